//! `indexer build --rebuild` and the repair of an index whose `MANIFEST` is damaged or gone.
//!
//! Memories are never collateral damage: a rebuild drops the code segments (derived from the
//! sources, re-indexed right after) and keeps the memory segments, their tombstones and the
//! memory log (`memory.wal`) untouched. A damaged `MANIFEST` is moved aside
//! (`MANIFEST.bak-<time>`) and the memory part of a new one is recovered from the memory
//! segments on disk (`format::recover`, whose module doc explains why `memory_lsn` restarts at
//! 0 without duplicating or losing a memory) and the memory ledger beside it (pulls and
//! deletions, `format::manifest::LEDGER_FILE`). A memory segment that cannot be opened is moved
//! aside too, never deleted. When keeping the memories is impossible (they were embedded with
//! another model, or written in another format version) the rebuild refuses and changes
//! nothing.

use std::path::{Path, PathBuf};

use format::manifest::{DirLock, IndexManifest, SegmentEntry};
use format::recover::{move_aside, recover_memory_segments, RecoverError};
use format::{tombstones, FormatError, Index, Segment};

use crate::IndexerError;

/// What a rebuild (or a repair) did before re-indexing.
#[derive(Debug, Default, Clone)]
pub struct RebuildReport {
    /// Code segments dropped from the manifest (re-indexed by the build).
    pub code_segments_dropped: usize,
    /// Memory segments kept, and their live memories.
    pub memory_segments: usize,
    pub memories: u64,
    /// True when the memory part of `MANIFEST` was recovered from the segments on disk.
    pub recovered: bool,
    /// Second copies of a memory id tombstoned during recovery.
    pub duplicates: u64,
    /// Copies of memories deleted here (the memory ledger says) tombstoned during recovery.
    pub deleted: u64,
    /// Deletions and pulled memory segments a recovered MANIFEST took from the memory ledger
    /// ([`format::manifest::LEDGER_FILE`]).
    pub ledger_restored: Option<(usize, usize)>,
    /// What was moved aside (`*.bak-<time>`), with why.
    pub moved_aside: Vec<(PathBuf, String)>,
    /// Problems that did not stop the rebuild (garbage collection).
    pub warnings: Vec<String>,
}

impl std::fmt::Display for RebuildReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.recovered {
            write!(
                f,
                "rebuild: MANIFEST recreated: {} memories in {} memory segments recovered from \
                 disk (memory.wal is replayed in full by the next queryd); code re-indexed",
                self.memories, self.memory_segments
            )?;
        } else {
            write!(
                f,
                "rebuild: {} code segments dropped, re-indexed; {} memories in {} memory segments \
                 kept (and memory.wal)",
                self.code_segments_dropped, self.memories, self.memory_segments
            )?;
        }
        if let Some((deletions, pulled)) = self.ledger_restored.filter(|&(d, p)| d + p > 0) {
            write!(
                f,
                "; the memory ledger restored {deletions} deletions and {pulled} pulled memory \
                 segments (a pull does not bring them back)"
            )?;
        }
        if self.duplicates > 0 {
            write!(f, "; {} duplicate copies hidden", self.duplicates)?;
        }
        if self.deleted > 0 {
            write!(
                f,
                "; {} copies of memories deleted here hidden",
                self.deleted
            )?;
        }
        for (p, why) in &self.moved_aside {
            write!(f, "\nrebuild: moved aside {} ({why})", p.display())?;
        }
        for w in &self.warnings {
            write!(f, "\nrebuild: warning: {w}")?;
        }
        Ok(())
    }
}

fn fmt_err(e: FormatError) -> IndexerError {
    IndexerError::Format(e)
}

fn refused(e: RecoverError) -> IndexerError {
    match e {
        RecoverError::Format(e) => IndexerError::Format(e),
        e => IndexerError::RebuildRefused(e.to_string()),
    }
}

/// Prepares `dir` for a build from scratch with model `model_id` (`dim`): see the module doc.
/// Nothing to do for a missing or empty directory.
pub fn prepare_rebuild(
    dir: &Path,
    model_id: &str,
    dim: u32,
) -> Result<RebuildReport, IndexerError> {
    let mut report = RebuildReport::default();
    if !dir.is_dir() {
        return Ok(report);
    }
    let _lock = DirLock::acquire(dir).map_err(fmt_err)?;
    let manifest = match IndexManifest::read(dir) {
        Ok(m) => keep_memories(dir, m, model_id, dim, &mut report)?,
        Err(FormatError::NotAnIndex { .. }) => {
            match recovered_manifest(dir, model_id, dim, &mut report)? {
                Some(m) => m,
                None => return Ok(report),
            }
        }
        Err(e @ FormatError::Corrupt { .. }) => {
            // Recovered first: a refusal (memories of another model) leaves the damaged
            // MANIFEST where it was, as every refusal changes nothing.
            let m = recovered_manifest(dir, model_id, dim, &mut report)?;
            let p = move_aside(&dir.join(format::manifest::MANIFEST)).map_err(fmt_err)?;
            report.moved_aside.push((p, e.to_string()));
            m.unwrap_or_else(|| IndexManifest::empty(model_id, dim))
        }
        Err(e @ FormatError::Version { .. }) => {
            return Err(IndexerError::RebuildRefused(format!(
            "{e}; --rebuild changed nothing: it cannot carry memories across format versions\n{}",
            format::repair_hint(&e)
        )))
        }
        Err(e) => return Err(fmt_err(e)),
    };
    report.memory_segments = manifest.memory_segments.len();
    manifest.commit(dir).map_err(fmt_err)?;
    if let Err(e) = Index::collect_garbage(dir) {
        report.warnings.push(format!("garbage collection: {e}"));
    }
    Ok(report)
}

/// The manifest of an index that has none (missing, or moved aside as damaged): the memory
/// segments found on disk. `None` when there is nothing to keep (no memory segment, no log).
/// The caller holds the directory lock.
pub fn recovered_manifest(
    dir: &Path,
    model_id: &str,
    dim: u32,
    report: &mut RebuildReport,
) -> Result<Option<IndexManifest>, IndexerError> {
    if let Some(logged) = format::manifest::memory_wal_model(dir) {
        if (logged.id.as_str(), logged.dim) != (model_id, dim)
            && format::manifest::memory_wal_holds_records(dir)
        {
            return Err(IndexerError::RebuildRefused(format!(
                "the memory log {} holds memories embedded with model {logged}, this build \
                 uses `{model_id}` ({dim} dims); the index has no MANIFEST to keep them \
                 under another model, so nothing was changed: rebuild with that model \
                 (--model), then save the memories with `queryd export --index {}`, or move \
                 {} aside to build without them",
                dir.join(format::manifest::MEMORY_WAL_FILE).display(),
                dir.display(),
                format::manifest::MEMORY_WAL_FILE,
            )));
        }
    }
    // Read before anything is changed: an error that says nothing about its bytes refuses.
    let ledger_path = dir.join(format::manifest::LEDGER_FILE);
    let ledger = format::manifest::read_ledger(dir);
    match &ledger {
        Err(e @ FormatError::Version { .. }) => {
            return Err(IndexerError::RebuildRefused(format!(
                "{e}; a newer indexer wrote it, so the recovery changed nothing: recover the \
                 index with that version"
            )))
        }
        Err(e) => refuse_if_passing(e, &ledger_path)?,
        Ok(_) => {}
    }
    let no_deletions = std::collections::BTreeMap::new();
    let deleted = match &ledger {
        Ok(Some((l, _))) => &l.deleted_memories,
        _ => &no_deletions,
    };
    let rec = recover_memory_segments(dir, model_id, dim, deleted).map_err(refused)?;
    for (p, why) in &rec.unusable {
        let to = move_aside(p).map_err(fmt_err)?;
        report.moved_aside.push((to, why.clone()));
    }
    let ledger = match ledger {
        Ok(l) => l,
        Err(e) => {
            let to = move_aside(&ledger_path).map_err(fmt_err)?;
            report.moved_aside.push((
                to,
                format!(
                    "{e}; memories deleted here before this recovery can come back with a pull \
                     from a store that holds them"
                ),
            ));
            None
        }
    };
    if rec.entries.is_empty()
        && !format::manifest::memory_wal_holds_records(dir)
        && report.moved_aside.is_empty()
        && ledger.as_ref().is_none_or(|(l, _)| l.is_empty())
    {
        return Ok(None);
    }
    report.recovered = true;
    report.duplicates = rec.duplicates;
    report.deleted = rec.deleted;
    report.memories = rec.live;
    let mut m = IndexManifest::empty(model_id, dim);
    m.memory_segments = rec.entries;
    // See `format::recover`: every log record is replayed, idempotently by id.
    m.memory_lsn = 0;
    m.generation = rec.max_generation + 1;
    if let Some((l, generation)) = ledger {
        report.ledger_restored = Some((l.deleted_memories.len(), l.pulled_memory_segments.len()));
        m.generation = m.generation.max(generation.saturating_add(1));
        m.pulled_memory_segments = l.pulled_memory_segments;
        m.deleted_memories = l.deleted_memories;
        m.pulled_from = l.pulled_from;
    }
    Ok(Some(m))
}

/// An error reading `p` that says nothing about its bytes (permissions, I/O errors, memory):
/// a refusal, since moving the file aside would take its memories out of the index (and a
/// tombstone file's deletes out of them) for good. A missing, truncated or invalid file is
/// damage, which the caller moves aside.
fn refuse_if_passing(err: &FormatError, p: &Path) -> Result<(), IndexerError> {
    match err {
        FormatError::Io { source, .. } if format::recover::is_passing(source) => {
            Err(IndexerError::RebuildRefused(format!(
                "could not read {} ({err}); it holds memories, so it was not moved aside: fix \
                 the cause (permissions, the disk) and run the rebuild again",
                p.display()
            )))
        }
        _ => Ok(()),
    }
}

/// `m` without its code segments and roots; memory segments that cannot be opened because
/// they are damaged are moved aside (an I/O error that is not damage refuses the rebuild). Refuses when the memories need another model.
fn keep_memories(
    dir: &Path,
    mut m: IndexManifest,
    model_id: &str,
    dim: u32,
    report: &mut RebuildReport,
) -> Result<IndexManifest, IndexerError> {
    let has_memories =
        !m.memory_segments.is_empty() || format::manifest::memory_wal_holds_records(dir);
    if (m.model_id != model_id || m.dim != dim) && has_memories {
        return Err(IndexerError::RebuildRefused(format!(
            "the index at {} holds memories embedded with model `{}` (dim {}), this build uses \
             `{model_id}` (dim {dim}); --rebuild keeps memories and cannot re-embed them, so it \
             changed nothing: export them (`queryd export --index {} > memories.jsonl`, with the \
             old model), then `indexer build <source paths> --out <new dir> --memories \
             memories.jsonl`",
            dir.display(),
            m.model_id,
            m.dim,
            dir.display()
        )));
    }
    report.code_segments_dropped = m.segments.len();
    m.segments.clear();
    m.roots.clear();
    m.model_id = model_id.to_string();
    m.dim = dim;
    let mut kept: Vec<SegmentEntry> = Vec::new();
    let mut tombstones_lost = false;
    for mut e in std::mem::take(&mut m.memory_segments) {
        match Segment::open(dir, &e.id, model_id, dim) {
            Ok(seg) => {
                if let Some(t) = &e.tombstones {
                    let p = dir.join(&t.file);
                    if let Err(err) = tombstones::read(&p, model_id, &t.blake3, e.chunks) {
                        refuse_if_passing(&err, &p)?;
                        // Its memories count as live again: a deleted one may come back, none
                        // is lost. The damaged file is kept aside.
                        if p.exists() {
                            let to = move_aside(&p).map_err(fmt_err)?;
                            report.moved_aside.push((to, err.to_string()));
                        }
                        e.tombstones = None;
                        tombstones_lost = true;
                    }
                }
                report.memories += u64::from(seg.meta().chunk_count)
                    - e.tombstones.as_ref().map_or(0, |t| t.count);
                kept.push(e);
            }
            Err(err) => {
                let p = dir.join(format::segment::dir_name(&e.id));
                refuse_if_passing(&err, &p)?;
                if p.exists() {
                    let to = move_aside(&p).map_err(fmt_err)?;
                    report.moved_aside.push((to, err.to_string()));
                } else {
                    report
                        .warnings
                        .push(format!("memory segment {} is missing: {err}", e.id));
                }
            }
        }
    }
    if tombstones_lost {
        // Older versions of updated memories are live again beside the newer ones: one copy
        // of each id stays (the newest), as when a MANIFEST is recovered.
        let (entries, hidden, deleted, live, generation) = format::recover::one_copy_per_memory_id(
            dir,
            model_id,
            dim,
            &kept,
            &m.deleted_memories,
            m.generation,
        )
        .map_err(refused)?;
        kept = entries;
        report.duplicates += hidden;
        report.deleted += deleted;
        report.memories = live;
        if hidden + deleted > 0 {
            // The MANIFEST naming the new tombstone files is at least their generation.
            m.generation = m.generation.max(generation - 1);
        }
    }
    m.memory_segments = kept;
    m.generation += 1;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only damage moves a memory file aside; an error that says nothing about its bytes
    /// refuses the rebuild.
    #[test]
    fn only_damage_moves_memories_aside() {
        let p = Path::new("/idx/seg-x");
        let io = |kind| FormatError::Io {
            path: p.to_path_buf(),
            source: std::io::Error::from(kind),
        };
        for kind in [
            std::io::ErrorKind::PermissionDenied,
            std::io::ErrorKind::OutOfMemory,
            std::io::ErrorKind::Other,
        ] {
            let why = refuse_if_passing(&io(kind), p).unwrap_err().to_string();
            assert!(why.contains("not moved aside"), "{why}");
        }
        for kind in [
            std::io::ErrorKind::NotFound,
            std::io::ErrorKind::UnexpectedEof,
            std::io::ErrorKind::InvalidData,
        ] {
            assert!(refuse_if_passing(&io(kind), p).is_ok());
        }
        let corrupt = FormatError::Corrupt {
            path: p.to_path_buf(),
            detail: "bad magic".into(),
        };
        assert!(refuse_if_passing(&corrupt, p).is_ok());
    }

    fn memory(i: u8, updated_at: i64) -> format::memory::MemoryRecord {
        format::memory::record_for_tests(i, updated_at)
    }

    /// A damaged tombstone file is set aside by the rebuild; the older copy of an updated
    /// memory it hid is hidden again (one copy per id, the newest), and so is a memory deleted
    /// here (MANIFEST's `deleted_memories`); nothing is lost.
    #[test]
    fn a_lost_tombstone_file_does_not_duplicate_updated_memories() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        let seg = |recs: Vec<format::memory::MemoryRecord>| {
            let vecs: Vec<f32> = (0..recs.len() * 4).map(|i| (i % 4) as f32).collect();
            format::SegmentBuilder::for_memories(recs, vecs)
                .write(dir, "m", 4)
                .unwrap()
                .0
        };
        let a = seg(vec![memory(1, 5), memory(2, 5), memory(3, 5)]);
        let b = seg(vec![memory(1, 9)]);
        // Memory 1 was updated: its first copy (a's record 0) is tombstoned; memory 2 was
        // deleted (record 1).
        let mut bits = roaring::RoaringBitmap::new();
        bits.insert(0);
        bits.insert(1);
        let name = format::tombstones::file_name(&a, 3);
        let bytes = format::tombstones::write(&dir.join(&name), "m", &bits).unwrap();
        let mut m = IndexManifest::empty("m", 4);
        m.memory_segments = vec![
            SegmentEntry {
                id: a.clone(),
                chunks: 3,
                tombstones: Some(format::manifest::TombstoneRef {
                    file: name.clone(),
                    blake3: format::blake3_hex(&bytes),
                    count: 2,
                }),
            },
            SegmentEntry {
                id: b.clone(),
                chunks: 1,
                tombstones: None,
            },
        ];
        m.deleted_memories.insert(memory(2, 0).id, 6);
        m.generation = 3;
        m.commit(dir).unwrap();
        std::fs::write(dir.join(&name), b"damaged").unwrap();

        let report = prepare_rebuild(dir, "m", 4).unwrap();
        assert_eq!(
            (report.memories, report.duplicates, report.deleted),
            (2, 1, 1),
            "{report}"
        );
        assert_eq!(report.moved_aside.len(), 1, "{report}");
        let after = IndexManifest::read(dir).unwrap();
        let ta = after.memory_segments[0].tombstones.as_ref().unwrap();
        // Files on disk: generation 3 (the damaged one, set aside); the new one is 4, and the
        // MANIFEST naming it is no older.
        assert_eq!(ta.file, format::tombstones::file_name(&a, 4));
        assert!(after.generation >= 4, "{}", after.generation);
        let hidden = format::tombstones::read(&dir.join(&ta.file), "m", &ta.blake3, 3).unwrap();
        assert_eq!(hidden.iter().collect::<Vec<_>>(), [0, 1]);
        assert!(after.memory_segments[1].tombstones.is_none());
    }

    /// A recovered MANIFEST takes its pulls and deletions from the memory ledger, so a pull
    /// does not bring deleted memories back: also when every memory was deleted (no memory
    /// segment is left to recover) and the MANIFEST is gone rather than damaged. A damaged
    /// ledger is moved aside and said so; the memories are recovered all the same.
    #[test]
    fn a_recovered_manifest_keeps_the_memory_ledger() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        let (seg, _) = format::SegmentBuilder::for_memories(vec![memory(1, 5)], vec![1.0; 4])
            .write(dir, "m", 4)
            .unwrap();
        let mut m = IndexManifest::empty("m", 4);
        m.memory_segments = vec![SegmentEntry {
            id: seg.clone(),
            chunks: 1,
            tombstones: None,
        }];
        m.generation = 12;
        m.deleted_memories
            .insert(memory(2, 0).id, 1_700_000_000_000);
        m.pulled_memory_segments = vec!["0a1b".into(), seg.clone()];
        m.pulled_from = Some(format::manifest::PulledFrom {
            store: "file:///store".into(),
            generation: 3,
        });
        m.commit(dir).unwrap();
        let manifest = dir.join(format::manifest::MANIFEST);
        std::fs::write(&manifest, b"{ damaged").unwrap();

        let report = prepare_rebuild(dir, "m", 4).unwrap();
        assert!(report.recovered, "{report}");
        assert_eq!(report.ledger_restored, Some((1, 2)), "{report}");
        assert!(
            report.to_string().contains("restored 1 deletions"),
            "{report}"
        );
        let after = IndexManifest::read(dir).unwrap();
        assert_eq!(after.ledger(), m.ledger());
        assert_eq!(after.memory_segments, m.memory_segments);
        assert!(after.generation > 12, "{}", after.generation);

        // Every memory deleted, then the MANIFEST lost: the ledger alone is worth a manifest.
        let mut none_left = after.clone();
        none_left.memory_segments.clear();
        none_left
            .deleted_memories
            .insert(memory(1, 0).id, 1_700_000_000_001);
        none_left.generation += 1;
        none_left.commit(dir).unwrap();
        std::fs::remove_file(&manifest).unwrap();
        // The dropped segment is still on disk (no garbage collection ran): its memory was
        // deleted, so it is not recovered.
        assert!(dir.join(format!("seg-{seg}")).exists());
        let mut r = RebuildReport::default();
        let m2 = recovered_manifest(dir, "m", 4, &mut r)
            .unwrap()
            .expect("a manifest keeping the ledger");
        assert_eq!(m2.ledger(), none_left.ledger());
        assert!(m2.memory_segments.is_empty(), "{m2:?}");
        assert_eq!((r.memories, r.deleted), (0, 1), "{r}");

        // A damaged ledger: moved aside, reported, the memories still recovered.
        let ledger = dir.join(format::manifest::LEDGER_FILE);
        std::fs::write(&ledger, b"{ damaged").unwrap();
        std::fs::write(&manifest, b"{ damaged").unwrap();
        let report = prepare_rebuild(dir, "m", 4).unwrap();
        assert_eq!(report.ledger_restored, None);
        assert!(
            report.moved_aside.iter().any(|(p, why)| p
                .to_string_lossy()
                .contains("memory-ledger.json.bak-")
                && why.contains("can come back")),
            "{report}"
        );
        assert!(!ledger.exists());
    }

    /// A damaged MANIFEST beside memories of another model: the rebuild refuses and leaves
    /// the MANIFEST where it was (it used to move it aside first).
    #[test]
    fn a_refused_rebuild_leaves_a_damaged_manifest_in_place() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        let rec = memory(1, 1);
        format::SegmentBuilder::for_memories(vec![rec], vec![1.0, 0.0, 0.0, 0.0])
            .write(dir, "other-model", 4)
            .unwrap();
        let manifest = dir.join(format::manifest::MANIFEST);
        std::fs::write(&manifest, b"{ damaged").unwrap();
        assert!(matches!(
            IndexManifest::read(dir),
            Err(FormatError::Corrupt { .. })
        ));
        let err = prepare_rebuild(dir, "this-model", 4).unwrap_err();
        assert!(matches!(err, IndexerError::RebuildRefused(_)), "{err}");
        assert_eq!(std::fs::read(&manifest).unwrap(), b"{ damaged");
    }

    /// Without a MANIFEST, a memory log whose header names another model refuses the
    /// rebuild (its records would be replayed as this model's) and is left as it was; an
    /// emptied one, or one of the build's model, is kept.
    #[test]
    fn a_log_of_another_model_refuses_a_recovery() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        let log = dir.join(format::manifest::MEMORY_WAL_FILE);
        let header = |id: &str| {
            format::walhead::encode(&format::walhead::LogModel {
                id: id.into(),
                dim: 4,
            })
        };
        let mut logged = header("other-model");
        logged.extend_from_slice(b"records of the other model");
        std::fs::write(&log, &logged).unwrap();
        let err =
            recovered_manifest(dir, "this-model", 4, &mut RebuildReport::default()).unwrap_err();
        assert!(
            matches!(&err, IndexerError::RebuildRefused(m) if m.contains("`other-model`")),
            "{err}"
        );
        assert_eq!(std::fs::read(&log).unwrap(), logged);
        // The same model: recovered (every log record is replayed by the next server).
        let mut same = header("this-model");
        same.extend_from_slice(b"records");
        std::fs::write(&log, &same).unwrap();
        let m = recovered_manifest(dir, "this-model", 4, &mut RebuildReport::default())
            .unwrap()
            .expect("a manifest keeping the log");
        assert_eq!(m.model_id, "this-model");
        // Another model's header with no record after it: nothing to keep.
        std::fs::write(&log, header("other-model")).unwrap();
        assert!(
            recovered_manifest(dir, "this-model", 4, &mut RebuildReport::default())
                .unwrap()
                .is_none()
        );
    }
}
