//! `indexer pull` and `queryd --follow`: fetch what the local index lacks, verify it, swap
//! `MANIFEST`.
//!
//! Downloads go to `<index>/.pull/` (locked while a pull runs): every file is streamed into
//! `<name>.part` while its size and blake3 are checked against the segment's `segment.json`
//! (itself checked against the segment id, its blake3), then renamed; a segment whose files are
//! all there gets its `segment.json` last and is opened ([`format::Segment::open`]: headers,
//! rkyv structure, cross-file checks). Only when every segment and tombstone file of the
//! generation is verified are they moved into the index directory and `MANIFEST` swapped, under
//! the directory lock. A failed or killed pull leaves the index as it was, and `.pull/` keeps
//! what was verified, so the rerun fetches only the rest.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use roaring::RoaringBitmap;

use format::manifest::{DirLock, TombstoneRef};
use format::segment::{dir_name, SEGMENT_JSON};
use format::{FormatError, IndexManifest, Segment, SegmentEntry, SegmentMeta};

use crate::layout::{segment_key, tombstone_key, RemoteManifest, LATEST};
use crate::push::hash_file;
use crate::{io_err, Remote, Result, SyncError};

/// The staging directory of pulls, inside the index directory.
pub const PULL_DIR: &str = ".pull";

/// How to pull.
#[derive(Debug, Clone)]
pub struct PullOptions {
    /// Downloads in flight at once.
    pub concurrency: usize,
    /// Install the store's newest generation even when it is older than the one the last
    /// pull from that store installed (`indexer pull --allow-older`): by default that is
    /// refused ([`SyncError::Rollback`]).
    pub allow_older: bool,
    /// Test hook: fail with [`SyncError::Stopped`] once this many files were downloaded, as a
    /// pull killed at that point would stop.
    #[doc(hidden)]
    pub stop_after_files: Option<u64>,
}

impl Default for PullOptions {
    fn default() -> Self {
        PullOptions {
            concurrency: 8,
            allow_older: false,
            stop_after_files: None,
        }
    }
}

/// What a pull did.
#[derive(Debug, Clone, Default)]
pub struct PullReport {
    /// The remote generation now served locally.
    pub generation: u64,
    /// The local MANIFEST generation after the pull.
    pub local_generation: u64,
    /// The local index already held that generation: nothing was written.
    pub up_to_date: bool,
    pub segments_downloaded: usize,
    /// Segments named by the remote manifest that the index directory already had.
    pub segments_present: usize,
    /// Local copies of the remote's segments that were damaged (a missing or cut file, a
    /// `segment.json` that is not the segment's), or of their tombstone files (not what the
    /// manifest's hash says): downloaded again, the damaged copy kept aside (path, and why).
    pub segments_replaced: Vec<(PathBuf, String)>,
    pub files_downloaded: usize,
    /// Files found verified in `.pull/` from an interrupted pull.
    pub files_resumed: usize,
    pub bytes_downloaded: u64,
    /// Memory segments of the remote added to the local ones.
    pub memory_segments_added: usize,
    /// Records of those segments left out (tombstoned) because their memory was deleted here
    /// after its last update (`MANIFEST`'s `deleted_memories`).
    pub memories_deleted_here: u64,
    /// Records of those segments left out (tombstoned) because a memory tool would refuse to
    /// store them (a bad id, size, field or timestamp), and why the first was.
    pub memories_refused: u64,
    pub memories_refused_why: Option<String>,
    /// Requests of the whole pull: `Stats::snapshot` order.
    pub requests: [u64; 7],
    pub seconds: f64,
}

/// Pulls the newest generation of `remote` into the index directory `dir` (created if
/// missing). The code segments become the remote's; local memory segments, the memory WAL
/// position and local roots are kept; memory segments pushed with `--with-memories` are added
/// (a memory id already live locally keeps its local record).
pub fn pull(remote: &Remote, dir: &Path, opts: &PullOptions) -> Result<PullReport> {
    let started = Instant::now();
    let before = remote.stats().snapshot();
    let head = remote
        .block_on(remote.head_manifest())?
        .ok_or_else(|| SyncError::Empty {
            url: remote.url().to_string(),
        })?;
    let mut report = pull_manifest(remote, dir, &head, opts)?;
    report.requests = std::array::from_fn(|i| remote.stats().snapshot()[i] - before[i]);
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

fn read_local(dir: &Path) -> Result<Option<IndexManifest>> {
    match IndexManifest::read(dir) {
        Ok(m) => Ok(Some(m)),
        Err(FormatError::NotAnIndex { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Whether the index at `dir` (MANIFEST `m`) holds memories: memory segments, a flush
/// position, or records in its memory log (a server keeps its first memories only there
/// until it flushes).
fn has_memories(dir: &Path, m: &IndexManifest) -> bool {
    !m.memory_segments.is_empty()
        || m.memory_lsn > 0
        || format::manifest::memory_wal_holds_records(dir)
}

fn pull_manifest(
    remote: &Remote,
    dir: &Path,
    head: &RemoteManifest,
    opts: &PullOptions,
) -> Result<PullReport> {
    let mut report = PullReport {
        generation: head.generation,
        ..PullReport::default()
    };
    let check_model = |local: &IndexManifest| {
        if has_memories(dir, local)
            && (local.model_id != head.index.model_id || local.dim != head.index.dim)
        {
            return Err(SyncError::Mismatch(format!(
                "{}: the local index holds memories embedded with {} ({} dims), generation {} \
                 of {} was built with {} ({} dims); pulling it would make them unsearchable. \
                 Export the memories (`queryd export`), pull into a new directory, then import \
                 them",
                dir.display(),
                local.model_id,
                local.dim,
                head.generation,
                remote.url(),
                head.index.model_id,
                head.index.dim
            )));
        }
        Ok(())
    };
    let local = read_local(dir)?;
    if local.is_none() {
        crate::orphan::refuse(dir, &dir.join(PULL_DIR), remote, head)?;
    }
    let store = remote.store_id();
    crate::floor::check(local.as_ref(), &store, head, dir, opts.allow_older)?;
    if let Some(local) = local {
        check_model(&local)?;
        let local_mem: HashSet<&str> = local
            .memory_segments
            .iter()
            .map(|s| s.id.as_str())
            .collect();
        // Up to date, unless a local copy of one of the generation's segments is damaged
        // (then the pull goes on and fetches it again).
        if local.segments == head.index.segments
            && local.model_id == head.index.model_id
            && head.index.memory_segments.iter().all(|s| {
                local_mem.contains(s.id.as_str()) || local.pulled_memory_segments.contains(&s.id)
            })
            && !any_local_damage(dir, head, &local_mem)?
        {
            report.up_to_date = true;
            report.local_generation = local.generation;
            if let Some(g) = crate::floor::record(&local, &store, head, dir)? {
                report.local_generation = g;
            }
            return Ok(report);
        }
    }
    format::fsio::create_dir_all(dir).map_err(io_err(dir))?;
    let staging = dir.join(PULL_DIR);
    format::fsio::create_dir_all(&staging).map_err(io_err(&staging))?;
    // The staging directory is emptied after the commit: through a symlink, that would
    // empty wherever it points.
    if std::fs::symlink_metadata(&staging).is_ok_and(|m| !m.is_dir()) {
        return Err(SyncError::Io {
            path: staging.clone(),
            source: std::io::Error::other(
                "is not a directory (a symlink?): a pull stages and then deletes files in it; \
                 move it away",
            ),
        });
    }
    let lock_path = staging.join("LOCK");
    // Not truncated, and not through a symlink: a `LOCK` planted as a link would otherwise
    // empty what it points at.
    let lock = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&lock_path)
            .map_err(io_err(&lock_path))?
    };
    if lock.try_lock().is_err() {
        return Err(SyncError::Busy {
            path: dir.to_path_buf(),
        });
    }

    // Fetch and verify what is missing.
    let files = AtomicU64::new(0);
    let model = (head.index.model_id.as_str(), head.index.dim);
    let before = read_local(dir)?;
    let pulled_before: Vec<String> = before
        .as_ref()
        .map(|l| l.pulled_memory_segments.clone())
        .unwrap_or_default();
    let local_mem: HashSet<&str> = before
        .iter()
        .flat_map(|l| l.memory_segments.iter().map(|s| s.id.as_str()))
        .collect();
    // Memory segments pulled before are not fetched again (one merged away locally must not
    // come back), except a local copy that is still live here and damaged.
    let mut entries: Vec<&SegmentEntry> = Vec::new();
    for e in head
        .index
        .segments
        .iter()
        .chain(&head.index.memory_segments)
    {
        let memory = is_memory(head, &e.id);
        let again = !memory
            || !pulled_before.contains(&e.id)
            || (local_mem.contains(e.id.as_str())
                && local_damage(&dir.join(dir_name(&e.id)), e, true)?.is_some());
        if again {
            entries.push(e);
        }
    }
    // Local copies that are not what their name says: fetched again, replaced at the commit.
    let mut damaged: Vec<(String, String)> = Vec::new();
    for e in &entries {
        let memory = is_memory(head, &e.id);
        let local_copy = dir.join(dir_name(&e.id));
        if let Some(why) = local_damage(&local_copy, e, memory)? {
            // A copy that is there but damaged is replaced (and kept aside) at the commit.
            if local_copy.exists() {
                damaged.push((e.id.clone(), why));
            }
            remote.block_on(fetch_segment(
                remote,
                &staging,
                e,
                memory,
                model,
                opts,
                &files,
                &mut report,
            ))?;
            report.segments_downloaded += 1;
        } else {
            report.segments_present += 1;
        }
        if let Some(t) = &e.tombstones {
            let local_t = dir.join(&t.file);
            let files = file_count(&staging, dir, &e.id);
            let damage = tombstone_damage(&local_t, t, model.0, e.chunks, files)?;
            if !local_t.is_file() || damage.is_some() {
                remote.block_on(fetch_tombstone(remote, &staging, t, &mut report))?;
            }
            if let (true, Some(why)) = (local_t.exists(), damage) {
                damaged.push((t.file.clone(), why));
            }
        }
    }

    // Every tombstone file the new MANIFEST names must read back against its hash and fit its
    // segment, before anything moves.
    for e in &entries {
        if let Some(t) = &e.tombstones {
            let staged = staging.join(&t.file);
            let p = if staged.is_file() {
                staged
            } else {
                dir.join(&t.file)
            };
            check_tombstones(&p, t, model.0, e.chunks, file_count(&staging, dir, &e.id))?;
        }
    }

    // Commit under the directory lock.
    let _dir_lock = DirLock::acquire(dir)?;
    let local = read_local(dir)?;
    if let Some(l) = &local {
        check_model(l)?;
    }
    if local.is_none() {
        // The memory segments about to be renamed in are this pull's, not a lost MANIFEST's
        // (`orphan`): a rerun after a stop before the commit must not take them for those.
        let mine: Vec<&str> = entries
            .iter()
            .filter(|e| is_memory(head, &e.id))
            .map(|e| e.id.as_str())
            .collect();
        crate::orphan::mark_installing(&staging, &mine)?;
    }
    for e in &entries {
        let to = dir.join(dir_name(&e.id));
        let from = staging.join(dir_name(&e.id));
        if from.is_dir() {
            let why = damaged.iter().find(|d| d.0 == e.id).map(|d| d.1.clone());
            if let (true, Some(why)) = (to.exists(), why) {
                // Never deleted: kept aside (`*.bak-<time>`, which garbage collection skips).
                let aside = format::recover::move_aside(&to)?;
                report.segments_replaced.push((aside, why));
            }
            if to.exists() {
                std::fs::remove_dir_all(&from).map_err(io_err(&from))?;
            } else {
                format::fsio::rename(&from, &to).map_err(io_err(&to))?;
            }
        }
        if let Some(t) = &e.tombstones {
            let from = staging.join(&t.file);
            let to = dir.join(&t.file);
            let why = damaged.iter().find(|d| d.0 == t.file).map(|d| d.1.clone());
            if let (true, true, Some(why)) = (from.is_file(), to.exists(), why) {
                // Kept aside like a damaged segment: it may be another generation's file of
                // the same name, which the MANIFEST committed below no longer names.
                let aside = format::recover::move_aside(&to)?;
                report.segments_replaced.push((aside, why));
            }
            if from.is_file() && !to.exists() {
                format::fsio::rename(&from, &to).map_err(io_err(&to))?;
            }
        }
    }
    format::fsio::sync_dir(dir).map_err(io_err(dir))?;
    // Under the lock, what the new MANIFEST names must be in place (a segment found present
    // before the lock may have been collected since) and be what the manifest says.
    for e in &entries {
        let p = dir.join(dir_name(&e.id)).join(SEGMENT_JSON);
        let json = std::fs::read(&p).map_err(|err| SyncError::Corrupt {
            key: p.display().to_string(),
            reason: format!("{err}: the segment left the index during the pull; run it again"),
        })?;
        let key = p.display().to_string();
        if format::segment::segment_id(&json) != e.id {
            return Err(SyncError::Corrupt {
                key,
                reason: "does not hash to its segment id: run `indexer verify`".into(),
            });
        }
        let meta: SegmentMeta =
            serde_json::from_slice(&json).map_err(|err| SyncError::Corrupt {
                key: key.clone(),
                reason: err.to_string(),
            })?;
        let memory = is_memory(head, &e.id);
        check_meta(&key, &meta, e, memory)?;
        if let Some(t) = &e.tombstones {
            if !dir.join(&t.file).is_file() {
                return Err(SyncError::Corrupt {
                    key: t.file.clone(),
                    reason: "the tombstone file left the index during the pull; run it again"
                        .into(),
                });
            }
        }
    }
    let generation = local.as_ref().map_or(0, |l| l.generation) + 1;
    let merged = merge_memories(dir, local.as_ref(), head, generation)?;
    let (memory_segments, added) = (merged.entries, merged.added);
    report.memories_deleted_here = merged.deleted_here;
    report.memories_refused = merged.refused;
    report.memories_refused_why = merged.refused_why;
    let mut deleted_memories = local
        .as_ref()
        .map(|l| l.deleted_memories.clone())
        .unwrap_or_default();
    for id in &merged.revived {
        deleted_memories.remove(id);
    }
    let mut pulled_memory_segments = local
        .as_ref()
        .map(|l| l.pulled_memory_segments.clone())
        .unwrap_or_default();
    for m in &head.index.memory_segments {
        if !pulled_memory_segments.contains(&m.id) {
            pulled_memory_segments.push(m.id.clone());
        }
    }
    report.memory_segments_added = added;
    // The local roots only. A remote's roots are paths on the pushing machine, with that
    // build's walk rules: taken over, they would let whoever writes the store choose what
    // this machine's `reindex` walks and serves (a home directory, hidden files included).
    // A local build adds this machine's checkout as a root.
    let roots = local.as_ref().map(|l| l.roots.clone()).unwrap_or_default();
    let new = IndexManifest {
        format_version: format::FORMAT_VERSION,
        generation,
        model_id: head.index.model_id.clone(),
        dim: head.index.dim,
        segments: head.index.segments.clone(),
        memory_segments,
        memory_lsn: local.as_ref().map_or(0, |l| l.memory_lsn),
        roots,
        pulled_memory_segments,
        deleted_memories,
        pulled_from: Some(format::manifest::PulledFrom {
            store,
            generation: head.generation,
        }),
    };
    new.commit(dir)?;
    report.local_generation = generation;
    if let Err(e) = format::Index::collect_garbage(dir) {
        eprintln!("pull: garbage collection after the commit failed (harmless): {e}");
    }
    // Empty the staging directory while still holding its lock; the lock file stays (a pull
    // waiting on it must not end up locking a file another pull no longer sees).
    if let Ok(entries) = std::fs::read_dir(&staging) {
        for entry in entries.flatten() {
            if entry.file_name() != "LOCK" {
                let p = entry.path();
                let _ = if p.is_dir() {
                    std::fs::remove_dir_all(&p)
                } else {
                    std::fs::remove_file(&p)
                };
            }
        }
    }
    drop(lock);
    Ok(report)
}

/// How far ahead of this machine's clock a pulled copy's `updated_at` may be for it to undo a
/// deletion made here (`deleted_memories`).
const REVIVE_MAX_AHEAD_MS: i64 = 86_400_000;

/// What [`merge_memories`] made of the remote's memory segments.
struct MergedMemories {
    /// Local memory segments, then the remote's that are new here.
    entries: Vec<SegmentEntry>,
    added: usize,
    /// Records left out because their memory was deleted here after its last update.
    deleted_here: u64,
    /// Memories deleted here that come back: the remote's copy was updated after the deletion.
    revived: Vec<String>,
    /// Records left out because a memory tool would refuse to store them, and why the first was.
    refused: u64,
    refused_why: Option<String>,
}

/// `r` with the control characters a memory tool now refuses removed (newlines and tabs stay
/// in the text), to check the rest of it.
fn without_controls(mut r: format::memory::MemoryRecord) -> format::memory::MemoryRecord {
    use format::memory::allowed_char;
    let multi = |s: &mut String| s.retain(|c| allowed_char(c, true));
    let single = |s: &mut String| s.retain(|c| allowed_char(c, false));
    multi(&mut r.text);
    single(&mut r.category);
    single(&mut r.entity);
    r.evidence.iter_mut().for_each(single);
    r.code_refs.iter_mut().for_each(|c| single(&mut c.path));
    r
}

/// Local memory segments plus the remote's that are new here. A remote record whose memory id
/// is live locally (or in an earlier remote segment) is tombstoned: the local record wins. So
/// is one whose memory was deleted here (`deleted_memories`) at or after the record's last
/// update: another machine that merged its memory segments re-sends, under a new segment id,
/// the memories it once pulled, and a deletion here must not be undone by that.
fn merge_memories(
    dir: &Path,
    local: Option<&IndexManifest>,
    head: &RemoteManifest,
    generation: u64,
) -> Result<MergedMemories> {
    let mut out: Vec<SegmentEntry> = local.map(|l| l.memory_segments.clone()).unwrap_or_default();
    let pulled: Vec<String> = local
        .map(|l| l.pulled_memory_segments.clone())
        .unwrap_or_default();
    let deleted = local.map(|l| &l.deleted_memories);
    let new: Vec<&SegmentEntry> = head
        .index
        .memory_segments
        .iter()
        .filter(|s| !out.iter().any(|l| l.id == s.id) && !pulled.contains(&s.id))
        .collect();
    let mut merged = MergedMemories {
        entries: Vec::new(),
        added: new.len(),
        deleted_here: 0,
        revived: Vec::new(),
        refused: 0,
        refused_why: None,
    };
    if new.is_empty() {
        merged.entries = out;
        return Ok(merged);
    }
    let (model, dim) = (head.index.model_id.as_str(), head.index.dim);
    let mut live: HashSet<String> = HashSet::new();
    for e in &out {
        let seg = Segment::open(dir, &e.id, model, dim)?;
        let dead = match &e.tombstones {
            Some(t) => format::tombstones::read(&dir.join(&t.file), model, &t.blake3, e.chunks)?,
            None => RoaringBitmap::new(),
        };
        if let Some(table) = seg.memories() {
            for (i, m) in table.memories.iter().enumerate() {
                if !dead.contains(i as u32) {
                    live.insert(m.id.as_str().to_string());
                }
            }
        }
    }
    for e in new {
        let seg = Segment::open(dir, &e.id, model, dim)?;
        let mut dead = match &e.tombstones {
            Some(t) => format::tombstones::read(&dir.join(&t.file), model, &t.blake3, e.chunks)?,
            None => RoaringBitmap::new(),
        };
        let before = dead.len();
        if let Some(table) = seg.memories() {
            for (i, m) in table.memories.iter().enumerate() {
                if dead.contains(i as u32) {
                    continue;
                }
                // What a memory tool would refuse to store is left out here too (ids, sizes,
                // fields, timestamps): the segment comes from whoever writes the store. Control
                // characters are let through: records stored before they were refused hold
                // some, and are served where they were stored.
                if let Err(why) = format::memory::validate_record(&without_controls(m.to_record()))
                {
                    dead.insert(i as u32);
                    merged.refused += 1;
                    merged
                        .refused_why
                        .get_or_insert_with(|| format!("segment {}, record {i}: {why}", e.id));
                    continue;
                }
                let id = m.id.as_str();
                if let Some(&at) = deleted.and_then(|d| d.get(id)) {
                    // A copy stamped more than a day ahead of this clock does not undo a
                    // deletion: no honest clock is that far off, and the stamp is the
                    // remote's word.
                    let updated = i64::from(m.updated_at);
                    if updated <= at || updated > format::memory::now_ms() + REVIVE_MAX_AHEAD_MS {
                        dead.insert(i as u32);
                        merged.deleted_here += 1;
                        continue;
                    }
                    if !live.contains(id) {
                        merged.revived.push(id.to_string());
                    }
                }
                if !live.insert(id.to_string()) {
                    dead.insert(i as u32);
                }
            }
        }
        let mut entry = e.clone();
        if dead.len() != before {
            let file = format::tombstones::file_name(&e.id, generation);
            let bytes = format::tombstones::write(&dir.join(&file), model, &dead)?;
            entry.tombstones = Some(TombstoneRef {
                file,
                blake3: format::blake3_hex(&bytes),
                count: dead.len(),
            });
        }
        out.push(entry);
    }
    merged.entries = out;
    Ok(merged)
}

fn count_file(files: &AtomicU64, opts: &PullOptions) -> Result<()> {
    let n = files.fetch_add(1, Ordering::SeqCst) + 1;
    match opts.stop_after_files {
        Some(stop) if n >= stop => Err(SyncError::Stopped(n)),
        _ => Ok(()),
    }
}

/// Fetches segment `id` into `staging/seg-<id>/` and opens it there.
#[allow(clippy::too_many_arguments)]
async fn fetch_segment(
    remote: &Remote,
    staging: &Path,
    entry: &SegmentEntry,
    memory: bool,
    (model, dim): (&str, u32),
    opts: &PullOptions,
    files: &AtomicU64,
    report: &mut PullReport,
) -> Result<()> {
    let id = entry.id.as_str();
    let seal = segment_key(id, SEGMENT_JSON);
    let json = remote
        .get_bytes(&seal)
        .await?
        .ok_or_else(|| SyncError::Corrupt {
            key: seal.clone(),
            reason: "missing: the manifest names a segment the store does not hold".into(),
        })?;
    report.bytes_downloaded += json.len() as u64;
    if format::segment::segment_id(&json) != id {
        return Err(SyncError::Corrupt {
            key: seal,
            reason: "does not hash to its segment id".into(),
        });
    }
    let meta: SegmentMeta = serde_json::from_slice(&json).map_err(|e| SyncError::Corrupt {
        key: seal.clone(),
        reason: e.to_string(),
    })?;
    check_meta(&seal, &meta, entry, memory)?;
    let seg_dir = staging.join(dir_name(id));
    format::fsio::create_dir_all(&seg_dir).map_err(io_err(&seg_dir))?;
    report.files_downloaded += 1;
    let done: Vec<(bool, u64)> = futures::stream::iter(meta.files.iter().map(|f| {
        let key = segment_key(id, &f.name);
        let seg_dir = &seg_dir;
        async move {
            let fetched = fetch_file(remote, &key, seg_dir, &f.name, f.size, &f.blake3).await?;
            if fetched {
                count_file(files, opts)?;
            }
            Ok::<_, SyncError>((fetched, f.size))
        }
    }))
    .buffer_unordered(opts.concurrency.max(1))
    .try_collect()
    .await?;
    for (fetched, n) in done {
        if fetched {
            report.files_downloaded += 1;
            report.bytes_downloaded += n;
        } else {
            report.files_resumed += 1;
        }
    }
    let json_path = seg_dir.join(SEGMENT_JSON);
    format::fsio::write_file(&json_path, &json).map_err(io_err(&json_path))?;
    let opened = Segment::open(staging, id, model, dim).map(|seg| seg.memories().is_some());
    match opened {
        Ok(has_memories) if has_memories == memory => Ok(()),
        Ok(_) => {
            let _ = std::fs::remove_dir_all(&seg_dir);
            Err(SyncError::Corrupt {
                key: seal,
                reason: "is listed as the wrong kind of segment (code / memory)".into(),
            })
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&seg_dir);
            Err(SyncError::Corrupt {
                key: seal,
                reason: format!("the downloaded segment does not open: {e}"),
            })
        }
    }
}

/// Whether `head` lists segment `id` among its memory segments.
fn is_memory(head: &RemoteManifest, id: &str) -> bool {
    head.index.memory_segments.iter().any(|m| m.id == id)
}

/// Whether a local copy of a segment of `head` (its code segments, and its memory segments
/// live in the local index: `local_mem`) is damaged ([`local_damage`]).
fn any_local_damage(dir: &Path, head: &RemoteManifest, local_mem: &HashSet<&str>) -> Result<bool> {
    for e in head.index.segments.iter().chain(
        head.index
            .memory_segments
            .iter()
            .filter(|m| local_mem.contains(m.id.as_str())),
    ) {
        if local_damage(&dir.join(dir_name(&e.id)), e, is_memory(head, &e.id))?.is_some() {
            return Ok(true);
        }
    }
    // The code segments' tombstone files (a memory segment pulled before keeps the local
    // index's own tombstones, which its MANIFEST names).
    let model = head.index.model_id.as_str();
    for e in &head.index.segments {
        if let Some(t) = &e.tombstones {
            let files = file_count(dir, dir, &e.id);
            if tombstone_damage(&dir.join(&t.file), t, model, e.chunks, files)?.is_some() {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Why the local tombstone file `path` is not the one `t` names (missing, or not its hash and
/// header); `None` when it is. Tombstone files are small: read whole and hashed. A refused
/// read (permissions) says nothing about the bytes: an error, not damage; any other failure
/// to read it (an unreadable sector) is damage another download repairs. Checked as
/// [`check_tombstones`] checks it.
fn tombstone_damage(
    path: &Path,
    t: &format::manifest::TombstoneRef,
    model: &str,
    chunks: u32,
    files: Option<u32>,
) -> Result<Option<String>> {
    match check_tombstones(path, t, model, chunks, files) {
        Ok(()) => Ok(None),
        Err(format::FormatError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            Ok(Some(format!("{} is missing", t.file)))
        }
        Err(format::FormatError::Io { source, path })
            if source.kind() == std::io::ErrorKind::PermissionDenied =>
        {
            Err(format::FormatError::Io { source, path }.into())
        }
        Err(e) => Ok(Some(format!("{}: {e}", t.file))),
    }
}

/// Reads the tombstone file `path` that `t` names against its hash and its segment's `chunks`,
/// and, where the segment's `files` count is known, its bitmap of deleted files without chunks
/// too (as opening the index checks it).
fn check_tombstones(
    path: &Path,
    t: &format::manifest::TombstoneRef,
    model: &str,
    chunks: u32,
    files: Option<u32>,
) -> format::Result<()> {
    match files {
        Some(n) => format::tombstones::read_with_files(path, model, &t.blake3, chunks, n).map(drop),
        None => format::tombstones::read(path, model, &t.blake3, chunks).map(drop),
    }
}

/// The file count of segment `id` as its `segment.json` says, staged in `staging` or else in
/// `dir`; `None` when neither reads (the segment's own checks report that).
fn file_count(staging: &Path, dir: &Path, id: &str) -> Option<u32> {
    format::Segment::read_meta(staging, id)
        .or_else(|_| format::Segment::read_meta(dir, id))
        .ok()
        .map(|m| m.file_count)
}

/// Why the local copy of `entry`'s segment in `seg_dir` is not that segment (`segment.json`
/// missing, unreadable as the segment's or not what the manifest says, a file it lists missing
/// or of another size); `None` when it looks whole. Sizes only: the files are not hashed (a
/// pull would otherwise read every local segment whole; `indexer verify` does that). An I/O
/// error that says nothing about the bytes (permissions) is an error, not damage.
fn local_damage(seg_dir: &Path, entry: &SegmentEntry, memory: bool) -> Result<Option<String>> {
    let p = seg_dir.join(SEGMENT_JSON);
    let json = match std::fs::read(&p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Some(format!("{SEGMENT_JSON} is missing")))
        }
        Err(e) => return Err(io_err(&p)(e)),
    };
    if format::segment::segment_id(&json) != entry.id {
        return Ok(Some(format!(
            "{SEGMENT_JSON} does not hash to the segment id"
        )));
    }
    let meta: SegmentMeta = match serde_json::from_slice(&json) {
        Ok(m) => m,
        Err(e) => return Ok(Some(format!("{SEGMENT_JSON} does not parse: {e}"))),
    };
    if let Err(e) = check_meta(&p.display().to_string(), &meta, entry, memory) {
        return Ok(Some(e.to_string()));
    }
    for f in &meta.files {
        let fp = seg_dir.join(&f.name);
        match std::fs::metadata(&fp) {
            Ok(m) if m.is_file() && m.len() == f.size => {}
            Ok(m) => {
                return Ok(Some(format!(
                    "{} is {} bytes, {SEGMENT_JSON} says {}",
                    f.name,
                    m.len(),
                    f.size
                )))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Some(format!("{} is missing", f.name)))
            }
            Err(e) => return Err(io_err(&fp)(e)),
        }
    }
    Ok(None)
}

/// What `segment.json` must say for manifest entry `entry`: its chunk count, files only inside
/// the segment, each once (and none that a download's temporary name could collide with), the
/// memory table exactly when the manifest lists it as a memory segment.
fn check_meta(key: &str, meta: &SegmentMeta, entry: &SegmentEntry, memory: bool) -> Result<()> {
    let bad = |reason: String| {
        Err(SyncError::Corrupt {
            key: key.to_string(),
            reason,
        })
    };
    if meta.chunk_count != entry.chunks {
        return bad(format!(
            "has {} chunks, the manifest says {}",
            meta.chunk_count, entry.chunks
        ));
    }
    let mut names = HashSet::new();
    for f in &meta.files {
        if f.name.is_empty()
            || f.name.contains('/')
            || f.name.contains('\\')
            || f.name.contains("..")
            || f.name == SEGMENT_JSON
            || f.name.ends_with(".part")
            || !names.insert(f.name.as_str())
        {
            return bad(format!("names a bad or repeated file {:?}", f.name));
        }
    }
    if names.contains("memories.rkyv") != memory {
        return bad("is listed as the wrong kind of segment (code / memory)".into());
    }
    Ok(())
}

/// Streams `key` into `dir/name`, checking size and blake3; `false` when a verified copy was
/// already there (an interrupted pull).
async fn fetch_file(
    remote: &Remote,
    key: &str,
    dir: &Path,
    name: &str,
    size: u64,
    blake3: &str,
) -> Result<bool> {
    let path = dir.join(name);
    if path.is_file() {
        if std::fs::metadata(&path).map_err(io_err(&path))?.len() == size
            && hash_file(&path)? == blake3
        {
            return Ok(false);
        }
        std::fs::remove_file(&path).map_err(io_err(&path))?;
    }
    let part: PathBuf = dir.join(format!("{name}.part"));
    let bad = |reason: String| SyncError::Corrupt {
        key: key.to_string(),
        reason,
    };
    let got = remote
        .get_stream(key)
        .await?
        .ok_or_else(|| bad("missing: the segment is sealed but this file is gone".into()))?;
    let mut stream = got.into_stream();
    let mut f = format::fsio::create(&part).map_err(io_err(&part))?;
    let mut hasher = blake3::Hasher::new();
    let mut n: u64 = 0;
    let result: Result<()> = async {
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| remote.read_error(key, e))?;
            n += chunk.len() as u64;
            remote.count_down(chunk.len() as u64);
            if n > size {
                return Err(bad(format!(
                    "longer than the {size} bytes segment.json says"
                )));
            }
            hasher.update(&chunk);
            format::fsio::write_all(&mut f, &part, &chunk).map_err(io_err(&part))?;
        }
        if n != size {
            return Err(bad(format!(
                "truncated: {n} of the {size} bytes segment.json says"
            )));
        }
        if hasher.finalize().to_hex().as_str() != blake3 {
            return Err(bad(
                "blake3 does not match segment.json (corrupt object)".into()
            ));
        }
        format::fsio::sync_all(&f, &part).map_err(io_err(&part))
    }
    .await;
    drop(f);
    if let Err(e) = result {
        let _ = std::fs::remove_file(&part);
        return Err(e);
    }
    format::fsio::rename(&part, &path).map_err(io_err(&path))?;
    Ok(true)
}

async fn fetch_tombstone(
    remote: &Remote,
    staging: &Path,
    t: &TombstoneRef,
    report: &mut PullReport,
) -> Result<()> {
    let key = tombstone_key(&t.blake3);
    let bytes = remote
        .get_bytes(&key)
        .await?
        .ok_or_else(|| SyncError::Corrupt {
            key: key.clone(),
            reason: "missing: the manifest names a tombstone file the store does not hold".into(),
        })?;
    if format::blake3_hex(&bytes) != t.blake3 {
        return Err(SyncError::Corrupt {
            key,
            reason: "blake3 does not match the manifest (corrupt object)".into(),
        });
    }
    let path = staging.join(&t.file);
    format::fsio::write_file(&path, &bytes).map_err(io_err(&path))?;
    report.files_downloaded += 1;
    report.bytes_downloaded += bytes.len() as u64;
    Ok(())
}

/// Follows a remote: each [`poll`](Follower::poll) makes one conditional GET of `latest` and
/// pulls when it changed (always on the first poll).
#[derive(Debug)]
pub struct Follower {
    remote: Remote,
    dir: PathBuf,
    opts: PullOptions,
    etag: Option<String>,
    /// The remote generation of the last pull.
    generation: u64,
}

impl Follower {
    pub fn new(remote: Remote, dir: PathBuf, opts: PullOptions) -> Follower {
        Follower {
            remote,
            dir,
            opts,
            etag: None,
            generation: 0,
        }
    }

    /// `Ok(None)`: `latest` unchanged since the last poll and no manifest after the last pulled
    /// one (or nothing pushed yet).
    pub fn poll(&mut self) -> Result<Option<PullReport>> {
        let got = self
            .remote
            .block_on(self.remote.get_if_changed(LATEST, self.etag.as_deref()))?;
        let etag = match got {
            // `latest` unchanged; a pusher that died between its commit and moving `latest` left
            // a newer manifest: one HEAD finds it.
            Some(None) => {
                let next = crate::layout::manifest_key(self.generation.saturating_add(1));
                if self.remote.block_on(self.remote.head(&next))?.is_none() {
                    return Ok(None);
                }
                self.etag.clone()
            }
            Some(Some((_, etag))) => etag,
            None => None,
        };
        match pull(&self.remote, &self.dir, &self.opts) {
            Ok(r) => {
                self.etag = etag;
                self.generation = r.generation;
                Ok(Some(r))
            }
            Err(SyncError::Empty { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}
