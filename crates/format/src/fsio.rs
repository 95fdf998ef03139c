//! The durability-relevant file operations (create, write, fsync, truncate, rename, directory
//! fsync), in one place so tests can make any one of them fail.
//!
//! Every write path that must survive a crash goes through here: the memory log
//! (`memory::wal`), segment, tombstone and `MANIFEST` writes (this crate), the memory flush and
//! merge (`memory::store`, through this crate's writers) and the indexer's output directory.
//! In a normal build each function is a plain call of its `std` counterpart.
//!
//! With the cargo feature `fault-injection` (turned on only by test crates) [`fault`] can
//! arm a failure: "the Nth operation of kind K (or of any kind) returns an I/O error", once or
//! for every operation from then on (a disk that died). A failed write first writes half of
//! its bytes (a torn write). The switch is a process-wide atomic countdown, so it also
//! catches operations on other threads (the background flusher); nothing outside a test can
//! arm it (there is no environment variable or flag).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// The kinds of operation that can be made to fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// Creating or opening a file for writing, creating a directory.
    Create,
    /// Writing bytes to a file.
    Write,
    /// fsync / fdatasync of a file.
    Sync,
    /// `set_len` (cutting a file back).
    Truncate,
    /// Renaming a file or directory.
    Rename,
    /// fsync of a directory (making creations and renames in it durable).
    SyncDir,
}

impl OpKind {
    pub const ALL: [OpKind; 6] = [
        OpKind::Create,
        OpKind::Write,
        OpKind::Sync,
        OpKind::Truncate,
        OpKind::Rename,
        OpKind::SyncDir,
    ];
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
fn check(_kind: OpKind, _path: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(feature = "fault-injection")]
#[inline]
fn check(kind: OpKind, path: &Path) -> io::Result<()> {
    fault::check(kind, path)
}

/// Whether an injected failure of a write should leave half the bytes behind.
#[cfg(feature = "fault-injection")]
fn torn(e: &io::Error) -> bool {
    fault::is_injected(e)
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
fn torn(_e: &io::Error) -> bool {
    false
}

/// Opens `path` with `opts` (counted as [`OpKind::Create`]).
#[inline]
pub fn open(opts: &OpenOptions, path: &Path) -> io::Result<File> {
    check(OpKind::Create, path)?;
    opts.open(path)
}

/// `File::create`.
#[inline]
pub fn create(path: &Path) -> io::Result<File> {
    check(OpKind::Create, path)?;
    File::create(path)
}

/// `std::fs::create_dir_all`.
#[inline]
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    check(OpKind::Create, path)?;
    std::fs::create_dir_all(path)
}

/// `parts` written one after the other to `f` (at `path`) as one operation, without joining
/// them in memory: vectored writes of up to 1,024 parts each, resumed after short writes. An
/// injected failure writes the first half of the bytes first.
pub fn write_all_parts(f: &mut File, path: &Path, parts: &[&[u8]]) -> io::Result<()> {
    if let Err(e) = check(OpKind::Write, path) {
        if torn(&e) {
            let mut half = parts.iter().map(|p| p.len()).sum::<usize>() / 2;
            for p in parts {
                let n = half.min(p.len());
                let _ = f.write_all(&p[..n]);
                half -= n;
            }
        }
        return Err(e);
    }
    for batch in parts.chunks(1024) {
        let mut slices: Vec<io::IoSlice> = batch.iter().map(|p| io::IoSlice::new(p)).collect();
        let mut rest = &mut slices[..];
        io::IoSlice::advance_slices(&mut rest, 0);
        while !rest.is_empty() {
            match f.write_vectored(rest) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => io::IoSlice::advance_slices(&mut rest, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// `write_all` on `f` (at `path`). An injected failure writes half of `buf` first.
#[inline]
pub fn write_all(f: &mut File, path: &Path, buf: &[u8]) -> io::Result<()> {
    if let Err(e) = check(OpKind::Write, path) {
        if torn(&e) {
            let _ = f.write_all(&buf[..buf.len() / 2]);
        }
        return Err(e);
    }
    f.write_all(buf)
}

/// Creates (or truncates) `path` and writes `bytes` to it, without fsync.
pub fn write_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = create(path)?;
    write_all(&mut f, path, bytes)
}

/// `File::sync_all`.
#[inline]
pub fn sync_all(f: &File, path: &Path) -> io::Result<()> {
    check(OpKind::Sync, path)?;
    f.sync_all()
}

/// `File::sync_data`.
#[inline]
pub fn sync_data(f: &File, path: &Path) -> io::Result<()> {
    check(OpKind::Sync, path)?;
    f.sync_data()
}

/// `File::set_len`.
#[inline]
pub fn set_len(f: &File, path: &Path, len: u64) -> io::Result<()> {
    check(OpKind::Truncate, path)?;
    f.set_len(len)
}

/// `std::fs::rename`.
#[inline]
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    check(OpKind::Rename, to)?;
    std::fs::rename(from, to)
}

/// fsyncs the directory `dir`, so that creations and renames in it are durable.
#[inline]
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    check(OpKind::SyncDir, dir)?;
    File::open(dir)?.sync_all()
}

/// The test-only failure switch (feature `fault-injection`).
#[cfg(feature = "fault-injection")]
pub mod fault {
    use std::io;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Mutex;

    use super::OpKind;

    /// Marker in the message of every injected error.
    pub const INJECTED: &str = "injected I/O failure";

    /// How an armed failure behaves.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Mode {
        /// Only the chosen operation fails (a transient EIO / ENOSPC).
        Once,
        /// The chosen operation and every later one fail (the disk is gone).
        Sticky,
    }

    /// One operation as recorded while counting.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Seen {
        pub kind: OpKind,
        pub path: PathBuf,
    }

    struct Config {
        /// Only operations of this kind count (all kinds when `None`).
        kind: Option<OpKind>,
        mode: Mode,
        /// Record every operation (for naming the one that failed).
        record: bool,
        log: Vec<Seen>,
        failed: Option<Seen>,
        /// Only operations on paths under this directory count (all when `None`).
        scope: Option<PathBuf>,
    }

    /// Fast path: false when nothing is armed and nothing is being counted.
    static ACTIVE: AtomicBool = AtomicBool::new(false);
    /// Operations (of the chosen kind) left before the failing one; 0 = not armed.
    static COUNTDOWN: AtomicU64 = AtomicU64::new(0);
    /// Set once the armed failure fired (sticky mode fails everything after it).
    static FIRED: AtomicBool = AtomicBool::new(false);
    /// Operations seen since the last [`reset`].
    static COUNT: AtomicU64 = AtomicU64::new(0);
    static CONFIG: Mutex<Config> = Mutex::new(Config {
        kind: None,
        mode: Mode::Once,
        record: false,
        log: Vec::new(),
        failed: None,
        scope: None,
    });

    fn config() -> std::sync::MutexGuard<'static, Config> {
        CONFIG.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Disarms and zeroes the counter; then counts (and, with `record`, records) every
    /// operation until the next call.
    pub fn count(record: bool) {
        let mut c = config();
        COUNTDOWN.store(0, Ordering::SeqCst);
        FIRED.store(false, Ordering::SeqCst);
        COUNT.store(0, Ordering::SeqCst);
        c.kind = None;
        c.record = record;
        c.log.clear();
        c.failed = None;
        ACTIVE.store(true, Ordering::SeqCst);
    }

    /// Arms a failure of the `n`th (1-based) operation of `kind` (any kind when `None`),
    /// counting from now.
    pub fn arm(kind: Option<OpKind>, n: u64, mode: Mode) {
        assert!(n > 0, "operations are counted from 1");
        let mut c = config();
        COUNT.store(0, Ordering::SeqCst);
        FIRED.store(false, Ordering::SeqCst);
        c.kind = kind;
        c.mode = mode;
        c.record = false;
        c.log.clear();
        c.failed = None;
        COUNTDOWN.store(n, Ordering::SeqCst);
        ACTIVE.store(true, Ordering::SeqCst);
    }

    /// Only operations on paths under `dir` count from now on (every path when `None`), so
    /// other tests of the same binary writing elsewhere do not shift the count.
    pub fn scope(dir: Option<&Path>) {
        config().scope = dir.map(Path::to_path_buf);
    }

    /// Disarms everything; operations pass through again.
    pub fn reset() {
        let mut c = config();
        c.scope = None;
        ACTIVE.store(false, Ordering::SeqCst);
        COUNTDOWN.store(0, Ordering::SeqCst);
        FIRED.store(false, Ordering::SeqCst);
        c.kind = None;
        c.record = false;
    }

    /// Operations seen (of the armed kind, or all while counting) since `count`/`arm`.
    pub fn seen() -> u64 {
        COUNT.load(Ordering::SeqCst)
    }

    /// The operations recorded since `count(true)`.
    pub fn log() -> Vec<Seen> {
        config().log.clone()
    }

    /// The operation that the armed failure hit, once it fired.
    pub fn failed() -> Option<Seen> {
        config().failed.clone()
    }

    /// Whether `e` is an injected failure.
    pub fn is_injected(e: &io::Error) -> bool {
        e.to_string().contains(INJECTED)
    }

    pub(super) fn check(kind: OpKind, path: &Path) -> io::Result<()> {
        if !ACTIVE.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut c = config();
        if c.kind.is_some_and(|k| k != kind)
            || c.scope.as_ref().is_some_and(|s| !path.starts_with(s))
        {
            return Ok(());
        }
        COUNT.fetch_add(1, Ordering::SeqCst);
        if c.record {
            c.log.push(Seen {
                kind,
                path: path.to_path_buf(),
            });
        }
        let fire = if FIRED.load(Ordering::SeqCst) {
            c.mode == Mode::Sticky
        } else {
            match COUNTDOWN.load(Ordering::SeqCst) {
                0 => false,
                1 => {
                    COUNTDOWN.store(0, Ordering::SeqCst);
                    FIRED.store(true, Ordering::SeqCst);
                    c.failed = Some(Seen {
                        kind,
                        path: path.to_path_buf(),
                    });
                    true
                }
                n => {
                    COUNTDOWN.store(n - 1, Ordering::SeqCst);
                    false
                }
            }
        };
        if fire {
            Err(io::Error::other(format!(
                "{INJECTED} ({kind:?} on {})",
                path.display()
            )))
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod parts_tests {
    use super::*;

    /// More parts than one vectored write takes, empty ones among them, each of its own
    /// length: the file holds exactly their concatenation.
    #[test]
    fn parts_are_written_as_their_concatenation() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let owned: Vec<Vec<u8>> = (0..2500u32)
            .map(|i| (0..(i * 7 % 61)).map(|j| (i + j) as u8).collect())
            .collect();
        let parts: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let mut f = create(&p).unwrap();
        write_all_parts(&mut f, &p, &parts).unwrap();
        write_all_parts(&mut f, &p, &[]).unwrap();
        drop(f);
        assert_eq!(std::fs::read(&p).unwrap(), owned.concat());
    }
}

#[cfg(all(test, feature = "fault-injection"))]
mod tests {
    use super::fault::{self, Mode};
    use super::*;

    /// The parts are one operation; an injected failure leaves the first half of their bytes.
    /// (Called from the test above: the fault switches are global.)
    fn parts_are_one_operation_torn_in_half() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        fault::scope(Some(d.path()));
        fault::count(true);
        let mut f = create(&p).unwrap();
        write_all_parts(&mut f, &p, &[b"ab", b"", b"cdef", b"gh"]).unwrap();
        assert_eq!(fault::seen(), 2);
        drop(f);
        fault::arm(Some(OpKind::Write), 1, Mode::Once);
        let mut f = create(&p).unwrap();
        let e = write_all_parts(&mut f, &p, &[b"ab", b"", b"cdef", b"gh"]).unwrap_err();
        assert!(fault::is_injected(&e), "{e}");
        drop(f);
        assert_eq!(std::fs::read(&p).unwrap(), b"abcd");
        fault::reset();
    }

    #[test]
    fn arms_the_nth_operation_once_or_sticky() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        fault::scope(Some(d.path()));
        fault::count(true);
        write_file(&p, b"abcd").unwrap();
        assert_eq!(fault::seen(), 2);
        assert_eq!(fault::log()[1].kind, OpKind::Write);
        // The second write fails, torn: half its bytes are there.
        fault::arm(Some(OpKind::Write), 2, Mode::Once);
        write_file(&p, b"abcd").unwrap();
        let e = write_file(&p, b"abcdef").unwrap_err();
        assert!(fault::is_injected(&e), "{e}");
        assert_eq!(std::fs::read(&p).unwrap(), b"abc");
        write_file(&p, b"abcd").unwrap();
        // Sticky: everything from the chosen operation on fails.
        fault::scope(Some(d.path()));
        fault::arm(None, 1, Mode::Sticky);
        assert!(sync_dir(d.path()).is_err());
        assert!(create(&p).is_err());
        fault::reset();
        write_file(&p, b"ok").unwrap();
        parts_are_one_operation_torn_in_half();
    }
}
