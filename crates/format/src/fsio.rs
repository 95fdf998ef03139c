//! The durability-relevant file operations (create, write, fsync, truncate, rename, directory
//! fsync), in one place so tests can make any one of them fail.
//!
//! Every write path that must survive a crash goes through here: the memory log
//! (`memory::wal`), segment, tombstone and `MANIFEST` writes (this crate), the memory flush and
//! merge (`memory::store`, through this crate's writers) and the indexer's output directory.
//! In a normal build each function is a plain call of its `std` counterpart; [`StreamOut`]
//! is a writer over them that can write around the page cache.
//!
//! With the cargo feature `fault-injection` (turned on only by test crates) [`fault`] can
//! arm a failure: "the Nth operation of kind K (or of any kind) returns an I/O error", once or
//! for every operation from then on (a disk that died). A failed write first writes half of
//! its bytes (a torn write). The switch is a process-wide atomic countdown, so it also
//! catches operations on other threads (the background flusher); nothing outside a test can
//! arm it (there is no environment variable or flag).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

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

/// Where an open file really is (its symlinks resolved when it was opened), for the read-time
/// confinement check: on Linux the kernel's own name for the descriptor, so a path swapped for
/// a symlink after the walk cannot slip through; elsewhere the path resolved right after the
/// open.
pub fn opened_path(file: &File, path: &Path) -> io::Result<PathBuf> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        if let Ok(p) = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) {
            return Ok(p);
        }
    }
    let _ = file;
    std::fs::canonicalize(path)
}

/// Opens `path` for reading without blocking: a path swapped for a FIFO would otherwise wait
/// for a writer in the open itself. (On a regular file the flag changes nothing.) Callers
/// check what the descriptor is (`File::metadata`) before reading.
pub fn open_for_read(path: &Path) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NONBLOCK);
    }
    opts.open(path)
}

/// At most `max` bytes of `f` from where it stands: `Ok(None)` when it holds more (only
/// `max + 1` bytes are read to tell), so a file that grew, or a device, is never read whole.
pub fn read_at_most(f: &File, max: u64) -> io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::new();
    f.take(max.saturating_add(1)).read_to_end(&mut buf)?;
    Ok((buf.len() as u64 <= max).then_some(buf))
}

/// The bytes of `path` when it is a regular file of at most `max` bytes, opened without
/// blocking ([`open_for_read`]) and checked before it is read ([`read_at_most`]): `Ok(None)`
/// for a FIFO, a device, a directory or a longer file, none of which is read.
pub fn read_regular_at_most(path: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    let f = open_for_read(path)?;
    let md = f.metadata()?;
    if !md.is_file() || md.len() > max {
        return Ok(None);
    }
    read_at_most(&f, max)
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
            write_first_half(f, parts);
        }
        return Err(e);
    }
    write_all_parts_unchecked(f, parts)
}

/// What an injected failure of a write of `parts` leaves: the first half of their bytes,
/// written as far as the file takes them.
fn write_first_half(f: &mut File, parts: &[&[u8]]) {
    let mut half = parts.iter().map(|p| p.len()).sum::<usize>() / 2;
    for p in parts {
        let n = half.min(p.len());
        let _ = f.write_all(&p[..n]);
        half -= n;
    }
}

/// [`write_all_parts`] without the fault switch.
fn write_all_parts_unchecked(f: &mut File, parts: &[&[u8]]) -> io::Result<()> {
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
            write_first_half(f, &[buf]);
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

/// Writes `bytes` to `path` durably and whole or not at all: a temporary file beside it (made
/// new, with the mode of the file it replaces), fsynced, renamed over `path`, then the
/// directory fsynced. A crash leaves the old file (or none) and at worst the temporary one,
/// never a `path` cut short. A `path` that exists and is not a regular file (`/dev/stdout`, a
/// pipe, a symlink) is written through as it is, with an fsync where it takes one.
pub fn write_durably(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let existing = std::fs::symlink_metadata(path).ok();
    if existing.as_ref().is_some_and(|m| !m.file_type().is_file()) {
        let mut f = OpenOptions::new().write(true).truncate(true).open(path)?;
        write_all(&mut f, path, bytes)?;
        let _ = f.sync_all(); // a pipe or a terminal takes none
        return Ok(());
    }
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file path"))?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp-{}-{nanos}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let mut opts = OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    if let Some(m) = &existing {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        opts.mode(m.permissions().mode() & 0o7777);
    }
    let mut f = opts.open(&tmp)?;
    let result = (|| {
        write_all(&mut f, &tmp, bytes)?;
        sync_all(&f, &tmp)?;
        rename(&tmp, path)?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        sync_dir(dir)
    })();
    if result.is_err() && tmp.exists() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The alignment of direct I/O: offsets, lengths and buffer addresses are multiples of it.
/// 4 KiB covers devices of 512-byte and 4 KiB logical blocks.
#[cfg(target_os = "linux")]
const DIRECT_ALIGN: usize = 4096;

/// How much a [`StreamOut`] gathers before one direct write (a multiple of the alignment).
#[cfg(target_os = "linux")]
const DIRECT_CHUNK: usize = 2 << 20;

#[cfg(target_os = "linux")]
thread_local! {
    /// One staging buffer per thread, reused by the files a thread writes one after another
    /// (a segment's texts and archives): a fresh one would be fresh memory to fault in each
    /// time.
    static DIRECT_BUF: std::cell::Cell<Option<Vec<u8>>> = const { std::cell::Cell::new(None) };
}

/// Whether `e` is a filesystem refusing direct I/O (`EINVAL`; `EOPNOTSUPP` from some FUSE and
/// network filesystems).
#[cfg(target_os = "linux")]
fn refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL) | Some(libc::EOPNOTSUPP)
    )
}

/// A file written once, front to back, by [`StreamOut::write_parts`] calls, bypassing the page
/// cache (`O_DIRECT`) where the filesystem takes it.
///
/// For segment files nothing reads soon (`indexer build --direct-io`): they are written once,
/// fsynced at once and not read back by their writer, so a page-cache copy of them buys
/// nothing at write time; it costs a copy into freshly allocated cache pages, which on a
/// virtual machine whose free memory is handed back to the host (free
/// page reporting) means a host fault per page: on the 2-core VM `dd` of 400 MB took 2.40-2.50 s
/// buffered and 0.28-0.31 s direct. Bytes are gathered in a 2 MiB aligned buffer and written in
/// whole blocks; the tail shorter than a block is written through the page cache (`O_DIRECT`
/// turned off on the descriptor), so the file is exactly the bytes given, never padded. Where
/// the filesystem refuses direct I/O (tmpfs before Linux 6.6, some FUSE filesystems: `EINVAL`
/// at open or at a write), the writer goes on as a plain buffered one from where it is; the bytes
/// are the same either way. Elsewhere than Linux it is always the buffered one.
///
/// Each `write_parts` is one [`OpKind::Write`] (as [`write_all_parts`]), the creation one
/// [`OpKind::Create`]; the caller syncs the file [`StreamOut::finish`] returns. Up to 2 MiB
/// of what `write_parts` took may still be gathered until then: a writer dropped without
/// `finish` leaves the file short, as one whose write failed.
#[must_use = "bytes gathered are written by `finish`"]
pub struct StreamOut<'p> {
    file: File,
    path: &'p Path,
    /// Gathered bytes waiting for a direct write: `buf[start..start + fill]`, `start` the
    /// first aligned address of `buf`. `None` once the writer is a buffered one.
    #[cfg(target_os = "linux")]
    direct: Option<(Vec<u8>, usize)>,
    #[cfg(target_os = "linux")]
    fill: usize,
}

/// Whether a [`StreamOut`] leaves the file's pages in the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PageCache {
    /// Direct I/O where the filesystem takes it: for a file nothing reads soon.
    Bypass,
    /// A plain buffered write (the default): for a file that is read soon (a merge maps its
    /// vectors back at once; a server opening a fresh build reads all of it).
    #[default]
    Keep,
}

impl<'p> StreamOut<'p> {
    /// Creates (or truncates) `path` for writing.
    pub fn create(path: &'p Path, cache: PageCache) -> io::Result<StreamOut<'p>> {
        check(OpKind::Create, path)?;
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::fs::OpenOptionsExt;
            let mut o = OpenOptions::new();
            o.write(true).create(true).truncate(true);
            let direct = match cache {
                PageCache::Bypass => o.clone().custom_flags(libc::O_DIRECT).open(path),
                PageCache::Keep => Err(io::Error::from_raw_os_error(libc::EINVAL)),
            };
            let (file, direct) = match direct {
                Ok(f) => {
                    let buf = DIRECT_BUF
                        .take()
                        .unwrap_or_else(|| vec![0u8; DIRECT_CHUNK + DIRECT_ALIGN]);
                    let start = buf.as_ptr().align_offset(DIRECT_ALIGN);
                    (f, Some((buf, start)))
                }
                Err(e) if refused(&e) => (o.open(path)?, None),
                Err(e) => return Err(e),
            };
            Ok(StreamOut {
                file,
                path,
                direct,
                fill: 0,
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = cache;
            Ok(StreamOut {
                file: File::create(path)?,
                path,
            })
        }
    }

    /// Appends `parts`, one after the other. An injected failure leaves the bytes given before
    /// and the first half of these in the file, as [`write_all_parts`] does.
    pub fn write_parts(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        if let Err(e) = check(OpKind::Write, self.path) {
            if torn(&e) {
                let _ = self.go_buffered();
                write_first_half(&mut self.file, parts);
            }
            return Err(e);
        }
        #[cfg(target_os = "linux")]
        if self.direct.is_some() {
            for p in parts {
                self.gather(p)?;
            }
            return Ok(());
        }
        write_all_parts_unchecked(&mut self.file, parts)
    }

    /// Whether the writer is still writing around the page cache.
    pub fn is_direct(&self) -> bool {
        #[cfg(target_os = "linux")]
        return self.direct.is_some();
        #[cfg(not(target_os = "linux"))]
        false
    }

    /// Test hook: moves the gathering buffer one byte off its alignment, so that a filesystem
    /// that checks it refuses the next direct write (the fallback's path).
    #[cfg(all(test, target_os = "linux"))]
    fn misalign(&mut self) {
        if let Some((_, start)) = &mut self.direct {
            assert_eq!(self.fill, 0);
            *start += 1;
        }
    }

    /// Writes what is gathered and returns the file, to be synced.
    #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
    pub fn finish(mut self) -> io::Result<File> {
        #[cfg(target_os = "linux")]
        if let Some((buf, start)) = &self.direct {
            let whole = self.fill / DIRECT_ALIGN * DIRECT_ALIGN;
            let tail = buf[start + whole..start + self.fill].to_vec();
            self.fill = whole;
            self.flush_direct()?;
            if !tail.is_empty() {
                self.go_buffered()?;
                self.file.write_all(&tail)?;
            }
        }
        Ok(self.take_file())
    }

    #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
    fn take_file(mut self) -> File {
        #[cfg(target_os = "linux")]
        if let Some((buf, _)) = self.direct.take() {
            DIRECT_BUF.set(Some(buf));
        }
        let StreamOut { file, .. } = self;
        file
    }

    /// Copies `p` into the gathering buffer, writing it out each time it is full.
    #[cfg(target_os = "linux")]
    fn gather(&mut self, mut p: &[u8]) -> io::Result<()> {
        while !p.is_empty() {
            let Some((buf, start)) = &mut self.direct else {
                return self.file.write_all(p);
            };
            let at = *start + self.fill;
            let n = p.len().min(DIRECT_CHUNK - self.fill);
            buf[at..at + n].copy_from_slice(&p[..n]);
            self.fill += n;
            p = &p[n..];
            if self.fill == DIRECT_CHUNK {
                self.flush_direct()?;
            }
        }
        Ok(())
    }

    /// Writes the gathered bytes (a whole number of blocks) directly and empties the buffer.
    /// When the filesystem refuses (`EINVAL`), turns direct I/O off and writes the rest
    /// through the page cache.
    #[cfg(target_os = "linux")]
    fn flush_direct(&mut self) -> io::Result<()> {
        let Some((buf, start)) = &self.direct else {
            return Ok(());
        };
        let block = &buf[*start..*start + self.fill];
        let mut done = 0;
        let refused = loop {
            if done == block.len() {
                break None;
            }
            match self.file.write(&block[done..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if refused(&e) => break Some(block[done..].to_vec()),
                Err(e) => return Err(e),
            }
        };
        self.fill = 0;
        if let Some(rest) = refused {
            self.go_buffered()?;
            self.file.write_all(&rest)?;
        }
        Ok(())
    }

    /// Makes this a buffered writer from here on: writes what is gathered (through the page
    /// cache) and turns `O_DIRECT` off on the descriptor.
    fn go_buffered(&mut self) -> io::Result<()> {
        #[cfg(target_os = "linux")]
        if self.direct.is_some() {
            use std::os::fd::AsRawFd;
            let fd = self.file.as_raw_fd();
            // SAFETY: fcntl on a descriptor this writer owns; no pointers are passed.
            let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
            if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_DIRECT) } < 0 {
                // Still a direct writer, with what it gathered.
                return Err(io::Error::last_os_error());
            }
            let Some((buf, start)) = self.direct.take() else {
                return Ok(());
            };
            let fill = std::mem::take(&mut self.fill);
            let r = self.file.write_all(&buf[start..start + fill]);
            DIRECT_BUF.set(Some(buf));
            r?;
        }
        Ok(())
    }
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

    /// `len` bytes of a fixed pseudo-random sequence.
    fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// `bytes` cut into parts of many lengths: empty ones, short ones, and one longer than
    /// the gathering buffer where there are enough bytes.
    fn cut(bytes: &[u8]) -> Vec<&[u8]> {
        let lens = [0usize, 1, 7, 4096, 3, (2 << 20) + 5, 0, 65_537, 12];
        let (mut parts, mut at, mut k) = (Vec::new(), 0, 0);
        while at < bytes.len() {
            let n = lens[k % lens.len()].min(bytes.len() - at);
            parts.push(&bytes[at..at + n]);
            at += n;
            k += 1;
        }
        parts
    }

    /// Whether `dir`'s filesystem takes `O_DIRECT` at open, and whether it refuses a direct
    /// write from a misaligned buffer.
    #[cfg(target_os = "linux")]
    fn probe(dir: &Path) -> (bool, bool) {
        use std::os::unix::fs::OpenOptionsExt;
        let p = dir.join("probe");
        let Ok(mut f) = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(&p)
        else {
            return (false, false);
        };
        let buf = vec![0u8; 3 * DIRECT_ALIGN];
        let at = buf.as_ptr().align_offset(DIRECT_ALIGN) + 1;
        let refused = f
            .write(&buf[at..at + DIRECT_ALIGN])
            .is_err_and(|e| e.raw_os_error() == Some(libc::EINVAL));
        std::fs::remove_file(&p).unwrap();
        (true, refused)
    }

    /// Lengths around a block and around the gathering buffer, each written after a 64-byte
    /// header in parts of many lengths, around the page cache and through it: the file holds
    /// exactly the bytes given, never padded, and the writer bypasses the cache where the
    /// filesystem allows it.
    #[test]
    fn stream_out_writes_exactly_the_bytes_given() {
        let d = tempfile::tempdir().unwrap();
        #[cfg(target_os = "linux")]
        let (takes_direct, _) = probe(d.path());
        #[cfg(not(target_os = "linux"))]
        let takes_direct = false;
        let chunk = 2usize << 20;
        let head = noise(64, 99);
        for (i, len) in [
            0,
            1,
            4031,
            4032,
            4033,
            chunk - 64,
            chunk - 63,
            3 * chunk + 12_345,
        ]
        .into_iter()
        .enumerate()
        {
            let bytes = noise(len, i as u64);
            for cache in [PageCache::Bypass, PageCache::Keep] {
                let p = d.path().join(format!("f{i}-{cache:?}"));
                let mut out = StreamOut::create(&p, cache).unwrap();
                assert_eq!(out.is_direct(), takes_direct && cache == PageCache::Bypass);
                out.write_parts(&[&head]).unwrap();
                out.write_parts(&cut(&bytes)).unwrap();
                out.write_parts(&[]).unwrap();
                let f = out.finish().unwrap();
                f.sync_all().unwrap();
                drop(f);
                let back = std::fs::read(&p).unwrap();
                assert_eq!(back.len(), 64 + len, "{len} bytes, {cache:?}");
                assert!(
                    back == [&head[..], &bytes[..]].concat(),
                    "{len} bytes, {cache:?}"
                );
            }
        }
    }

    /// A direct write the filesystem refuses (here: from a misaligned buffer, which ext4 and
    /// most block filesystems refuse with `EINVAL`) turns the writer into a buffered one from
    /// where it was, losing nothing.
    #[cfg(target_os = "linux")]
    #[test]
    fn stream_out_falls_back_when_a_direct_write_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let (takes_direct, refuses_misaligned) = probe(d.path());
        let p = d.path().join("f");
        let bytes = noise(3 * (2 << 20) + 777, 5);
        let mut out = StreamOut::create(&p, PageCache::Bypass).unwrap();
        assert_eq!(out.is_direct(), takes_direct);
        out.misalign();
        out.write_parts(&cut(&bytes[..1000])).unwrap();
        out.write_parts(&cut(&bytes[1000..])).unwrap();
        if refuses_misaligned {
            assert!(
                !out.is_direct(),
                "the refused write did not turn direct I/O off"
            );
        }
        drop(out.finish().unwrap());
        assert!(std::fs::read(&p).unwrap() == bytes);
    }

    #[test]
    fn durable_writes_replace_whole_files_and_leave_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("export.jsonl");
        write_durably(&p, b"first\n").unwrap();
        write_durably(&p, b"second, longer\n").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"second, longer\n");
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("export.jsonl")]);
        // The mode of the file replaced is kept (an export of memories may be private).
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
            write_durably(&p, b"third\n").unwrap();
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
            // A symlink is written through, not replaced.
            let link = d.path().join("link.jsonl");
            std::os::unix::fs::symlink(&p, &link).unwrap();
            write_durably(&link, b"through\n").unwrap();
            assert!(std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink());
            assert_eq!(std::fs::read(&p).unwrap(), b"through\n");
            std::fs::remove_file(&link).unwrap();
        }
        // A directory in the way: an error, and no temporary left behind.
        let dir = d.path().join("sub");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("x"), b"x").unwrap();
        assert!(write_durably(&dir, b"y").is_err());
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2);
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
        stream_out_is_torn_like_a_plain_write();
    }

    /// Around the page cache or through it, a [`StreamOut`] counts one creation and one write
    /// per `write_parts`, and an injected failure leaves the bytes written before and half of
    /// the failed write's.
    fn stream_out_is_torn_like_a_plain_write() {
        let d = tempfile::tempdir().unwrap();
        fault::scope(Some(d.path()));
        for cache in [PageCache::Bypass, PageCache::Keep] {
            let p = d.path().join(format!("{cache:?}"));
            let first = vec![3u8; 5000];
            let second: Vec<u8> = (0..(5u32 << 20)).map(|i| i as u8).collect();
            fault::count(true);
            let mut out = StreamOut::create(&p, cache).unwrap();
            out.write_parts(&[&first]).unwrap();
            out.write_parts(&[&second[..100], &second[100..]]).unwrap();
            drop(out.finish().unwrap());
            assert_eq!(fault::seen(), 3);
            assert!(std::fs::read(&p).unwrap() == [&first[..], &second[..]].concat());
            fault::arm(Some(OpKind::Write), 2, Mode::Once);
            let mut out = StreamOut::create(&p, cache).unwrap();
            out.write_parts(&[&first]).unwrap();
            let e = out
                .write_parts(&[&second[..100], &second[100..]])
                .unwrap_err();
            assert!(fault::is_injected(&e), "{e}");
            drop(out);
            let torn = [&first[..], &second[..second.len() / 2]].concat();
            assert!(std::fs::read(&p).unwrap() == torn, "{cache:?}");
            fault::reset();
        }
    }
}
