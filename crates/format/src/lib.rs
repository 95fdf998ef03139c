//! Every byte the engine keeps on disk: immutable segments (chunk archive, BM25 postings, CSR
//! graph, vectors and their FAISS IVF index), per-generation tombstones and the index-level
//! `MANIFEST`.
//!
//! The crate knows nothing of tree-sitter, burn or MCP: it stores and reads records. Writers
//! produce byte-identical output for identical input; readers validate a file once when it is
//! opened and then read it zero-copy through `memmap2`.

pub mod bm25;
pub mod cpu;
pub mod fsio;
pub mod graph;
pub mod header;
pub mod ivf_map;
pub mod ivf_write;
pub mod lazy_text;
pub mod manifest;
pub mod memory;
pub mod merge;
pub mod rabitq;
pub mod records;
pub mod recover;
pub mod roots;
pub mod segment;
pub mod short_str;
pub mod staging;
pub mod text;
pub mod texts;
pub mod tombstones;
pub mod vectors;
pub mod walhead;
pub mod walrec;

use std::path::{Path, PathBuf};

pub use manifest::{DamagedSegment, Index, IndexManifest, OpenOptions, SegmentEntry};
pub use records::{ChunkInput, EdgeInput, FileInput};
pub use segment::{Segment, SegmentBuilder, SegmentMeta};

/// Version of the on-disk format this build writes. Bumped on any incompatible change.
/// 4: chunk texts in `texts.bin` ([`texts`]) instead of inside the records of `chunks.rkyv`.
/// 5: full blocks of the BM25 postings bit-packed ([`bm25`]; format 4 postings still read).
pub const FORMAT_VERSION: u32 = 5;

/// The oldest format this build reads: format 3 segments (texts inside the records) open and
/// serve as before, so an index and its memories carry over an upgrade; new segments and
/// manifests are written as [`FORMAT_VERSION`]. Older and newer versions are refused.
pub const MIN_READ_VERSION: u32 = 3;

/// Whether this build reads format `version`.
pub fn reads_version(version: u32) -> bool {
    (MIN_READ_VERSION..=FORMAT_VERSION).contains(&version)
}

/// Errors of the format layer. Every variant names the file it is about.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A damaged file. No advice here: callers add the repair that fits ([`repair_hint`]).
    #[error("{path} is corrupt ({detail})")]
    Corrupt { path: PathBuf, detail: String },
    #[error("{path} has format version {found}, this build reads versions {MIN_READ_VERSION} to {expected}")]
    Version {
        path: PathBuf,
        found: u32,
        expected: u32,
    },
    #[error("{path}: {detail}")]
    Mismatch { path: PathBuf, detail: String },
    #[error("{path} is not an index directory (no MANIFEST): pass the directory an `indexer build <source paths> --out <index dir>` wrote (an index is kept apart from the sources it indexes)")]
    NotAnIndex { path: PathBuf },
    #[error("invalid input for the segment writer: {0}")]
    InvalidInput(String),
    #[error("vector index error on {path}: {detail}")]
    Faiss { path: PathBuf, detail: String },
}

pub type Result<T, E = FormatError> = std::result::Result<T, E>;

impl FormatError {
    /// The file the error is about (`None` for invalid writer input).
    pub fn path(&self) -> Option<&Path> {
        match self {
            FormatError::Io { path, .. }
            | FormatError::Corrupt { path, .. }
            | FormatError::Version { path, .. }
            | FormatError::Mismatch { path, .. }
            | FormatError::NotAnIndex { path }
            | FormatError::Faiss { path, .. } => Some(path),
            FormatError::InvalidInput(_) => None,
        }
    }
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> FormatError + '_ {
    move |source| FormatError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The index directory a damaged file belongs to (`dir/MANIFEST`, `dir/tomb-*`,
/// `dir/seg-*/file`).
fn index_dir_of(path: &Path) -> &Path {
    let parent = path.parent().unwrap_or(Path::new("."));
    if parent
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("seg-"))
    {
        parent.parent().unwrap_or(parent)
    } else {
        parent
    }
}

/// What to do about `e`, as one line (`hint: ...`), for the errors a repair can fix: a damaged
/// or missing file ([`FormatError::Corrupt`]) and a file of another format version. Empty for
/// the others.
pub fn repair_hint(e: &FormatError) -> String {
    match e {
        FormatError::Corrupt { path, .. } => format!(
            "hint: `indexer build <source paths> --out {} --rebuild` re-indexes the code and \
             keeps every memory (memory segments and memory.wal); whatever it cannot use is moved \
             aside as *.bak-<time>, never deleted",
            index_dir_of(path).display()
        ),
        FormatError::Version { path, .. } => format!(
            "hint: export the memories with the `queryd` that wrote {} (`queryd export`), then \
             `indexer build <source paths> --out <new dir> --memories <dump.jsonl>`",
            index_dir_of(path).display()
        ),
        _ => String::new(),
    }
}

/// `e`'s message, followed on a second line by its [`repair_hint`] when it has one.
pub fn with_repair_hint(e: &FormatError) -> String {
    match repair_hint(e) {
        h if h.is_empty() => e.to_string(),
        h => format!("{e}\n{h}"),
    }
}

/// A short description of a JSON parse failure (not the parser's own wording).
pub(crate) fn json_detail(e: &serde_json::Error) -> String {
    if e.is_eof() {
        "it ends early: truncated".to_string()
    } else {
        format!("not valid JSON at line {} column {}", e.line(), e.column())
    }
}

pub(crate) fn corrupt(path: &Path, detail: impl Into<String>) -> FormatError {
    FormatError::Corrupt {
        path: path.to_path_buf(),
        detail: detail.into(),
    }
}

/// Writes `bytes` to `path` and fsyncs the file (no rename: segment files are written into a
/// fresh directory that only becomes visible through the manifest).
pub(crate) fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = fsio::create(path).map_err(io_err(path))?;
    fsio::write_all(&mut f, path, bytes).map_err(io_err(path))?;
    fsio::sync_all(&f, path).map_err(io_err(path))?;
    Ok(())
}

/// Fsyncs a directory so that renames and creations inside it are durable.
pub(crate) fn sync_dir(path: &Path) -> Result<()> {
    fsio::sync_dir(path).map_err(io_err(path))
}

/// Asks for the memory of `items` to be brought into the cache (a hint; nothing elsewhere).
/// Public for readers that walk records of a mapped segment in an order the hardware cannot
/// foresee (`code::rank::collapse`).
#[inline]
pub fn prefetch<T>(items: &[T]) {
    prefetch_hint::<{ PREFETCH_L1 }, T>(items)
}

#[cfg(target_arch = "x86_64")]
const PREFETCH_L1: i32 = std::arch::x86_64::_MM_HINT_T0;
#[cfg(target_arch = "x86_64")]
const PREFETCH_L2: i32 = std::arch::x86_64::_MM_HINT_T1;
#[cfg(not(target_arch = "x86_64"))]
const PREFETCH_L1: i32 = 0;
#[cfg(not(target_arch = "x86_64"))]
const PREFETCH_L2: i32 = 0;

/// Every cache line of `items` asked for with `_mm_prefetch` hint `HINT` (no-op elsewhere).
#[inline]
fn prefetch_hint<const HINT: i32, T>(items: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        let base = items.as_ptr().cast::<u8>();
        for at in (0..std::mem::size_of_val(items)).step_by(64) {
            // SAFETY: SSE is part of x86_64; `at` is inside `items`, and a prefetch of a valid
            // address has no effect on program state.
            unsafe { std::arch::x86_64::_mm_prefetch::<HINT>(base.add(at).cast()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = items;
}

/// [`prefetch`] into the second-level cache (`prefetcht1`) rather than the first: for streams
/// of many lines asked for ahead of use (blocks of one-bit codes, whole rows to re-rank,
/// document lengths). On the 2-core VM (AMD EPYC, Zen 4) a 1,920-byte block of codes asked for
/// two blocks ahead into L1 stalled on the prefetch instructions themselves (27% of the
/// scan's samples: the L1's miss buffers were full); into L2 the vector phase at 1M chunks
/// took 27% less time (docs/measurements.md, "Search over many segments"). No effect on
/// program state.
pub fn prefetch_l2<T>(items: &[T]) {
    prefetch_hint::<{ PREFETCH_L2 }, T>(items)
}

/// Asks for `map`'s pages to be mapped, and read from disk where the page cache lacks them,
/// in 2 MiB pages (`MADV_HUGEPAGE`; Linux only, and only where the kernel has transparent huge
/// pages and the filesystem large folios, e.g. ext4 since Linux 6.16 or XFS). For maps a
/// reader goes through whole (the archives validated at open, a map being populated): a
/// page fault then reads ahead and maps 2 MiB where it mapped one 4 KiB page (or a
/// fault-around's 64 KiB), and the page tables and TLB hold 512 times fewer entries for the
/// same bytes. Not for maps read at random before they are populated (a cold fault would read
/// 2-4 MiB of disk for one row). Pages the page cache already holds in smaller folios stay as
/// they are. Advisory: a refusal changes nothing. No effect on program state.
pub fn advise_huge_pages(map: &memmap2::Mmap) {
    #[cfg(target_os = "linux")]
    let _ = map.advise(memmap2::Advice::HugePage);
    #[cfg(not(target_os = "linux"))]
    let _ = map;
}

/// Enters every page of `map` into the process's page tables (`MADV_POPULATE_READ`, Linux 5.14+;
/// elsewhere, or where the kernel refuses it, one byte of each page is read), reading from
/// disk what the page cache lacks. A mapped page's first access otherwise costs a page fault
/// (a few microseconds, on the query that touches it), and a prefetch instruction to a page
/// not yet mapped is dropped. Returns the bytes covered. No effect on program state.
pub fn populate(map: &memmap2::Mmap) -> usize {
    // Populating reads the whole map: in 2 MiB pages where the kernel can.
    advise_huge_pages(map);
    #[cfg(target_os = "linux")]
    if map.advise(memmap2::Advice::PopulateRead).is_ok() {
        return map.len();
    }
    let mut sum = 0u8;
    for i in (0..map.len()).step_by(4096) {
        // SAFETY: `i` is within the mapping; a volatile read so the touch is not optimised out.
        sum = sum.wrapping_add(unsafe { std::ptr::read_volatile(map.as_ptr().add(i)) });
    }
    std::hint::black_box(sum);
    map.len()
}

/// Asks the kernel to read `map`'s bytes `range` (clamped to the map) into the page cache
/// without waiting for them (`MADV_WILLNEED`): a reader about to touch
/// scattered pages of a cold file queues their reads together instead of faulting them in one
/// after another. Advisory: a refusal is ignored.
pub fn will_need(map: &memmap2::Mmap, range: std::ops::Range<usize>) {
    let end = range.end.min(map.len());
    let start = range.start.min(end);
    if start < end {
        let _ = map.advise_range(memmap2::Advice::WillNeed, start, end - start);
    }
}

/// Whether the page holding byte `at` of `map` is in the page cache (`mincore`; `true` where
/// it cannot be told, and past the end).
pub fn resident(map: &memmap2::Mmap, at: usize) -> bool {
    #[cfg(target_os = "linux")]
    if at < map.len() {
        let page = page_size();
        let start = (map.as_ptr() as usize + at) / page * page;
        let mut v = 0u8;
        // SAFETY: `start` is the page-aligned address of a page inside the live mapping `map`
        // (its start is page-aligned and `at` is within it); mincore writes one byte to `v`.
        let r = unsafe { libc::mincore(start as *mut libc::c_void, 1, &mut v) };
        return r != 0 || v & 1 == 1;
    }
    let _ = (map, at);
    true
}

/// The system's page size.
#[cfg(target_os = "linux")]
fn page_size() -> usize {
    static SIZE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    // SAFETY: sysconf reads a constant of the system.
    *SIZE.get_or_init(|| (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize)
}

/// Drops the pages of `map`'s bytes `range` (clamped to the map, widened to whole pages)
/// from the process's page tables (`MADV_DONTNEED`; nothing elsewhere). They stay
/// in the page cache, and the next read of them faults them in again with the same bytes. For
/// a writer that reads a large map once and would otherwise keep all of it resident (a merge's
/// parts, the rows FAISS adds): the process then holds what it is reading, not all it has
/// read. Advisory: a refusal is ignored. Returns the bytes released.
pub(crate) fn release(map: &memmap2::Mmap, range: std::ops::Range<usize>) -> usize {
    let end = range.end.min(map.len());
    let start = range.start.min(end);
    if start == end {
        return 0;
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: every map this crate makes is a read-only shared mapping (`Mmap::map`) of a
        // segment file nothing writes or truncates once it is written (segment files are
        // immutable; the writer maps only files it has written, synced and closed). For such
        // a mapping MADV_DONTNEED only removes the pages from this process's page tables: a
        // later read faults them in again from the file, with the same contents, so no
        // reference into the map ever sees other bytes (it would zero an anonymous or
        // written private mapping, which this is not).
        let r = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start)
        };
        if r.is_ok() {
            return end - start;
        }
    }
    0
}

/// Hex of the blake3 hash of `bytes`.
pub fn blake3_hex(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// [`blake3_hex`] of the file at `path`, read in 1 MiB pieces (no copy of it is held).
pub fn blake3_file_hex(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().to_hex().to_string())
}

#[cfg(not(target_endian = "little"))]
compile_error!(
    "the segment format is little-endian and read zero-copy; big-endian hosts are not supported"
);

/// True when chunk `id` passes the filter: in `allow` (when given) and not in `deny` (when given).
#[inline]
pub fn admitted(
    id: u32,
    allow: Option<&roaring::RoaringBitmap>,
    deny: Option<&roaring::RoaringBitmap>,
) -> bool {
    allow.is_none_or(|a| a.contains(id)) && deny.is_none_or(|d| !d.contains(id))
}

/// The `k` best (id, score) pairs by descending score, ties broken by ascending id so results
/// are deterministic.
pub fn top_k(items: impl Iterator<Item = (u32, f32)>, k: usize) -> Vec<(u32, f32)> {
    use std::cmp::Ordering;
    use std::collections::BinaryHeap;
    #[derive(PartialEq)]
    struct Entry(f32, u32);
    impl Eq for Entry {}
    impl PartialOrd for Entry {
        fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
            Some(self.cmp(o))
        }
    }
    // Min-heap by "goodness": the worst kept entry sits on top.
    impl Ord for Entry {
        fn cmp(&self, o: &Self) -> Ordering {
            o.0.total_cmp(&self.0).then(self.1.cmp(&o.1))
        }
    }
    if k == 0 {
        return Vec::new();
    }
    let mut heap = BinaryHeap::with_capacity(k + 1);
    for (id, s) in items {
        if s.is_nan() {
            continue;
        }
        heap.push(Entry(s, id));
        if heap.len() > k {
            heap.pop();
        }
    }
    let mut v: Vec<(u32, f32)> = heap.into_iter().map(|e| (e.1, e.0)).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}
