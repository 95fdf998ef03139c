//! Recovering the memory part of an index whose `MANIFEST` is damaged or missing, from what
//! is on disk: memory segments are self-describing (`segment.json` names the model, the
//! dimension and `memories.rkyv`; the records carry their ids and `updated_at`), and each one's
//! newest tombstone file (`tomb-<id>-g<generation>.del`) says which of its records are dead.
//!
//! What a segment does not record is the write-ahead-log sequence number it covers
//! (`MANIFEST`'s `memory_lsn`). The recovered manifest sets it to 0, so every record still in
//! `memory.wal` is replayed. That is safe because replay is idempotent by memory id: a
//! replayed write of an id that a segment holds shadows the segment's copy (the log is
//! contiguous since its last truncation, so the replayed version is the newest), and the next
//! flush tombstones the segment copy. Setting it any higher could skip an acknowledged write.
//!
//! What the segments cannot tell either (the remote memory segments pulled or pushed, the
//! memories deleted here and when, the store generation last pulled) comes from the copy of
//! the lost manifest's [`crate::manifest::MemoryLedger`] in
//! [`crate::manifest::LEDGER_FILE`]; without it a pull would bring deleted memories back.
//!
//! Leftovers that no committed manifest named any more (an interrupted merge's inputs, for
//! example) can hold a second live copy of an id; the copy with the newest `updated_at` (then
//! the newest segment) is kept and the others are tombstoned, so every memory is served
//! exactly once. A leftover can also hold memories deleted here (a segment a flush dropped
//! when all its memories were deleted, not yet garbage collected): a copy the ledger's
//! deletions cover (deleted at or after its last update) is tombstoned too. Nothing here
//! deletes anything; what cannot be used is moved aside ([`move_aside`]) by the caller.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use roaring::RoaringBitmap;

use crate::manifest::{SegmentEntry, TombstoneRef};
use crate::segment::{Segment, SegmentMeta};
use crate::{io_err, tombstones, FormatError, Result};

/// The marker of a file or directory moved aside (`<name>.bak-<unix seconds>`); garbage
/// collection never touches such names.
pub use crate::manifest::BACKUP_MARK;

/// Renames `path` to `<path>.bak-<unix seconds>` (a numbered variant when that exists) and
/// returns the new path.
pub fn move_aside(path: &Path) -> Result<PathBuf> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut dest = path.with_file_name(format!("{name}{BACKUP_MARK}{secs}"));
    let mut n = 1;
    while dest.exists() {
        dest = path.with_file_name(format!("{name}{BACKUP_MARK}{secs}-{n}"));
        n += 1;
    }
    std::fs::rename(path, &dest).map_err(io_err(path))?;
    crate::sync_dir(path.parent().unwrap_or(Path::new(".")))?;
    Ok(dest)
}

/// What [`recover_memory_segments`] found.
#[derive(Debug, Default)]
pub struct RecoveredMemory {
    /// Usable memory segments with their tombstones, oldest first: the manifest's
    /// `memory_segments`.
    pub entries: Vec<SegmentEntry>,
    /// Live memories in them.
    pub live: u64,
    /// Second copies of an id tombstoned (leftovers of an interrupted merge or flush).
    pub duplicates: u64,
    /// Copies tombstoned because the memory was deleted here at or after their last update
    /// (the ledger's `deleted_memories`): segments a flush had dropped but garbage collection
    /// had not yet removed.
    pub deleted: u64,
    /// Memory segment directories that cannot be opened, with why (the caller moves them
    /// aside).
    pub unusable: Vec<(PathBuf, String)>,
    /// The highest generation named by a tombstone file, so the new manifest's generation
    /// is above every file on disk.
    pub max_generation: u64,
}

/// The ids of the memory segments in `dir` (`seg-<hex>` directories whose readable
/// `segment.json` names `memories.rkyv`), sorted; none when `dir` does not exist. A pull into
/// a directory without a `MANIFEST` refuses when one is not its own: committing would leave
/// it to garbage collection.
pub fn memory_segments_on_disk(dir: &Path) -> Result<Vec<String>> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    Ok(memory_segment_dirs(dir)?
        .into_iter()
        .filter(|(_, meta)| meta.is_ok())
        .map(|(id, _)| id)
        .collect())
}

/// Why recovery refuses (it then changes nothing).
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    #[error(
        "the memory segment {path} was embedded with model `{found}` (dim {found_dim}), this \
         build uses `{model}` (dim {dim}); nothing was changed: run the build with that model \
         (--model), or export the memories with a queryd of that model (`queryd export`) and \
         ingest them into a new index (`indexer build --memories`)"
    )]
    OtherModel {
        path: PathBuf,
        found: String,
        found_dim: u32,
        model: String,
        dim: u32,
    },
    #[error(transparent)]
    Format(#[from] FormatError),
}

/// The `seg-<hex>` directories of `dir` whose `segment.json` names `memories.rkyv`, with
/// their metadata (`Err`: an unreadable `segment.json`, kind unknown), by id.
fn memory_segment_dirs(
    dir: &Path,
) -> Result<Vec<(String, std::result::Result<SegmentMeta, String>)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(id) = name.strip_prefix("seg-") else {
            continue;
        };
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) || !entry.path().is_dir() {
            continue;
        }
        let meta_path = entry.path().join(crate::segment::SEGMENT_JSON);
        let meta = match std::fs::read(&meta_path) {
            // Not damage: the recovery stops, nothing is moved aside (see `is_passing`).
            Err(e) if is_passing(&e) => return Err(io_err(&meta_path)(e)),
            Err(e) => Err(e.to_string()),
            Ok(b) => serde_json::from_slice::<SegmentMeta>(&b).map_err(|e| e.to_string()),
        };
        match meta {
            Ok(m)
                if !m
                    .files
                    .iter()
                    .any(|f| f.name == crate::header::Component::Memories.file_name()) => {}
            // Unreadable metadata: could be either kind; a code segment is re-indexed anyway,
            // but a memory one must not be lost, so it is reported (and moved aside).
            Ok(m) => out.push((id.to_string(), Ok(m))),
            Err(e) => out.push((id.to_string(), Err(format!("unreadable segment.json: {e}")))),
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Whether `e`, met reading a memory file, says nothing about its bytes (a permission, I/O
/// or memory error): such a file is not damaged and must not be moved aside (its memories
/// would leave the index), so recovery refuses instead. A missing, truncated or invalid file
/// is damage.
pub fn is_passing(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{InvalidData, NotFound, UnexpectedEof};
    !matches!(e.kind(), NotFound | UnexpectedEof | InvalidData)
}

/// The newest tombstone file of each segment id: id → (generation, file name).
fn newest_tombstones(dir: &Path) -> Result<HashMap<String, (u64, String)>> {
    let mut out: HashMap<String, (u64, String)> = HashMap::new();
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name
            .strip_prefix("tomb-")
            .and_then(|r| r.strip_suffix(".del"))
        else {
            continue;
        };
        let Some((id, g)) = rest.rsplit_once("-g") else {
            continue;
        };
        let Ok(g) = g.parse::<u64>() else { continue };
        if out.get(id).is_none_or(|(best, _)| g > *best) {
            out.insert(id.to_string(), (g, name));
        }
    }
    Ok(out)
}

/// Finds the memory segments of `dir` (see the module doc) for a manifest of `model_id` and
/// `dim`, and writes tombstones for second copies of an id and for copies of memories
/// `deleted` here (id → when, Unix ms: the lost manifest's ledger) at or after their last
/// update (named for a generation above every tombstone file on disk, returned as
/// [`RecoveredMemory::max_generation`]). Refuses, changing nothing, when a memory segment was
/// embedded with another model. The caller holds the directory lock.
pub fn recover_memory_segments(
    dir: &Path,
    model_id: &str,
    dim: u32,
    deleted: &BTreeMap<String, i64>,
) -> std::result::Result<RecoveredMemory, RecoverError> {
    let mut out = RecoveredMemory::default();
    let tombs = newest_tombstones(dir)?;
    out.max_generation = tombs.values().map(|(g, _)| *g).max().unwrap_or(0);
    let found = memory_segment_dirs(dir)?;
    // Refuse before anything else when a memory segment needs another model.
    for (id, meta) in &found {
        if let Ok(m) = meta {
            if m.model_id != model_id || m.dim != dim {
                return Err(RecoverError::OtherModel {
                    path: dir.join(crate::segment::dir_name(id)),
                    found: m.model_id.clone(),
                    found_dim: m.dim,
                    model: model_id.to_string(),
                    dim,
                });
            }
        }
    }
    // (segment, tombstones, its tombstone ref, mtime) of the usable ones.
    let mut usable: Vec<(
        Segment,
        RoaringBitmap,
        Option<TombstoneRef>,
        std::time::SystemTime,
    )> = Vec::new();
    for (id, meta) in found {
        let path = dir.join(crate::segment::dir_name(&id));
        if let Err(e) = meta {
            out.unusable.push((path, e));
            continue;
        }
        let seg = match Segment::open(dir, &id, model_id, dim) {
            Ok(s) => s,
            Err(FormatError::Io { source, path }) if is_passing(&source) => {
                return Err(FormatError::Io { path, source }.into())
            }
            Err(e) => {
                out.unusable.push((path, e.to_string()));
                continue;
            }
        };
        let chunks = seg.meta().chunk_count;
        let (bits, tref) = match tombs.get(&id) {
            Some((_, file)) => {
                let p = dir.join(file);
                let bytes = std::fs::read(&p).map_err(io_err(&p))?;
                let hash = crate::blake3_hex(&bytes);
                // An unreadable tombstone file: its records count as live (a deleted memory
                // may come back; none is lost).
                match tombstones::read(&p, model_id, &hash, chunks) {
                    Ok(bits) => {
                        let count = bits.len();
                        let r = TombstoneRef {
                            file: file.clone(),
                            blake3: hash,
                            count,
                        };
                        (bits, Some(r))
                    }
                    Err(_) => (RoaringBitmap::new(), None),
                }
            }
            None => (RoaringBitmap::new(), None),
        };
        let mtime = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .unwrap_or(std::time::UNIX_EPOCH);
        usable.push((seg, bits, tref, mtime));
    }
    // Oldest first (the order flushes append in).
    usable.sort_by(|a, b| a.3.cmp(&b.3).then_with(|| a.0.id().cmp(b.0.id())));
    let usable: Vec<(Segment, RoaringBitmap, Option<TombstoneRef>)> =
        usable.into_iter().map(|(s, b, t, _)| (s, b, t)).collect();
    let generation = out.max_generation + 1;
    let hidden = one_copy_per_id(dir, model_id, &usable, deleted, generation)?;
    out.entries = hidden.entries;
    out.duplicates = hidden.duplicates;
    out.deleted = hidden.deleted;
    out.live = hidden.live;
    if out.duplicates + out.deleted > 0 {
        out.max_generation = generation;
    }
    Ok(out)
}

/// What [`one_copy_per_id`] kept and hid.
struct OneCopy {
    entries: Vec<SegmentEntry>,
    duplicates: u64,
    deleted: u64,
    live: u64,
}

/// One live copy of each memory id among `usable` (segments oldest first, each with its
/// tombstones and their file): the newest `updated_at`, then the later segment; none when that
/// copy was `deleted` (id → when) at or after its `updated_at`. A segment whose copies are
/// hidden gets a new tombstone file named for `generation`; one with nothing live left is
/// dropped. Returns the entries to keep, the copies hidden (as second copies, as deleted) and
/// the live records.
fn one_copy_per_id(
    dir: &Path,
    model_id: &str,
    usable: &[(Segment, RoaringBitmap, Option<TombstoneRef>)],
    deleted: &BTreeMap<String, i64>,
    generation: u64,
) -> Result<OneCopy> {
    let mut best: HashMap<String, (i64, usize, u32)> = HashMap::new();
    for (si, (seg, bits, _)) in usable.iter().enumerate() {
        let Some(t) = seg.memories() else { continue };
        for (i, r) in t.memories.iter().enumerate() {
            let i = i as u32;
            if bits.contains(i) {
                continue;
            }
            let key = (r.updated_at.to_native(), si, i);
            match best.get(r.id.as_str()) {
                Some(b) if (b.0, b.1) > (key.0, key.1) => {}
                _ => {
                    best.insert(r.id.to_string(), key);
                }
            }
        }
    }
    let mut out = OneCopy {
        entries: Vec::new(),
        duplicates: 0,
        deleted: 0,
        live: 0,
    };
    for (si, (seg, bits, tref)) in usable.iter().enumerate() {
        let Some(t) = seg.memories() else { continue };
        let mut bits = bits.clone();
        let before = bits.len();
        for (i, r) in t.memories.iter().enumerate() {
            let i = i as u32;
            if bits.contains(i) {
                continue;
            }
            let gone = deleted
                .get(r.id.as_str())
                .is_some_and(|&at| at >= r.updated_at.to_native());
            if gone {
                out.deleted += 1;
                bits.insert(i);
            } else if best
                .get(r.id.as_str())
                .is_some_and(|b| (b.1, b.2) != (si, i))
            {
                out.duplicates += 1;
                bits.insert(i);
            }
        }
        let chunks = seg.meta().chunk_count;
        let newly = bits.len() - before;
        if bits.len() >= u64::from(chunks) {
            continue; // nothing live in it
        }
        let tombstones = if newly > 0 {
            let name = tombstones::file_name(seg.id(), generation);
            let bytes = tombstones::write(&dir.join(&name), model_id, &bits)?;
            Some(TombstoneRef {
                file: name,
                blake3: crate::blake3_hex(&bytes),
                count: bits.len(),
            })
        } else {
            tref.clone()
        };
        out.live += u64::from(chunks) - bits.len();
        out.entries.push(SegmentEntry {
            id: seg.id().to_string(),
            chunks,
            tombstones,
        });
    }
    Ok(out)
}

/// The memory segments `entries` (a MANIFEST's, in its order) with one live copy of each
/// memory id and none of memories `deleted` (the MANIFEST's `deleted_memories`) at or after
/// their last update: for an index whose tombstones were partly lost (a damaged tombstone
/// file set aside), where older versions of updated memories, and deleted ones, became live
/// again. Returns the entries, the second copies hidden, the deleted copies hidden, the live
/// records and the generation of the new tombstone files.
/// New tombstone files are named for a generation above every one on disk and above `above`
/// (the MANIFEST's generation); the MANIFEST that names them must be at least that
/// generation, or a later flush could write a tombstone file of the same name. The caller
/// holds the directory lock.
pub fn one_copy_per_memory_id(
    dir: &Path,
    model_id: &str,
    dim: u32,
    entries: &[SegmentEntry],
    deleted: &BTreeMap<String, i64>,
    above: u64,
) -> std::result::Result<(Vec<SegmentEntry>, u64, u64, u64, u64), RecoverError> {
    let generation = newest_tombstones(dir)?
        .values()
        .map(|(g, _)| *g)
        .max()
        .unwrap_or(0)
        .max(above)
        + 1;
    let mut usable = Vec::new();
    for e in entries {
        let seg = Segment::open(dir, &e.id, model_id, dim)?;
        let bits = match &e.tombstones {
            Some(t) => tombstones::read(&dir.join(&t.file), model_id, &t.blake3, e.chunks)?,
            None => RoaringBitmap::new(),
        };
        usable.push((seg, bits, e.tombstones.clone()));
    }
    let kept = one_copy_per_id(dir, model_id, &usable, deleted, generation)?;
    Ok((
        kept.entries,
        kept.duplicates,
        kept.deleted,
        kept.live,
        generation,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryRecord;
    use crate::SegmentBuilder;

    fn rec(i: u8, updated_at: i64) -> MemoryRecord {
        MemoryRecord {
            entity: "uploads".into(),
            ..crate::memory::record_for_tests(i, updated_at)
        }
    }

    fn segment(dir: &Path, recs: Vec<MemoryRecord>) -> String {
        let n = recs.len();
        let vecs: Vec<f32> = (0..n * 4).map(|i| (i % 4 == 0) as u8 as f32).collect();
        let (id, _) = SegmentBuilder::for_memories(recs, vecs)
            .write(dir, "m", 4)
            .unwrap();
        // Distinct mtimes: segment age decides ties.
        std::thread::sleep(std::time::Duration::from_millis(20));
        id
    }

    /// Segments found on disk: tombstones honoured (newest generation), a second live copy of
    /// an id hidden (the newest `updated_at` wins), an unreadable segment reported, another
    /// model refused.
    #[test]
    fn memory_segments_are_recovered_without_duplicates() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        let a = segment(dir, vec![rec(1, 5), rec(2, 5), rec(3, 5)]);
        let b = segment(dir, vec![rec(2, 9), rec(4, 9)]);
        // Record 3 of `a` deleted at generation 4 (an older file at generation 2 says less).
        let mut bits = RoaringBitmap::new();
        tombstones::write(&dir.join(tombstones::file_name(&a, 2)), "m", &bits).unwrap();
        bits.insert(2);
        tombstones::write(&dir.join(tombstones::file_name(&a, 4)), "m", &bits).unwrap();
        // A memory segment whose segment.json is damaged.
        let c = segment(dir, vec![rec(7, 1)]);
        std::fs::write(dir.join(format!("seg-{c}/segment.json")), b"{").unwrap();

        let r = recover_memory_segments(dir, "m", 4, &BTreeMap::new()).unwrap();
        let ids: Vec<&str> = r.entries.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, [a.as_str(), b.as_str()]);
        // Live: a's 1 (2 is superseded by b's newer copy, 3 deleted), b's 2 and 4.
        assert_eq!((r.live, r.duplicates), (3, 1));
        assert_eq!(r.max_generation, 5);
        let ta = r.entries[0].tombstones.as_ref().unwrap();
        assert_eq!(
            (ta.file.as_str(), ta.count),
            (tombstones::file_name(&a, 5).as_str(), 2)
        );
        assert!(r.entries[1].tombstones.is_none());
        assert_eq!(r.unusable.len(), 1);
        assert!(r.unusable[0].0.ends_with(format!("seg-{c}")));

        assert!(matches!(
            recover_memory_segments(dir, "other", 4, &BTreeMap::new()),
            Err(RecoverError::OtherModel { .. })
        ));
    }

    /// Copies of memories the ledger says were deleted at or after their last update are
    /// hidden (a dropped segment not yet garbage collected); a copy updated after its
    /// deletion (written again elsewhere) stays, and the duplicates of a deleted memory go too.
    #[test]
    fn copies_of_deleted_memories_are_not_recovered() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        let a = segment(dir, vec![rec(1, 5), rec(2, 5), rec(3, 5)]);
        let b = segment(dir, vec![rec(1, 6), rec(4, 9)]);
        let deleted: BTreeMap<String, i64> =
            [(rec(1, 0).id, 7), (rec(2, 0).id, 5), (rec(4, 0).id, 8)]
                .into_iter()
                .collect();
        let r = recover_memory_segments(dir, "m", 4, &deleted).unwrap();
        // Left live: a's 3 and b's 4 (updated at 9, after its deletion at 8).
        assert_eq!((r.live, r.deleted, r.duplicates), (2, 3, 0), "{r:?}");
        let ids: Vec<&str> = r.entries.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, [a.as_str(), b.as_str()]);
        let ta = r.entries[0].tombstones.as_ref().unwrap();
        let bits = tombstones::read(&dir.join(&ta.file), "m", &ta.blake3, 3).unwrap();
        assert_eq!(bits.iter().collect::<Vec<_>>(), [0, 1]);
        let tb = r.entries[1].tombstones.as_ref().unwrap();
        let bits = tombstones::read(&dir.join(&tb.file), "m", &tb.blake3, 2).unwrap();
        assert_eq!(bits.iter().collect::<Vec<_>>(), [0]);
        // A segment holding only deleted memories is dropped.
        let c = segment(dir, vec![rec(2, 1)]);
        let r = recover_memory_segments(dir, "m", 4, &deleted).unwrap();
        assert!(!r.entries.iter().any(|e| e.id == c), "{r:?}");
    }

    #[test]
    fn moved_aside_names_are_kept_by_garbage_collection() {
        let d = tempfile::tempdir().unwrap();
        let a = segment(d.path(), vec![rec(1, 1)]);
        let moved = move_aside(&d.path().join(format!("seg-{a}"))).unwrap();
        assert!(moved.to_string_lossy().contains(".bak-"));
        crate::IndexManifest::empty("m", 4)
            .commit(d.path())
            .unwrap();
        assert!(crate::Index::collect_garbage(d.path()).unwrap().is_empty());
        assert!(moved.is_dir());
    }
}
