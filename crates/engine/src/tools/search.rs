//! `search_code`: hybrid search ([`code::search`]) plus graph expansion of the top results.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use code::search::{path_glob, Mode, SearchOptions};
use code::NodeRef;
use format::records::{EdgeKind, EDGE_RESOLVED};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    check_text, check_weights, label, limit_arg, ms, snippet, symbol_ref, Debug, SymbolRef,
    ToolError, ToolResult, MAX_LIMIT,
};
use crate::engine::Engine;
use crate::snapshot::Snapshot;

/// Ranking mode.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ModeArg {
    /// Vectors and BM25, filtered before ranking and fused (default).
    #[default]
    Hybrid,
    /// Embedding similarity only: paraphrases, descriptions.
    Vector,
    /// BM25 only: exact identifiers and keywords.
    Lexical,
}

/// Hybrid code search over the indexed repositories: embeddings and BM25, each filtered before
/// ranking, fused by a linear combination of z-scored lists (the default; weighted reciprocal
/// rank fusion is the alternative, and `weights` shifts the balance). Use a sentence for
/// behaviour ("where are retries configured") or an identifier for exact names
/// (`parse_config`). The balance is chosen per query: identifier-like queries lean lexical,
/// search-style questions lean vector, prose weighs both (`debug: true` says which and why).
/// Each symbol also matches through its header (path, owner, signature, first doc sentence).
/// Filters: language, kind, path glob,
/// repo. Top results are expanded along the code graph (callees, callers, members), marked
/// source=graph. Returns ranked chunks with path, lines, symbol id and a snippet.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchCodeArgs {
    /// What to find: a sentence ("where are retries configured"), keywords or an identifier.
    pub query: String,
    /// Results to return (default 10, at most 100).
    #[serde(default)]
    pub limit: Option<usize>,
    /// hybrid (default) | vector | lexical.
    #[serde(default)]
    pub mode: Option<ModeArg>,
    /// Weights of the [vector, lexical] rankings in hybrid mode (default: chosen per query by
    /// its shape: identifiers lean lexical, search-style questions lean vector, prose weighs
    /// both equally).
    #[serde(default)]
    pub weights: Option<[f32; 2]>,
    /// Only this language: rust, python, typescript, tsx, javascript, go, java, c, cpp, markdown, toml, ...
    #[serde(default)]
    pub language: Option<String>,
    /// Only this chunk kind: function, method, class, struct, enum, trait, interface, impl, module, top_level, window, ...
    #[serde(default)]
    pub kind: Option<String>,
    /// Only paths matching this glob (`src/**/*.rs`, `*.py`) or starting with this prefix (`crates/format/`); relative to the repository root, or absolute inside an indexed root (`/home/me/repo/src/**/*.rs`: also limits the search to that root's repository). A name with glob characters also matches literally (`app/[slug]/` is that directory, and also `app/s/`...).
    #[serde(default)]
    pub path: Option<String>,
    /// Only this repository (its name in the index).
    #[serde(default)]
    pub repo: Option<String>,
    /// Lines of each result's code to include (default 12; 0 for none).
    #[serde(default)]
    pub snippet_lines: Option<usize>,
    /// Characters of each snippet at most (default 800).
    #[serde(default)]
    pub max_chars: Option<usize>,
    /// Add callees, callers and members of the top results from the code graph (default true).
    #[serde(default)]
    pub expand_graph: Option<bool>,
    /// Return a per-phase timing breakdown.
    #[serde(default)]
    pub debug: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CodeHit {
    pub score: f32,
    #[serde(flatten)]
    pub symbol: SymbolRef,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub repo: String,
    /// `search` (ranked by the query) or `graph` (a neighbour of a top result).
    pub source: &'static str,
    /// For graph results: how it relates to which result (`called by X`, `calls X`, `member of X`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vector_rank: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lexical_rank: Option<usize>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub snippet: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SearchCodeAnswer {
    pub query: String,
    pub mode: &'static str,
    pub results: Vec<CodeHit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

/// (score, node, vector rank, lexical rank, graph relation, lines when a search hit's lines
/// cover several chunks).
type Ranked = (
    f32,
    NodeRef,
    Option<usize>,
    Option<usize>,
    Option<String>,
    Option<(u32, u32)>,
);

/// Damping of a graph neighbour's score relative to its seed.
pub const GRAPH_DAMPING: f32 = 0.5;
/// Top results whose neighbours are added.
pub const GRAPH_SEEDS: usize = 3;
/// Most graph neighbours added to one answer. A constant (not a share of `limit`), so that
/// asking for more results never changes the first ones.
pub const GRAPH_EXTRAS: usize = 5;

impl Engine {
    pub fn search_code(&self, a: &SearchCodeArgs) -> ToolResult<SearchCodeAnswer> {
        let t0 = Instant::now();
        check_text("query", &a.query)?;
        let snap = self.snapshot();
        let mut dbg = Debug {
            generation: snap.generation(),
            ..Debug::default()
        };
        let mode = match a.mode.unwrap_or_default() {
            ModeArg::Hybrid => Mode::Hybrid,
            ModeArg::Vector => Mode::Vector,
            ModeArg::Lexical => Mode::Lexical,
        };
        let limit = limit_arg(a.limit, 10, MAX_LIMIT)?;
        let mut o = SearchOptions {
            limit,
            mode,
            language: filter_value(a.language.as_deref(), true),
            kind: filter_value(a.kind.as_deref(), true),
            repo: filter_value(a.repo.as_deref(), false),
            weights: a.weights.map(|[v, l]| (v, l)),
            ..SearchOptions::default()
        };
        check_weights(o.weights)?;
        if let Some(p) = a.path.as_deref().filter(|p| !p.trim().is_empty()) {
            let (rel, repo) = root_relative(&snap.code.index.manifest.roots, p.trim(), &o.repo)?;
            if repo.is_some() {
                o.repo = repo;
            }
            if let Some(rel) = rel {
                o.path_glob =
                    Some(path_glob(&rel).map_err(|e| ToolError::InvalidInput(e.to_string()))?);
            }
        }
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
        // Nothing before the final cut depends on `limit` (so the first results do not change
        // when only `limit` grows): search's own top-k is limit-independent, and the graph
        // neighbours are found from a fixed pool (the first MAX_LIMIT hits).
        let so = SearchOptions {
            limit: limit.max(MAX_LIMIT).max(GRAPH_SEEDS),
            ..o.clone()
        };
        let (pool, tm) = code::search::search(&snap.code.index, a.query.trim(), qv.as_deref(), &so)
            .map_err(|e| ToolError::Internal(e.to_string()))?;
        if pool.is_empty() {
            // Nothing found: a filter value the index does not hold is a mistake to name, not
            // an empty answer to trust.
            if let Some(why) = unmatched_filter(&snap.code.index, &o) {
                return Err(ToolError::InvalidInput(why));
            }
        }
        dbg.filter_ms = ms(tm.filter);
        dbg.vector_ms = ms(tm.vector);
        dbg.bm25_ms = ms(tm.bm25);
        dbg.fusion_ms = ms(tm.fusion);
        dbg.fusion = tm.choice.as_ref().map(|c| c.reason.clone());

        let t = Instant::now();
        let extra = if a.expand_graph.unwrap_or(true) {
            graph_neighbours(&snap, &pool, &o)
        } else {
            Vec::new()
        };
        // Each chunk appears once. A neighbour that beats its own search score is a neighbour
        // (and no search result) whatever the limit; one that does not is a neighbour only when
        // its search result is not shown — then its neighbour score is at most its search
        // score, below every shown result, so the first results never depend on the limit.
        let search_score: HashMap<NodeRef, f32> = pool
            .iter()
            .map(|h| ((h.segment, h.chunk), h.score))
            .collect();
        let displaced: HashSet<NodeRef> = extra
            .iter()
            .filter(|(r, same)| search_score.get(same).is_some_and(|&hs| r.0 > hs))
            .map(|e| e.1)
            .collect();
        let shown: Vec<&code::Hit> = pool
            .iter()
            .filter(|h| !displaced.contains(&(h.segment, h.chunk)))
            .take(limit)
            .collect();
        let shown_nodes: HashSet<NodeRef> = shown.iter().map(|h| (h.segment, h.chunk)).collect();
        let extra: Vec<Ranked> = extra
            .into_iter()
            .filter(|(_, same)| displaced.contains(same) || !shown_nodes.contains(same))
            .map(|e| e.0)
            .take(GRAPH_EXTRAS)
            .collect();
        let mut ranked: Vec<Ranked> = shown
            .iter()
            .map(|h| {
                (
                    h.score,
                    (h.segment, h.chunk),
                    h.vector_rank,
                    h.lexical_rank,
                    None,
                    Some((h.start_line, h.end_line)),
                )
            })
            .collect();
        ranked.extend(extra);
        // Stable, by score only: search results keep their order (ties included) and come
        // before a neighbour with the same score.
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
        dbg.graph_ms = ms(t.elapsed());

        let t = Instant::now();
        let lines = a.snippet_lines.unwrap_or(12);
        let max_chars = a.max_chars.unwrap_or(800);
        let results = ranked
            .into_iter()
            .map(|(score, n, vr, lr, via, span)| {
                let (snip, truncated) = if lines == 0 {
                    (String::new(), false)
                } else {
                    snippet(snap.code.text(n)?, lines, max_chars)
                };
                let mut symbol = symbol_ref(&snap.code, n);
                if let Some((start, end)) = span {
                    symbol.start_line = start;
                    symbol.end_line = end;
                }
                Ok(CodeHit {
                    score: (score * 1e4).round() / 1e4,
                    symbol,
                    repo: snap.code.file(n).repo.to_string(),
                    source: if via.is_some() { "graph" } else { "search" },
                    via,
                    vector_rank: vr,
                    lexical_rank: lr,
                    snippet: snip,
                    truncated,
                })
            })
            .collect::<ToolResult<_>>()?;
        dbg.format_ms = ms(t.elapsed());
        dbg.total_ms = ms(t0.elapsed());
        Ok(SearchCodeAnswer {
            query: a.query.clone(),
            mode: match mode {
                Mode::Hybrid => "hybrid",
                Mode::Vector => "vector",
                Mode::Lexical => "lexical",
            },
            results,
            debug: a.debug.then_some(dbg),
        })
    }
}

/// Graph neighbours: callees, callers and members of the first [`GRAPH_SEEDS`] hits of `pool`
/// that pass the filters (seeds left out), scored at [`GRAPH_DAMPING`] times their seed's score
/// (0.7 of that for an unresolved edge), best first. Each comes with the pool hit it stands for:
/// itself, or the hit with the same path and lines. Depends on the pool alone.
fn graph_neighbours(s: &Snapshot, pool: &[code::Hit], o: &SearchOptions) -> Vec<(Ranked, NodeRef)> {
    // A body part's edges are its symbol's (the head chunk's).
    let symbol_of = |h: &code::Hit| {
        (
            h.segment,
            s.code.chunk((h.segment, h.chunk)).symbol_chunk(h.chunk),
        )
    };
    let seeds: Vec<NodeRef> = pool.iter().take(GRAPH_SEEDS).map(symbol_of).collect();
    let by_lines: HashMap<(&str, u32, u32), NodeRef> = pool
        .iter()
        .map(|h| {
            (
                (h.path.as_str(), h.start_line, h.end_line),
                (h.segment, h.chunk),
            )
        })
        .collect();
    // Neighbour → (score, relation), the best seed's.
    let mut best: HashMap<NodeRef, (f32, String)> = HashMap::new();
    for h in pool.iter().take(GRAPH_SEEDS) {
        let seed = symbol_of(h);
        let seed_label = label(&symbol_ref(&s.code, seed));
        let mut neigh: Vec<(NodeRef, u8, String)> = Vec::new();
        for (n, fl) in s.code.out_edges(seed, EdgeKind::Calls) {
            neigh.push((n, fl, format!("called by {seed_label}")));
        }
        for (n, fl) in s.code.in_edges(seed, EdgeKind::Calls) {
            neigh.push((n, fl, format!("calls {seed_label}")));
        }
        for (n, fl) in s.code.out_edges(seed, EdgeKind::Contains) {
            neigh.push((n, fl, format!("member of {seed_label}")));
        }
        for (n, fl, via) in neigh {
            if seeds.contains(&n) || !s.code.is_live_chunk(n) || !passes(s, n, o) {
                continue;
            }
            let w = if fl & EDGE_RESOLVED != 0 { 1.0 } else { 0.7 };
            let score = h.score * GRAPH_DAMPING * w;
            let e = best.entry(n).or_insert((f32::NEG_INFINITY, String::new()));
            if score > e.0 {
                *e = (score, via);
            }
        }
    }
    // (neighbour, the pool hit it stands for: itself or the hit with its lines).
    let mut extra: Vec<(Ranked, NodeRef)> = best
        .into_iter()
        .filter_map(|(n, (score, via))| {
            let c = s.code.chunk(n);
            let key = (
                s.code.file(n).path.as_str(),
                c.start_line.to_native(),
                c.end_line.to_native(),
            );
            let same = by_lines.get(&key).copied().unwrap_or(n);
            (!seeds.contains(&same)).then_some(((score, n, None, None, Some(via), None), same))
        })
        .collect();
    extra.sort_by(|a, b| b.0 .0.total_cmp(&a.0 .0).then(a.0 .1.cmp(&b.0 .1)));
    extra
}

/// Whether a chunk passes the search filters (for graph neighbours, which bypass the bitmaps).
fn passes(s: &Snapshot, n: NodeRef, o: &SearchOptions) -> bool {
    let f = s.code.file(n);
    let c = s.code.chunk(n);
    o.language.as_deref().is_none_or(|l| f.language == l)
        && o.kind.as_deref().is_none_or(|k| c.kind == k)
        && o.repo.as_deref().is_none_or(|r| f.repo == r)
        && o.path_glob
            .as_ref()
            .is_none_or(|g| g.is_match(f.path.as_str()))
}

/// A `path` filter as search reads it: relative to a repository root. Agents often know files
/// by absolute path, and an absolute pattern matched no stored (relative) path, so the search
/// silently found nothing. An absolute one is cut at its first component with glob characters
/// below the deepest root it lies in as written (a root's own path may hold them);
/// that literal part must lie inside an indexed root ([`format::roots::confine`], within the
/// `repo` filter's roots when one is given), and the pattern becomes the rest relative to the
/// root, with the root's repository as the repo filter. Returns the relative pattern (`None`:
/// the whole root) and the repository to filter on (`None`: unchanged). `queryd search` reads
/// its `--path` the same way.
/// A filter value as given (`language`, `kind`: lower-cased, as the index stores them:
/// `Rust` or ` function` found nothing, silently); `None` when blank.
pub fn filter_value(v: Option<&str>, lower: bool) -> Option<String> {
    let v = v?.trim();
    (!v.is_empty()).then(|| {
        if lower {
            v.to_ascii_lowercase()
        } else {
            v.to_string()
        }
    })
}

/// Why the filters of `o` match nothing in `index`: a language, kind or repository no live
/// file or chunk of it has, with the values it does hold. `None` when every value occurs
/// (then the query itself found nothing). Read only after a search came back empty.
pub fn unmatched_filter(index: &format::Index, o: &SearchOptions) -> Option<String> {
    use std::collections::BTreeSet;
    // (file record, the kind a filter sees: a header's or body part's symbol's) of each live
    // chunk.
    let live = || {
        index.segments.iter().flat_map(|ls| {
            let t = ls.segment.table();
            (0..t.chunks.len() as u32)
                .filter(|&c| !ls.tombstones.contains(c))
                .map(move |c| {
                    let ch = &t.chunks[c as usize];
                    let kind = t.chunks[ch.symbol_chunk(c) as usize].kind.as_str();
                    (&t.files[ch.file.to_native() as usize], kind)
                })
        })
    };
    // Most values listed (repositories can be many).
    const LISTED: usize = 30;
    let missing = |what: &str, want: &str, all: BTreeSet<&str>| -> Option<String> {
        (!all.contains(want)).then(|| {
            let n = all.len();
            let mut list: Vec<&str> = all.into_iter().take(LISTED).collect();
            let more = n.saturating_sub(LISTED);
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            if list.is_empty() {
                list.push("nothing");
            }
            format!(
                "no live chunk of this index has {what} `{want}`; it holds: {}{more}",
                list.join(", ")
            )
        })
    };
    let has = |f: &dyn Fn(&format::records::ArchivedFileRecord, &str) -> bool| {
        live().any(|(file, kind)| f(file, kind))
    };
    if let Some(l) = &o.language {
        if !has(&|f, _| f.language == l.as_str()) {
            return missing(
                "language",
                l,
                live().map(|(f, _)| f.language.as_str()).collect(),
            );
        }
    }
    if let Some(k) = &o.kind {
        if !has(&|_, kind| kind == k) {
            return missing("kind", k, live().map(|(_, kind)| kind).collect());
        }
    }
    if let Some(r) = &o.repo {
        if !has(&|f, _| f.repo == r.as_str()) {
            return missing(
                "repository",
                r,
                live().map(|(f, _)| f.repo.as_str()).collect(),
            );
        }
    }
    None
}

pub fn root_relative(
    roots: &[format::manifest::RootEntry],
    pattern: &str,
    repo: &Option<String>,
) -> ToolResult<(Option<String>, Option<String>)> {
    if !std::path::Path::new(pattern).is_absolute() {
        // Indexed paths are relative to their root and never hold `..`: such a filter matched
        // nothing, silently.
        if pattern.split('/').any(|c| c == "..") {
            return Err(ToolError::InvalidInput(format!(
                "the path filter `{pattern}` holds `..`: paths are relative to their root \
                 (`src/lib.rs`, `src/**/*.rs`) or absolute inside it"
            )));
        }
        return Ok((Some(pattern.to_string()), None));
    }
    // `//` and `/./` say nothing (as `Path` reads them), and would put the cut below off.
    // (A trailing `/` is kept: it makes the pattern a directory for `path_glob`.)
    let split: Vec<&str> = pattern.split('/').collect();
    let last = split.len() - 1;
    let parts: Vec<&str> = split
        .into_iter()
        .enumerate()
        .filter(|(i, c)| *i == 0 || (*i == last && c.is_empty()) || !(c.is_empty() || *c == "."))
        .map(|(_, c)| c)
        .collect();
    // A root's own path may hold glob characters (`/work/[team]/app`): the glob part is looked
    // for after the deepest root the pattern lies in as written.
    let within = roots
        .iter()
        .filter(|r| repo.as_deref().is_none_or(|x| x == r.repo))
        .filter(|r| std::path::Path::new(pattern).starts_with(&r.path))
        .map(|r| std::path::Path::new(&r.path).components().count())
        .max()
        .unwrap_or(0)
        .min(parts.len());
    let cut = parts[within..]
        .iter()
        .position(|c| code::search::has_glob_meta(c))
        .map_or(parts.len(), |i| within + i);
    let literal = match parts[..cut].join("/") {
        s if s.is_empty() => "/".to_string(),
        s => s,
    };
    // As written first (a symlink inside the root keeps the name the index stores it under),
    // the deepest root holding it; then with symlinks resolved (`confine`).
    let lexical = roots
        .iter()
        .filter(|r| repo.as_deref().is_none_or(|x| x == r.repo))
        .filter_map(|r| {
            let rest = std::path::Path::new(&literal).strip_prefix(&r.path).ok()?;
            format::roots::clean_relative(rest).map(|parts| (r, parts.join("/")))
        })
        .max_by_key(|(r, _)| r.path.len());
    let c = match lexical {
        Some((r, rel)) => Ok(format::roots::Confined {
            root: r.clone(),
            full: std::path::Path::new(&r.path).join(&rel),
            rel,
        }),
        None => {
            let opts = format::roots::ConfineOptions {
                repo: repo.as_deref(),
                allow_absolute: true,
                allow_root: true,
            };
            format::roots::confine(roots, &literal, opts)
        }
    };
    let c =
        c.map_err(|e| {
            ToolError::InvalidInput(match e {
                format::roots::ConfineError::NotInRoot { roots, .. } => {
                    format!(
                "`path` `{pattern}` is absolute but not inside an indexed root ({}); give it \
                 inside one, or relative to the repository root (`src/`, `**/*.rs`)",
                if roots.is_empty() { "none recorded" } else { roots.as_str() }
            )
                }
                e => format!("`path` `{pattern}`: {e}"),
            })
        })?;
    let rest = parts[cut..].join("/");
    // Anchored at the root: `/root/*.rs` is the top level's `.rs` files (`./*.rs`), not
    // every one at any depth (which a pattern without `/` means).
    let rel = match (c.rel.is_empty(), rest.is_empty()) {
        (true, true) => None,
        (false, true) => Some(c.rel.clone()),
        (true, false) => Some(format!("./{rest}")),
        (false, false) => Some(format!("{}/{rest}", c.rel)),
    };
    Ok((rel, Some(c.root.repo)))
}

#[cfg(test)]
mod tests {
    use super::root_relative;

    fn root(repo: &str, path: &str) -> format::manifest::RootEntry {
        format::manifest::RootEntry {
            repo: repo.into(),
            path: path.into(),
            ..Default::default()
        }
    }

    #[test]
    fn absolute_patterns_become_root_relative() {
        // Lexical only: none of these paths exist, so the symlink-resolving fallback is not
        // reached for the ones inside a root.
        let roots = [
            root("app", "/nowhere/[team]/app"),
            root("lib", "/nowhere/lib"),
        ];
        let rel = |p: &str| root_relative(&roots, p, &None).unwrap();
        // A root whose own path has glob characters: the glob part begins after it.
        assert_eq!(
            rel("/nowhere/[team]/app/src/*.rs"),
            (Some("src/*.rs".into()), Some("app".into()))
        );
        assert_eq!(
            rel("/nowhere/[team]/app/*.rs"),
            (Some("./*.rs".into()), Some("app".into()))
        );
        assert_eq!(rel("/nowhere/[team]/app"), (None, Some("app".into())));
        assert_eq!(
            rel("/nowhere//[team]/./app//src/*.rs"),
            (Some("src/*.rs".into()), Some("app".into()))
        );
        assert_eq!(
            rel("/nowhere/lib/app/[slug]/"),
            (Some("app/[slug]/".into()), Some("lib".into()))
        );
        // Glob characters in a directory under the root stay in the pattern (path_glob reads
        // them both ways).
        assert_eq!(
            rel("/nowhere/lib/app/[slug]/page.tsx"),
            (Some("app/[slug]/page.tsx".into()), Some("lib".into()))
        );
        // Relative patterns pass through unchanged.
        assert_eq!(rel("src/[id].ts"), (Some("src/[id].ts".into()), None));
        // The repo filter limits the roots considered.
        assert!(root_relative(&roots, "/nowhere/lib/x", &Some("app".into())).is_err());
    }
}
