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
use std::io::{self, Seek, Write};
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

/// Writes are cut at multiples of this many bytes of the file (the size of a PMD page on
/// x86-64 and arm64 with 4 KiB pages): see [`write_all_parts`].
pub const FOLIO_BYTES: usize = 2 << 20;

/// `parts` written one after the other to `f` (at `path`, from its current position) as one
/// operation, without joining them in memory: every `write` ends at a multiple of
/// [`FOLIO_BYTES`] of the file (or at the end). Parts long enough go to the kernel where they
/// are; what lies between two such cuts is copied into one buffer of at most that size. An
/// injected failure writes the first half of the bytes first.
///
/// Why the cuts: a filesystem with large folios (ext4 since Linux 6.16, XFS) sizes the page
/// cache folios a buffered write creates by the write, so a whole, aligned 2 MiB write becomes
/// one 2 MiB folio, and a reader that maps the file then maps it with one page-table entry
/// instead of 512. Small writes leave small folios; each one is a page fault (or a share of a
/// fault-around) in every process that later maps the file. Opening the 1M-chunk index, which
/// reads its record, postings and graph archives whole, spent about a third of its time so.
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
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let start = f.stream_position()?;
    let mut w = FolioCuts::new(f, start, total);
    for p in parts {
        w.push(p)?;
    }
    w.finish().map(|_| ())
}

/// A writer that passes bytes on to `W` in writes cut at multiples of [`FOLIO_BYTES`] of the
/// file (see [`write_all_parts`], which uses it): a long enough run of bytes pushed at a cut
/// goes on where it is, the bytes between two cuts are gathered into one buffer of at most
/// [`FOLIO_BYTES`] first. For writers of a stream (a download) into a fresh file: wrap the
/// file in [`Checked`] so that each write is one operation of this module.
pub struct FolioCuts<W: Write> {
    f: W,
    /// The file offset after the bytes pushed so far.
    pos: u64,
    /// The bytes pushed since the last cut and not yet written.
    buf: Vec<u8>,
    /// What `buf` reserves when first used.
    cap: usize,
}

impl<W: Write> FolioCuts<W> {
    /// A writer into `f`, whose next byte is the file's byte `start`, of about `total` bytes
    /// (the buffer is no larger).
    pub fn new(f: W, start: u64, total: usize) -> Self {
        FolioCuts {
            f,
            pos: start,
            buf: Vec::new(),
            cap: total.min(FOLIO_BYTES),
        }
    }

    /// Appends `p`, writing every piece that reaches a cut.
    pub fn push(&mut self, mut p: &[u8]) -> io::Result<()> {
        const FOLIO: u64 = FOLIO_BYTES as u64;
        while !p.is_empty() {
            let off = (self.pos % FOLIO) as usize;
            if self.buf.is_empty() && off == 0 && p.len() >= FOLIO_BYTES {
                let n = p.len() - p.len() % FOLIO_BYTES;
                self.f.write_all(&p[..n])?;
                self.pos += n as u64;
                p = &p[n..];
                continue;
            }
            let n = (FOLIO_BYTES - off).min(p.len());
            if self.buf.capacity() == 0 {
                self.buf.reserve_exact(self.cap.max(n));
            }
            self.buf.extend_from_slice(&p[..n]);
            self.pos += n as u64;
            p = &p[n..];
            if self.pos.is_multiple_of(FOLIO) {
                self.f.write_all(&self.buf)?;
                self.buf.clear();
            }
        }
        Ok(())
    }

    /// Writes what is left (the piece after the last cut) and returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        if !self.buf.is_empty() {
            self.f.write_all(&self.buf)?;
        }
        Ok(self.f)
    }
}

/// `Write` through [`write_all`]: each `write` is one operation of this module (an injected
/// failure fails it, having written half its bytes).
pub struct Checked<'a> {
    pub file: &'a mut File,
    pub path: &'a Path,
}

impl Write for Checked<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        write_all(self.file, self.path, buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
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

    /// A stream of small pieces (a download) through [`Checked`] into a file: the file holds
    /// exactly the stream.
    #[test]
    fn a_stream_through_checked_cuts_is_the_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let bytes: Vec<u8> = (0..(5 * FOLIO_BYTES + 7))
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let mut f = create(&p).unwrap();
        let mut w = FolioCuts::new(
            Checked {
                file: &mut f,
                path: &p,
            },
            0,
            bytes.len(),
        );
        for piece in bytes.chunks(3000) {
            w.push(piece).unwrap();
        }
        w.finish().unwrap();
        drop(f);
        assert!(std::fs::read(&p).unwrap() == bytes);
    }

    /// Records each `write` call's range of the output.
    struct Calls {
        out: Vec<u8>,
        ends: Vec<(usize, usize)>,
    }

    impl Write for Calls {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            // Short writes, as a kernel may make them: `write_all` must resume them.
            let n = b.len().min(3 << 20);
            self.ends.push((self.out.len(), self.out.len() + n));
            self.out.extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Whatever the parts and the starting offset, every write starts at the start or at a
    /// cut and ends at a cut or at the end, at most one cut's worth of bytes is held, and the
    /// output is the parts' concatenation. Dropping the cuts (one write per part) or cutting
    /// at part boundaries fails it.
    #[test]
    fn writes_end_at_folio_cuts() {
        const F: usize = FOLIO_BYTES;
        let shapes: Vec<(usize, Vec<usize>)> = vec![
            (0, vec![64, 7 * F + 5]),
            (0, vec![64, 3, 0, F - 67, F, 2 * F + 1, 10]),
            (5, vec![F, F, 3 * F]),
            (0, (0..5000).map(|i| (i * 977) % 4099).collect()),
            (F - 1, vec![1, 1, 2 * F]),
            (0, vec![F]),
            (0, vec![]),
        ];
        for (start, lens) in shapes {
            let owned: Vec<Vec<u8>> = (lens.iter().enumerate())
                .map(|(i, &n)| (0..n).map(|j| (i * 31 + j) as u8).collect())
                .collect();
            let parts: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
            let mut calls = Calls {
                out: vec![0xEE; start],
                ends: Vec::new(),
            };
            let total: usize = lens.iter().sum();
            let mut w = FolioCuts::new(&mut calls, start as u64, total);
            for p in &parts {
                w.push(p).unwrap();
                assert!(w.buf.len() < F, "held {} bytes", w.buf.len());
            }
            w.finish().unwrap();
            assert_eq!(&calls.out[start..], &owned.concat()[..], "{lens:?}");
            let end = start + total;
            let mut at = start;
            for &(a, b) in &calls.ends {
                assert_eq!(a, at, "writes are in order, without gaps");
                at = b;
                // A short write's end (3 MiB past its start) is the kernel's, not a cut.
                let short = (b - a) == 3 << 20 && b != end;
                assert!(
                    b % F == 0 || b == end || short,
                    "a write ends at {b} ({lens:?})"
                );
            }
            assert_eq!(at, end);
        }
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
