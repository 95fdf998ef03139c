//! Memory dumps: `indexer build --memories FILE.jsonl` ingests one JSON object per line into a
//! memory segment (see `format::memory`), the same records `queryd export` writes.
//!
//! A line is a memory record: `text` (required), `id` (a lower-case UUID; a new time-ordered one
//! when absent), `category` (default `note`), `scope` (`user|session|project|team|org`, default
//! `project`), `entity`, `tags` (`key` or `key=value`), `source` (`user|agent|inferred`, default
//! `agent`), `evidence`, `code_refs`, `created_at` / `updated_at` (Unix milliseconds, default now),
//! `state` (`active|archived|deleted`, default `active`), `similar` (SIMILAR edges, `[{"id", "score"}]`;
//! computed at ingest when the field is absent, kept as given when present, so an export
//! round-trips exactly). Unknown fields, invalid values and
//! repeated ids are errors that name the line; then nothing is written. A memory whose id the
//! index already holds is replaced (the old copy is tombstoned).

use std::path::Path;
use std::time::Instant;

use format::manifest::{DirLock, IndexManifest, SegmentEntry};
use format::memory::{
    normalize_tag, now_ms, validate_record, CodeRef, MemoryRecord, Similar, SIMILAR_K, SIMILAR_MIN,
};
use format::{Index, SegmentBuilder};
use serde::Deserialize;

use crate::build::Embedder;
use crate::IndexerError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DumpRecord {
    #[serde(default)]
    id: Option<String>,
    text: String,
    #[serde(default)]
    category: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    entity: Option<String>,
    #[serde(default)]
    tags: Option<Vec<String>>,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    evidence: Option<Vec<String>>,
    #[serde(default)]
    code_refs: Option<Vec<CodeRef>>,
    #[serde(default)]
    created_at: Option<i64>,
    #[serde(default)]
    updated_at: Option<i64>,
    #[serde(default)]
    state: Option<String>,
    /// SIMILAR edges as `queryd export` writes them; computed at ingest when absent.
    #[serde(default)]
    similar: Option<Vec<Similar>>,
}

/// What an ingest did.
#[derive(Debug, Default, Clone)]
pub struct IngestReport {
    pub read: usize,
    /// Records that replaced a memory with the same id.
    pub replaced: u64,
    pub segment_id: Option<String>,
    pub generation: u64,
    pub embed_secs: f64,
    /// Computing SIMILAR edges for records without them.
    pub similar_secs: f64,
    pub tokens: usize,
}

/// SIMILAR edges for `recs[i]`, `i` in `need`, as queryd computes them at write: the
/// [`SIMILAR_K`] nearest active memories with cosine ≥ [`SIMILAR_MIN`], among the other records
/// of the dump (exactly: a dot product per pair, in parallel) and the live records of the
/// index's memory segments that the dump does not replace.
fn similar_edges(
    recs: &[MemoryRecord],
    vectors: &[f32],
    dim: usize,
    need: &[usize],
    index: Option<&Index>,
) -> Vec<Vec<Similar>> {
    use rayon::prelude::*;
    let ids: std::collections::HashSet<&str> = recs.iter().map(|r| r.id.as_str()).collect();
    let active: Vec<usize> = (0..recs.len())
        .filter(|&j| recs[j].state == "active")
        .collect();
    // Per existing memory segment: records that cannot be targets (tombstoned, inactive).
    let denies: Vec<roaring::RoaringBitmap> = index
        .map(|ix| {
            ix.memory
                .iter()
                .map(|ls| {
                    let mut d = ls.tombstones.clone();
                    if let Some(t) = ls.segment.memories() {
                        for (i, m) in t.memories.iter().enumerate() {
                            if m.state.as_str() != "active" {
                                d.insert(i as u32);
                            }
                        }
                    }
                    d
                })
                .collect()
        })
        .unwrap_or_default();
    need.par_iter()
        .map(|&i| {
            let q = &vectors[i * dim..(i + 1) * dim];
            let mut c: Vec<(&str, f32)> = Vec::new();
            for &j in &active {
                if j != i {
                    let s = format::vectors::dot(&vectors[j * dim..(j + 1) * dim], q);
                    if s >= SIMILAR_MIN {
                        c.push((recs[j].id.as_str(), s));
                    }
                }
            }
            let mut owned: Vec<(String, f32)> = Vec::new();
            if let Some(ix) = index {
                for (ls, deny) in ix.memory.iter().zip(&denies) {
                    let Some(t) = ls.segment.memories() else {
                        continue;
                    };
                    let hits = ls
                        .segment
                        .search_vectors(
                            q,
                            SIMILAR_K * 2,
                            format::vectors::DEFAULT_NPROBE,
                            None,
                            Some(deny),
                        )
                        .unwrap_or_default();
                    for (h, s) in hits {
                        let id = t.memories[h as usize].id.as_str();
                        if s >= SIMILAR_MIN && !ids.contains(id) {
                            owned.push((id.to_string(), s));
                        }
                    }
                }
            }
            let mut all: Vec<(String, f32)> =
                c.into_iter().map(|(id, s)| (id.to_string(), s)).collect();
            all.extend(owned);
            format::memory::pick_similar(all)
        })
        .collect()
}

/// Parses and validates a dump; errors name the line. Each record comes with whether the line
/// carried its SIMILAR edges (`similar`, as `queryd export` writes it).
pub fn parse_dump(path: &Path, text: &str) -> Result<Vec<(MemoryRecord, bool)>, IndexerError> {
    let err = |line: usize, m: String| IndexerError::Dump {
        path: path.to_path_buf(),
        message: format!("line {line}: {m}"),
    };
    let now = now_ms();
    let mut out = Vec::new();
    let mut ids = std::collections::HashSet::new();
    for (i, l) in text.lines().enumerate() {
        let line = i + 1;
        if l.trim().is_empty() {
            continue;
        }
        let d: DumpRecord = serde_json::from_str(l).map_err(|e| err(line, e.to_string()))?;
        let mut tags = d
            .tags
            .unwrap_or_default()
            .iter()
            .map(|t| normalize_tag(t))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| err(line, e.to_string()))?;
        tags.sort();
        tags.dedup();
        let created = d.created_at.unwrap_or(now);
        let has_similar = d.similar.is_some();
        let r = MemoryRecord {
            id: d
                .id
                .unwrap_or_else(|| uuid::Uuid::now_v7().hyphenated().to_string()),
            text: d.text,
            category: d.category.unwrap_or_else(|| "note".into()),
            scope: d.scope.unwrap_or_else(|| "project".into()),
            entity: d.entity.unwrap_or_default(),
            tags,
            source: d.source.unwrap_or_else(|| "agent".into()),
            evidence: d.evidence.unwrap_or_default(),
            code_refs: d.code_refs.unwrap_or_default(),
            created_at: created,
            updated_at: d.updated_at.unwrap_or(created),
            state: d.state.unwrap_or_else(|| "active".into()),
            similar: d.similar.unwrap_or_default(),
        };
        validate_record(&r).map_err(|e| err(line, e.to_string()))?;
        if !ids.insert(r.id.clone()) {
            return Err(err(line, format!("id {} appears twice", r.id)));
        }
        out.push((r, has_similar));
    }
    Ok(out)
}

/// Where the check of a dump against the memory log stands: what `MANIFEST` says is already
/// in memory segments, and which model the index's vectors are of (a put of another model is
/// never replayed, so it shadows nothing).
#[derive(Debug, Clone, Copy)]
pub struct LogCheck<'a> {
    /// `MANIFEST`'s `memory_lsn` (0 where the index has no MANIFEST: every record replays).
    pub memory_lsn: u64,
    /// The index has no readable MANIFEST (the repair comes before a flush can run).
    pub no_manifest: bool,
    pub model_id: &'a str,
    pub dim: usize,
}

/// Refuses an ingest of `ids` into the index at `dir` while its memory log (`memory.wal`)
/// holds writes to any of them that no memory segment holds yet (sequence numbers past
/// `memory_lsn`). Such a write, older than the ingest, would shadow the dump's copy when a
/// queryd replays the log, and its flush would tombstone that copy: the ingest undone. The
/// records are taken as replay takes them: a batch cut short at the end (a crash mid-append;
/// the next open cuts it) is not there, and a put of another model than the index's (by the
/// log's header or its vector's length) is never replayed. A log this cannot read through (a
/// damaged header or record) is refused too, since the writes it holds cannot be known.
pub fn refuse_unflushed_writes(
    dump: &Path,
    dir: &Path,
    at: LogCheck<'_>,
    ids: &std::collections::HashSet<&str>,
) -> Result<(), IndexerError> {
    use format::walhead::{self, WalHeader};
    use format::walrec::{salvage, WalOp};
    let log = dir.join(format::manifest::MEMORY_WAL_FILE);
    let b = match std::fs::read(&log) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(IndexerError::Io { path: log, source }),
    };
    let refuse = |message: String| IndexerError::Dump {
        path: dump.to_path_buf(),
        message,
    };
    let repair = |why: &str| {
        refuse(format!(
            "the memory log {} is damaged ({why}), so which memories it still writes to is \
             unknown; stop queryd, run `queryd repair-wal --index {}`, then ingest again",
            log.display(),
            dir.display()
        ))
    };
    let (start, logged) = match walhead::parse(&b) {
        WalHeader::Partial => return Ok(()),
        WalHeader::Bad { why } => return Err(repair(&why)),
        WalHeader::Complete { len, model } => (len, model),
    };
    let other_model = logged.is_some_and(|m| m.id != at.model_id || m.dim as usize != at.dim);
    let s = salvage(&b, start);
    if let Some(k) = s.skips.iter().find(|k| k.end < b.len()) {
        return Err(repair(&format!("at byte {}: {}", k.start, k.why)));
    }
    let whole = s.recs.iter().rposition(|r| r.last).map_or(0, |i| i + 1);
    let mut hit: Vec<&str> = s.recs[..whole]
        .iter()
        .filter(|r| r.lsn > at.memory_lsn)
        .filter_map(|r| match &r.op {
            WalOp::Put { record, vector } => {
                (!other_model && vector.len() == at.dim).then_some(record.id.as_str())
            }
            WalOp::Delete { id } => Some(id.as_str()),
        })
        .filter(|id| ids.contains(id))
        .collect();
    hit.sort_unstable();
    hit.dedup();
    if hit.is_empty() {
        return Ok(());
    }
    const SHOWN: usize = 5;
    let mut named = hit[..hit.len().min(SHOWN)].join(", ");
    if hit.len() > SHOWN {
        named.push_str(&format!(" and {} more", hit.len() - SHOWN));
    }
    let flush = if at.no_manifest {
        format!(
            "The index has no MANIFEST: recover it with `indexer build <your checkout> --out {dir} \
             --rebuild` (memories are kept), then flush the log with `queryd flush --index {dir}`",
            dir = dir.display()
        )
    } else {
        format!(
            "Flush the log first with `queryd flush --index {}` (a running queryd holds it: \
             stop it, and it flushes at shutdown)",
            dir.display()
        )
    };
    Err(refuse(format!(
        "{n} of its memories ({named}) have writes in {log} that are not yet in a memory \
         segment; ingested now, the dump's copies would be replaced by those older writes when \
         queryd next replays the log. {flush}, or leave these ids out of the dump",
        n = hit.len(),
        log = log.display(),
    )))
}

/// The check of [`refuse_unflushed_writes`] before anything is written or locked: against the
/// `MANIFEST` as it stands, or, with `rebuild` (`indexer build --rebuild --memories`: the
/// rebuild commits first), as the rebuild will leave it. A flush committing while the log is
/// read can make records that just went into a segment look unflushed: a refusal stands only
/// when `MANIFEST` still says the same after the read (the check under the lock decides).
pub fn precheck_dump(
    dump: &Path,
    out: &Path,
    model_id: &str,
    dim: usize,
    rebuild: bool,
) -> Result<(), IndexerError> {
    let text = std::fs::read_to_string(dump).map_err(|e| IndexerError::Io {
        path: dump.to_path_buf(),
        source: e,
    })?;
    let recs = parse_dump(dump, &text)?;
    let ids: std::collections::HashSet<&str> = recs.iter().map(|r| r.0.id.as_str()).collect();
    precheck_ids(dump, out, model_id, dim, rebuild, &ids)
}

fn precheck_ids(
    dump: &Path,
    out: &Path,
    model_id: &str,
    dim: usize,
    rebuild: bool,
    ids: &std::collections::HashSet<&str>,
) -> Result<(), IndexerError> {
    let lsn_now = || IndexManifest::read(out).map(|m| m.memory_lsn);
    let before = lsn_now();
    let at = match &before {
        Ok(lsn) => LogCheck {
            memory_lsn: *lsn,
            no_manifest: false,
            model_id,
            dim,
        },
        // Without a MANIFEST (or with a damaged one, under --rebuild) one is recovered with
        // `memory_lsn` 0, so every record of the log replays.
        Err(_) if rebuild || !out.join(format::manifest::MANIFEST).exists() => LogCheck {
            memory_lsn: 0,
            no_manifest: true,
            model_id,
            dim,
        },
        Err(_) => return Ok(()), // the open says what is wrong with it
    };
    let was = before.ok();
    match refuse_unflushed_writes(dump, out, at, ids) {
        // A flush moved records meanwhile: the check under the lock decides.
        Err(_) if was.is_some() && lsn_now().ok() != was => Ok(()),
        r => r,
    }
}

/// Ingests the dump at `file` into the index at `out` (created when missing).
pub fn ingest(
    file: &Path,
    out: &Path,
    embedder: &dyn Embedder,
) -> Result<IngestReport, IndexerError> {
    let text = std::fs::read_to_string(file).map_err(|e| IndexerError::Io {
        path: file.to_path_buf(),
        source: e,
    })?;
    let mut parsed = parse_dump(file, &text)?;
    parsed.sort_by(|a, b| a.0.id.cmp(&b.0.id));
    let has_similar: Vec<bool> = parsed.iter().map(|p| p.1).collect();
    let mut recs: Vec<MemoryRecord> = parsed.into_iter().map(|p| p.0).collect();
    let mut report = IngestReport {
        read: recs.len(),
        ..IngestReport::default()
    };
    let dim = embedder.dim();
    // Before the embedding (minutes for a large dump), without the lock; again under it.
    // Without a MANIFEST, one is recovered with `memory_lsn` 0 below (and committed): this
    // check covers that case first, so a refusal changes nothing (unless a write lands
    // between the two checks).
    let ids: std::collections::HashSet<&str> = recs.iter().map(|r| r.id.as_str()).collect();
    precheck_ids(file, out, embedder.model_id(), dim, false, &ids)?;
    drop(ids);
    let t = Instant::now();
    let mut vectors = Vec::with_capacity(recs.len() * dim);
    // One hold for every batch (each call holds one too, which then changes nothing): the
    // pages one batch frees are the next one's.
    let _keep = (!embedder.on_device()).then(crate::alloc::KeepFreedPages::new);
    for batch in recs.chunks(256) {
        let texts: Vec<&str> = batch.iter().map(|r| r.text.as_str()).collect();
        let (v, tokens) = embedder.embed(&texts)?;
        vectors.extend(v);
        report.tokens += tokens;
    }
    report.embed_secs = t.elapsed().as_secs_f64();

    format::fsio::create_dir_all(out).map_err(|e| IndexerError::Io {
        path: out.to_path_buf(),
        source: e,
    })?;
    let _lock = DirLock::acquire(out).map_err(IndexerError::Format)?;
    let (mut m, index) = match Index::open(out) {
        Ok(ix) => (ix.manifest.clone(), Some(ix)),
        // No MANIFEST: memory segments or a memory log left in the directory are adopted.
        Err(format::FormatError::NotAnIndex { .. }) => {
            let mut r = crate::rebuild::RebuildReport::default();
            let m =
                crate::rebuild::recovered_manifest(out, embedder.model_id(), dim as u32, &mut r)?
                    .unwrap_or_else(|| IndexManifest::empty(embedder.model_id(), dim as u32));
            if m.memory_segments.is_empty() {
                (m, None)
            } else {
                // Commit what was found, so the upsert below can tombstone older copies.
                m.commit(out).map_err(IndexerError::Format)?;
                let ix = Index::open(out).map_err(IndexerError::Format)?;
                (ix.manifest.clone(), Some(ix))
            }
        }
        Err(e) => {
            return Err(IndexerError::ExistingIndex {
                path: out.to_path_buf(),
                cause: e,
            })
        }
    };
    if m.model_id != embedder.model_id() || m.dim as usize != dim {
        return Err(IndexerError::ModelChanged {
            path: out.to_path_buf(),
            index_model: m.model_id.clone(),
            model: embedder.model_id().to_string(),
        });
    }
    // Under the directory lock no flush moves `memory_lsn`; a write a running queryd logs
    // after this check is concurrent with the ingest, and ordered after it.
    let ids: std::collections::HashSet<&str> = recs.iter().map(|r| r.id.as_str()).collect();
    let at = LogCheck {
        memory_lsn: m.memory_lsn,
        no_manifest: false,
        model_id: &m.model_id,
        dim,
    };
    refuse_unflushed_writes(file, out, at, &ids)?;
    drop(ids);
    let t = Instant::now();
    let need: Vec<usize> = (0..recs.len()).filter(|&i| !has_similar[i]).collect();
    if !need.is_empty() {
        let edges = similar_edges(&recs, &vectors, dim, &need, index.as_ref());
        for (i, e) in need.into_iter().zip(edges) {
            recs[i].similar = e;
        }
    }
    report.similar_secs = t.elapsed().as_secs_f64();
    let generation = m.generation + 1;
    // Upsert: older copies of these ids are tombstoned.
    if let Some(ix) = &index {
        let (kept, newly) = format::manifest::tombstone_memory_ids(
            out,
            ix,
            &m.memory_segments,
            recs.iter().map(|r| r.id.as_str()),
            generation,
        )
        .map_err(IndexerError::Format)?;
        m.memory_segments = kept;
        report.replaced = newly;
    }
    // Written again: no longer a deletion a pull must keep (`deleted_memories`).
    for r in &recs {
        m.deleted_memories.remove(&r.id);
    }
    if !recs.is_empty() {
        let (id, meta) = SegmentBuilder::for_memories(recs, vectors)
            .write(out, &m.model_id.clone(), dim)
            .map_err(IndexerError::Format)?;
        m.memory_segments.push(SegmentEntry {
            id: id.clone(),
            chunks: meta.chunk_count,
            tombstones: None,
        });
        report.segment_id = Some(id);
    }
    m.generation = generation;
    m.commit(out).map_err(IndexerError::Format)?;
    let _ = Index::collect_garbage(out);
    report.generation = generation;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dump_lines_are_validated_with_line_numbers() {
        let p = Path::new("d.jsonl");
        let ok = parse_dump(
            p,
            "{\"text\": \"a\", \"tags\": [\"b\", \"a=1\"]}\n\n{\"text\": \"b\", \"id\": \"0190f3c4-8f7a-7b2e-9c1d-2a3b4c5d6e7f\"}\n",
        )
        .unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[0].0.tags, ["a=1", "b"]);
        assert_eq!(ok[0].0.scope, "project");
        assert!(!ok[0].1);
        for (dump, want) in [
            ("{\"text\": \"a\"}\n{\"txt\": \"b\"}", "line 2"),
            ("{\"text\": \"\"}", "empty"),
            ("{\"text\": \"a\", \"scope\": \"x\"}", "unknown scope"),
            ("{\"text\": \"a\", \"id\": \"0190f3c4-8f7a-7b2e-9c1d-2a3b4c5d6e7f\"}\n{\"text\": \"b\", \"id\": \"0190f3c4-8f7a-7b2e-9c1d-2a3b4c5d6e7f\"}", "twice"),
            ("not json", "line 1"),
        ] {
            let e = parse_dump(p, dump).unwrap_err().to_string();
            assert!(e.contains(want), "{dump}: {e}");
        }
    }

    fn logged(ops: &[(u64, &str, bool, bool)]) -> Vec<u8> {
        use format::walrec::{encode, WalOp};
        let mut b = format::walhead::encode(&format::walhead::LogModel {
            id: "m".into(),
            dim: 2,
        });
        for &(lsn, id, put, last) in ops {
            let op = if put {
                let mut r = parse_dump(Path::new("d"), "{\"text\": \"x\"}")
                    .unwrap()
                    .remove(0)
                    .0;
                r.id = id.into();
                WalOp::Put {
                    record: Box::new(r),
                    vector: vec![0.5, 0.5],
                }
            } else {
                WalOp::Delete { id: id.into() }
            };
            b.extend(encode(lsn, &op, last));
        }
        b
    }

    /// Writes to the dump's ids that the log holds past `memory_lsn` refuse the ingest and
    /// are named; flushed ones, other ids and a batch cut short at the end do not; a log that
    /// cannot be read through refuses it with the repair to run.
    #[test]
    fn unflushed_writes_to_the_dumps_ids_refuse_the_ingest() {
        let d = tempfile::tempdir().unwrap();
        let dump = Path::new("dump.jsonl");
        let ids: std::collections::HashSet<&str> = ["a", "b", "c"].into_iter().collect();
        let at = |memory_lsn: u64| LogCheck {
            memory_lsn,
            no_manifest: false,
            model_id: "m",
            dim: 2,
        };
        let check = |log: &[u8], lsn: u64| {
            std::fs::write(d.path().join("memory.wal"), log).unwrap();
            refuse_unflushed_writes(dump, d.path(), at(lsn), &ids).map_err(|e| e.to_string())
        };
        refuse_unflushed_writes(dump, d.path(), at(0), &ids).unwrap(); // no log at all
        let log = logged(&[
            (4, "a", true, true),
            (5, "b", false, false),
            (6, "x", true, true),
        ]);
        check(&log, 6).unwrap(); // all flushed
        let e = check(&log, 4).unwrap_err();
        assert!(
            e.contains("1 of its memories (b)") && e.contains("queryd flush --index"),
            "{e}"
        );
        let e = check(&log, 0).unwrap_err();
        assert!(e.contains("2 of its memories (a, b)"), "{e}");
        // Puts of another model are never replayed; its deletes are.
        std::fs::write(d.path().join("memory.wal"), &log).unwrap();
        for other in [
            LogCheck {
                model_id: "other",
                ..at(0)
            },
            LogCheck { dim: 3, ..at(0) },
        ] {
            let e = refuse_unflushed_writes(dump, d.path(), other, &ids)
                .unwrap_err()
                .to_string();
            assert!(e.contains("1 of its memories (b)"), "{e}");
        }
        // Without a MANIFEST the repair comes before the flush.
        let e = refuse_unflushed_writes(
            dump,
            d.path(),
            LogCheck {
                no_manifest: true,
                ..at(0)
            },
            &ids,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("--rebuild") && e.contains("queryd flush"), "{e}");
        check(&logged(&[(7, "x", true, true), (8, "y", false, true)]), 0).unwrap();
        // A batch without its end at the end of the log: not a write.
        let mut torn = logged(&[(7, "x", true, true), (8, "a", true, false)]);
        check(&torn, 0).unwrap();
        torn.truncate(torn.len() - 3);
        check(&torn, 0).unwrap();
        // A damaged record with valid ones after it.
        let mut bad = logged(&[
            (7, "x", true, true),
            (8, "y", true, true),
            (9, "z", false, true),
        ]);
        let h = format::walhead::encode(&format::walhead::LogModel {
            id: "m".into(),
            dim: 2,
        })
        .len();
        bad[h + 20] ^= 1;
        let e = check(&bad, 0).unwrap_err();
        assert!(e.contains("damaged") && e.contains("repair-wal"), "{e}");
        let e = check(b"NOTALOG!rest", 0).unwrap_err();
        assert!(e.contains("damaged") && e.contains("repair-wal"), "{e}");
        check(b"CIXW", 0).unwrap(); // a header cut short: no record
    }
}
