//! Code-linked memory tools on [`Engine`]: references checked when a memory is returned
//! (`annotated`), `memories_for_code`, `check_staleness` (persisted re-checks, also run after
//! a `reindex` and by `queryd staleness`), and link suggestions from a memory's text.

use std::collections::HashSet;
use std::time::Instant;

use format::memory::MemoryRecord;
use format::roots::{confine, ConfineError, ConfineOptions};
use memory::coderefs::{self, apply_status, check_ref, confidence, RefCtx, RefStatus};
use memory::search::MemFilter;
use memory::wal::WalOp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::engine::Engine;
use crate::snapshot::Snapshot;
use crate::tools::common::{limit_arg, ms, Debug, ToolError, ToolResult, MAX_LIMIT};
use crate::tools::memory::input::{check_id, CodeRefInput, MAX_BATCH};
use crate::tools::memory::output::{out, MemoryOut};

/// The reason of code links inferred from a memory's text.
pub const INFERRED: &str = "inferred_from_code_index";

/// Identifiers in `text` worth looking up: CamelCase types, snake_case and camelCase
/// functions, `name()` calls, qualified names (`Type::method`, `Type.method`) and paths.
pub fn identifiers(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for raw in text.split(|c: char| c.is_whitespace() || "`'\",;!?<>[]{}|*".contains(c)) {
        let call = raw.contains("()") || raw.ends_with('(');
        let w = raw
            .split('(')
            .next()
            .unwrap_or("")
            .trim_matches(|c: char| !(c.is_alphanumeric() || c == '_'));
        if w.len() < 3 || w.len() > 200 {
            continue;
        }
        let is_path = w.contains('/') && w.contains('.');
        let has_upper = w.chars().skip(1).any(|c| c.is_uppercase());
        let has_lower = w.chars().any(|c| c.is_lowercase());
        let qualified = w.contains("::") || (w.contains('.') && !is_path && !w.ends_with('.'));
        let camel = has_upper && has_lower && w.chars().all(|c| c.is_alphanumeric() || c == '_');
        let snake = w.contains('_') && w.chars().all(|c| c.is_alphanumeric() || c == '_');
        if (call || is_path || qualified || camel || snake) && !out.iter().any(|x| x == w) {
            out.push(w.to_string());
        }
    }
    out.truncate(16);
    out
}

/// Code links for the identifiers of `text` (see [`identifiers`]): a path that an indexed
/// root holds links its whole file; a name that resolves to 1-3 indexed symbols links each
/// (confidence 0.8 when unique, 0.5 when ambiguous; files 0.6). At most 5.
pub fn suggest_links(
    ctx: &RefCtx<'_>,
    text: &str,
    now: i64,
) -> Vec<(String, f32, format::memory::CodeRef)> {
    let mut out: Vec<(String, f32, format::memory::CodeRef)> = Vec::new();
    for id in identifiers(text) {
        let mut add = |conf: f32, input: CodeRefInput| {
            if let Ok(r) = input.complete(ctx, now) {
                if !out
                    .iter()
                    .any(|(_, _, x)| x.path == r.path && x.start_line == r.start_line)
                {
                    out.push((id.clone(), conf, r));
                }
            }
        };
        if id.contains('/') && id.contains('.') {
            let Ok(p) = coderefs::clean_path(&id) else {
                continue;
            };
            if let Ok(Some((root, full))) = coderefs::resolve_readable(ctx, "", &p) {
                if let Ok(v) = ctx.cache.get(&full, &root) {
                    if !v.lines.is_empty() {
                        add(
                            0.6,
                            CodeRefInput {
                                path: Some(p),
                                start_line: Some(1),
                                end_line: Some(v.lines.len() as u32),
                                ..Default::default()
                            },
                        );
                    }
                }
            }
            continue;
        }
        let found = ctx.code.resolve(&id);
        if found.is_empty() || found.len() > 3 {
            continue;
        }
        let conf = if found.len() == 1 { 0.8 } else { 0.5 };
        for n in found {
            let sid = ctx.code.chunk(n).symbol_id.to_string();
            if sid.is_empty() {
                continue;
            }
            add(
                conf,
                CodeRefInput {
                    symbol_id: Some(sid),
                    ..Default::default()
                },
            );
        }
    }
    out.truncate(5);
    out
}

impl Engine {
    /// What reference checks need, for `snap`.
    pub fn ref_ctx<'a>(&'a self, snap: &'a Snapshot) -> RefCtx<'a> {
        RefCtx {
            roots: &snap.code.index.manifest.roots,
            cache: &self.files,
            code: &snap.code,
        }
    }

    /// Forgets the source files cached by reference checks (benchmarks measure cold checks).
    pub fn clear_file_cache(&self) {
        self.files.clear();
    }

    /// `m` as tools return it, its code references checked against the current files
    /// (cached by mtime and size): status, `is_stale`, relocated lines, confidence.
    pub fn annotated(&self, snap: &Snapshot, m: &MemoryRecord) -> MemoryOut {
        let ctx = self.ref_ctx(snap);
        let statuses: Vec<RefStatus> = m.code_refs.iter().map(|r| check_ref(&ctx, r)).collect();
        annotate(out(m), m, &statuses)
    }
}

/// Fills the check results into `o` (made by `out(m)`).
pub fn annotate(mut o: MemoryOut, m: &MemoryRecord, statuses: &[RefStatus]) -> MemoryOut {
    let now = memory::now_ms();
    for ((ro, r), st) in o.code_refs.iter_mut().zip(&m.code_refs).zip(statuses) {
        ro.status = st.name().into();
        ro.is_stale = st.is_stale();
        match st {
            RefStatus::Fresh => {}
            RefStatus::Relocated { start, end } => {
                ro.reason = format!("relocated from lines {}-{}", r.start_line, r.end_line);
                ro.start_line = *start;
                ro.end_line = *end;
                ro.code_link = coderefs::uri(&r.path, *start, *end);
            }
            // `stale_since` stays what a recorded check wrote: a read that finds the reference
            // stale first does not know since when (absent then).
            RefStatus::Stale { reason } => ro.reason = reason.clone(),
            RefStatus::Unverified { reason } => ro.reason = reason.clone(),
        }
    }
    o.is_stale = statuses.iter().any(RefStatus::is_stale);
    o.confidence = (confidence(m, statuses, now) * 100.0).round() / 100.0;
    o
}

/// Memories linked to code: those whose code references cover a line of a file (`direct`), or
/// point at the same file or the symbol at that line (`related`), each with its references
/// checked against the current file (fresh, relocated, stale) and its confidence.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoriesForCodeArgs {
    /// Repository-relative path (or absolute, inside an indexed root).
    pub path: String,
    /// A line of the file: memories whose references cover it are `direct`; others on the
    /// same file or symbol are `related`. Without it every reference to the file is direct.
    #[serde(default)]
    pub line: Option<u32>,
    /// Also archived and deleted memories.
    #[serde(default)]
    pub include_inactive: bool,
    /// Results (default 20, at most 100).
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub debug: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CodeMemory {
    /// `direct` (a reference covers the line) or `related` (same file or symbol).
    pub relation: String,
    pub memory: MemoryOut,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct MemoriesForCodeAnswer {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// The symbol at `line`, when the index has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symbol_id: Option<String>,
    pub memories: Vec<CodeMemory>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

/// Re-check the code references of some memories (ids), of memories referencing changed files
/// (changed_files, e.g. from a commit), or of all, and record the result: stale since when and
/// why (changed, deleted), or relocated lines when the same code moved. Returns counts
/// (checked, fresh, relocated, stale, unverified, updated).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckStalenessArgs {
    /// Memories to re-check (default: every memory with code references).
    #[serde(default)]
    pub ids: Option<Vec<String>>,
    /// Only memories referencing these repo-relative paths (what a commit changed).
    #[serde(default)]
    pub changed_files: Option<Vec<String>>,
    #[serde(default)]
    pub debug: bool,
}

/// What a persisted check found and did.
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct StalenessReport {
    /// Memories checked.
    pub memories: usize,
    /// References checked, by result.
    pub checked: usize,
    pub fresh: usize,
    pub relocated: usize,
    pub stale: usize,
    /// References that could not be checked (no hash, no root).
    pub unverified: usize,
    /// Memories written back (a reference turned stale or fresh, moved, or was verified).
    pub updated: usize,
    /// Memories that could not be written back.
    pub errors: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

/// `path` as a repo-relative path: absolute paths are made relative to the root holding them
/// ([`format::roots::confine`]).
fn relative(snap: &Snapshot, path: &str) -> ToolResult<String> {
    let p = std::path::Path::new(path.trim());
    if p.is_absolute() {
        let opts = ConfineOptions {
            repo: None,
            allow_absolute: true,
            allow_root: true,
        };
        return match confine(&snap.code.index.manifest.roots, path.trim(), opts) {
            Ok(c) => {
                coderefs::clean_path(&c.rel).map_err(|e| ToolError::InvalidInput(e.to_string()))
            }
            Err(ConfineError::NotInRoot { .. }) => Err(ToolError::InvalidInput(format!(
                "`{path}` is not inside an indexed root"
            ))),
            Err(e) => Err(ToolError::InvalidInput(format!("`{path}`: {e}"))),
        };
    }
    coderefs::clean_path(path).map_err(|e| ToolError::InvalidInput(e.to_string()))
}

/// Every live memory (all states) with at least one code reference.
fn with_refs(snap: &Snapshot) -> Vec<MemoryRecord> {
    let mut v = Vec::new();
    for (si, ls) in snap.memory.index.memory.iter().enumerate() {
        let Some(t) = ls.segment.memories() else {
            continue;
        };
        for (i, m) in t.memories.iter().enumerate() {
            if !m.code_refs.is_empty() && !snap.memory.mem[si].dead.contains(i as u32) {
                v.push(m.to_record());
            }
        }
    }
    for e in snap.memory.delta.entries.values() {
        if !e.record.code_refs.is_empty() {
            v.push(e.record.clone());
        }
    }
    v
}

impl Engine {
    pub fn memories_for_code(&self, a: &MemoriesForCodeArgs) -> ToolResult<MemoriesForCodeAnswer> {
        let t0 = Instant::now();
        let snap = self.snapshot();
        let path = relative(&snap, &a.path)?;
        if a.line == Some(0) {
            return Err(ToolError::InvalidInput("`line` is 1-based".into()));
        }
        let symbol_id = a.line.and_then(|l| snap.code.innermost_symbol(&path, l, l));
        let ctx = self.ref_ctx(&snap);
        let active = MemFilter::default();
        let mut out = Vec::new();
        for m in with_refs(&snap) {
            if !a.include_inactive && !active.matches(&m) {
                continue;
            }
            let statuses: Vec<RefStatus> = m.code_refs.iter().map(|r| check_ref(&ctx, r)).collect();
            let mut relation = None;
            for (r, st) in m.code_refs.iter().zip(&statuses) {
                let same_file = coderefs::clean_path(&r.path).ok().as_deref() == Some(&path);
                let same_symbol = symbol_id
                    .as_deref()
                    .is_some_and(|s| !r.symbol_id.is_empty() && r.symbol_id == s);
                if !same_file && !same_symbol {
                    continue;
                }
                // Where the code is now (a relocated reference counts at its new lines).
                let (s, e) = match st {
                    RefStatus::Relocated { start, end } => (*start, *end),
                    _ => (r.start_line, r.end_line),
                };
                let covers = same_file && a.line.is_none_or(|l| s <= l && l <= e);
                if covers {
                    relation = Some("direct");
                    break;
                }
                relation = Some("related");
            }
            if let Some(rel) = relation {
                out.push((
                    rel,
                    annotate(crate::tools::memory::output::out(&m), &m, &statuses),
                    m.updated_at,
                ));
            }
        }
        out.sort_by(|x, y| {
            (x.0 != "direct")
                .cmp(&(y.0 != "direct"))
                .then(y.1.confidence.total_cmp(&x.1.confidence))
                .then(y.2.cmp(&x.2))
        });
        out.truncate(limit_arg(a.limit, 20, MAX_LIMIT)?);
        Ok(MemoriesForCodeAnswer {
            path,
            line: a.line,
            symbol_id,
            memories: out
                .into_iter()
                .map(|(rel, memory, _)| CodeMemory {
                    relation: rel.into(),
                    memory,
                })
                .collect(),
            debug: a.debug.then(|| Debug {
                total_ms: ms(t0.elapsed()),
                generation: snap.generation(),
                ..Debug::default()
            }),
        })
    }

    /// Re-checks code references and writes back what changed (stale since, relocated
    /// lines, verification time). Idempotent: a second run over the same files writes
    /// nothing. Never deletes or hides a memory.
    pub fn check_staleness(&self, a: &CheckStalenessArgs) -> ToolResult<StalenessReport> {
        let t0 = Instant::now();
        let snap = self.snapshot();
        let ids: Option<HashSet<String>> = match &a.ids {
            Some(v) => {
                let mut set = HashSet::new();
                for id in v {
                    let id = id.trim();
                    check_id(id)?;
                    if snap.memory.key_of(id).is_none() {
                        return Err(crate::tools::memory::output::not_found(id));
                    }
                    set.insert(id.to_string());
                }
                Some(set)
            }
            None => None,
        };
        let changed: Option<HashSet<String>> = match &a.changed_files {
            Some(v) => Some(
                v.iter()
                    .map(|p| relative(&snap, p))
                    .collect::<ToolResult<HashSet<String>>>()?,
            ),
            None => None,
        };
        let mut rep = StalenessReport::default();
        let now = memory::now_ms();
        let mut todo: Vec<String> = Vec::new();
        {
            let ctx = self.ref_ctx(&snap);
            for m in with_refs(&snap) {
                if ids.as_ref().is_some_and(|s| !s.contains(&m.id)) {
                    continue;
                }
                if changed.as_ref().is_some_and(|c| {
                    !m.code_refs
                        .iter()
                        .any(|r| coderefs::clean_path(&r.path).is_ok_and(|p| c.contains(&p)))
                }) {
                    continue;
                }
                rep.memories += 1;
                let mut changed_any = false;
                let mut refs = m.code_refs.clone();
                for r in &mut refs {
                    let st = check_ref(&ctx, r);
                    rep.checked += 1;
                    match &st {
                        RefStatus::Fresh => rep.fresh += 1,
                        RefStatus::Relocated { .. } => rep.relocated += 1,
                        RefStatus::Stale { .. } => rep.stale += 1,
                        RefStatus::Unverified { .. } => rep.unverified += 1,
                    }
                    changed_any |= apply_status(r, &st, now);
                }
                if changed_any {
                    todo.push(m.id.clone());
                }
            }
        }
        // Write back in batches, each re-checked on the snapshot it is written against.
        for batch in todo.chunks(MAX_BATCH) {
            let r = self.write_with(|snap| {
                let ctx = self.ref_ctx(snap);
                let mut ops = Vec::new();
                for id in batch {
                    let Some(k) = snap.memory.key_of(id) else {
                        continue;
                    };
                    let mut m = snap.memory.record_of(&k);
                    let vector = match &k {
                        memory::search::MemKey::Delta(e) => e.vector.clone(),
                        memory::search::MemKey::Segment(si, c) => snap.memory.index.memory[*si]
                            .segment
                            .vector(*c)
                            .map(<[f32]>::to_vec)
                            .unwrap_or_default(),
                    };
                    let mut any = false;
                    for r in &mut m.code_refs {
                        let st = check_ref(&ctx, r);
                        any |= apply_status(r, &st, now);
                    }
                    if any && !vector.is_empty() {
                        ops.push(WalOp::Put {
                            record: Box::new(m),
                            vector,
                        });
                    }
                }
                let n = ops.len();
                Ok((ops, n))
            });
            match r {
                Ok(n) => rep.updated += n,
                Err(e) => rep.errors.push(e.to_string()),
            }
        }
        rep.debug = a.debug.then(|| Debug {
            total_ms: ms(t0.elapsed()),
            generation: snap.generation(),
            ..Debug::default()
        });
        Ok(rep)
    }
}
