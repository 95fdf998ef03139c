//! The long-running engine: the current [`Snapshot`] behind one `ArcSwap`, swapped when
//! `indexer build` commits a new `MANIFEST` ([`Engine::reload_if_changed`]; the watcher in
//! [`crate::watch`]) or a memory write or flush publishes one; the query encoder with its LRU
//! cache; the writer lock and the background flusher; the re-index job table.
//!
//! Readers load the current `Arc<Snapshot>` once per request and keep it to the end, so a swap
//! never shows a query a half-built state and never blocks it. A failed reload (corrupt or
//! half-copied index) keeps the old snapshot and is reported by `index_status`.
//!
//! Lock order: the directory lock (`LOCK`, flushes and re-index commits), then the writer lock;
//! readers take neither.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use code::{EmbedCache, EMBED_CACHE_ENTRIES};
use format::manifest::{manifest_mtime, DirLock, MANIFEST};
use format::{FormatError, Index, IndexManifest};
use memory::store::{FlushError, FlushReport, LogAccess, Writer};
use memory::wal::{Damage, Wal, WalOp, WAL_FILE};
use memory::MemoryView;
use serde::Serialize;

use crate::snapshot::Snapshot;
use crate::tools::common::{ToolError, ToolResult};

/// How often the watcher looks at `MANIFEST`.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(500);

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
    /// Set while `MANIFEST` names another model than the served one (an index pulled or
    /// rebuilt under the server): memory writes are refused, since what they log could never
    /// be flushed into this index, and a server of the new model would read their vectors
    /// as its own. Cleared when `MANIFEST` names the served model again.
    model_changed: Mutex<Option<String>>,
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
    pub(crate) jobs: crate::jobs::Jobs,
    /// Source files read by code-reference checks.
    pub(crate) files: memory::coderefs::FileCache,
    /// Damaged segments, caught panics, bad text (see [`crate::integrity`]).
    pub(crate) integrity: crate::integrity::Integrity,
    /// How this server holds the memory log (fixed at open).
    access: LogAccess,
    /// Damage found in the memory log (re-read by [`Engine::tail_memory_log`] when another
    /// server holds it).
    damage: Mutex<Option<Damage>>,
    /// A damaged log kept locked while writes are disabled (see `Recovered::held`).
    _held_log: Option<Wal>,
    /// Serialises [`Engine::tail_memory_log`]; holds the (log length, log mtime, generation)
    /// last replayed.
    tail_seen: Mutex<Option<TailKey>>,
}

type TailKey = (Option<(u64, Option<SystemTime>)>, u64);

/// Errors of starting the engine.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Not `#[source]`: the text includes the cause once; `{:#}` chains would repeat it.
    #[error("cannot open the index: {}", format::with_repair_hint(.0))]
    Index(FormatError),
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

impl From<FormatError> for OpenError {
    fn from(e: FormatError) -> Self {
        OpenError::Index(e)
    }
}

impl Engine {
    /// Opens the index and loads the model (on the CPU). Fails on a missing or unreadable
    /// MANIFEST, a damaged memory segment and on a model that differs from the one the index
    /// was built with; a damaged code segment is left out and reported (see
    /// [`crate::integrity`]).
    pub fn open(index_dir: &Path, model_dir: &Path) -> Result<Engine, OpenError> {
        Engine::open_on(index_dir, model_dir, kernels::DeviceChoice::Cpu)
    }

    /// [`Engine::open`] with the encoder (query and memory embeddings) on `device`: a GPU
    /// when the binary was built with `wgpu`/`cuda` and one works (`Auto` falls back to the CPU
    /// and says why in [`kernels::Encoder::device_description`]). The encoder computes in f32
    /// on every device, so query vectors match what a CPU build of the index holds.
    pub fn open_on(
        index_dir: &Path,
        model_dir: &Path,
        device: kernels::DeviceChoice,
    ) -> Result<Engine, OpenError> {
        format::vectors::set_faiss_threads(1);
        let mtime = manifest_mtime(index_dir);
        let index = Index::open_lenient(index_dir)?;
        for d in &index.damaged {
            eprintln!(
                "queryd: code segment {} is damaged and left out: {}",
                d.id, d.error
            );
        }
        // The IVF maps open beside the model load, so the first query does not open them.
        // The query path's half-precision weights are made with the model, before the first
        // query (`Encoder::prepare_query_path`; if that fails, queries take the f32 path).
        let encoder = std::thread::scope(|s| {
            s.spawn(|| index.open_vector_maps());
            kernels::Encoder::load_with(model_dir, device, kernels::Precision::F32).inspect(|e| {
                let _ = e.prepare_query_path();
            })
        })
        .map_err(|source| OpenError::Model {
            dir: model_dir.to_path_buf(),
            source,
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
        let rec = memory::store::recover(index_dir, index, mtime);
        let (wal, access, damage, held) = (rec.wal, rec.access, rec.damage, rec.held);
        let integrity = crate::integrity::Integrity::default();
        if let Some(problem) = rec.problem {
            eprintln!("queryd: {problem}");
            let path = index_dir.join(memory::wal::WAL_FILE).display().to_string();
            if access == LogAccess::HeldElsewhere {
                // A state of reading another's log: cleared by the next good read.
                integrity.set_log_reading(path, Some(problem));
            } else {
                integrity.report("memory_log", Some(path), problem);
            }
        }
        let index = Arc::new(rec.index);
        populate_in_background(&index);
        let snap = Snapshot::new(index, rec.manifest_mtime, rec.delta);
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
            jobs: crate::jobs::Jobs::default(),
            files: memory::coderefs::FileCache::default(),
            integrity,
            cache: EmbedCache::new(EMBED_CACHE_ENTRIES),
            last_failure: Mutex::new(None),
            model_changed: Mutex::new(None),
            reload_lock: Mutex::new(()),
            seen: Mutex::new((snap_key.0, Some(snap_key.1))),
            reloads: AtomicU64::new(0),
            started: SystemTime::now(),
            access,
            damage: Mutex::new(damage),
            _held_log: held,
            tail_seen: Mutex::new(None),
        })
    }

    /// How this server holds the memory log.
    pub fn memory_access(&self) -> LogAccess {
        self.access
    }

    /// Damage found in the memory log, if any (the valid prefix is served).
    pub fn memory_log_damage(&self) -> Option<Damage> {
        self.damage
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// On a server reading a log another process holds ([`LogAccess::HeldElsewhere`]):
    /// when the log or `MANIFEST` changed since the last call, reloads the index if needed,
    /// re-reads the log and installs its records as the delta, so the writer's new memories
    /// are served here too. Returns whether a new snapshot was installed.
    pub fn tail_memory_log(&self) -> Result<bool, String> {
        if self.access != LogAccess::HeldElsewhere {
            return Ok(false);
        }
        let mut seen = self.tail_seen.lock().unwrap_or_else(|e| e.into_inner());
        for _ in 0..5 {
            let log = std::fs::metadata(self.dir.join(WAL_FILE))
                .ok()
                .map(|m| (m.len(), m.modified().ok()));
            // A flush by the writer commits a new generation and truncates the log. (A failed
            // reload is reported by `index_status`; the log is then read on the next call.)
            let _ = self.reload_if_changed();
            let cur = self.snapshot();
            let key = (log, cur.generation());
            if *seen == Some(key) {
                return Ok(false);
            }
            match memory::store::replay_shared(&self.dir, &cur.code.index) {
                Ok(Some(memory::store::Shared {
                    delta,
                    recovery: rec,
                    problem,
                })) => {
                    self.set_log_reading(problem);
                    let _w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
                    let now = self.snapshot();
                    if !Arc::ptr_eq(&now.code.index, &cur.code.index) {
                        continue; // a reload installed a newer index meanwhile
                    }
                    self.store_snapshot(Snapshot {
                        code: now.code.clone(),
                        memory: MemoryView::new(Arc::clone(&now.code.index), delta),
                        loaded_at: now.loaded_at,
                        manifest_mtime: now.manifest_mtime,
                    });
                    *self.damage.lock().unwrap_or_else(|e| e.into_inner()) = rec.damage;
                    *seen = Some(key);
                    return Ok(true);
                }
                Ok(None) => continue, // MANIFEST moved on while the log was read
                // Reported by the tailer when it persists (a read racing the writer's
                // truncation is not a problem).
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(false)
    }

    /// What this server, reading the log another one holds, cannot serve from it now
    /// (`None`: everything), for `index_status`.
    fn set_log_reading(&self, detail: Option<String>) {
        self.integrity
            .set_log_reading(self.dir.join(WAL_FILE).display().to_string(), detail);
    }

    /// Starts the thread that follows a log another server writes
    /// ([`Engine::tail_memory_log`] every `interval`) until the engine is dropped.
    pub fn spawn_log_tailer(self: &Arc<Self>, interval: Duration) -> std::thread::JoinHandle<()> {
        let weak: Weak<Engine> = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("queryd-tail".into())
            .spawn(move || {
                let mut last_err = None;
                loop {
                    std::thread::sleep(interval);
                    let Some(e) = weak.upgrade() else { return };
                    let err = e.tail_memory_log().err();
                    if let Some(m) = err.as_ref().filter(|m| Some(*m) == last_err.as_ref()) {
                        // The same failure twice in a row: the log's unflushed memories are
                        // not being served here, which `index_status` must say.
                        e.set_log_reading(Some(memory::store::shared_unreadable(&e.dir, m)));
                    }
                    if err.is_some() && err != last_err {
                        eprintln!(
                            "queryd: following the memory log of the other queryd: {}",
                            err.as_deref().unwrap_or_default()
                        );
                    }
                    last_err = err;
                }
            })
            .expect("spawn the memory log tailer")
    }

    /// Why memory writes are disabled on this engine (another queryd holds the log, a
    /// read-only directory, a log a failed write could not be cut back in, `MANIFEST` naming
    /// another model…), if they are.
    pub fn memory_writes_disabled(&self) -> Option<String> {
        match &self.writer.lock().unwrap_or_else(|e| e.into_inner()).wal {
            Err(e) => Some(e.0.clone()),
            Ok(w) => w
                .poisoned()
                .map(str::to_string)
                .or_else(|| self.model_changed()),
        }
    }

    /// Why memory writes are refused because `MANIFEST` names another model, if it does.
    fn model_changed(&self) -> Option<String> {
        self.model_changed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Records which model `MANIFEST` names: another than the served one refuses memory
    /// writes until it names the served one again.
    fn note_manifest_model(&self, model: &str, dim: u32) {
        let served = (self.encoder.model_id(), self.encoder.dim());
        *self.model_changed.lock().unwrap_or_else(|e| e.into_inner()) =
            ((model, dim as usize) != served).then(|| {
                format!(
                    "MANIFEST now names model `{model}` ({dim} dims), this server runs `{}` ({} \
                     dims): nothing was written; restart queryd with that model (memories the \
                     log already holds are kept: `queryd export` saves them)",
                    served.0, served.1
                )
            });
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

    /// Runs `prepare` on the current snapshot under the writer lock; the operations it returns
    /// are logged (fsynced), applied and published before this returns.
    pub(crate) fn write_with<T>(
        &self,
        prepare: impl FnOnce(&Snapshot) -> ToolResult<(Vec<WalOp>, T)>,
    ) -> ToolResult<T> {
        let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let flush_at = w.flush_at;
        if let Some(why) = self.model_changed() {
            return Err(ToolError::Internal(format!(
                "memory writes are disabled on this server: {why}"
            )));
        }
        let wal = w.wal.as_mut().map_err(|e| {
            ToolError::Internal(format!("memory writes are disabled on this server: {e}"))
        })?;
        let cur = self.snapshot();
        let (ops, out) = prepare(&cur)?;
        if ops.is_empty() {
            return Ok(out);
        }
        let lsns = wal
            .append(&ops)
            .map_err(|e| ToolError::Internal(format!("the write was not saved: {e}")))?;
        let memory = cur.memory.with_applied(lsns.into_iter().zip(&ops));
        // Dead slots (replaced versions) count too, so a stream of updates also flushes.
        let size = memory.delta.slots.len();
        self.store_snapshot(Snapshot {
            code: cur.code.clone(),
            memory,
            loaded_at: cur.loaded_at,
            manifest_mtime: cur.manifest_mtime,
        });
        drop(w);
        if size >= flush_at {
            self.request_flush();
        }
        Ok(out)
    }

    /// Sets the delta size that triggers a flush.
    pub fn set_flush_at(&self, n: usize) {
        self.writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .flush_at = n.max(1);
    }

    /// Writes the delta into a memory segment, tombstones what it supersedes, commits
    /// `MANIFEST`, swaps the snapshot and truncates the log ([`memory::store::flush`]).
    /// `Ok(None)` when there was nothing to flush.
    pub fn flush_memories(&self) -> Result<Option<FlushReport>, FlushError> {
        let started = std::time::Instant::now();
        let dir = self.dir().to_path_buf();
        // The directory lock first: an indexer build may hold it for minutes, and writes must
        // not wait for that behind the writer lock.
        let _lock = DirLock::acquire(&dir)?;
        let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let cur = self.snapshot();
        let out = memory::store::flush(
            &dir,
            &cur.memory,
            &mut w,
            started,
            |index, mtime, delta, generation| {
                self.store_snapshot(Snapshot::new(index, mtime, delta));
                self.mark_seen(mtime, generation);
            },
        );
        if let Err(FlushError::ModelChanged { now, now_dim, .. }) = &out {
            self.note_manifest_model(now, *now_dim);
        }
        out
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
        if let Ok(m) = &manifest {
            self.note_manifest_model(&m.model_id, m.dim);
        }
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
            // A quarantined segment whose directory was replaced (pulled again, rebuilt) is
            // opened again; the verifier checksums the new files.
            let lifted = self.integrity.lift_replaced(&self.dir);
            for id in &lifted {
                eprintln!(
                    "queryd: code segment {id} was replaced on disk since it failed its checksum; \
                     opening the new copy"
                );
            }
            if lifted.is_empty()
                && m.generation == cur.generation()
                && m.segments == cur.code.index.manifest.segments
                && m.memory_segments == cur.code.index.manifest.memory_segments
            {
                return Ok(None); // the same generation (touched, or restored after a failure)
            }
            let options = format::OpenOptions {
                quarantine: self.integrity.quarantined(),
                ..cur.code.index.options.clone()
            };
            let index = Index::open_with(&self.dir, Some(&cur.code.index), options)?;
            // Before the swap, so the first query of the new generation does not pay it.
            index.open_vector_maps();
            Ok(Some(index))
        });
        let out = match result {
            Ok(Some(index)) => {
                if !self.install_index(&cur, index, mtime) {
                    // A flush installed a newer index while this one was opening: it is
                    // already current, and installing ours would step back.
                    return Ok(false);
                }
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

    /// Installs `index` as the new snapshot, keeping the live memory delta, unless the served
    /// index is no longer `cur`'s (a flush or another reload installed a newer one meanwhile).
    /// Returns whether it was installed.
    pub(crate) fn install_index(
        &self,
        cur: &Snapshot,
        index: Index,
        mtime: Option<SystemTime>,
    ) -> bool {
        // Swap under the writer lock so no write is lost between reading the current delta
        // and storing the new snapshot.
        let _w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.snap.load_full();
        if !Arc::ptr_eq(&now.code.index, &cur.code.index) {
            return false;
        }
        let index = Arc::new(index);
        populate_in_background(&index);
        // Segment copies of ids the delta holds are superseded (a dump ingested while we run
        // may have added some).
        let mut delta = now.memory.delta.clone();
        let ids: Vec<String> = delta.entries.keys().cloned().collect();
        for id in ids {
            if !delta.shadowed.contains(&id) && memory::find_in_segments(&index, &id).is_some() {
                delta.shadowed.insert(id);
            }
        }
        self.snap
            .store(Arc::new(Snapshot::new(index, mtime, delta)));
        true
    }

    /// The query's vector, from the cache when it was embedded before. Returns (vector,
    /// cached).
    pub fn embed_query(&self, q: &str) -> Result<(Arc<[f32]>, bool), String> {
        if let Some(v) = self.cache.get(q) {
            return Ok((v, true));
        }
        let v = self
            .encoder
            .embed_query(q)
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

/// Maps the index's files into the page tables on a background thread ([`Index::populate`]),
/// so that queries do not pay a page fault for each vector row, record or text they touch
/// first (at 1M chunks: vector-only p99 2.6-5.1 → 1.8-2.1 ms over a server's first thousand
/// queries; docs/measurements.md, "Search over many segments"). Only segments not done
/// before (a new generation shares its unchanged segments), and only when they fit in half of
/// the memory the kernel reports available, since pages the page cache lacks are read from
/// disk; elsewhere than Linux, never.
/// The memory check runs on that thread too, off the callers' paths (`install_index` holds
/// the writer lock).
fn populate_in_background(index: &Arc<Index>) {
    let index = Arc::clone(index);
    // A thread that cannot be started leaves the pages to fault in on use, as before.
    let _ = std::thread::Builder::new()
        .name("cix-populate".into())
        .spawn(move || {
            if mem_available().is_some_and(|a| index.mapped_bytes() as u64 <= a / 2) {
                index.populate();
            }
        });
}

/// `MemAvailable` of `/proc/meminfo`, in bytes (`None` where there is none).
fn mem_available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
