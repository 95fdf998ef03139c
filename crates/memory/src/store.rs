//! The durable side of memories: recovery at start (log replay on top of `MANIFEST`'s
//! `memory_lsn`), the writer state (the open log, or why writes are disabled), the flush of the
//! delta into a memory segment (merging older memory segments when there are many), and
//! export.
//!
//! Lock order, kept by the engine that calls these: the directory lock (`LOCK`), then the
//! writer lock (the `Mutex<Writer>`). A flush commits `MANIFEST` (with `memory_lsn`) before the
//! log is truncated, and replay skips LSNs ≤ `memory_lsn`, so a crash at any point neither loses
//! nor duplicates a write; a failure after the commit disables writes until a restart.

use std::path::Path;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use format::manifest::{manifest_mtime, DirLock, IndexManifest, SegmentEntry};
use format::memory::MemoryRecord;
use format::{FormatError, Index, SegmentBuilder};
use serde::Serialize;

use crate::delta::{find_in_segments, Delta};
use crate::search::MemFilter;
use crate::view::MemoryView;
use crate::wal::{Damage, LogModel, Recovery, Wal, WalError, WalOp, WAL_FILE};

/// A flush that would leave more memory segments than this merges them all into one.
pub const MERGE_AT: usize = 8;

/// Why memory writes are disabled on a server (another queryd holds the log, a read-only
/// directory, a flush that committed but could not be installed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct WritesDisabled(pub String);

/// The write side of memories; the engine keeps it behind its writer lock.
pub struct Writer {
    /// The open log, or why memory writes are disabled.
    pub wal: Result<Wal, WritesDisabled>,
    /// Delta size that triggers a flush.
    pub flush_at: usize,
}

/// How a server holds the memory log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogAccess {
    /// This server holds the log and writes memories.
    Writer,
    /// Another process holds the log: memories are served read-only, and the log is re-read
    /// ([`replay_shared`]) to follow its writes.
    HeldElsewhere,
    /// This server holds the log, but it has a damaged record followed by valid ones
    /// ([`Recovered::damage`]): the valid prefix is served and memory writes stop until
    /// `queryd repair-wal` (the log stays locked meanwhile).
    Damaged,
    /// The log cannot be opened for writing because the directory or file system is
    /// read-only (or not ours to write): a legitimate way to serve an index. Its records are
    /// replayed read-only ([`replay_shared`]), so every memory is served.
    ReadOnly,
    /// Memory writes are disabled for another reason (the `WritesDisabled` message says why).
    Disabled,
}

/// What recovery found: the log (or why writes are disabled), the index generation to serve
/// (a newer one when a previous server flushed after `index` was opened) and the replayed
/// delta.
pub struct Recovered {
    pub wal: Result<Wal, WritesDisabled>,
    pub index: Index,
    pub manifest_mtime: Option<SystemTime>,
    pub delta: Delta,
    pub access: LogAccess,
    /// Damage found in the log (whoever holds it).
    pub damage: Option<Damage>,
    /// A damaged log, held open (locked) while writes are disabled, so that no other server
    /// writes it and no repair runs under this one.
    pub held: Option<Wal>,
    /// Something `index_status` must report that is not [`Recovered::damage`]: a tail cut at
    /// open that may have held acknowledged writes (`Recovery::cut_suspect`), or, on a server
    /// reading a log another one holds, records it could not serve (an unreadable log,
    /// records of another model).
    pub problem: Option<String>,
}

/// Applies the records past `index`'s `memory_lsn` to a new delta; returns it and how many
/// were applied. Records whose vector does not fit the index are skipped and handed to
/// `misfit` (LSN, memory id, vector length): those of another dimension, and every put when
/// `other_model` (the log's header names another model than the index's).
fn replay(
    index: &Index,
    ops: &[(u64, WalOp)],
    other_model: bool,
    mut misfit: impl FnMut(u64, &str, usize),
) -> (Delta, usize) {
    let done = index.manifest.memory_lsn;
    let dim = index.manifest.dim as usize;
    let mut delta = Delta {
        last_lsn: done,
        ..Delta::default()
    };
    let mut n = 0;
    for (lsn, op) in ops {
        if *lsn <= done {
            continue;
        }
        if let WalOp::Put { record, vector } = op {
            if other_model || vector.len() != dim {
                misfit(*lsn, &record.id, vector.len());
                continue;
            }
        }
        delta.apply(*lsn, op, |id| find_in_segments(index, id).is_some());
        n += 1;
    }
    (delta, n)
}

/// The log of `dir`, read without taking it (another process writes it), replayed on top of
/// `index`. `Ok(None)` when `MANIFEST` no longer names `index`'s generation after the read: a
/// flush may have moved records from the log into a segment meanwhile, so reload the index
/// and call again. (A flush commits `MANIFEST` before it truncates the log, so an unchanged
/// generation means the log read still held every record the index lacks.)
pub fn replay_shared(dir: &Path, index: &Index) -> Result<Option<Shared>, WalError> {
    let mut rec = crate::wal::read_only(dir)?;
    match IndexManifest::read(dir) {
        Ok(m) if m.generation == index.manifest.generation => {}
        _ => return Ok(None),
    }
    let ops = std::mem::take(&mut rec.ops);
    let other = rec.other_model(&index_model(index));
    let mut misfits = 0usize;
    let (delta, _) = replay(index, &ops, other, |_, _, _| misfits += 1);
    let problem = (misfits > 0).then(|| {
        format!(
            "{misfits} record(s) of the memory log {} (held by another queryd) were embedded \
             with another model than the index's {} and are not served here",
            dir.join(WAL_FILE).display(),
            index_model(index)
        )
    });
    Ok(Some(Shared {
        delta,
        recovery: rec,
        problem,
    }))
}

/// What [`replay_shared`] read from a log another process holds.
pub struct Shared {
    pub delta: Delta,
    pub recovery: Recovery,
    /// Records it could not serve, said for `index_status`.
    pub problem: Option<String>,
}

/// What `index_status` says when the log another process holds cannot be read at all.
pub fn shared_unreadable(dir: &Path, e: &dyn std::fmt::Display) -> String {
    format!(
        "the memory log {} (held by another queryd) could not be read ({e}); its unflushed \
         memories are not served here",
        dir.join(WAL_FILE).display()
    )
}

/// The model whose vectors `index` holds, as a log's header names it.
fn index_model(index: &Index) -> LogModel {
    LogModel {
        id: index.manifest.model_id.clone(),
        dim: index.manifest.dim,
    }
}

/// Whether opening the log failed only because it cannot be written here (a read-only
/// directory or file system, a file owned by someone else), not because it is damaged.
fn read_only_open(e: &WalError) -> bool {
    matches!(e, WalError::Io { source, .. }
        if matches!(source.kind(), std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem))
}

/// Recovery that serves `index` with memory writes disabled for `why` (no log replayed).
fn disabled(index: Index, mtime: Option<SystemTime>, why: String) -> Recovered {
    Recovered {
        wal: Err(WritesDisabled(why)),
        index,
        manifest_mtime: mtime,
        delta: Delta::default(),
        access: LogAccess::Disabled,
        damage: None,
        held: None,
        problem: None,
    }
}

/// Opens the log of `dir`, replays what `MANIFEST`'s `memory_lsn` does not cover into a delta
/// on top of `index`. When another process holds the log, its records are replayed read-only;
/// when the log is damaged, its valid prefix is.
pub fn recover(dir: &Path, index: Index, mtime: Option<SystemTime>) -> Recovered {
    let (mut wal, rec) = match Wal::open(dir, 1, &index_model(&index)) {
        Ok(x) => x,
        Err(e @ WalError::Busy { .. }) => {
            eprintln!("queryd: memory writes are disabled: {e}; serving its memories read-only");
            return recover_shared(dir, index, mtime, e.to_string());
        }
        Err(e) if read_only_open(&e) => {
            eprintln!("queryd: memory writes are disabled: {e}; serving its memories read-only");
            let mut r = recover_shared(dir, index, mtime, e.to_string());
            r.access = LogAccess::ReadOnly;
            return r;
        }
        Err(e) => {
            eprintln!("queryd: memory writes are disabled: {e}");
            return disabled(index, mtime, e.to_string());
        }
    };
    // The log is ours now. A previous server may have flushed (and truncated its log) after
    // `index` was opened: start from the MANIFEST as it is now.
    let (index, mtime) = match IndexManifest::read(dir) {
        Ok(m) if m.generation != index.manifest.generation => {
            match Index::open_reusing(dir, Some(&index)) {
                Ok(ix) => (ix, manifest_mtime(dir)),
                Err(e) => {
                    eprintln!("queryd: memory writes are disabled: reopening the index: {e}");
                    return disabled(index, mtime, e.to_string());
                }
            }
        }
        _ => (index, mtime),
    };
    wal.ensure_next_lsn(index.manifest.memory_lsn + 1);
    if rec.cut_bytes > 0 {
        eprintln!(
            "queryd: memory log {}: cut {} bytes at the end ({}); the records before it were replayed",
            dir.join(WAL_FILE).display(),
            rec.cut_bytes,
            rec.cut_reason.as_deref().unwrap_or("?")
        );
    }
    let cut = rec.cut_suspect.then(|| {
        format!(
            "the memory log's last {} bytes were cut at open ({}): a record there was written \
             whole and fails its checksum, which a crash mid-write rarely leaves, so an \
             acknowledged memory write may be missing; the bytes are kept for inspection",
            rec.cut_bytes,
            rec.cut_reason.as_deref().unwrap_or("?")
        )
    });
    let dim = index.manifest.dim;
    let mut misfits = 0usize;
    let served = index_model(&index);
    let other = rec.other_model(&served);
    let logged = rec
        .model
        .as_ref()
        .map_or_else(String::new, |m| m.to_string());
    let (delta, n) = replay(&index, &rec.ops, other, |lsn, id, len| {
        misfits += 1;
        if other {
            eprintln!(
                "queryd: memory log record {lsn} (memory {id}) was embedded with model {logged}, the index holds {served}; not replayed"
            )
        } else {
            eprintln!(
                "queryd: memory log record {lsn} (memory {id}) has a {len}-d vector, the index is {dim}-d (a different model?); not replayed"
            )
        }
    });
    if n > 0 {
        eprintln!("queryd: replayed {n} memory writes from the log");
    }
    if let Some(d) = rec.damage {
        let msg = format!("{}: {}", dir.join(WAL_FILE).display(), d.message(dir));
        eprintln!("queryd: MEMORY LOG DAMAGED, memory writes are disabled: {msg}");
        return Recovered {
            wal: Err(WritesDisabled(msg)),
            index,
            manifest_mtime: mtime,
            delta,
            access: LogAccess::Damaged,
            damage: Some(d),
            held: Some(wal),
            problem: None,
        };
    }
    if misfits > 0 || other {
        // (A log of another model with no put left to replay refuses appends all the same:
        // its header must not be taken over while it holds records.)
        // A flush would move `memory_lsn` past these records and truncate the log: they
        // would be gone. Writes stop instead, and the log stays held so nothing else writes
        // it; `queryd export` still reads them (it does not need their vectors).
        let what = if other {
            format!(
                "were embedded with model {logged} (the log's header says so), the index \
                 holds {served}; they are not replayed"
            )
        } else {
            format!(
                "hold vectors of another dimension than the index's {dim} (embedded with \
                 another model)"
            )
        };
        let records = if other { rec.ops.len() } else { misfits };
        let msg = format!(
            "{records} record(s) of the memory log {} {what}; memory writes are disabled so \
             that the log keeps them: stop queryd, save every memory with `queryd export \
             --index {} --out FILE`, ingest FILE into the index with `indexer build \
             --memories FILE` (re-embedded with its model), then move {WAL_FILE} away",
            dir.join(WAL_FILE).display(),
            dir.display(),
        );
        eprintln!("queryd: {msg}");
        return Recovered {
            wal: Err(WritesDisabled(msg)),
            index,
            manifest_mtime: mtime,
            delta,
            access: LogAccess::Disabled,
            damage: None,
            held: Some(wal),
            problem: cut,
        };
    }
    Recovered {
        wal: Ok(wal),
        index,
        manifest_mtime: mtime,
        delta,
        access: LogAccess::Writer,
        damage: None,
        held: None,
        problem: cut,
    }
}

/// Recovery when another process holds the log: its records, read-only, on the generation of
/// `MANIFEST` they belong with.
fn recover_shared(
    dir: &Path,
    mut index: Index,
    mut mtime: Option<SystemTime>,
    why: String,
) -> Recovered {
    let out = |index: Index, mtime, delta, damage, problem| Recovered {
        wal: Err(WritesDisabled(why.clone())),
        index,
        manifest_mtime: mtime,
        delta,
        access: LogAccess::HeldElsewhere,
        damage,
        held: None,
        problem,
    };
    let mut problem = None;
    for _ in 0..5 {
        match replay_shared(dir, &index) {
            Ok(Some(s)) => {
                return out(index, mtime, s.delta, s.recovery.damage, s.problem);
            }
            Ok(None) => match Index::open_reusing(dir, Some(&index)) {
                Ok(ix) => {
                    index = ix;
                    mtime = manifest_mtime(dir);
                }
                Err(e) => {
                    eprintln!("queryd: reopening the index to read the memory log: {e}");
                    problem = Some(shared_unreadable(dir, &e));
                    break;
                }
            },
            Err(e) => {
                eprintln!("queryd: reading the memory log held by another queryd: {e}");
                problem = Some(shared_unreadable(dir, &e));
                break;
            }
        }
    }
    out(index, mtime, Delta::default(), None, problem)
}

/// Result of a flush.
#[derive(Debug, Clone, Serialize)]
pub struct FlushReport {
    pub segment: Option<String>,
    /// Memories from the delta.
    pub memories: usize,
    /// Memories copied from merged older segments.
    pub merged: usize,
    pub tombstoned: u64,
    pub generation: u64,
    pub ms: f64,
}

/// Why a flush failed. Before the commit nothing changed (the log keeps the writes); after it,
/// writes are disabled until a restart ([`FlushError::NotInstalled`]).
#[derive(Debug, thiserror::Error)]
pub enum FlushError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error("memory writes are disabled; nothing to flush")]
    Disabled,
    #[error("a memory flush was committed but could not be installed ({0}); restart queryd")]
    NotInstalled(String),
    /// `MANIFEST` now names another model than the one the logged memories were embedded
    /// with (an `indexer pull` or build replaced the index under the server): their vectors
    /// would be written under the wrong model, so nothing is flushed and the log keeps them.
    #[error(
        "{dir}: MANIFEST now names model {now} ({now_dim} dims), but the memories in the log \
         were embedded with {served} ({served_dim} dims); nothing was flushed and the log keeps \
         them: save them (`queryd export --index {dir}`), then ingest the export into an index \
         of the new model (`indexer build --memories FILE`)"
    )]
    ModelChanged {
        dir: String,
        now: String,
        now_dim: u32,
        served: String,
        served_dim: u32,
    },
    #[error(transparent)]
    Wal(#[from] WalError),
}

/// Writes the delta of `cur` into a memory segment, tombstones what it supersedes and commits
/// `MANIFEST`; then `install` publishes the new generation (index, MANIFEST mtime, empty
/// delta, generation) and the log is truncated. `Ok(None)` when nothing was logged since the
/// last flush. The caller holds the directory lock and the writer lock (`w`), and `cur` is the
/// view it serves; `started` is when the flush was asked for (the report's `ms` counts the
/// wait for the locks too).
pub fn flush(
    dir: &Path,
    cur: &MemoryView,
    w: &mut Writer,
    started: Instant,
    install: impl FnOnce(Arc<Index>, Option<SystemTime>, Delta, u64),
) -> Result<Option<FlushReport>, FlushError> {
    let mut m = IndexManifest::read(dir)?;
    if cur.delta.last_lsn <= m.memory_lsn {
        return Ok(None); // nothing logged since the last flush
    }
    if w.wal.is_err() {
        return Err(FlushError::Disabled);
    }
    let served = &cur.index.manifest;
    if (m.model_id.as_str(), m.dim) != (served.model_id.as_str(), served.dim)
        || cur
            .delta
            .entries
            .values()
            .any(|e| e.vector.len() != m.dim as usize)
    {
        return Err(FlushError::ModelChanged {
            dir: dir.display().to_string(),
            now: m.model_id.clone(),
            now_dim: m.dim,
            served: served.model_id.clone(),
            served_dim: served.dim,
        });
    }
    let base: Arc<Index> = if m.memory_segments == cur.index.manifest.memory_segments {
        Arc::clone(&cur.index)
    } else {
        Arc::new(Index::open_reusing(dir, Some(&cur.index))?)
    };
    let generation = m.generation + 1;
    let model = m.model_id.clone();
    let mut tombstoned = 0;
    // Merge: with many memory segments, their live records go into the new segment
    // together with the delta (vectors are copied, nothing is re-embedded).
    let merge = base.memory.len() + 1 > MERGE_AT;
    let dim = m.dim as usize;
    let mut recs = Vec::new();
    let mut vecs = Vec::new();
    let mut merged = 0usize;
    // Every segment copy of an id the delta touched is superseded: ids shadowed at write
    // time, and ids the delta holds (a dump ingested meanwhile may have added copies).
    let superseded: Vec<&str> = cur
        .delta
        .shadowed
        .iter()
        .map(String::as_str)
        .chain(cur.delta.entries.keys().map(String::as_str))
        .collect();
    let kept = if merge {
        for ls in base.memory.iter() {
            let Some(t) = ls.segment.memories() else {
                continue;
            };
            for (i, r) in t.memories.iter().enumerate() {
                let i = i as u32;
                let dead = ls.tombstones.contains(i)
                    || cur.delta.shadowed.contains(r.id.as_str())
                    || cur.delta.entries.contains_key(r.id.as_str());
                if let (false, Some(v)) = (dead, ls.segment.vector(i)) {
                    recs.push(r.to_record());
                    vecs.extend_from_slice(v);
                    merged += 1;
                } else if !ls.tombstones.contains(i) {
                    tombstoned += 1;
                }
            }
        }
        Vec::new()
    } else {
        let (kept, newly) = format::manifest::tombstone_memory_ids(
            dir,
            &base,
            &m.memory_segments,
            superseded.iter().copied(),
            generation,
        )?;
        tombstoned += newly;
        kept
    };
    m.memory_segments = kept;
    let n = cur.delta.entries.len();
    let mut segment = None;
    for e in cur.delta.entries.values() {
        recs.push(e.record.clone());
        vecs.extend_from_slice(&e.vector);
    }
    if !recs.is_empty() {
        // Record order inside a segment: by id (time order).
        let mut order: Vec<usize> = (0..recs.len()).collect();
        order.sort_by(|&a, &b| recs[a].id.cmp(&recs[b].id));
        let recs: Vec<MemoryRecord> = order.iter().map(|&i| recs[i].clone()).collect();
        let vecs: Vec<f32> = order
            .iter()
            .flat_map(|&i| vecs[i * dim..(i + 1) * dim].iter().copied())
            .collect();
        let (id, meta) = SegmentBuilder::for_memories(recs, vecs).write(dir, &model, dim)?;
        m.memory_segments.push(SegmentEntry {
            id: id.clone(),
            chunks: meta.chunk_count,
            tombstones: None,
        });
        segment = Some(id);
    }
    // Deletions are remembered, so that a pull does not bring them back in another
    // machine's merged segment; a memory written again leaves the list. The time is that of
    // the delete, and never before the deleted copy's own `updated_at` (another machine's
    // clock may run ahead), so the copy deleted cannot count as newer than its deletion.
    let now = format::memory::now_ms();
    for id in cur.delta.shadowed.iter() {
        if cur.delta.entries.contains_key(id.as_str()) {
            continue;
        }
        let mut at = cur.delta.deleted_at.get(id).copied().unwrap_or(now);
        if let Some((si, c)) = find_in_segments(&base, id) {
            if let Some(t) = base.memory[si].segment.memories() {
                at = at.max(i64::from(t.memories[c as usize].updated_at));
            }
        }
        m.deleted_memories.insert(id.clone(), at);
    }
    // Bounded: the oldest deletions go first (a copy of one could then come back).
    let excess = m
        .deleted_memories
        .len()
        .saturating_sub(format::manifest::MAX_DELETED_MEMORIES);
    if excess > 0 {
        let mut by_age: Vec<(i64, String)> = m
            .deleted_memories
            .iter()
            .map(|(id, at)| (*at, id.clone()))
            .collect();
        by_age.sort_unstable();
        for (_, id) in by_age.into_iter().take(excess) {
            m.deleted_memories.remove(&id);
        }
    }
    for id in cur.delta.entries.keys() {
        m.deleted_memories.remove(id.as_str());
    }
    m.memory_lsn = cur.delta.last_lsn;
    m.generation = generation;
    // From the commit on, a failure leaves disk ahead of memory: the log's records are in
    // the new segment. Serving on would flush them twice, so memory writes stop until a
    // restart, which replays only what `memory_lsn` does not cover.
    let poison = |w: &mut Writer, e: String| {
        let err = FlushError::NotInstalled(e);
        eprintln!("queryd: {err}");
        w.wal = Err(WritesDisabled(err.to_string()));
        err
    };
    if let Err(e) = m.commit(dir) {
        return Err(poison(w, e.to_string()));
    }
    if let Err(e) = Index::collect_garbage(dir) {
        eprintln!("queryd: garbage collection after a memory flush: {e}");
    }
    let index = match Index::open_reusing(dir, Some(&base)) {
        Ok(ix) => ix,
        Err(e) => return Err(poison(w, e.to_string())),
    };
    install(
        Arc::new(index),
        manifest_mtime(dir),
        Delta {
            last_lsn: cur.delta.last_lsn,
            ..Delta::default()
        },
        generation,
    );
    // Committed: the log's records are in the segment (and `memory_lsn` says so, should
    // this truncation not happen).
    if let Ok(wal) = w.wal.as_mut() {
        wal.truncate()?;
    }
    Ok(Some(FlushReport {
        segment,
        memories: n,
        merged,
        tombstoned,
        generation,
        ms: (started.elapsed().as_secs_f64() * 1e6).round() / 1e3,
    }))
}

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error(transparent)]
    Wal(#[from] WalError),
}

/// What [`export`] read: every memory it could, and the damage that kept it from reading
/// the rest (the export is then incomplete).
#[derive(Debug)]
pub struct Exported {
    pub memories: Vec<MemoryRecord>,
    pub damage: Option<Damage>,
}

/// Every live memory of the index at `dir`, including unflushed writes in its log, sorted by
/// id (the dump format of `indexer build --memories`). Reads only. With a damaged log, the
/// memories of its valid prefix, and the damage.
pub fn export(dir: &Path) -> Result<Exported, ExportError> {
    // Under the directory lock a flush cannot move records from the log into a segment
    // between reading the one and the other.
    let _lock = DirLock::acquire(dir)?;
    let index = Index::open_lenient(dir)?; // code segments do not matter here
    let rec = crate::wal::read_only(dir)?;
    let done = index.manifest.memory_lsn;
    let mut delta = Delta::default();
    for (lsn, op) in &rec.ops {
        if *lsn > done {
            delta.apply(*lsn, op, |id| find_in_segments(&index, id).is_some());
        }
    }
    let view = MemoryView::new(Arc::new(index), delta);
    let all = MemFilter {
        states: format::memory::STATES
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ..MemFilter::default()
    };
    let mut v = view.all_memories(&all);
    v.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(Exported {
        memories: v,
        damage: rec.damage,
    })
}

#[cfg(test)]
mod read_only_tests {
    use super::*;

    /// Only "cannot write here" serves the log read-only; other open errors disable writes.
    #[test]
    fn a_read_only_log_is_told_from_a_broken_one() {
        let io = |kind| WalError::Io {
            path: "memory.wal".into(),
            source: std::io::Error::from(kind),
        };
        assert!(read_only_open(&io(std::io::ErrorKind::PermissionDenied)));
        assert!(read_only_open(&io(std::io::ErrorKind::ReadOnlyFilesystem)));
        assert!(!read_only_open(&io(std::io::ErrorKind::Other)));
        assert!(!read_only_open(&WalError::BadMagic {
            path: "memory.wal".into()
        }));
    }
}
