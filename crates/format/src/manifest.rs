//! The index directory and its `MANIFEST`, the single commit point.
//!
//! `MANIFEST` is JSON: format version, a generation counter, the model id and dimension, and the
//! live segments with their current tombstone file. It is replaced atomically: written to
//! `MANIFEST.tmp`, fsynced, renamed over `MANIFEST`, then the directory is fsynced. Readers that
//! opened the previous generation keep their memory maps; [`Index::collect_garbage`] only
//! unlinks what no manifest names. What `MANIFEST` alone knows about memories (pulls and
//! deletions, [`MemoryLedger`]) has a second copy in [`LEDGER_FILE`] for its recovery.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use roaring::RoaringBitmap;
use serde::{Deserialize, Serialize};

use crate::segment::{dir_name, Segment};
use crate::{
    corrupt, io_err, sync_dir, tombstones, write_synced, FormatError, Result, FORMAT_VERSION,
};

pub const MANIFEST: &str = "MANIFEST";

pub const BACKUP_MARK: &str = ".bak-";

/// The memory log's file name in an index directory (written by the `memory` crate; the
/// indexer and sync only read its header: [`crate::walhead`]).
pub const MEMORY_WAL_FILE: &str = "memory.wal";

/// Whether `dir`'s memory log holds records (memories not yet flushed into a segment, or
/// flushed ones a crash left before the log was truncated). What decides whether an index
/// holds memories is this and [`IndexManifest::memory_segments`] and `memory_lsn`: a fresh
/// server keeps its first memories only in the log until its first flush. A log whose header
/// is damaged, or that cannot be read, counts as holding records.
pub fn memory_wal_holds_records(dir: &Path) -> bool {
    let path = dir.join(MEMORY_WAL_FILE);
    match crate::walhead::read(&path) {
        Some((crate::walhead::WalHeader::Complete { len, .. }, file_len)) => file_len > len as u64,
        Some((crate::walhead::WalHeader::Partial, _)) => false,
        Some((crate::walhead::WalHeader::Bad { .. }, _)) => true,
        None => path.exists(),
    }
}

/// The model `dir`'s memory log says its records were embedded with: `None` when there is no
/// log, when its header does not say (a log written before it did) or cannot be read.
pub fn memory_wal_model(dir: &Path) -> Option<crate::walhead::LogModel> {
    crate::walhead::read(&dir.join(MEMORY_WAL_FILE))?.0.model()
}

/// The modification time of `dir/MANIFEST`, if it can be read (readers use it with the
/// generation to notice a new commit).
pub fn manifest_mtime(dir: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(dir.join(MANIFEST))
        .and_then(|m| m.modified())
        .ok()
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TombstoneRef {
    pub file: String,
    pub blake3: String,
    pub count: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SegmentEntry {
    pub id: String,
    pub chunks: u32,
    pub tombstones: Option<TombstoneRef>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct IndexManifest {
    pub format_version: u32,
    pub generation: u64,
    pub model_id: String,
    pub dim: u32,
    pub segments: Vec<SegmentEntry>,
    /// Memory segments (see [`crate::memory`]), oldest first.
    #[serde(default)]
    pub memory_segments: Vec<SegmentEntry>,
    /// Sequence number of the last memory write-ahead-log record that the memory segments
    /// contain; replay skips records up to it.
    #[serde(default)]
    pub memory_lsn: u64,
    /// The source roots code segments were built from (absolute paths), so a server can
    /// re-index them (`reindex`). Sorted by repository name.
    #[serde(default)]
    pub roots: Vec<RootEntry>,
    /// Memory segments a pull (`sync`) has merged in from a remote, or a push with memories has
    /// sent to one, ever: a later pull never adds one of them again, so a memory deleted
    /// locally (its segment dropped or merged away) does not come back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pulled_memory_segments: Vec<String>,
    /// Memories deleted here (`delete_memories`, recorded when the deletion is flushed into
    /// tombstones), with when (Unix ms): a pull does not add a remote copy of one unless that
    /// copy was updated later. A remote segment can hold such a memory under an id this index
    /// never saw, when the machine that pulled it merged its memory segments into a new one
    /// and pushed that. A memory written again with the same id (an ingest, a later put) leaves
    /// the list; past [`MAX_DELETED_MEMORIES`] the oldest deletions leave it. Never pushed:
    /// only this machine's pulls read it. (A binary from before this field rewrites `MANIFEST`
    /// without it. A recovered `MANIFEST` takes it, with the two fields beside it, from the
    /// [`LEDGER_FILE`].)
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub deleted_memories: BTreeMap<String, i64>,
    /// The store and store generation the last pull installed: a later pull from the same
    /// store refuses an older generation (a store rolled back, or its newer manifests
    /// deleted) instead of serving older code without a word. Never pushed. (A binary from
    /// before this field starts it empty: the next pull records it.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pulled_from: Option<PulledFrom>,
}

/// See [`IndexManifest::pulled_from`].
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PulledFrom {
    /// The store's URL without credentials, query or fragment (`sync::Remote::store_id`).
    pub store: String,
    /// Its generation the pull installed.
    pub generation: u64,
}

/// Most deletions [`IndexManifest::deleted_memories`] keeps (about 60 bytes each in
/// `MANIFEST`, which servers read whenever they check for a new generation).
pub const MAX_DELETED_MEMORIES: usize = 20_000;

/// A repository root the index was built from, with the walk rules it was built with, so a
/// re-index (`reindex`, an incremental build from a server) walks it the same way instead of
/// dropping the files those rules let in.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct RootEntry {
    /// Repository name (the `repo` of its files).
    pub repo: String,
    /// Absolute path of the root directory when it was last built.
    pub path: String,
    /// Built with `--no-ignore`: `.gitignore` / `.ignore` files and git's excludes were not
    /// applied.
    #[serde(default, skip_serializing_if = "is_false")]
    pub no_ignore: bool,
    /// Built with `--hidden`: hidden files and directories were walked (`.git` never is).
    #[serde(default, skip_serializing_if = "is_false")]
    pub hidden: bool,
    /// Built with `--follow-external-symlinks`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub follow_external_symlinks: bool,
}

impl RootEntry {
    /// Whether `other` was walked with the same rules (ignore files, hidden files, external
    /// symlinks) as this root.
    pub fn same_walk(&self, other: &RootEntry) -> bool {
        (self.no_ignore, self.hidden, self.follow_external_symlinks)
            == (
                other.no_ignore,
                other.hidden,
                other.follow_external_symlinks,
            )
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// An exclusive advisory lock on an index directory (`dir/LOCK`), held by every
/// read-modify-write of `MANIFEST` (the indexer committing code segments, queryd flushing
/// memories), so neither overwrites the other's commit. Released on drop.
#[derive(Debug)]
pub struct DirLock {
    _file: std::fs::File,
}

impl DirLock {
    /// Blocks until the lock is held.
    pub fn acquire(dir: &Path) -> Result<DirLock> {
        let p = dir.join("LOCK");
        let f = crate::fsio::open(
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true),
            &p,
        )
        .map_err(io_err(&p))?;
        f.lock().map_err(io_err(&p))?;
        Ok(DirLock { _file: f })
    }
}

impl IndexManifest {
    pub fn empty(model_id: &str, dim: u32) -> IndexManifest {
        IndexManifest {
            format_version: FORMAT_VERSION,
            generation: 0,
            model_id: model_id.to_string(),
            dim,
            segments: Vec::new(),
            memory_segments: Vec::new(),
            memory_lsn: 0,
            roots: Vec::new(),
            pulled_memory_segments: Vec::new(),
            deleted_memories: BTreeMap::new(),
            pulled_from: None,
        }
    }

    /// Reads `dir/MANIFEST`.
    pub fn read(dir: &Path) -> Result<IndexManifest> {
        let p = dir.join(MANIFEST);
        let bytes = match std::fs::read(&p) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(FormatError::NotAnIndex {
                    path: dir.to_path_buf(),
                })
            }
            Err(e) => return Err(FormatError::Io { path: p, source: e }),
        };
        let m: IndexManifest =
            serde_json::from_slice(&bytes).map_err(|e| corrupt(&p, crate::json_detail(&e)))?;
        if !crate::reads_version(m.format_version) {
            return Err(FormatError::Version {
                path: p,
                found: m.format_version,
                expected: FORMAT_VERSION,
            });
        }
        for s in m.segments.iter().chain(&m.memory_segments) {
            let ok_id = !s.id.is_empty() && s.id.bytes().all(|b| b.is_ascii_hexdigit());
            let ok_tomb = s.tombstones.as_ref().is_none_or(|t| {
                !t.file.contains('/') && !t.file.contains("..") && t.file.starts_with("tomb-")
            });
            if !ok_id || !ok_tomb {
                return Err(corrupt(&p, format!("bad segment entry {s:?}")));
            }
        }
        Ok(m)
    }

    /// Atomically replaces `dir/MANIFEST` with `self`, as [`FORMAT_VERSION`] whatever version
    /// it was read as (a build that reads format 3 and adds format 4 segments says so, and an
    /// older build refuses the index instead of meeting the new segments). The memory ledger
    /// ([`LEDGER_FILE`]) is written after the rename when it changed, so it never records what
    /// no `MANIFEST` committed; a crash or an error between the two leaves it one commit
    /// behind until the next commit. (An error after the rename, there or in the directory
    /// fsync, means the new `MANIFEST` may be in place.)
    pub fn commit(&self, dir: &Path) -> Result<()> {
        let tmp = dir.join("MANIFEST.tmp");
        let current = IndexManifest {
            format_version: FORMAT_VERSION,
            ..self.clone()
        };
        let json = serde_json::to_vec_pretty(&current)
            .map_err(|e| FormatError::InvalidInput(e.to_string()))?;
        write_synced(&tmp, &json)?;
        let dest = dir.join(MANIFEST);
        crate::fsio::rename(&tmp, &dest).map_err(io_err(&dest))?;
        // The rename is made durable even when the ledger cannot be written.
        let ledger = write_ledger(dir, &self.ledger(), self.generation);
        sync_dir(dir)?;
        ledger
    }

    /// What this manifest records about memories that the memory segments on disk cannot
    /// tell again ([`MemoryLedger`]).
    pub fn ledger(&self) -> MemoryLedger {
        MemoryLedger {
            pulled_memory_segments: self.pulled_memory_segments.clone(),
            deleted_memories: self.deleted_memories.clone(),
            pulled_from: self.pulled_from.clone(),
        }
    }
}

/// The file beside `MANIFEST` holding a second copy of its [`MemoryLedger`], for MANIFEST
/// recovery (`indexer build --rebuild` of an index whose `MANIFEST` is damaged or lost), and
/// so that a pull into a directory that lost its `MANIFEST` refuses instead of forgetting
/// deletions. Written by [`IndexManifest::commit`] when the ledger changed (each commit reads
/// it to compare); never pushed or pulled. A binary from before it commits without updating
/// it: a memory such a binary deletes or imports again is known to the ledger only after the
/// next commit of a newer one.
pub const LEDGER_FILE: &str = "memory-ledger.json";

/// Longest ledger file read ([`MAX_DELETED_MEMORIES`] deletions take about 1.2 MB).
const LEDGER_MAX_BYTES: u64 = 64 << 20;

/// The part of a `MANIFEST` that a recovery could not rebuild from the segments on disk: which
/// remote memory segments were pulled or pushed, which memories were deleted here and when,
/// and the store generation the last pull installed. Without it a recovered index would let
/// a pull bring deleted memories back, or accept a store rolled back.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct MemoryLedger {
    /// [`IndexManifest::pulled_memory_segments`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pulled_memory_segments: Vec<String>,
    /// [`IndexManifest::deleted_memories`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub deleted_memories: BTreeMap<String, i64>,
    /// [`IndexManifest::pulled_from`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pulled_from: Option<PulledFrom>,
}

impl MemoryLedger {
    /// Nothing recorded.
    pub fn is_empty(&self) -> bool {
        self == &MemoryLedger::default()
    }

    /// blake3 of the ledger's compact JSON: its content's checksum (equal content, equal sum,
    /// however the file's bytes are laid out).
    fn checksum(&self) -> Result<String> {
        let body =
            serde_json::to_vec(self).map_err(|e| FormatError::InvalidInput(e.to_string()))?;
        Ok(crate::blake3_hex(&body))
    }
}

/// [`LEDGER_FILE`]'s layout.
#[derive(Serialize, Deserialize)]
struct LedgerFile {
    ledger_version: u32,
    /// The generation of the commit that last changed the ledger.
    generation: u64,
    /// [`MemoryLedger::checksum`]: damage that still parses as JSON is found too.
    blake3: String,
    ledger: MemoryLedger,
}

const LEDGER_VERSION: u32 = 1;

/// Reads `dir`'s [`LEDGER_FILE`]: the ledger and the generation that last changed it; `None`
/// when there is none. A file that does not parse, or whose content does not match its
/// checksum, is [`FormatError::Corrupt`].
pub fn read_ledger(dir: &Path) -> Result<Option<(MemoryLedger, u64)>> {
    let p = dir.join(LEDGER_FILE);
    let bytes = match crate::fsio::read_regular_at_most(&p, LEDGER_MAX_BYTES) {
        Ok(Some(b)) => b,
        Ok(None) => {
            return Err(corrupt(
                &p,
                format!("not a regular file of at most {LEDGER_MAX_BYTES} bytes"),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(FormatError::Io { path: p, source: e }),
    };
    let file: LedgerFile =
        serde_json::from_slice(&bytes).map_err(|e| corrupt(&p, crate::json_detail(&e)))?;
    if file.ledger_version != LEDGER_VERSION {
        return Err(FormatError::Version {
            path: p,
            found: file.ledger_version,
            expected: LEDGER_VERSION,
        });
    }
    if file.ledger.checksum()? != file.blake3 {
        return Err(corrupt(&p, "content does not match its blake3"));
    }
    Ok(Some((file.ledger, file.generation)))
}

/// Writes `ledger` as `dir`'s [`LEDGER_FILE`] (to a temporary file, fsynced, renamed over it;
/// the caller fsyncs the directory), unless the file already holds it, or holds nothing and
/// `ledger` is empty. A file that cannot be read, is damaged or of another version is
/// replaced: the committed `MANIFEST` is what it copies.
fn write_ledger(dir: &Path, ledger: &MemoryLedger, generation: u64) -> Result<()> {
    match read_ledger(dir) {
        Ok(Some((on_disk, _))) if &on_disk == ledger => return Ok(()),
        Ok(None) if ledger.is_empty() => return Ok(()),
        _ => {}
    }
    let file = LedgerFile {
        ledger_version: LEDGER_VERSION,
        generation,
        blake3: ledger.checksum()?,
        ledger: ledger.clone(),
    };
    let json =
        serde_json::to_vec_pretty(&file).map_err(|e| FormatError::InvalidInput(e.to_string()))?;
    let tmp = dir.join(format!("{LEDGER_FILE}.tmp"));
    write_synced(&tmp, &json)?;
    let dest = dir.join(LEDGER_FILE);
    crate::fsio::rename(&tmp, &dest).map_err(io_err(&dest))
}

/// A segment of an open index with its current tombstones.
#[derive(Debug)]
pub struct LiveSegment {
    /// Shared between generations: reopening an index reuses the segments it already mapped.
    pub segment: std::sync::Arc<Segment>,
    pub tombstones: RoaringBitmap,
    /// Files without chunks that are deleted (they have no chunk to tombstone;
    /// [`tombstones`]).
    pub dead_files: RoaringBitmap,
}

impl LiveSegment {
    /// Whether file `fi` of the segment is live: it has a chunk that is not tombstoned, or it
    /// has no chunks and is not deleted.
    pub fn file_is_live(&self, fi: u32) -> bool {
        let Some(f) = self.segment.table().files.get(fi as usize) else {
            return false;
        };
        let first = f.first_chunk.to_native();
        let n = f.chunk_count.to_native();
        if n == 0 {
            !self.dead_files.contains(fi)
        } else {
            (first..first.saturating_add(n)).any(|c| !self.tombstones.contains(c))
        }
    }
}

/// A code segment the index names but does not serve (see [`OpenOptions::lenient`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DamagedSegment {
    pub id: String,
    /// The file at fault (or the segment directory when no single file is).
    pub path: PathBuf,
    /// What is wrong, one sentence.
    pub error: String,
    /// The segment directory the damage was found in ([`crate::segment::dir_identity`]): a
    /// quarantine ([`OpenOptions::quarantine`]) holds only while that directory is still the
    /// one at the segment's path, so a repaired copy is opened again.
    #[serde(skip)]
    pub dir: Option<crate::segment::DirIdentity>,
}

/// How [`Index::open_with`] treats code segments that fail to open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// Leave out code segments that fail to open (recorded in [`Index::damaged`]) instead of
    /// failing: a server keeps serving the healthy segments and every memory. Memory segments
    /// are never left out (that would hide memories): their damage always fails the open.
    pub lenient: bool,
    /// Code segment ids to leave out, with why (a checksum mismatch found after open): they
    /// are listed in [`Index::damaged`] without being opened.
    pub quarantine: std::collections::BTreeMap<String, DamagedSegment>,
    /// Drop each code segment's pages from the process as soon as it is validated
    /// ([`Segment::release_pages`]). Validation reads every record table and dictionary, and
    /// at 35 segments of real code their pages came to about 300 MB mapped at once; a caller
    /// that goes on to read only some of the segments (a merge) asks for this.
    pub release_pages: bool,
}

/// An open index: the manifest and its validated segments.
#[derive(Debug)]
pub struct Index {
    pub dir: PathBuf,
    pub manifest: IndexManifest,
    /// The code segments served: every one the manifest names, except the
    /// [`Index::damaged`] ones (so positions match `manifest.segments` only when none is).
    pub segments: Vec<LiveSegment>,
    /// Memory segments, in manifest order.
    pub memory: Vec<LiveSegment>,
    /// Code segments named by the manifest but left out (lenient opens only), in manifest
    /// order.
    pub damaged: Vec<DamagedSegment>,
    /// The options this index was opened with; [`Index::open_reusing`] carries them on.
    pub options: OpenOptions,
}

impl Index {
    /// Opens and validates every segment named by `dir/MANIFEST`; any damage fails the open.
    pub fn open(dir: &Path) -> Result<Index> {
        Index::open_with(dir, None, OpenOptions::default())
    }

    /// Opens `dir` leaving out damaged code segments (see [`OpenOptions::lenient`]).
    pub fn open_lenient(dir: &Path) -> Result<Index> {
        Index::open_with(
            dir,
            None,
            OpenOptions {
                lenient: true,
                ..OpenOptions::default()
            },
        )
    }

    /// Opens the index at `dir`, taking segments that `previous` already opened (same id, same
    /// directory on disk: [`Segment::replaced_on_disk`]) from it instead of mapping and
    /// validating them again; only tombstones are re-read. A new
    /// generation that adds one segment costs one segment's validation. The options are
    /// `previous`'s (strict without one).
    pub fn open_reusing(dir: &Path, previous: Option<&Index>) -> Result<Index> {
        let options = previous.map(|p| p.options.clone()).unwrap_or_default();
        Index::open_with(dir, previous, options)
    }

    /// [`Index::open_reusing`] with explicit options.
    pub fn open_with(dir: &Path, previous: Option<&Index>, options: OpenOptions) -> Result<Index> {
        let manifest = IndexManifest::read(dir)?;
        let mut known: std::collections::HashMap<&str, &std::sync::Arc<Segment>> =
            std::collections::HashMap::new();
        if let Some(p) = previous {
            for ls in p.segments.iter().chain(&p.memory) {
                known.insert(ls.segment.id(), &ls.segment);
            }
        }
        // Segments are validated in parallel (on a many-segment index, open is mostly these
        // checks), then taken in MANIFEST order, so errors and results do not depend on timing.
        use rayon::prelude::*;
        let opened: Vec<Option<Result<LiveSegment>>> = manifest
            .segments
            .par_iter()
            // One segment per job: segments differ in size by orders of magnitude.
            .with_max_len(1)
            .map(|e| {
                (!quarantined(dir, &options, &e.id)).then(|| {
                    let ls = open_one(dir, &manifest, e, false, &known);
                    if let (Ok(ls), true) = (&ls, options.release_pages) {
                        ls.segment.release_pages();
                    }
                    ls
                })
            })
            .collect();
        let mut damaged = Vec::new();
        let mut segments = Vec::with_capacity(manifest.segments.len());
        for (e, opened) in manifest.segments.iter().zip(opened) {
            let Some(opened) = opened else {
                damaged.extend(options.quarantine.get(&e.id).cloned());
                continue;
            };
            match opened {
                Ok(ls) => segments.push(ls),
                Err(err) if options.lenient => damaged.push(DamagedSegment {
                    dir: None,
                    id: e.id.clone(),
                    path: err
                        .path()
                        .unwrap_or(&dir.join(dir_name(&e.id)))
                        .to_path_buf(),
                    error: err.to_string(),
                }),
                Err(err) => return Err(err),
            }
        }
        let memory = manifest
            .memory_segments
            .iter()
            .map(|e| open_one(dir, &manifest, e, true, &known))
            .collect::<Result<Vec<_>>>()?;
        Ok(Index {
            dir: dir.to_path_buf(),
            manifest,
            segments,
            memory,
            damaged,
            options,
        })
    }

    /// Live memories in the memory segments.
    pub fn live_memories(&self) -> u64 {
        self.memory
            .iter()
            .map(|s| u64::from(s.segment.meta().chunk_count) - s.tombstones.len())
            .sum()
    }

    /// Opens every code segment's IVF map and one-bit codes now, in parallel, instead of in
    /// the first vector search (parsing the headers and quantising the centroids: about 20 ms
    /// of the first query at a million chunks in 9 segments). A server calls it while the
    /// model loads and before it swaps in a new generation. A failure is kept by the segment
    /// and reported by the searches that need the map, as it would have been without this.
    pub fn open_vector_maps(&self) {
        use rayon::prelude::*;
        self.segments.par_iter().with_max_len(1).for_each(|ls| {
            if ls.segment.ivf_map().is_ok() {
                let _ = ls.segment.rbq();
            }
        });
    }

    /// Code segments, then memory segments.
    fn all_segments(&self) -> impl Iterator<Item = &LiveSegment> {
        self.segments.iter().chain(&self.memory)
    }

    /// Bytes of every segment's memory maps (code and memory segments).
    pub fn mapped_bytes(&self) -> usize {
        self.all_segments()
            .map(|ls| ls.segment.mapped_bytes())
            .sum()
    }

    /// [`Segment::populate`] for every code and memory segment, one after the other: a task
    /// for a background thread (it reads from disk what the page cache lacks). Returns the
    /// bytes covered (segments already populated, for example shared with the generation
    /// before, count nothing). Every map is first asked for 2 MiB pages
    /// ([`crate::advise_huge_pages`]): queries running meanwhile then fault in from disk the
    /// whole 2 MiB pieces that populating reads anyway, instead of scattering small pages
    /// that would keep those pieces from being read as one.
    pub fn populate(&self) -> usize {
        for ls in self.all_segments() {
            ls.segment.advise_huge_pages();
        }
        self.all_segments().map(|ls| ls.segment.populate()).sum()
    }

    /// Live (not tombstoned) chunk count.
    pub fn live_chunks(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| u64::from(s.segment.meta().chunk_count) - s.tombstones.len())
            .sum()
    }

    /// Removes segment directories, tombstone files and temporaries that the current MANIFEST
    /// does not name. Open memory maps stay valid (unlink semantics). Returns what was removed.
    pub fn collect_garbage(dir: &Path) -> Result<Vec<PathBuf>> {
        let m = IndexManifest::read(dir)?;
        let all = || m.segments.iter().chain(&m.memory_segments);
        let mut keep: Vec<String> = all().map(|s| dir_name(&s.id)).collect();
        keep.extend(all().filter_map(|s| s.tombstones.as_ref().map(|t| t.file.clone())));
        let mut removed = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
            let entry = entry.map_err(io_err(dir))?;
            let name = entry.file_name().to_string_lossy().to_string();
            // A build's staged segments: removed only when their builder is gone.
            if name.starts_with(crate::staging::STAGING_PREFIX) && !name.contains(BACKUP_MARK) {
                let p = entry.path();
                if p.is_dir() && crate::staging::abandoned(&p) {
                    std::fs::remove_dir_all(&p).map_err(io_err(&p))?;
                    removed.push(p);
                }
                continue;
            }
            // Names moved aside (`*.bak-<time>`, see `recover::move_aside`) are never ours.
            let ours = (name.starts_with("seg-")
                || name.starts_with("tomb-")
                || name.starts_with(".tmp-seg-"))
                && !name.contains(BACKUP_MARK);
            if !ours || keep.contains(&name) {
                continue;
            }
            let p = entry.path();
            let r = if p.is_dir() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
            r.map_err(io_err(&p))?;
            removed.push(p);
        }
        Ok(removed)
    }
}

/// Whether segment `id` stays out under `options`' quarantine: it is quarantined and its
/// directory is still the damaged one.
fn quarantined(dir: &Path, options: &OpenOptions, id: &str) -> bool {
    options
        .quarantine
        .get(id)
        .is_some_and(|d| !crate::segment::dir_replaced(&dir.join(dir_name(id)), d.dir))
}

/// Opens the segment of entry `e` with its tombstones; `memory` says which list it is from
/// (memory segments must carry `memories.rkyv`, code segments must not).
fn open_one(
    dir: &Path,
    manifest: &IndexManifest,
    e: &SegmentEntry,
    memory: bool,
    known: &std::collections::HashMap<&str, &std::sync::Arc<Segment>>,
) -> Result<LiveSegment> {
    let segment = match known.get(e.id.as_str()) {
        // Not when its directory was replaced since (a pull re-fetched a damaged copy, a
        // rebuild wrote it again): the maps would go on serving the old files.
        Some(s)
            if s.meta().model_id == manifest.model_id
                && s.meta().dim == manifest.dim
                && !s.replaced_on_disk() =>
        {
            std::sync::Arc::clone(s)
        }
        _ => std::sync::Arc::new(Segment::open(dir, &e.id, &manifest.model_id, manifest.dim)?),
    };
    if segment.meta().chunk_count != e.chunks {
        return Err(corrupt(
            &dir.join(MANIFEST),
            format!(
                "segment {} has {} chunks, MANIFEST says {}",
                e.id,
                segment.meta().chunk_count,
                e.chunks
            ),
        ));
    }
    if segment.memories().is_some() != memory {
        return Err(corrupt(
            &dir.join(MANIFEST),
            format!(
                "segment {} is listed as a {} segment but is not one",
                e.id,
                if memory { "memory" } else { "code" }
            ),
        ));
    }
    let deleted = match &e.tombstones {
        Some(t) => tombstones::read_with_files(
            &dir.join(&t.file),
            &manifest.model_id,
            &t.blake3,
            e.chunks,
            segment.meta().file_count,
        )?,
        None => tombstones::Deleted::default(),
    };
    // Only files without chunks are deleted through the bitmap of files (the others through
    // their chunks).
    let table = segment.table();
    if let Some(fi) =
        (deleted.files.iter()).find(|&fi| table.files[fi as usize].chunk_count.to_native() != 0)
    {
        let t = e
            .tombstones
            .as_ref()
            .map_or(String::new(), |t| t.file.clone());
        return Err(corrupt(
            &dir.join(t),
            format!("deletes file {fi}, which has chunks, as a file without chunks"),
        ));
    }
    Ok(LiveSegment {
        segment,
        tombstones: deleted.chunks,
        dead_files: deleted.files,
    })
}

/// Tombstones, in the memory segments of `index` (whose manifest entries are `entries`, same
/// order), every record whose id is in `ids`, on top of the existing tombstones; new tombstone
/// files are named for `generation`. Returns the new entries (a segment left with no live
/// record is dropped) and how many records were newly tombstoned.
pub fn tombstone_memory_ids<'a>(
    dir: &std::path::Path,
    index: &Index,
    entries: &[SegmentEntry],
    ids: impl Iterator<Item = &'a str> + Clone,
    generation: u64,
) -> Result<(Vec<SegmentEntry>, u64)> {
    let mut kept = Vec::with_capacity(entries.len());
    let mut newly = 0;
    for (ls, entry) in index.memory.iter().zip(entries) {
        let mut entry = entry.clone();
        let mut bits = ls.tombstones.clone();
        for id in ids.clone() {
            for c in ls
                .segment
                .table()
                .symbol_chunks(&format!("{}{id}", crate::memory::MEMORY_SYMBOL_PREFIX))
            {
                bits.insert(c);
            }
        }
        if bits.len() != ls.tombstones.len() {
            newly += bits.len() - ls.tombstones.len();
            if bits.len() >= u64::from(entry.chunks) {
                continue;
            }
            let name = tombstones::file_name(&entry.id, generation);
            let bytes = tombstones::write_with_files(
                &dir.join(&name),
                &index.manifest.model_id,
                &bits,
                &ls.dead_files,
            )?;
            entry.tombstones = Some(TombstoneRef {
                file: name,
                blake3: crate::blake3_hex(&bytes),
                count: bits.len(),
            });
        }
        kept.push(entry);
    }
    Ok((kept, newly))
}
