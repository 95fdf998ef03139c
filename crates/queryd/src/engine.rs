//! The long-running side of `queryd`: an immutable [`Snapshot`] of the index (memory-mapped
//! segments plus symbol maps built at load) behind an `ArcSwap`, swapped when `indexer build`
//! commits a new `MANIFEST`, and the query encoder with an LRU cache of query vectors.
//!
//! Readers load the current `Arc<Snapshot>` once per request and keep it to the end, so a swap
//! never shows a query a half-built state and never blocks it. A failed reload (corrupt or
//! half-copied index) keeps the old snapshot and is reported by `index_status`.
//!
//! The graph of an incrementally built index spans segments: edges of an old segment may point
//! at chunks that a later build tombstoned (their file changed), and a new segment names targets
//! that live in older segments by symbol id (`external` edges). [`Snapshot::out_edges`] and
//! [`Snapshot::in_edges`] resolve both by symbol id to the live chunks, so callers see one graph.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use format::graph::Direction;
use format::manifest::MANIFEST;
use format::records::{name_key, qualified_key, ArchivedChunkRecord, ArchivedFileRecord, EdgeKind};
use format::{FormatError, Index, IndexManifest};

use crate::memory::{self, wal::Wal, Delta, MemSegState};
use serde::Serialize;

/// A graph node: (segment ordinal, node id). Node ids are chunk ordinals, then
/// `chunk_count + file ordinal` for file nodes.
pub type NodeRef = (usize, u32);

/// How often the watcher looks at `MANIFEST`.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(500);
/// Query vectors kept in the LRU cache.
pub const EMBED_CACHE_ENTRIES: usize = 1024;

/// One generation of the index, immutable once built. Everything it knows is read from the
/// mapped segments: symbols, names, paths and external edges are found by binary search in
/// each segment's lookup tables (written by `format`), so opening a snapshot costs no heap
/// proportional to the index and a swap is cheap.
pub struct Snapshot {
    pub index: Arc<Index>,
    pub loaded_at: SystemTime,
    pub manifest_mtime: Option<SystemTime>,
    /// Memories written since the last flush (see [`crate::memory`]).
    pub delta: Delta,
    /// Per memory segment: tombstoned or shadowed records, and inactive ones.
    pub mem: Arc<Vec<MemSegState>>,
    /// The graph of the active memories, built on first use (see [`memory::graph`]).
    pub graph: std::sync::OnceLock<Arc<memory::graph::MemGraph>>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("dir", &self.index.dir)
            .field("generation", &self.index.manifest.generation)
            .finish()
    }
}

pub(crate) fn manifest_mtime(dir: &Path) -> Option<SystemTime> {
    std::fs::metadata(dir.join(MANIFEST))
        .and_then(|m| m.modified())
        .ok()
}

impl Snapshot {
    /// Opens the index at `dir`.
    pub fn load(dir: &Path) -> Result<Snapshot, FormatError> {
        let mtime = manifest_mtime(dir);
        let index = Index::open(dir)?;
        Ok(Snapshot::from_index(index, mtime))
    }

    /// Wraps an opened index (no delta).
    pub fn from_index(index: Index, manifest_mtime: Option<SystemTime>) -> Snapshot {
        Snapshot::with_delta(Arc::new(index), manifest_mtime, Delta::default())
    }

    /// An index with a delta of live memory writes on top.
    pub fn with_delta(
        index: Arc<Index>,
        manifest_mtime: Option<SystemTime>,
        delta: Delta,
    ) -> Snapshot {
        let mem = Arc::new(memory::mem_states(&index, &delta.shadowed));
        Snapshot {
            index,
            loaded_at: SystemTime::now(),
            manifest_mtime,
            delta,
            mem,
            graph: std::sync::OnceLock::new(),
        }
    }

    /// The memory graph of the memories passing `f`: cached for the default filter (active
    /// memories), built for this call otherwise.
    pub fn mem_graph(&self, f: &memory::search::MemFilter) -> Arc<memory::graph::MemGraph> {
        if f.is_default() {
            Arc::clone(
                self.graph
                    .get_or_init(|| Arc::new(memory::graph::MemGraph::build(self, f))),
            )
        } else {
            Arc::new(memory::graph::MemGraph::build(self, f))
        }
    }

    pub fn generation(&self) -> u64 {
        self.index.manifest.generation
    }

    fn chunk_count(&self, seg: usize) -> u32 {
        self.index.segments[seg].segment.table().chunks.len() as u32
    }

    /// True for a chunk node that is not tombstoned.
    pub fn is_live_chunk(&self, (s, n): NodeRef) -> bool {
        n < self.chunk_count(s) && !self.index.segments[s].tombstones.contains(n)
    }

    pub fn is_chunk(&self, (s, n): NodeRef) -> bool {
        n < self.chunk_count(s)
    }

    pub fn chunk(&self, (s, n): NodeRef) -> &ArchivedChunkRecord {
        &self.index.segments[s].segment.table().chunks[n as usize]
    }

    /// The file of a chunk node, or the file a file node stands for.
    pub fn file(&self, (s, n): NodeRef) -> &ArchivedFileRecord {
        let t = self.index.segments[s].segment.table();
        let cc = t.chunks.len() as u32;
        let fi = if n < cc {
            t.chunks[n as usize].file.to_native()
        } else {
            n - cc
        };
        &t.files[fi as usize]
    }

    /// The stored vector of a chunk.
    pub fn vector(&self, (s, n): NodeRef) -> Option<&[f32]> {
        self.index.segments[s].segment.vector(n)
    }

    /// Chunks with exactly this symbol id, live or tombstoned, in (segment, chunk) order.
    fn symbol_nodes(&self, id: &str) -> impl Iterator<Item = NodeRef> + '_ {
        let id = id.to_string();
        self.index
            .segments
            .iter()
            .enumerate()
            .flat_map(move |(si, ls)| {
                ls.segment
                    .table()
                    .symbol_chunks(&id)
                    .map(move |c| (si, c))
                    .collect::<Vec<_>>()
            })
    }

    /// Live chunks with exactly this symbol id (several for a long body split into pieces), in
    /// (segment, chunk) order: the symbol's own chunk first.
    pub fn by_symbol_id(&self, id: &str) -> Vec<NodeRef> {
        if id.is_empty() {
            return Vec::new();
        }
        self.symbol_nodes(id)
            .filter(|&n| self.is_live_chunk(n))
            .collect()
    }

    /// The first live chunk of a symbol id.
    fn first_live(&self, id: &str) -> Option<NodeRef> {
        if id.is_empty() {
            return None;
        }
        self.symbol_nodes(id).find(|&n| self.is_live_chunk(n))
    }

    /// Live chunks under a lookup key (see [`format::records::name_key`]).
    fn by_key(&self, key: &str) -> Vec<NodeRef> {
        let mut out = Vec::new();
        for (si, ls) in self.index.segments.iter().enumerate() {
            for c in ls.segment.table().name_chunks(key) {
                if !ls.tombstones.contains(c) {
                    out.push((si, c));
                }
            }
        }
        out
    }

    /// Live chunks whose simple or qualified name is `name` (case-insensitive).
    pub fn by_name(&self, name: &str) -> Vec<NodeRef> {
        self.by_key(&name_key(name))
    }

    /// Every file node of a path, live or not, in (segment, file) order.
    fn files_all(&self, path: &str) -> Vec<NodeRef> {
        let mut out = Vec::new();
        for (si, ls) in self.index.segments.iter().enumerate() {
            let t = ls.segment.table();
            let cc = t.chunks.len() as u32;
            out.extend(t.files_with_path(path).map(|f| (si, cc + f)));
        }
        out
    }

    /// The symbol id of the smallest live chunk of `path` that covers `start..=end`.
    pub fn innermost_symbol(&self, path: &str, start: u32, end: u32) -> Option<String> {
        self.chunks_of_path(path)
            .into_iter()
            .map(|n| self.chunk(n))
            .filter(|c| {
                !c.symbol_id.is_empty()
                    && c.start_line.to_native() <= start
                    && c.end_line.to_native() >= end
            })
            .min_by_key(|c| c.end_line.to_native() - c.start_line.to_native())
            .map(|c| c.symbol_id.to_string())
    }

    /// The live chunks of the file at repo-relative `path`, in order.
    pub fn chunks_of_path(&self, path: &str) -> Vec<NodeRef> {
        let Some((si, n)) = self.file_by_path(path) else {
            return Vec::new();
        };
        let ls = &self.index.segments[si];
        let t = ls.segment.table();
        let f = &t.files[(n - t.chunks.len() as u32) as usize];
        let first = f.first_chunk.to_native();
        (first..first + f.chunk_count.to_native())
            .filter(|c| !ls.tombstones.contains(*c))
            .map(|c| (si, c))
            .collect()
    }

    /// The live file node of a path: the newest segment whose file still has a live chunk (or
    /// has no chunks at all).
    fn file_by_path(&self, path: &str) -> Option<NodeRef> {
        for (si, ls) in self.index.segments.iter().enumerate().rev() {
            let t = ls.segment.table();
            let cc = t.chunks.len() as u32;
            for fi in t
                .files_with_path(path)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
            {
                let f = &t.files[fi as usize];
                let first = f.first_chunk.to_native();
                let n = f.chunk_count.to_native();
                if n == 0 || (first..first + n).any(|c| !ls.tombstones.contains(c)) {
                    return Some((si, cc + fi));
                }
            }
        }
        None
    }

    /// Resolves a symbol id, else a qualified or simple name (`Dictionary::suggest`,
    /// `Dictionary.suggest`, `suggest`), to live symbols: one node per symbol id (its first
    /// chunk).
    pub fn resolve(&self, symbol: &str) -> Vec<NodeRef> {
        let symbol = symbol.trim();
        if let Some(n) = self.first_live(symbol) {
            return vec![n];
        }
        let mut found = self.by_name(symbol);
        if found.is_empty() {
            // `Type::method`, `Type.method`, `Type#method` spellings of a qualified name.
            let norm = qualified_key(symbol);
            found = self.by_key(&norm);
            if found.is_empty() {
                // A qualified suffix: `Circle.area` for `geometry.Circle.area`.
                if let Some(last) = norm.rsplit('.').next().filter(|l| *l != norm) {
                    let suffix = format!(".{norm}");
                    found = self
                        .by_key(last)
                        .into_iter()
                        .filter(|&n| qualified_key(&self.chunk(n).qualified).ends_with(&suffix))
                        .collect();
                }
            }
        }
        // One node per symbol id: the first chunk; chunks without a symbol id stay as they are.
        let mut seen = std::collections::HashSet::new();
        found.sort_unstable();
        found.retain(|&n| {
            let id = self.chunk(n).symbol_id.as_str();
            id.is_empty() || seen.insert(id.to_string())
        });
        found
            .into_iter()
            .map(|n| {
                self.first_live(self.chunk(n).symbol_id.as_str())
                    .unwrap_or(n)
            })
            .collect()
    }

    /// Known names close to `name`: same prefix or substring first, then by edit distance.
    pub fn suggest(&self, name: &str, k: usize) -> Vec<String> {
        let q = name
            .trim()
            .rsplit(['.', ':', '#', '/'])
            .find(|s| !s.is_empty())
            .unwrap_or("")
            .to_lowercase();
        if q.is_empty() {
            return Vec::new();
        }
        // Keys without separators, each with its first live chunk (segments in order).
        let mut keys: std::collections::BTreeMap<&str, NodeRef> = std::collections::BTreeMap::new();
        for (si, ls) in self.index.segments.iter().enumerate() {
            for (k, chunks) in ls.segment.table().names() {
                if k.contains(['.', ':']) || keys.contains_key(k) {
                    continue;
                }
                if let Some(c) = chunks
                    .iter()
                    .find(|c| !ls.tombstones.contains(c.to_native()))
                {
                    keys.insert(k, (si, c.to_native()));
                }
            }
        }
        let mut scored: Vec<(usize, &str, NodeRef)> = keys
            .into_iter()
            .map(|(n, node)| {
                let d = if n.contains(&q) || q.contains(n) {
                    n.len().abs_diff(q.len()) / 4
                } else {
                    levenshtein(&q, n)
                };
                (d, n, node)
            })
            .filter(|(d, n, _)| *d <= (q.len().max(n.len()) / 2).max(2))
            .collect();
        scored.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(b.1)));
        let mut out: Vec<String> = Vec::new();
        for (_, _, node) in scored {
            let c = self.chunk(node);
            let s = if c.qualified.is_empty() {
                c.name.to_string()
            } else {
                c.qualified.to_string()
            };
            if !out.contains(&s) {
                out.push(s);
            }
            if out.len() >= k {
                break;
            }
        }
        out
    }

    /// Where edges of `(seg, target)` really lead: a tombstoned chunk is replaced by the live
    /// chunks with its symbol id, a file node by the live node of its path.
    fn push_target(&self, seg: usize, t: u32, fl: u8, out: &mut Vec<(NodeRef, u8)>) {
        let node = (seg, t);
        if self.is_chunk(node) {
            if self.is_live_chunk(node) {
                out.push((node, fl));
            } else if let Some(n) = self.first_live(self.chunk(node).symbol_id.as_str()) {
                out.push((n, fl));
            }
        } else {
            let path = self.file(node).path.as_str();
            out.push((self.file_by_path(path).unwrap_or(node), fl));
        }
    }

    fn push_external(&self, dst: &str, fl: u8, out: &mut Vec<(NodeRef, u8)>) {
        if let Some(p) = dst.strip_prefix("file:") {
            if let Some(n) = self.file_by_path(p) {
                out.push((n, fl));
            }
        } else if let Some(n) = self.first_live(dst) {
            out.push((n, fl));
        }
    }

    /// A source node is current when it is a live chunk or the live node of its file.
    fn is_current_source(&self, n: NodeRef) -> bool {
        if self.is_chunk(n) {
            self.is_live_chunk(n)
        } else {
            self.file_by_path(self.file(n).path.as_str()) == Some(n)
        }
    }

    /// Targets of `node`'s edges of `kind` (callees, contained symbols, imported files), with
    /// their flags, remapped across segments; deduplicated, in edge order.
    pub fn out_edges(&self, node: NodeRef, kind: EdgeKind) -> Vec<(NodeRef, u8)> {
        let (s, n) = node;
        let mut out = Vec::new();
        for (t, fl) in self.index.segments[s]
            .segment
            .graph()
            .neighbors(n, kind, Direction::Out)
        {
            self.push_target(s, t, fl, &mut out);
        }
        for e in self.index.segments[s]
            .segment
            .graph()
            .external_from(n, kind)
        {
            self.push_external(e.dst.as_str(), e.flags, &mut out);
        }
        dedup_nodes(out, node)
    }

    /// Sources of edges of `kind` into `node` (callers, containers, importers), including edges
    /// that still point at an older, tombstoned version of the same symbol or file and external
    /// edges naming it; only current sources.
    pub fn in_edges(&self, node: NodeRef, kind: EdgeKind) -> Vec<(NodeRef, u8)> {
        let mut aliases = vec![node];
        let key = if self.is_chunk(node) {
            let id = self.chunk(node).symbol_id.as_str();
            // Other pieces of the symbol, live or tombstoned (old targets of edges).
            aliases.extend(self.symbol_nodes(id).filter(|&x| x != node));
            (!id.is_empty()).then(|| id.to_string())
        } else {
            let p = self.file(node).path.to_string();
            aliases.extend(self.files_all(&p).into_iter().filter(|&x| x != node));
            Some(format!("file:{p}"))
        };
        let mut out = Vec::new();
        for (s, n) in aliases {
            for (src, fl) in
                self.index.segments[s]
                    .segment
                    .graph()
                    .neighbors(n, kind, Direction::In)
            {
                if self.is_current_source((s, src)) {
                    out.push(((s, src), fl));
                }
            }
        }
        if let Some(key) = key {
            for (si, ls) in self.index.segments.iter().enumerate() {
                for e in ls.segment.graph().external_to(&key, kind) {
                    let src = (si, e.src.to_native());
                    if self.is_current_source(src) {
                        out.push((src, e.flags));
                    }
                }
            }
        }
        dedup_nodes(out, node)
    }

    /// Every live chunk, in (segment, chunk) order.
    pub fn live_chunks(&self) -> impl Iterator<Item = NodeRef> + '_ {
        self.index.segments.iter().enumerate().flat_map(|(si, ls)| {
            (0..ls.segment.table().chunks.len() as u32)
                .filter(move |c| !ls.tombstones.contains(*c))
                .map(move |c| (si, c))
        })
    }
}

/// Drops duplicates (keeping the first, i.e. the strongest flags seen first) and self-loops.
fn dedup_nodes(v: Vec<(NodeRef, u8)>, this: NodeRef) -> Vec<(NodeRef, u8)> {
    let mut seen: HashMap<NodeRef, usize> = HashMap::new();
    let mut out: Vec<(NodeRef, u8)> = Vec::new();
    for (n, fl) in v {
        if n == this {
            continue;
        }
        match seen.get(&n) {
            Some(&i) => out[i].1 |= fl,
            None => {
                seen.insert(n, out.len());
                out.push((n, fl));
            }
        }
    }
    out
}

/// Edit distance (insertions, deletions, substitutions) over chars.
pub fn levenshtein(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut cur = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// A small LRU map of query text to its vector.
pub struct EmbedCache {
    inner: Mutex<lru::LruCache<String, Arc<[f32]>>>,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

impl EmbedCache {
    pub fn new(entries: usize) -> EmbedCache {
        EmbedCache {
            inner: Mutex::new(lru::LruCache::new(
                NonZeroUsize::new(entries.max(1)).expect("at least one entry"),
            )),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub fn get(&self, q: &str) -> Option<Arc<[f32]>> {
        let v = self.lock().get(q).cloned();
        let c = if v.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        c.fetch_add(1, Ordering::Relaxed);
        v
    }

    pub fn put(&self, q: &str, v: Arc<[f32]>) {
        self.lock().put(q.to_string(), v);
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, lru::LruCache<String, Arc<[f32]>>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The last reload that failed; the old snapshot keeps serving.
#[derive(Debug, Clone, Serialize)]
pub struct ReloadFailure {
    pub error: String,
    /// Seconds since the Unix epoch.
    pub at_unix: u64,
    #[serde(skip)]
    key: (Option<SystemTime>, Option<u64>),
}

/// The query engine: the current snapshot, the encoder and its cache.
pub struct Engine {
    dir: PathBuf,
    encoder: kernels::Encoder,
    model_dir: PathBuf,
    snap: ArcSwap<Snapshot>,
    pub cache: EmbedCache,
    last_failure: Mutex<Option<ReloadFailure>>,
    reload_lock: Mutex<()>,
    /// (MANIFEST mtime, generation) last examined without error.
    seen: Mutex<(Option<SystemTime>, Option<u64>)>,
    pub reloads: AtomicU64,
    pub started: SystemTime,
    /// Serialises memory writes, flushes and snapshot swaps (readers never take it).
    pub(crate) writer: Mutex<Writer>,
    /// Wakes the background flusher.
    flush_tx: Mutex<Option<std::sync::mpsc::SyncSender<()>>>,
    /// Re-index jobs (see [`crate::reindex`]).
    pub(crate) jobs: crate::reindex::Jobs,
    /// Source files read by code-reference checks.
    pub(crate) files: memory::coderefs::FileCache,
}

/// The write side of memories.
pub(crate) struct Writer {
    /// The open log, or why memory writes are disabled (a read-only index directory, another
    /// queryd holding the log).
    pub wal: Result<Wal, String>,
    /// Delta size that triggers a flush.
    pub flush_at: usize,
}

/// Errors of starting the engine.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot open the index: {0}")]
    Index(#[from] FormatError),
    #[error("cannot load the model from {dir}: {source}")]
    Model {
        dir: PathBuf,
        #[source]
        source: kernels::ModelError,
    },
    #[error("the index at {index} was built with model `{index_model}` but {model_dir} holds `{model}`; pass the model the index was built with (--model)")]
    ModelMismatch {
        index: PathBuf,
        index_model: String,
        model_dir: PathBuf,
        model: String,
    },
}

impl Engine {
    /// Opens the index and loads the model (on the CPU). Fails on a missing, empty or corrupt
    /// index and on a model that differs from the one the index was built with.
    pub fn open(index_dir: &Path, model_dir: &Path) -> Result<Engine, OpenError> {
        format::vectors::set_faiss_threads(1);
        let mtime = manifest_mtime(index_dir);
        let index = Index::open(index_dir)?;
        let encoder =
            kernels::Encoder::load(model_dir, kernels::DeviceChoice::Cpu).map_err(|source| {
                OpenError::Model {
                    dir: model_dir.to_path_buf(),
                    source,
                }
            })?;
        if encoder.model_id() != index.manifest.model_id {
            return Err(OpenError::ModelMismatch {
                index: index_dir.to_path_buf(),
                index_model: index.manifest.model_id.clone(),
                model_dir: model_dir.to_path_buf(),
                model: encoder.model_id().to_string(),
            });
        }
        // One snapshot, built after recovery (which may have moved to a newer generation).
        let (wal, snap) = memory::tools::recover(index_dir, index, mtime);
        let snap_key = (snap.manifest_mtime, snap.generation());
        Ok(Engine {
            dir: index_dir.to_path_buf(),
            encoder,
            model_dir: model_dir.to_path_buf(),
            snap: ArcSwap::from_pointee(snap),
            writer: Mutex::new(Writer {
                wal,
                flush_at: memory::DEFAULT_FLUSH_AT,
            }),
            flush_tx: Mutex::new(None),
            jobs: crate::reindex::Jobs::default(),
            files: memory::coderefs::FileCache::default(),
            cache: EmbedCache::new(EMBED_CACHE_ENTRIES),
            last_failure: Mutex::new(None),
            reload_lock: Mutex::new(()),
            seen: Mutex::new((snap_key.0, Some(snap_key.1))),
            reloads: AtomicU64::new(0),
            started: SystemTime::now(),
        })
    }

    /// Why memory writes are disabled on this engine (another queryd holds the log, a
    /// read-only directory…), if they are.
    pub fn memory_writes_disabled(&self) -> Option<String> {
        self.writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .wal
            .as_ref()
            .err()
            .cloned()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn model_dir(&self) -> &Path {
        &self.model_dir
    }

    pub fn encoder(&self) -> &kernels::Encoder {
        &self.encoder
    }

    /// The current snapshot; hold it for the whole request.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snap.load_full()
    }

    /// Installs a new snapshot (callers hold the writer lock).
    pub(crate) fn store_snapshot(&self, s: Snapshot) {
        self.snap.store(Arc::new(s));
    }

    /// Records that this (MANIFEST mtime, generation) is already served (after a flush
    /// committed it), so the watcher does not reload it.
    pub(crate) fn mark_seen(&self, mtime: Option<SystemTime>, generation: u64) {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = (mtime, Some(generation));
    }

    /// Asks the background flusher (if started) to flush the delta.
    pub(crate) fn request_flush(&self) {
        if let Some(tx) = self
            .flush_tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            let _ = tx.try_send(());
        }
    }

    /// Starts the thread that flushes the memory delta when a write finds it at the flush
    /// size. Without it, flushes happen only when [`Engine::flush_memories`] is called.
    pub fn spawn_flusher(self: &Arc<Self>) -> std::thread::JoinHandle<()> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<()>(1);
        *self.flush_tx.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
        let weak: Weak<Engine> = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("queryd-flush".into())
            .spawn(move || {
                while rx.recv().is_ok() {
                    let Some(e) = weak.upgrade() else { return };
                    match e.flush_memories() {
                        Ok(Some(r)) => eprintln!(
                            "queryd: flushed {} memories into a segment ({} merged from older segments) in {:.0} ms (generation {})",
                            r.memories, r.merged, r.ms, r.generation
                        ),
                        Ok(None) => {}
                        Err(err) => eprintln!("queryd: memory flush failed (the log keeps the writes): {err}"),
                    }
                }
            })
            .expect("spawn the memory flusher")
    }

    /// The last failed reload, while the snapshot it could not replace is still served.
    pub fn last_failure(&self) -> Option<ReloadFailure> {
        self.last_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Re-reads `MANIFEST`; when its generation or modification time changed, opens the new
    /// generation and swaps it in atomically. Returns whether a new snapshot was installed. On
    /// failure the old snapshot stays and the error is kept for `index_status`; the same
    /// (mtime, generation) is not retried until the MANIFEST changes again.
    pub fn reload_if_changed(&self) -> Result<bool, String> {
        let _guard = self.reload_lock.lock().unwrap_or_else(|e| e.into_inner());
        let mtime = manifest_mtime(&self.dir);
        let manifest = IndexManifest::read(&self.dir);
        let key = (mtime, manifest.as_ref().ok().map(|m| m.generation));
        if *self.seen.lock().unwrap_or_else(|e| e.into_inner()) == key {
            return Ok(false);
        }
        if let Some(f) = self.last_failure() {
            if f.key == key {
                return Err(f.error);
            }
        }
        let cur = self.snap.load_full();
        let result = manifest.and_then(|m| {
            if m.model_id != self.encoder.model_id() {
                return Err(FormatError::Mismatch {
                    path: self.dir.join(MANIFEST),
                    detail: format!(
                        "the new index generation was built with model `{}`, this server runs `{}`; restart queryd with that model",
                        m.model_id,
                        self.encoder.model_id()
                    ),
                });
            }
            if m.generation == cur.generation()
                && m.segments == cur.index.manifest.segments
                && m.memory_segments == cur.index.manifest.memory_segments
            {
                return Ok(None); // the same generation (touched, or restored after a failure)
            }
            Index::open_reusing(&self.dir, Some(&cur.index)).map(Some)
        });
        let out = match result {
            Ok(Some(index)) => {
                // Keep the live delta: swap under the writer lock so no write is lost between
                // reading the current delta and storing the new snapshot.
                let _w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
                let now = self.snap.load_full();
                if !Arc::ptr_eq(&now.index, &cur.index) {
                    // A flush installed a newer index while this one was opening: it is
                    // already current, and installing ours would step back.
                    return Ok(false);
                }
                let index = Arc::new(index);
                // Segment copies of ids the delta holds are superseded (a dump ingested while
                // we run may have added some).
                let mut delta = now.delta.clone();
                let ids: Vec<String> = delta.entries.keys().cloned().collect();
                for id in ids {
                    if !delta.shadowed.contains(&id)
                        && memory::find_in_segments(&index, &id).is_some()
                    {
                        delta.shadowed.insert(id);
                    }
                }
                self.snap
                    .store(Arc::new(Snapshot::with_delta(index, mtime, delta)));
                self.reloads.fetch_add(1, Ordering::Relaxed);
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => {
                let error = e.to_string();
                eprintln!(
                    "queryd: reload failed, still serving index generation {}: {error}",
                    cur.generation()
                );
                *self.last_failure.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(ReloadFailure {
                        error: error.clone(),
                        at_unix: unix_secs(SystemTime::now()),
                        key,
                    });
                return Err(error);
            }
        };
        *self.last_failure.lock().unwrap_or_else(|e| e.into_inner()) = None;
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = key;
        out
    }

    /// Starts a thread that calls [`reload_if_changed`](Self::reload_if_changed) every
    /// `interval` until the engine is dropped.
    pub fn spawn_watcher(self: &Arc<Self>, interval: Duration) -> std::thread::JoinHandle<()> {
        let weak: Weak<Engine> = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("queryd-watch".into())
            .spawn(move || loop {
                std::thread::sleep(interval);
                let Some(e) = weak.upgrade() else { return };
                if let Ok(true) = e.reload_if_changed() {
                    eprintln!(
                        "queryd: now serving index generation {}",
                        e.snapshot().generation()
                    );
                    // An `indexer build` changed code: re-check memories linked to it.
                    if e.memory_writes_disabled().is_none() {
                        let args = memory::code_tools::CheckStalenessArgs {
                            ids: None,
                            changed_files: None,
                            debug: false,
                        };
                        if let Ok(r) = e.check_staleness(&args) {
                            if r.updated > 0 {
                                eprintln!(
                                    "queryd: code references re-checked: {} stale, {} relocated, {} memories updated",
                                    r.stale, r.relocated, r.updated
                                );
                            }
                        }
                    }
                }
            })
            .expect("spawn the MANIFEST watcher")
    }

    /// The query's vector, from the cache when it was embedded before. Returns (vector,
    /// cached).
    pub fn embed_query(&self, q: &str) -> Result<(Arc<[f32]>, bool), String> {
        if let Some(v) = self.cache.get(q) {
            return Ok((v, true));
        }
        let (v, _) = self
            .encoder
            .embed(&[q])
            .map_err(|e| format!("embedding the query failed: {e}"))?;
        let v: Arc<[f32]> = v.into();
        self.cache.put(q, v.clone());
        Ok((v, false))
    }

    /// Embeds a text without caching it (code for `find_duplicates`).
    pub fn embed_text(&self, text: &str) -> Result<Vec<f32>, String> {
        self.encoder
            .embed(&[text])
            .map(|(v, _)| v)
            .map_err(|e| format!("embedding failed: {e}"))
    }
}

pub fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_cache_evicts_least_recently_used() {
        let c = EmbedCache::new(2);
        c.put("a", Arc::from(vec![1.0]));
        c.put("b", Arc::from(vec![2.0]));
        assert!(c.get("a").is_some()); // a is now most recent
        c.put("c", Arc::from(vec![3.0])); // evicts b
        assert!(c.get("b").is_none());
        assert_eq!(c.get("c").as_deref(), Some(&[3.0f32][..]));
        assert_eq!(c.len(), 2);
        assert_eq!(c.hits.load(Ordering::Relaxed), 2);
        assert_eq!(c.misses.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn edit_distance() {
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("", "ab"), 2);
        assert_eq!(levenshtein("same", "same"), 0);
    }

    use format::manifest::{SegmentEntry, TombstoneRef};
    use format::records::{ChunkRecord, EdgeInput, ExternalEdge, FileRecord, NO_PARENT};
    use format::{tombstones, SegmentBuilder};

    const MODEL: &str = "test-model@0";
    const DIM: usize = 4;

    fn sym(path: &str, name: &str) -> String {
        format!("rust r {path}/{name}().")
    }

    /// A segment of `files`: (path, [function names]); calls as (src, dst) chunk ordinals.
    fn segment(
        files: &[(&str, &[&str])],
        calls: &[(u32, u32)],
        ext: Vec<ExternalEdge>,
    ) -> SegmentBuilder {
        let mut b = SegmentBuilder::default();
        for (fi, (path, names)) in files.iter().enumerate() {
            let first = b.chunks.len() as u32;
            for (i, name) in names.iter().enumerate() {
                let text = format!("fn {name}() {{}}");
                b.chunks.push(ChunkRecord {
                    file: fi as u32,
                    kind: "function".into(),
                    name: name.to_string(),
                    qualified: name.to_string(),
                    symbol_id: sym(path, name),
                    start_line: 1 + i as u32,
                    end_line: 1 + i as u32,
                    start_byte: 0,
                    end_byte: 10,
                    parent: NO_PARENT,
                    content_hash: [i as u8; 32],
                    text,
                });
                let mut v = vec![0.0; DIM];
                v[i % DIM] = 1.0;
                b.vectors.extend(v);
            }
            b.files.push(FileRecord {
                repo: "r".into(),
                path: path.to_string(),
                language: "rust".into(),
                content_hash: [fi as u8; 32],
                size: 10,
                first_chunk: first,
                chunk_count: names.len() as u32,
                imports: vec![],
            });
        }
        for &(src, dst) in calls {
            b.edges.push(EdgeInput {
                kind: EdgeKind::Calls,
                src,
                dst,
                resolved: true,
            });
        }
        b.external_edges = ext;
        b
    }

    /// An incremental build by hand: `b.rs` changed, so its chunk in segment A is tombstoned
    /// and segment B holds the new `callee` plus a new `helper`.
    #[test]
    fn edges_into_tombstoned_chunks_and_external_edges_are_remapped() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // A: a.rs/caller (0) calls b.rs/callee (1).
        let (a, _) = segment(
            &[("a.rs", &["caller"]), ("b.rs", &["callee"])],
            &[(0, 1)],
            vec![],
        )
        .write(d, MODEL, DIM)
        .unwrap();
        // B: b.rs/callee (0), b.rs/helper (1) calls callee; callee calls a.rs/caller (external).
        let ext = vec![ExternalEdge {
            kind: EdgeKind::Calls as u8,
            src: 0,
            dst: sym("a.rs", "caller"),
            flags: 0,
        }];
        let (b, _) = segment(&[("b.rs", &["callee", "helper"])], &[(1, 0)], ext)
            .write(d, MODEL, DIM)
            .unwrap();
        let mut bits = roaring::RoaringBitmap::new();
        bits.insert(1);
        let name = tombstones::file_name(&a, 2);
        let bytes = tombstones::write(&d.join(&name), MODEL, &bits).unwrap();
        IndexManifest {
            format_version: format::FORMAT_VERSION,
            generation: 2,
            model_id: MODEL.into(),
            dim: DIM as u32,
            segments: vec![
                SegmentEntry {
                    id: a,
                    chunks: 2,
                    tombstones: Some(TombstoneRef {
                        file: name,
                        blake3: format::blake3_hex(&bytes),
                        count: 1,
                    }),
                },
                SegmentEntry {
                    id: b,
                    chunks: 2,
                    tombstones: None,
                },
            ],
            ..IndexManifest::empty("", 0)
        }
        .commit(d)
        .unwrap();

        let s = Snapshot::load(d).unwrap();
        let (caller, old_callee, callee, helper) = ((0, 0), (0, 1), (1, 0), (1, 1));
        assert!(!s.is_live_chunk(old_callee));
        assert_eq!(s.resolve("callee"), vec![callee]);
        assert_eq!(s.resolve(&sym("b.rs", "callee")), vec![callee]);
        let nodes = |v: Vec<(NodeRef, u8)>| v.into_iter().map(|x| x.0).collect::<Vec<_>>();
        // The old edge caller → old callee now leads to the live callee.
        assert_eq!(nodes(s.out_edges(caller, EdgeKind::Calls)), vec![callee]);
        // Callers of the live callee: through the tombstoned alias, and in its own segment.
        let mut callers = nodes(s.in_edges(callee, EdgeKind::Calls));
        callers.sort();
        assert_eq!(callers, vec![caller, helper]);
        // External edges by symbol id, both directions.
        assert_eq!(nodes(s.out_edges(callee, EdgeKind::Calls)), vec![caller]);
        assert_eq!(nodes(s.in_edges(caller, EdgeKind::Calls)), vec![callee]);
        // The file node of b.rs is the new segment's.
        assert_eq!(s.file_by_path("b.rs"), Some((1, 2)));
        assert_eq!(s.suggest("calee", 3)[0], "callee");
    }

    #[test]
    fn dedup_keeps_first_and_merges_flags() {
        let v = vec![((0, 1), 0), ((0, 2), 1), ((0, 1), 1), ((0, 5), 0)];
        assert_eq!(dedup_nodes(v, (0, 5)), vec![((0, 1), 1), ((0, 2), 1)]);
    }
}
