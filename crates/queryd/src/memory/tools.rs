//! The memory tools on [`Engine`]: `add_memories`, `get_memory`, `list_memories`,
//! `update_memory`, `delete_memories`, `search_memory`; recovery at start, the write path and
//! the flush.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use format::manifest::{DirLock, IndexManifest, SegmentEntry};
use format::memory::{normalize_tag, validate_record, CodeRef, MemoryRecord};
use format::{Index, SegmentBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::coderefs::{self, RefCtx};
use super::graph::similar_for;
use super::graph_tools::{relations, RelationDetail};
use super::search::{Boosts, MemFilter, MemHit, MemKey};
use super::wal::{Wal, WalOp};
#[cfg(test)]
use super::Entry;
use super::{find_in_segments, new_id, now_ms, shadow, Delta};
use crate::engine::{Engine, Snapshot};
use crate::search::{Mode, SearchOptions};
use crate::tools::{check_text, check_weights, ms, Debug, ToolError, ToolResult, MAX_LIMIT};
use format::vectors::DEFAULT_NPROBE;

/// A result's score is multiplied by `CONFIDENCE_FLOOR + (1 − CONFIDENCE_FLOOR) · confidence`.
pub const CONFIDENCE_FLOOR: f32 = 0.7;

/// A flush that would leave more memory segments than this merges them all into one.
pub const MERGE_AT: usize = 8;

/// Most memories in one `add_memories` or `delete_memories` call.
pub const MAX_BATCH: usize = 256;

/// Opens the log of `dir`, replays what `MANIFEST`'s `memory_lsn` does not cover into a delta
/// on top of `snap`, and returns the log (or why writes are disabled) with the new snapshot.
pub fn recover(
    dir: &Path,
    index: Index,
    mtime: Option<std::time::SystemTime>,
) -> (Result<Wal, String>, Snapshot) {
    let (mut wal, rec) = match Wal::open(dir, 1) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("queryd: memory writes are disabled: {e}");
            return (Err(e.to_string()), Snapshot::from_index(index, mtime));
        }
    };
    // The log is ours now. A previous server may have flushed (and truncated its log) after
    // `index` was opened: start from the MANIFEST as it is now.
    let (index, mtime) = match IndexManifest::read(dir) {
        Ok(m) if m.generation != index.manifest.generation => {
            match Index::open_reusing(dir, Some(&index)) {
                Ok(ix) => (ix, crate::engine::manifest_mtime(dir)),
                Err(e) => {
                    eprintln!("queryd: memory writes are disabled: reopening the index: {e}");
                    return (Err(e.to_string()), Snapshot::from_index(index, mtime));
                }
            }
        }
        _ => (index, mtime),
    };
    let done = index.manifest.memory_lsn;
    wal.ensure_next_lsn(done + 1);
    let dim = index.manifest.dim as usize;
    if rec.cut_bytes > 0 {
        eprintln!(
            "queryd: memory log {}: cut {} bytes at the end ({}); the records before it were replayed",
            dir.join(super::wal::WAL_FILE).display(),
            rec.cut_bytes,
            rec.cut_reason.as_deref().unwrap_or("?")
        );
    }
    let mut delta = Delta {
        last_lsn: done,
        ..Delta::default()
    };
    let mut n = 0;
    for (lsn, op) in &rec.ops {
        if *lsn <= done {
            continue;
        }
        if let WalOp::Put { record, vector } = op {
            if vector.len() != dim {
                eprintln!(
                    "queryd: memory log record {lsn} (memory {}) has a {}-d vector, the index is {dim}-d (a different model?); not replayed: re-add it",
                    record.id,
                    vector.len()
                );
                continue;
            }
        }
        delta.apply(*lsn, op, |id| find_in_segments(&index, id).is_some());
        n += 1;
    }
    if n > 0 {
        eprintln!("queryd: replayed {n} memory writes from the log");
    }
    (Ok(wal), Snapshot::with_delta(Arc::new(index), mtime, delta))
}

/// Result of a flush.
#[derive(Debug, Clone, Serialize, JsonSchema)]
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

impl Engine {
    /// Runs `prepare` on the current snapshot under the writer lock; the operations it returns
    /// are logged (fsynced), applied and published before this returns.
    pub(crate) fn write_with<T>(
        &self,
        prepare: impl FnOnce(&Snapshot) -> ToolResult<(Vec<WalOp>, T)>,
    ) -> ToolResult<T> {
        let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let flush_at = w.flush_at;
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
        let mut delta = cur.delta.clone();
        let mut mem = None;
        for (lsn, op) in lsns.into_iter().zip(&ops) {
            if let Some(id) = delta.apply(lsn, op, |id| find_in_segments(&cur.index, id).is_some())
            {
                let m = mem.get_or_insert_with(|| (*cur.mem).clone());
                shadow(&cur.index, m, &id);
            }
        }
        // Dead slots (replaced versions) count too, so a stream of updates also flushes.
        let size = delta.slots.len();
        self.store_snapshot(Snapshot {
            index: Arc::clone(&cur.index),
            loaded_at: cur.loaded_at,
            manifest_mtime: cur.manifest_mtime,
            delta,
            mem: mem.map(Arc::new).unwrap_or_else(|| Arc::clone(&cur.mem)),
            graph: std::sync::OnceLock::new(),
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
    /// `MANIFEST`, swaps the snapshot and truncates the log. `Ok(None)` when there was nothing
    /// to flush.
    pub fn flush_memories(&self) -> Result<Option<FlushReport>, String> {
        let t0 = Instant::now();
        let dir = self.dir().to_path_buf();
        // The directory lock first: an indexer build may hold it for minutes, and writes must
        // not wait for that behind the writer lock.
        let _lock = DirLock::acquire(&dir).map_err(|e| e.to_string())?;
        let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let cur = self.snapshot();
        let mut m = IndexManifest::read(&dir).map_err(|e| e.to_string())?;
        if cur.delta.last_lsn <= m.memory_lsn {
            return Ok(None); // nothing logged since the last flush
        }
        if w.wal.is_err() {
            return Err("memory writes are disabled; nothing to flush".into());
        }
        let base: Arc<Index> = if m.memory_segments == cur.index.manifest.memory_segments {
            Arc::clone(&cur.index)
        } else {
            Arc::new(Index::open_reusing(&dir, Some(&cur.index)).map_err(|e| e.to_string())?)
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
        let shadowed = || superseded.iter().copied();
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
                &dir,
                &base,
                &m.memory_segments,
                shadowed(),
                generation,
            )
            .map_err(|e| e.to_string())?;
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
            let (id, meta) = SegmentBuilder::for_memories(recs, vecs)
                .write(&dir, &model, dim)
                .map_err(|e| e.to_string())?;
            m.memory_segments.push(SegmentEntry {
                id: id.clone(),
                chunks: meta.chunk_count,
                tombstones: None,
            });
            segment = Some(id);
        }
        m.memory_lsn = cur.delta.last_lsn;
        m.generation = generation;
        // From the commit on, a failure leaves disk ahead of memory: the log's records are in
        // the new segment. Serving on would flush them twice, so memory writes stop until a
        // restart, which replays only what `memory_lsn` does not cover.
        let poison = |w: &mut crate::engine::Writer, e: String| {
            let msg = format!(
                "a memory flush was committed but could not be installed ({e}); restart queryd"
            );
            eprintln!("queryd: {msg}");
            w.wal = Err(msg.clone());
            msg
        };
        if let Err(e) = m.commit(&dir) {
            return Err(poison(&mut w, e.to_string()));
        }
        if let Err(e) = Index::collect_garbage(&dir) {
            eprintln!("queryd: garbage collection after a memory flush: {e}");
        }
        let index = match Index::open_reusing(&dir, Some(&base)) {
            Ok(ix) => ix,
            Err(e) => return Err(poison(&mut w, e.to_string())),
        };
        let mtime = crate::engine::manifest_mtime(&dir);
        self.store_snapshot(Snapshot::with_delta(
            Arc::new(index),
            mtime,
            Delta {
                last_lsn: cur.delta.last_lsn,
                ..Delta::default()
            },
        ));
        self.mark_seen(mtime, generation);
        // Committed: the log's records are in the segment (and `memory_lsn` says so, should
        // this truncation not happen).
        if let Ok(wal) = w.wal.as_mut() {
            wal.truncate().map_err(|e| e.to_string())?;
        }
        Ok(Some(FlushReport {
            segment,
            memories: n,
            merged,
            tombstoned,
            generation,
            ms: ms(t0.elapsed()),
        }))
    }
}

/// A code reference as a tool takes it: a `path` with lines, a `uri`, or a `symbol_id` /
/// `symbol` resolved through the code index. Missing parts are completed (see
/// [`CodeRefInput::complete`]).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CodeRefInput {
    /// Repository-relative path with `/` separators.
    #[serde(default)]
    pub path: Option<String>,
    /// First line, 1-based.
    #[serde(default)]
    pub start_line: Option<u32>,
    /// Last line, inclusive.
    #[serde(default)]
    pub end_line: Option<u32>,
    /// `file:<path>#L<start>-L<end>` instead of path and lines.
    #[serde(default)]
    pub uri: Option<String>,
    /// Repository name (needed only when several indexed roots hold the path).
    #[serde(default)]
    pub repo: Option<String>,
    /// The index's symbol id of the referenced code.
    #[serde(default)]
    pub symbol_id: Option<String>,
    /// A symbol name or qualified name (`Type::method`), resolved through the code index.
    #[serde(default)]
    pub symbol: Option<String>,
    /// Default: `HEAD` of the git work tree holding the file.
    #[serde(default)]
    pub git_commit: Option<String>,
    /// `sha256:<hex>` of the referenced lines; default: computed from the file.
    #[serde(default)]
    pub code_hash: Option<String>,
}

impl CodeRefInput {
    /// A complete reference: location from `uri`, path + lines or the symbol; path confined
    /// to the indexed roots; file and lines must exist; hash and git commit computed when not
    /// given. With no roots recorded in the index, the reference is kept as given (it cannot
    /// be verified).
    pub fn complete(self, ctx: &RefCtx<'_>, now: i64) -> Result<CodeRef, String> {
        let mut path = self.path.filter(|p| !p.trim().is_empty());
        let (mut start, mut end) = (self.start_line, self.end_line);
        if let Some(u) = &self.uri {
            let (p, a, b) = coderefs::parse_uri(u)?;
            if path.as_ref().is_some_and(|x| x.trim() != p)
                || start.is_some_and(|x| x != a)
                || end.is_some_and(|x| x != b)
            {
                return Err(format!("`uri` {u} disagrees with path/start_line/end_line"));
            }
            path = Some(p);
            start = Some(a);
            end = Some(b);
        }
        let mut repo = self.repo.unwrap_or_default();
        let mut symbol_id = self.symbol_id.unwrap_or_default();
        let symbol = self.symbol.filter(|s| !s.trim().is_empty());
        if path.is_none() {
            let Some(sym) = (!symbol_id.is_empty())
                .then(|| symbol_id.clone())
                .or(symbol)
            else {
                return Err(
                    "a code reference needs a `path` with lines, a `uri` or a `symbol_id` / `symbol`"
                        .into(),
                );
            };
            let found = ctx.snap.resolve(&sym);
            let node = match found.as_slice() {
                [n] => *n,
                [] => {
                    let close = ctx.snap.suggest(&sym, 5);
                    return Err(format!(
                        "no indexed symbol `{sym}`{}",
                        if close.is_empty() {
                            String::new()
                        } else {
                            format!("; close names: {}", close.join(", "))
                        }
                    ));
                }
                many => {
                    return Err(format!(
                        "`{sym}` names {} symbols; pass one symbol_id: {}",
                        many.len(),
                        many.iter()
                            .take(5)
                            .map(|&n| ctx.snap.chunk(n).symbol_id.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                }
            };
            let c = ctx.snap.chunk(node);
            let f = ctx.snap.file(node);
            path = Some(f.path.to_string());
            if repo.is_empty() {
                repo = f.repo.to_string();
            }
            symbol_id = c.symbol_id.to_string();
            start = start.or(Some(c.start_line.to_native()));
            end = end.or(Some(c.end_line.to_native()));
        }
        let path = coderefs::clean_path(path.as_deref().unwrap_or_default())?;
        let (Some(start), Some(end)) = (start, end.or(start)) else {
            return Err(format!(
                "code reference `{path}` needs `start_line` and `end_line` (or a uri ending in #L<start>-L<end>)"
            ));
        };
        if start == 0 || end < start {
            return Err(format!(
                "code reference lines {start}-{end} are invalid: lines are 1-based and end ≥ start"
            ));
        }
        let mut r = CodeRef {
            repo,
            path,
            start_line: start,
            end_line: end,
            symbol_id,
            git_commit: self.git_commit.unwrap_or_default(),
            code_hash: self.code_hash.unwrap_or_default(),
            created_at: now,
            last_verified_at: None,
            stale_since: None,
            confidence: None,
            reason: String::new(),
        };
        let Some((root, full)) = coderefs::resolve_path(ctx.roots, &r.repo, &r.path)? else {
            r.reason = "unverified: the index records no source roots".into();
            return Ok(r);
        };
        r.repo = root.repo.clone();
        let view = ctx.cache.get(&full).ok_or_else(|| {
            format!(
                "code reference `{}`: no such file under the root {} of `{}`",
                r.path, root.path, root.repo
            )
        })?;
        let current = coderefs::block_hash(&view.lines, start, end).ok_or_else(|| {
            format!(
                "code reference `{}` lines {start}-{end}: the file has {} lines",
                r.path,
                view.lines.len()
            )
        })?;
        if r.code_hash.is_empty() {
            r.code_hash = current.clone();
        } else if !r.code_hash.starts_with(coderefs::HASH_PREFIX) {
            return Err(format!(
                "code_hash `{}` must be `sha256:` followed by 64 hex digits",
                r.code_hash
            ));
        }
        if r.code_hash == current {
            r.last_verified_at = Some(now);
        }
        if r.git_commit.is_empty() {
            r.git_commit = coderefs::git_head(&full).unwrap_or_default();
        }
        if r.symbol_id.is_empty() {
            r.symbol_id = ctx
                .snap
                .innermost_symbol(&r.path, start, end)
                .unwrap_or_default();
        }
        Ok(r)
    }
}

/// One memory to add.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryInput {
    /// What to remember: one fact, decision or lesson (at most 16 KiB).
    pub text: String,
    /// Free-form kind, e.g. `decision`, `bug`, `convention`, `preference` (default `note`).
    #[serde(default)]
    pub category: Option<String>,
    /// `user`, `session`, `project` (default), `team` or `org`.
    #[serde(default)]
    pub scope: Option<String>,
    /// What the memory is about (a component, service, person…).
    #[serde(default)]
    pub entity: Option<String>,
    /// `key` or `key=value`.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// `user`, `agent` (default) or `inferred`.
    #[serde(default)]
    pub source: Option<String>,
    /// References backing the memory (ADRs, PRs, URLs).
    #[serde(default)]
    pub evidence: Option<Vec<String>>,
    /// Code the memory is about.
    #[serde(default)]
    pub code_refs: Option<Vec<CodeRefInput>>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddMemoriesArgs {
    /// One or more memories (at most 256).
    pub memories: Vec<MemoryInput>,
    /// Attach the suggested code links (identifiers in the text found in the code index) as
    /// code references, with confidence and reason `inferred_from_code_index`. Without it
    /// they are only returned as `suggested_links`.
    #[serde(default)]
    pub auto_link: bool,
    #[serde(default)]
    pub debug: bool,
}

/// A code link suggested for a new memory.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SuggestedLink {
    /// Index of the memory in the call.
    pub memory: usize,
    /// The identifier of the text that matched.
    pub matched: String,
    pub confidence: f32,
    pub reason: String,
    pub code_ref: CodeRefOut,
    /// Whether it was attached (`auto_link: true`).
    pub attached: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AddMemoriesAnswer {
    /// Ids of the new memories, in input order.
    pub ids: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub suggested_links: Vec<SuggestedLink>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

/// A memory as tools return it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct MemoryOut {
    pub id: String,
    pub text: String,
    pub category: String,
    pub scope: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub entity: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    pub source: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub code_refs: Vec<CodeRefOut>,
    /// True when a code reference is stale (its code changed or was deleted).
    pub is_stale: bool,
    /// 0-1: verification recency, evidence, code freshness and source (see the README).
    pub confidence: f32,
    pub state: String,
    /// RFC 3339, UTC.
    pub created_at: String,
    pub updated_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vector_rank: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lexical_rank: Option<usize>,
    /// Graph context, as much as `relation_detail` asks for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relations: Option<super::graph_tools::RelationsOut>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CodeRefOut {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub repo: String,
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
    /// `file:<path>#L<start>-L<end>`.
    pub code_link: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub symbol_id: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub git_commit: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub code_hash: String,
    /// `fresh`, `relocated` (the same code moved: lines above are where it is now), `stale`
    /// or `unverified`, as checked against the current file when this answer was made.
    pub status: String,
    pub is_stale: bool,
    /// Why it is stale (`deleted`, `changed: …`) or unverified, or where it moved from.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale_since: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_verified_at: Option<String>,
}

/// Days since 1970-01-01 → (year, month, day) (Howard Hinnant's civil-from-days).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// (year, month, day) → days since 1970-01-01.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Unix milliseconds → RFC 3339 (`2026-11-22T19:38:24.123Z`).
pub fn rfc3339(ms: i64) -> String {
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, mo, d) = civil(days);
    let s = rem / 1000;
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        s / 3600,
        s / 60 % 60,
        s % 60,
        rem % 1000
    )
}

/// Parses `YYYY-MM-DD` or `YYYY-MM-DDTHH:MM[:SS[.fff]][Z]` (UTC) into Unix milliseconds.
pub fn parse_time(what: &str, s: &str) -> ToolResult<i64> {
    let bad = || {
        ToolError::InvalidInput(format!(
            "`{what}` = `{s}` is not a date; use YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ (UTC)"
        ))
    };
    let s2 = s.trim().trim_end_matches('Z');
    let (date, time) = s2.split_once(['T', ' ']).unwrap_or((s2, ""));
    let p: Vec<&str> = date.split('-').collect();
    if p.len() != 3 || p[0].len() != 4 {
        return Err(bad());
    }
    let y: i64 = p[0].parse().map_err(|_| bad())?;
    let m: u32 = p[1].parse().map_err(|_| bad())?;
    let d: u32 = p[2].parse().map_err(|_| bad())?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return Err(bad());
    }
    let mut secs = 0f64;
    if !time.is_empty() {
        let t: Vec<&str> = time.split(':').collect();
        if t.len() < 2 || t.len() > 3 {
            return Err(bad());
        }
        let h: f64 = t[0].parse().map_err(|_| bad())?;
        let mi: f64 = t[1].parse().map_err(|_| bad())?;
        let se: f64 = t.get(2).map_or(Ok(0.0), |x| x.parse()).map_err(|_| bad())?;
        if !(0.0..24.0).contains(&h) || !(0.0..60.0).contains(&mi) || !(0.0..61.0).contains(&se) {
            return Err(bad());
        }
        secs = h * 3600.0 + mi * 60.0 + se;
    }
    Ok(days_from_civil(y, m, d) * 86_400_000 + (secs * 1000.0).round() as i64)
}

fn code_ref_out(r: &CodeRef) -> CodeRefOut {
    CodeRefOut {
        repo: r.repo.clone(),
        path: r.path.clone(),
        start_line: r.start_line,
        end_line: r.end_line,
        code_link: coderefs::uri(&r.path, r.start_line, r.end_line),
        symbol_id: r.symbol_id.clone(),
        git_commit: r.git_commit.clone(),
        code_hash: r.code_hash.clone(),
        status: "unverified".into(),
        is_stale: r.stale_since.is_some(),
        reason: r.reason.clone(),
        stale_since: r.stale_since.map(rfc3339),
        last_verified_at: r.last_verified_at.map(rfc3339),
    }
}

pub(crate) fn out(m: &MemoryRecord) -> MemoryOut {
    MemoryOut {
        id: m.id.clone(),
        text: m.text.clone(),
        category: m.category.clone(),
        scope: m.scope.clone(),
        entity: m.entity.clone(),
        tags: m.tags.clone(),
        source: m.source.clone(),
        evidence: m.evidence.clone(),
        code_refs: m.code_refs.iter().map(code_ref_out).collect(),
        is_stale: m.code_refs.iter().any(|r| r.stale_since.is_some()),
        confidence: 0.0,
        state: m.state.clone(),
        created_at: rfc3339(m.created_at),
        updated_at: rfc3339(m.updated_at),
        score: None,
        vector_rank: None,
        lexical_rank: None,
        relations: None,
    }
}

/// Canonical, sorted, unique tags.
pub fn canonical_tags(tags: &[String]) -> ToolResult<Vec<String>> {
    let mut out = tags
        .iter()
        .map(|t| normalize_tag(t).map_err(ToolError::InvalidInput))
        .collect::<ToolResult<Vec<_>>>()?;
    out.sort();
    out.dedup();
    Ok(out)
}

/// Completes a tool's code references (see [`CodeRefInput::complete`]).
fn complete_refs(
    refs: Option<Vec<CodeRefInput>>,
    ctx: &RefCtx<'_>,
    now: i64,
) -> ToolResult<Vec<CodeRef>> {
    refs.unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            r.complete(ctx, now)
                .map_err(|e| ToolError::InvalidInput(format!("code_refs[{i}]: {e}")))
        })
        .collect()
}

fn record_from(
    input: MemoryInput,
    id: String,
    now: i64,
    code_refs: Vec<CodeRef>,
) -> ToolResult<MemoryRecord> {
    let r = MemoryRecord {
        id,
        text: input.text,
        category: input
            .category
            .map(|c| c.trim().to_string())
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| "note".into()),
        scope: input.scope.unwrap_or_else(|| "project".into()),
        entity: input
            .entity
            .map(|e| e.trim().to_string())
            .unwrap_or_default(),
        tags: canonical_tags(&input.tags.unwrap_or_default())?,
        source: input.source.unwrap_or_else(|| "agent".into()),
        evidence: input.evidence.unwrap_or_default(),
        code_refs,
        created_at: now,
        updated_at: now,
        state: "active".into(),
        similar: vec![],
    };
    validate_record(&r).map_err(ToolError::InvalidInput)?;
    Ok(r)
}

/// Where the current version of memory `id` is: the delta, else the segments.
pub(crate) fn key_of(snap: &Snapshot, id: &str) -> Option<MemKey> {
    if let Some(e) = snap.delta.entries.get(id) {
        return Some(MemKey::Delta(Arc::clone(e)));
    }
    if snap.delta.shadowed.contains(id) {
        return None;
    }
    find_in_segments(&snap.index, id).map(|(si, c)| MemKey::Segment(si, c))
}

/// The record at `key` (a key of this snapshot).
pub(crate) fn record_of(snap: &Snapshot, key: &MemKey) -> MemoryRecord {
    match key {
        MemKey::Delta(e) => e.record.clone(),
        MemKey::Segment(si, c) => snap.index.memory[*si]
            .segment
            .memories()
            .expect("a memory key names a memory segment")
            .memories[*c as usize]
            .to_record(),
    }
}

/// The current version of memory `id`, with its vector: from the delta, else the segments.
fn lookup(snap: &Snapshot, id: &str) -> Option<(MemoryRecord, Vec<f32>)> {
    if let Some(e) = snap.delta.entries.get(id) {
        return Some((e.record.clone(), e.vector.clone()));
    }
    if snap.delta.shadowed.contains(id) {
        return None; // deleted since the last flush
    }
    let (si, c) = find_in_segments(&snap.index, id)?;
    let seg = &snap.index.memory[si].segment;
    let m = seg.memories()?.memories.get(c as usize)?;
    let rec: MemoryRecord = m.to_record();
    Some((rec, seg.vector(c)?.to_vec()))
}

pub(crate) fn not_found(id: &str) -> ToolError {
    ToolError::NotFound {
        message: format!("no memory with id `{id}` (it may have been deleted)"),
        suggestions: vec!["list_memories".into(), "search_memory".into()],
    }
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetMemoryArgs {
    pub id: String,
    /// Graph context: `none`, `minimal` (default: SIMILAR ids), `standard` (+ scores,
    /// mentioned entities, 3 related memories) or `full` (+ what they share, co-mentioned
    /// entities).
    #[serde(default)]
    pub relation_detail: Option<String>,
    #[serde(default)]
    pub debug: bool,
}

/// Filters shared by `list_memories` and `search_memory`.
#[derive(Debug, Clone, Default)]
pub struct MemoryFilterArgs {
    pub category: Option<String>,
    pub scope: Option<String>,
    pub entity: Option<String>,
    pub source: Option<String>,
    pub tags: Option<Vec<String>>,
    pub tags_mode: Option<String>,
    pub created_after: Option<String>,
    pub created_before: Option<String>,
    pub state: Option<String>,
}

/// Declares an argument struct with the memory filter fields inline (serde's `flatten` cannot
/// be combined with `deny_unknown_fields`, which unknown-argument errors need).
macro_rules! with_memory_filters {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident : $t:ty,)* }) => {
        $(#[$m])*
        pub struct $name {
            $($(#[$fm])* pub $f: $t,)*
            /// Only this category (exact).
            #[serde(default)]
            pub category: Option<String>,
            /// Only this scope: user, session, project, team or org.
            #[serde(default)]
            pub scope: Option<String>,
            /// Only memories about this entity (case-insensitive).
            #[serde(default)]
            pub entity: Option<String>,
            /// Only this source: user, agent or inferred.
            #[serde(default)]
            pub source: Option<String>,
            /// Only memories with these tags: `key` (any value) or `key=value`.
            #[serde(default)]
            pub tags: Option<Vec<String>>,
            /// `all` (default) or `any` of `tags`.
            #[serde(default)]
            pub tags_mode: Option<String>,
            /// Created at or after this time: YYYY-MM-DD or RFC 3339, UTC.
            #[serde(default)]
            pub created_after: Option<String>,
            /// Created before this time.
            #[serde(default)]
            pub created_before: Option<String>,
            /// `active` (default), `archived`, `deleted` or `all`.
            #[serde(default)]
            pub state: Option<String>,
        }

        impl $name {
            pub(crate) fn filter_args(&self) -> MemoryFilterArgs {
                MemoryFilterArgs {
                    category: self.category.clone(),
                    scope: self.scope.clone(),
                    entity: self.entity.clone(),
                    source: self.source.clone(),
                    tags: self.tags.clone(),
                    tags_mode: self.tags_mode.clone(),
                    created_after: self.created_after.clone(),
                    created_before: self.created_before.clone(),
                    state: self.state.clone(),
                }
            }
        }
    };
}

pub(crate) use with_memory_filters;

impl MemoryFilterArgs {
    pub(crate) fn filter(&self) -> ToolResult<MemFilter> {
        let one = |what: &str,
                   v: &Option<String>,
                   allowed: &[&str]|
         -> ToolResult<Option<String>> {
            match v.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
                None => Ok(None),
                Some(s) if allowed.is_empty() || allowed.contains(&s) => Ok(Some(s.to_string())),
                Some(s) => Err(ToolError::InvalidInput(format!(
                    "unknown {what} `{s}`; expected one of: {}",
                    allowed.join(", ")
                ))),
            }
        };
        let states = match self.state.as_deref().map(str::trim) {
            None | Some("") | Some("active") => vec!["active".to_string()],
            Some("all") => format::memory::STATES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            Some(s) if format::memory::STATES.contains(&s) => vec![s.to_string()],
            Some(s) => {
                return Err(ToolError::InvalidInput(format!(
                    "unknown state `{s}`; expected active, archived, deleted or all"
                )))
            }
        };
        Ok(MemFilter {
            category: one("category", &self.category, &[])?,
            scope: one("scope", &self.scope, &format::memory::SCOPES)?,
            entity: one("entity", &self.entity, &[])?,
            source: one("source", &self.source, &format::memory::SOURCES)?,
            tags: canonical_tags(self.tags.as_deref().unwrap_or_default())?,
            tags_all: match self.tags_mode.as_deref() {
                None | Some("all") => true,
                Some("any") => false,
                Some(m) => {
                    return Err(ToolError::InvalidInput(format!(
                        "unknown tags_mode `{m}`; expected all or any"
                    )))
                }
            },
            created_after: self
                .created_after
                .as_deref()
                .map(|s| parse_time("created_after", s))
                .transpose()?,
            created_before: self
                .created_before
                .as_deref()
                .map(|s| parse_time("created_before", s))
                .transpose()?,
            states,
        })
    }
}

with_memory_filters! {
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListMemoriesArgs {
    /// Page size (default 20, at most 100).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Memories to skip (from `next_offset` of the previous page).
    #[serde(default)]
    pub offset: Option<usize>,
    #[serde(default)]
    pub debug: bool,
}
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ListMemoriesAnswer {
    /// Newest first.
    pub memories: Vec<MemoryOut>,
    /// Memories matching the filters.
    pub total: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateMemoryArgs {
    pub id: String,
    /// New text (re-embedded).
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub category: Option<String>,
    #[serde(default)]
    pub scope: Option<String>,
    #[serde(default)]
    pub entity: Option<String>,
    /// Replaces all tags.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    #[serde(default)]
    pub add_tags: Option<Vec<String>>,
    /// Tags to remove: `key` removes every tag with that key, `key=value` that tag.
    #[serde(default)]
    pub remove_tags: Option<Vec<String>>,
    #[serde(default)]
    pub source: Option<String>,
    /// Replaces the evidence list.
    #[serde(default)]
    pub evidence: Option<Vec<String>>,
    #[serde(default)]
    pub add_evidence: Option<Vec<String>>,
    /// Replaces the code references.
    #[serde(default)]
    pub code_refs: Option<Vec<CodeRefInput>>,
    /// `active`, `archived` or `deleted` (kept, hidden from default searches).
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub debug: bool,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteMemoriesArgs {
    /// Ids to delete (at most 256). All must exist, or nothing is deleted.
    pub ids: Vec<String>,
    #[serde(default)]
    pub debug: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct DeleteMemoriesAnswer {
    pub deleted: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct MemoryAnswer {
    pub memory: MemoryOut,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

with_memory_filters! {
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchMemoryArgs {
    /// What to look for: a sentence or keywords.
    pub query: String,
    /// Results (default 10, at most 100).
    #[serde(default)]
    pub limit: Option<usize>,
    /// `hybrid` (default), `vector` or `lexical`.
    #[serde(default)]
    pub mode: Option<String>,
    /// [vector, lexical] weights for hybrid fusion.
    #[serde(default)]
    pub weights: Option<[f32; 2]>,
    /// Rank memories about this entity higher.
    #[serde(default)]
    pub boost_entity: Option<String>,
    /// Rank memories of this category higher.
    #[serde(default)]
    pub boost_category: Option<String>,
    /// Rank memories with these tags higher.
    #[serde(default)]
    pub boost_tags: Option<Vec<String>>,
    /// Recency half-life in days (default 30; 0 turns the recency boost off).
    #[serde(default)]
    pub half_life_days: Option<f64>,
    /// Longest text per result, in characters (default 1000).
    #[serde(default)]
    pub max_chars: Option<usize>,
    /// Leave out memories whose code references are stale.
    #[serde(default)]
    pub exclude_stale: bool,
    /// Leave out memories with a lower confidence (0-1).
    #[serde(default)]
    pub min_confidence: Option<f32>,
    /// Graph context per result: `none`, `minimal` (default: SIMILAR ids), `standard`
    /// (+ scores, mentioned entities, 3 related memories) or `full` (+ what they share,
    /// co-mentioned entities).
    #[serde(default)]
    pub relation_detail: Option<String>,
    #[serde(default)]
    pub debug: bool,
}
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SearchMemoryAnswer {
    pub query: String,
    pub results: Vec<MemoryOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

fn one_of(what: &str, v: Option<String>, allowed: &[&str]) -> ToolResult<Option<String>> {
    match v {
        Some(s) if !allowed.contains(&s.as_str()) => Err(ToolError::InvalidInput(format!(
            "unknown {what} `{s}`; expected one of: {}",
            allowed.join(", ")
        ))),
        v => Ok(v),
    }
}

pub(crate) fn check_id(id: &str) -> ToolResult<()> {
    if format::memory::is_uuid(id) {
        Ok(())
    } else {
        Err(ToolError::InvalidInput(format!(
            "`{}` is not a memory id; ids are lower-case UUIDs as returned by add_memories",
            id.chars().take(80).collect::<String>()
        )))
    }
}

/// Every live memory of a snapshot matching `f`: (record view as owned record, created_at).
fn all_memories(snap: &Snapshot, f: &MemFilter) -> Vec<MemoryRecord> {
    let mut out = Vec::new();
    for (si, ls) in snap.index.memory.iter().enumerate() {
        let Some(t) = ls.segment.memories() else {
            continue;
        };
        for (i, m) in t.memories.iter().enumerate() {
            if snap.mem[si].dead.contains(i as u32) || !f.matches(m) {
                continue;
            }
            out.push(m.to_record());
        }
    }
    for e in snap.delta.entries.values() {
        if f.matches(&e.record) {
            out.push(e.record.clone());
        }
    }
    out
}

impl Engine {
    pub fn add_memories(&self, a: &AddMemoriesArgs) -> ToolResult<AddMemoriesAnswer> {
        let t0 = Instant::now();
        if a.memories.is_empty() {
            return Err(ToolError::InvalidInput(
                "`memories` is empty; pass at least one {\"text\": …}".into(),
            ));
        }
        if a.memories.len() > MAX_BATCH {
            return Err(ToolError::InvalidInput(format!(
                "{} memories in one call; at most {MAX_BATCH}: split the batch",
                a.memories.len()
            )));
        }
        let now = now_ms();
        let mut recs = Vec::with_capacity(a.memories.len());
        let snap = self.snapshot();
        let ctx = self.ref_ctx(&snap);
        for (i, m) in a.memories.iter().enumerate() {
            let r = complete_refs(m.code_refs.clone(), &ctx, now)
                .and_then(|refs| record_from(m.clone(), new_id(), now, refs))
                .map_err(|e| match e {
                    ToolError::InvalidInput(s) if a.memories.len() > 1 => {
                        ToolError::InvalidInput(format!("memory {i}: {s}; nothing was added"))
                    }
                    e => e,
                })?;
            recs.push(r);
        }
        // Code links suggested by identifiers in the texts.
        let mut suggested_links = Vec::new();
        for (i, r) in recs.iter_mut().enumerate() {
            for (matched, conf, mut cr) in super::code_tools::suggest_links(&ctx, &r.text, now) {
                let dup = r.code_refs.iter().any(|x| {
                    x.path == cr.path && x.start_line == cr.start_line && x.end_line == cr.end_line
                });
                let attached = a.auto_link && !dup && r.code_refs.len() < format::memory::MAX_LIST;
                cr.confidence = Some(conf);
                cr.reason = super::code_tools::INFERRED.into();
                let mut out = code_ref_out(&cr);
                out.status = "fresh".into();
                if attached {
                    r.code_refs.push(cr);
                }
                if !dup {
                    suggested_links.push(SuggestedLink {
                        memory: i,
                        matched,
                        confidence: conf,
                        reason: super::code_tools::INFERRED.into(),
                        code_ref: out,
                        attached,
                    });
                }
            }
        }
        let t = Instant::now();
        let texts: Vec<&str> = recs.iter().map(|r| r.text.as_str()).collect();
        let (vecs, _) = self
            .encoder()
            .embed(&texts)
            .map_err(|e| ToolError::Internal(format!("embedding failed: {e}")))?;
        let embed_ms = ms(t.elapsed());
        let dim = self.encoder().dim();
        let ids: Vec<String> = recs.iter().map(|r| r.id.clone()).collect();
        let t = Instant::now();
        let sims = similar_for(&self.snapshot(), &ids, &vecs, dim, DEFAULT_NPROBE);
        let similar_ms = ms(t.elapsed());
        for (r, s) in recs.iter_mut().zip(sims) {
            r.similar = s;
        }
        let ops = recs
            .into_iter()
            .enumerate()
            .map(|(i, record)| WalOp::Put {
                record: Box::new(record),
                vector: vecs[i * dim..(i + 1) * dim].to_vec(),
            })
            .collect();
        self.write_with(|_| Ok((ops, ())))?;
        Ok(AddMemoriesAnswer {
            ids,
            suggested_links,
            debug: a.debug.then(|| Debug {
                embed_ms,
                graph_ms: similar_ms,
                other_ms: ms(t.elapsed()) - similar_ms,
                total_ms: ms(t0.elapsed()),
                ..Debug::default()
            }),
        })
    }

    /// Writes complete records with precomputed vectors (`records.len() × dim` floats): the
    /// write path of `add_memories` without validation of tool input or embedding. Records
    /// are validated; ids must be new. Their SIMILAR links are kept as given (a bulk load;
    /// [`super::graph::similar_for`] computes them).
    pub fn put_memories(&self, records: Vec<MemoryRecord>, vectors: &[f32]) -> ToolResult<()> {
        let dim = self.encoder().dim();
        if vectors.len() != records.len() * dim {
            return Err(ToolError::InvalidInput(format!(
                "{} floats for {} records of dimension {dim}",
                vectors.len(),
                records.len()
            )));
        }
        for r in &records {
            validate_record(r).map_err(ToolError::InvalidInput)?;
        }
        let ops = records
            .into_iter()
            .enumerate()
            .map(|(i, record)| WalOp::Put {
                record: Box::new(record),
                vector: vectors[i * dim..(i + 1) * dim].to_vec(),
            })
            .collect();
        self.write_with(|_| Ok((ops, ())))
    }

    pub fn get_memory(&self, a: &GetMemoryArgs) -> ToolResult<MemoryAnswer> {
        let t0 = Instant::now();
        check_id(a.id.trim())?;
        let level = RelationDetail::parse(a.relation_detail.as_deref())?;
        let snap = self.snapshot();
        let (r, _) = lookup(&snap, a.id.trim()).ok_or_else(|| not_found(&a.id))?;
        let mut o = self.annotated(&snap, &r);
        o.relations = relations(&snap, &r.id, level);
        Ok(MemoryAnswer {
            memory: o,
            debug: a.debug.then(|| Debug {
                total_ms: ms(t0.elapsed()),
                ..Debug::default()
            }),
        })
    }

    pub fn list_memories(&self, a: &ListMemoriesArgs) -> ToolResult<ListMemoriesAnswer> {
        let t0 = Instant::now();
        let f = a.filter_args().filter()?;
        let limit = a.limit.unwrap_or(20).clamp(1, MAX_LIMIT);
        let offset = a.offset.unwrap_or(0);
        let snap = self.snapshot();
        let mut all = all_memories(&snap, &f);
        all.sort_by(|x, y| y.created_at.cmp(&x.created_at).then(y.id.cmp(&x.id)));
        let total = all.len();
        let page: Vec<MemoryOut> = all
            .iter()
            .skip(offset)
            .take(limit)
            .map(|m| self.annotated(&snap, m))
            .collect();
        let next = offset + page.len();
        Ok(ListMemoriesAnswer {
            memories: page,
            total,
            next_offset: (next < total).then_some(next),
            debug: a.debug.then(|| Debug {
                total_ms: ms(t0.elapsed()),
                ..Debug::default()
            }),
        })
    }

    pub fn update_memory(&self, a: &UpdateMemoryArgs) -> ToolResult<MemoryAnswer> {
        let t0 = Instant::now();
        let id = a.id.trim().to_string();
        check_id(&id)?;
        // Embed a new text before taking the writer lock.
        let mut embed_ms = 0.0;
        let new_vec = match &a.text {
            Some(t) => {
                if t.trim().is_empty() {
                    return Err(ToolError::InvalidInput(
                        "`text` is empty; pass the new text or leave it out".into(),
                    ));
                }
                if t.len() > format::memory::MAX_TEXT_BYTES {
                    return Err(ToolError::InvalidInput(format!(
                        "the memory text is {} bytes; the limit is {} bytes",
                        t.len(),
                        format::memory::MAX_TEXT_BYTES
                    )));
                }
                let t1 = Instant::now();
                let v = self
                    .encoder()
                    .embed(&[t.as_str()])
                    .map_err(|e| ToolError::Internal(format!("embedding failed: {e}")))?
                    .0;
                embed_ms = ms(t1.elapsed());
                Some(v)
            }
            None => None,
        };
        let add = canonical_tags(a.add_tags.as_deref().unwrap_or_default())?;
        let remove = canonical_tags(a.remove_tags.as_deref().unwrap_or_default())?;
        let replace = a.tags.as_deref().map(canonical_tags).transpose()?;
        let scope = one_of("scope", a.scope.clone(), &format::memory::SCOPES)?;
        let source = one_of("source", a.source.clone(), &format::memory::SOURCES)?;
        let state = one_of("state", a.state.clone(), &format::memory::STATES)?;
        // Code references are completed (files read, hashed) before the writer lock.
        let new_refs = match &a.code_refs {
            Some(c) => {
                let snap = self.snapshot();
                Some(complete_refs(
                    Some(c.clone()),
                    &self.ref_ctx(&snap),
                    now_ms(),
                )?)
            }
            None => None,
        };
        // New text, new SIMILAR edges (against everything but the memory itself).
        let new_sims = new_vec.as_ref().map(|v| {
            let dim = self.encoder().dim();
            similar_for(
                &self.snapshot(),
                std::slice::from_ref(&id),
                v,
                dim,
                DEFAULT_NPROBE,
            )
            .remove(0)
        });
        let updated = self.write_with(|snap| {
            let (mut r, old_vec) = lookup(snap, &id).ok_or_else(|| not_found(&id))?;
            if let Some(t) = &a.text {
                r.text = t.clone();
            }
            if let Some(s) = &new_sims {
                r.similar = s.clone();
            }
            if let Some(c) = &a.category {
                r.category = c.trim().to_string();
            }
            if let Some(s) = &scope {
                r.scope = s.clone();
            }
            if let Some(e) = &a.entity {
                r.entity = e.trim().to_string();
            }
            if let Some(t) = &replace {
                r.tags = t.clone();
            }
            r.tags.retain(|t| {
                !remove
                    .iter()
                    .any(|x| x == t || (!x.contains('=') && format::memory::tag_key(t) == x))
            });
            r.tags.extend(add.iter().cloned());
            r.tags.sort();
            r.tags.dedup();
            if let Some(s) = &source {
                r.source = s.clone();
            }
            if let Some(e) = &a.evidence {
                r.evidence = e.clone();
            }
            for e in a.add_evidence.iter().flatten() {
                if !r.evidence.contains(e) {
                    r.evidence.push(e.clone());
                }
            }
            let now = now_ms().max(r.created_at);
            if let Some(c) = &new_refs {
                r.code_refs = c.clone();
            }
            if let Some(s) = &state {
                r.state = s.clone();
            }
            r.updated_at = now.max(r.updated_at);
            validate_record(&r).map_err(ToolError::InvalidInput)?;
            let vector = new_vec.clone().unwrap_or(old_vec);
            Ok((
                vec![WalOp::Put {
                    record: Box::new(r.clone()),
                    vector,
                }],
                r,
            ))
        })?;
        let snap = self.snapshot();
        Ok(MemoryAnswer {
            memory: self.annotated(&snap, &updated),
            debug: a.debug.then(|| Debug {
                embed_ms,
                total_ms: ms(t0.elapsed()),
                ..Debug::default()
            }),
        })
    }

    pub fn delete_memories(&self, a: &DeleteMemoriesArgs) -> ToolResult<DeleteMemoriesAnswer> {
        let t0 = Instant::now();
        if a.ids.is_empty() || a.ids.len() > MAX_BATCH {
            return Err(ToolError::InvalidInput(format!(
                "`ids` must hold 1 to {MAX_BATCH} memory ids"
            )));
        }
        let mut ids: Vec<String> = a.ids.iter().map(|s| s.trim().to_string()).collect();
        for id in &ids {
            check_id(id)?;
        }
        ids.sort();
        ids.dedup();
        let deleted = self.write_with(|snap| {
            let missing: Vec<&String> =
                ids.iter().filter(|id| lookup(snap, id).is_none()).collect();
            if !missing.is_empty() {
                return Err(ToolError::NotFound {
                    message: format!(
                        "no memory with id {}; nothing was deleted",
                        missing
                            .iter()
                            .map(|s| format!("`{s}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    suggestions: vec!["list_memories".into()],
                });
            }
            let ops = ids
                .iter()
                .map(|id| WalOp::Delete { id: id.clone() })
                .collect();
            Ok((ops, ids.clone()))
        })?;
        Ok(DeleteMemoriesAnswer {
            deleted,
            debug: a.debug.then(|| Debug {
                total_ms: ms(t0.elapsed()),
                ..Debug::default()
            }),
        })
    }

    pub fn search_memory(&self, a: &SearchMemoryArgs) -> ToolResult<SearchMemoryAnswer> {
        let t0 = Instant::now();
        check_text("query", &a.query)?;
        let f = a.filter_args().filter()?;
        let level = RelationDetail::parse(a.relation_detail.as_deref())?;
        let mode: Mode = a
            .mode
            .as_deref()
            .unwrap_or("hybrid")
            .parse()
            .map_err(ToolError::InvalidInput)?;
        if a.half_life_days
            .is_some_and(|h| !(h.is_finite() && h >= 0.0))
        {
            return Err(ToolError::InvalidInput(
                "`half_life_days` must be a non-negative number (0 turns recency off)".into(),
            ));
        }
        let limit = a.limit.unwrap_or(10).clamp(1, MAX_LIMIT);
        if a.min_confidence
            .is_some_and(|c| !(c.is_finite() && (0.0..=1.0).contains(&c)))
        {
            return Err(ToolError::InvalidInput(
                "`min_confidence` must be between 0 and 1".into(),
            ));
        }
        // Confidence re-ranks and may filter: fetch more than `limit`.
        let o = SearchOptions {
            limit: (limit * 3).min(3 * MAX_LIMIT),
            mode,
            weights: a.weights.map(|[v, l]| (v, l)),
            ..SearchOptions::default()
        };
        check_weights(o.weights)?;
        let boosts = Boosts {
            entity: a.boost_entity.clone().filter(|s| !s.trim().is_empty()),
            category: a.boost_category.clone().filter(|s| !s.trim().is_empty()),
            tags: canonical_tags(a.boost_tags.as_deref().unwrap_or_default())?,
            half_life_days: a
                .half_life_days
                .unwrap_or(super::search::DEFAULT_HALF_LIFE_DAYS),
            recency_weight: super::search::DEFAULT_RECENCY_WEIGHT,
            now_ms: now_ms(),
        };
        let mut dbg = Debug::default();
        let snap = self.snapshot();
        let qv = if mode == Mode::Lexical {
            None
        } else {
            let t = Instant::now();
            let (v, cached) = self
                .embed_query(a.query.trim())
                .map_err(ToolError::Internal)?;
            dbg.embed_ms = ms(t.elapsed());
            dbg.embed_cached = cached;
            Some(v)
        };
        let (hits, tm) =
            super::search::search(&snap, a.query.trim(), qv.as_deref(), &f, &boosts, &o)
                .map_err(|e| ToolError::Internal(e.to_string()))?;
        dbg.filter_ms = ms(tm.filter);
        dbg.vector_ms = ms(tm.vector);
        dbg.bm25_ms = ms(tm.bm25);
        dbg.fusion_ms = ms(tm.fusion);
        let t = Instant::now();
        let max_chars = a.max_chars.unwrap_or(1000).max(1);
        let mut results: Vec<MemoryOut> = hits
            .iter()
            .filter_map(|h: &MemHit| {
                let rec = match &h.key {
                    MemKey::Delta(e) => e.record.clone(),
                    MemKey::Segment(si, c) => {
                        let m = snap.index.memory[*si]
                            .segment
                            .memories()?
                            .memories
                            .get(*c as usize)?;
                        m.to_record()
                    }
                };
                let mut o = self.annotated(&snap, &rec);
                if (a.exclude_stale && o.is_stale)
                    || a.min_confidence.is_some_and(|c| o.confidence < c)
                {
                    return None;
                }
                if o.text.chars().count() > max_chars {
                    o.text = o.text.chars().take(max_chars).collect::<String>() + "…";
                }
                // Fresher, verified memories first: confidence scales the score.
                let s = h.score * (CONFIDENCE_FLOOR + (1.0 - CONFIDENCE_FLOOR) * o.confidence);
                o.score = Some((s * 1e4).round() / 1e4);
                o.vector_rank = h.vector_rank;
                o.lexical_rank = h.lexical_rank;
                Some(o)
            })
            .collect();
        results.sort_by(|x, y| y.score.unwrap_or(0.0).total_cmp(&x.score.unwrap_or(0.0)));
        results.truncate(limit);
        for o in &mut results {
            o.relations = relations(&snap, &o.id, level);
        }
        dbg.format_ms = ms(t.elapsed());
        dbg.total_ms = ms(t0.elapsed());
        Ok(SearchMemoryAnswer {
            query: a.query.clone(),
            results,
            debug: a.debug.then_some(dbg),
        })
    }
}

/// Every live memory of the index at `dir`, including unflushed writes in its log, sorted by
/// id (the dump format of `indexer build --memories`). Reads only.
pub fn export(dir: &Path) -> Result<Vec<MemoryRecord>, String> {
    // Under the directory lock a flush cannot move records from the log into a segment
    // between reading the one and the other.
    let _lock = DirLock::acquire(dir).map_err(|e| e.to_string())?;
    let index = Index::open(dir).map_err(|e| e.to_string())?;
    let rec = super::wal::read_only(dir).map_err(|e| e.to_string())?;
    let done = index.manifest.memory_lsn;
    let mut delta = Delta::default();
    for (lsn, op) in &rec.ops {
        if *lsn > done {
            delta.apply(*lsn, op, |id| find_in_segments(&index, id).is_some());
        }
    }
    let snap = Snapshot::with_delta(Arc::new(index), None, delta);
    let all = MemFilter {
        states: format::memory::STATES
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ..MemFilter::default()
    };
    let mut v = all_memories(&snap, &all);
    v.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        let t = parse_time("t", "2026-11-22T19:38:24Z").unwrap();
        assert_eq!(rfc3339(t), "2026-11-22T19:38:24.000Z");
        assert_eq!(
            parse_time("t", "2024-02-29").unwrap(),
            days_from_civil(2024, 2, 29) * 86_400_000
        );
        assert_eq!(
            rfc3339(parse_time("t", "2000-03-01").unwrap()),
            "2000-03-01T00:00:00.000Z"
        );
        for bad in ["yesterday", "2026-13-01", "2026-1-1x", "2026-11-22T25:00"] {
            assert!(parse_time("t", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn entries_index_like_segments() {
        let e = Entry::new(
            MemoryRecord {
                id: new_id(),
                text: "parseConfig reads TOML".into(),
                category: "note".into(),
                scope: "project".into(),
                entity: "config".into(),
                tags: vec!["lang=rust".into()],
                source: "agent".into(),
                evidence: vec![],
                code_refs: vec![],
                created_at: 1,
                updated_at: 1,
                state: "active".into(),
                similar: vec![],
            },
            vec![0.0; 4],
        );
        assert!(e.tf("parse") > 0 && e.tf("toml") > 0 && e.tf("config") > 1);
        assert_eq!(e.tf("absent"), 0);
        assert!(format::memory::is_uuid(&new_id()));
    }
}
