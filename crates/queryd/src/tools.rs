//! The tools, as plain functions on [`Engine`]: typed arguments in (serde + JSON schema),
//! serialisable answers out. The MCP layer (`mcp.rs`) only routes and converts.
//!
//! Every tool takes `debug`; then the answer carries [`Debug`], the time per phase.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

use format::records::{EdgeKind, EDGE_RESOLVED, NO_PARENT};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::engine::{unix_secs, Engine, NodeRef, Snapshot};
use crate::search::{path_glob, Mode, SearchOptions};

/// Longest accepted query or code text, in bytes.
pub const MAX_QUERY_BYTES: usize = 8 * 1024;
/// Most results any tool returns.
pub const MAX_LIMIT: usize = 100;

/// Why a tool could not answer. `InvalidInput` and `NotFound` are the caller's to fix.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolError {
    InvalidInput(String),
    NotFound {
        message: String,
        suggestions: Vec<String>,
    },
    Internal(String),
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToolError::InvalidInput(m) | ToolError::Internal(m) => f.write_str(m),
            ToolError::NotFound {
                message,
                suggestions,
            } => {
                f.write_str(message)?;
                if !suggestions.is_empty() {
                    write!(f, "; did you mean: {}?", suggestions.join(", "))?;
                }
                Ok(())
            }
        }
    }
}

pub(crate) type ToolResult<T> = Result<T, ToolError>;

pub(crate) fn check_text(what: &str, q: &str) -> ToolResult<()> {
    if q.trim().is_empty() {
        return Err(ToolError::InvalidInput(format!(
            "`{what}` is empty; pass some words, an identifier or code"
        )));
    }
    if q.len() > MAX_QUERY_BYTES {
        return Err(ToolError::InvalidInput(format!(
            "`{what}` is {} bytes; the limit is {MAX_QUERY_BYTES} bytes: shorten it to the part that matters",
            q.len()
        )));
    }
    Ok(())
}

fn check_symbol(s: &str) -> ToolResult<()> {
    if s.trim().is_empty() {
        return Err(ToolError::InvalidInput(
            "`symbol` is empty; pass a symbol id (from search_code) or a name like `parse_config` or `Server::run`".into(),
        ));
    }
    if s.len() > 1024 {
        return Err(ToolError::InvalidInput(format!(
            "`symbol` is {} bytes; a symbol id or name is at most 1024 bytes",
            s.len()
        )));
    }
    Ok(())
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// `weights` of a hybrid search: two finite non-negative numbers, not both 0.
pub(crate) fn check_weights(w: Option<(f32, f32)>) -> ToolResult<()> {
    if w.is_some_and(|(v, l)| {
        !(v.is_finite() && l.is_finite() && v >= 0.0 && l >= 0.0 && v + l > 0.0)
    }) {
        return Err(ToolError::InvalidInput(
            "`weights` must be two non-negative numbers [vector, lexical], not both 0".into(),
        ));
    }
    Ok(())
}

pub(crate) fn ms(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// Time per phase in milliseconds (only with `debug: true`).
#[derive(Debug, Default, Clone, Serialize, JsonSchema)]
pub struct Debug {
    /// Query embedding (0 when cached or not needed).
    #[serde(skip_serializing_if = "is_zero")]
    pub embed_ms: f64,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub embed_cached: bool,
    /// Filter bitmaps.
    #[serde(skip_serializing_if = "is_zero")]
    pub filter_ms: f64,
    /// Vector search over all segments.
    #[serde(skip_serializing_if = "is_zero")]
    pub vector_ms: f64,
    /// BM25 over all segments.
    #[serde(skip_serializing_if = "is_zero")]
    pub bm25_ms: f64,
    /// Graph walks (expansion, callers/callees, impact).
    #[serde(skip_serializing_if = "is_zero")]
    pub graph_ms: f64,
    /// Rank fusion.
    #[serde(skip_serializing_if = "is_zero")]
    pub fusion_ms: f64,
    /// Building the answer (snippets, records).
    #[serde(skip_serializing_if = "is_zero")]
    pub format_ms: f64,
    /// Other work (text scans, symbol lookup).
    #[serde(skip_serializing_if = "is_zero")]
    pub other_ms: f64,
    pub total_ms: f64,
    /// Index generation that answered.
    pub generation: u64,
}

/// A symbol or chunk, as tools name it.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct SymbolRef {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub qualified: String,
    pub kind: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub symbol_id: String,
    pub path: String,
    pub language: String,
    pub start_line: u32,
    pub end_line: u32,
}

fn symbol_ref(s: &Snapshot, n: NodeRef) -> SymbolRef {
    let f = s.file(n);
    if s.is_chunk(n) {
        let c = s.chunk(n);
        SymbolRef {
            name: c.name.to_string(),
            // Only when it says more than the name.
            qualified: if c.qualified == c.name {
                String::new()
            } else {
                c.qualified.to_string()
            },
            kind: c.kind.to_string(),
            symbol_id: c.symbol_id.to_string(),
            path: f.path.to_string(),
            language: f.language.to_string(),
            start_line: c.start_line.to_native(),
            end_line: c.end_line.to_native(),
        }
    } else {
        let t = f.chunk_count.to_native();
        let end = if t == 0 {
            0
        } else {
            let last = (n.0, f.first_chunk.to_native() + t - 1);
            s.chunk(last).end_line.to_native()
        };
        SymbolRef {
            name: f.path.rsplit('/').next().unwrap_or("").to_string(),
            qualified: String::new(),
            kind: "file".into(),
            symbol_id: String::new(),
            path: f.path.to_string(),
            language: f.language.to_string(),
            start_line: 1,
            end_line: end,
        }
    }
}

fn label(r: &SymbolRef) -> String {
    if !r.qualified.is_empty() {
        r.qualified.clone()
    } else if !r.name.is_empty() {
        r.name.clone()
    } else {
        format!("{}:{}", r.path, r.start_line)
    }
}

/// The first `lines` lines of `text`, at most `max_chars` characters; (snippet, truncated).
pub fn snippet(text: &str, lines: usize, max_chars: usize) -> (String, bool) {
    let mut out = String::new();
    let mut truncated = false;
    for (i, l) in text.lines().enumerate() {
        if i >= lines {
            truncated = true;
            break;
        }
        if i > 0 {
            out.push('\n');
        }
        out.push_str(l);
    }
    if out.chars().count() > max_chars {
        out = out.chars().take(max_chars).collect();
        truncated = true;
    }
    (out, truncated)
}

// ---------------------------------------------------------------------------------------------
// search_code

/// Ranking mode.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ModeArg {
    /// Vectors and BM25 fused with weighted RRF (default).
    #[default]
    Hybrid,
    /// Embedding similarity only: paraphrases, descriptions.
    Vector,
    /// BM25 only: exact identifiers and keywords.
    Lexical,
}

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
    /// Weights of the [vector, lexical] rankings in hybrid mode (default: by query shape,
    /// identifiers lean lexical, sentences weigh both equally).
    #[serde(default)]
    pub weights: Option<[f32; 2]>,
    /// Only this language: rust, python, typescript, tsx, javascript, go, java, c, cpp, markdown, toml, ...
    #[serde(default)]
    pub language: Option<String>,
    /// Only this chunk kind: function, method, class, struct, enum, trait, interface, impl, module, top_level, window, ...
    #[serde(default)]
    pub kind: Option<String>,
    /// Only paths matching this glob (`src/**/*.rs`, `*.py`) or starting with this prefix (`crates/format/`).
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

/// (score, node, vector rank, lexical rank, graph relation).
type Ranked = (f32, NodeRef, Option<usize>, Option<usize>, Option<String>);

/// Damping of a graph neighbour's score relative to its seed.
pub const GRAPH_DAMPING: f32 = 0.5;
/// Top results whose neighbours are added.
pub const GRAPH_SEEDS: usize = 3;

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
        let limit = a.limit.unwrap_or(10).clamp(1, MAX_LIMIT);
        let mut o = SearchOptions {
            limit,
            mode,
            language: a.language.clone().filter(|s| !s.is_empty()),
            kind: a.kind.clone().filter(|s| !s.is_empty()),
            repo: a.repo.clone().filter(|s| !s.is_empty()),
            weights: a.weights.map(|[v, l]| (v, l)),
            ..SearchOptions::default()
        };
        check_weights(o.weights)?;
        if let Some(p) = a.path.as_deref().filter(|p| !p.trim().is_empty()) {
            o.path_glob = Some(path_glob(p).map_err(ToolError::InvalidInput)?);
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
        let (hits, tm) = crate::search::search(&snap.index, a.query.trim(), qv.as_deref(), &o)
            .map_err(|e| ToolError::Internal(e.to_string()))?;
        dbg.filter_ms = ms(tm.filter);
        dbg.vector_ms = ms(tm.vector);
        dbg.bm25_ms = ms(tm.bm25);
        dbg.fusion_ms = ms(tm.fusion);

        // Graph expansion: neighbours of the top seeds, damped, that pass the same filters.
        let t = Instant::now();
        let mut ranked: Vec<Ranked> = hits
            .iter()
            .map(|h| {
                (
                    h.score,
                    (h.segment, h.chunk),
                    h.vector_rank,
                    h.lexical_rank,
                    None,
                )
            })
            .collect();
        if a.expand_graph.unwrap_or(true) {
            let mut seen: HashSet<NodeRef> = ranked.iter().map(|r| r.1).collect();
            let mut extra = Vec::new();
            let cap = (limit / 2).max(2);
            for h in hits.iter().take(GRAPH_SEEDS) {
                let seed = (h.segment, h.chunk);
                let seed_label = label(&symbol_ref(&snap, seed));
                let mut neigh: Vec<(NodeRef, u8, String)> = Vec::new();
                for (n, fl) in snap.out_edges(seed, EdgeKind::Calls) {
                    neigh.push((n, fl, format!("called by {seed_label}")));
                }
                for (n, fl) in snap.in_edges(seed, EdgeKind::Calls) {
                    neigh.push((n, fl, format!("calls {seed_label}")));
                }
                for (n, fl) in snap.out_edges(seed, EdgeKind::Contains) {
                    neigh.push((n, fl, format!("member of {seed_label}")));
                }
                for (n, fl, via) in neigh {
                    if !snap.is_live_chunk(n) || !passes(&snap, n, &o) || !seen.insert(n) {
                        continue;
                    }
                    let w = if fl & EDGE_RESOLVED != 0 { 1.0 } else { 0.7 };
                    extra.push((h.score * GRAPH_DAMPING * w, n, None, None, Some(via)));
                }
            }
            extra.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            extra.truncate(cap);
            ranked.extend(extra);
            ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        }
        dbg.graph_ms = ms(t.elapsed());

        let t = Instant::now();
        let lines = a.snippet_lines.unwrap_or(12);
        let max_chars = a.max_chars.unwrap_or(800);
        let results = ranked
            .into_iter()
            .map(|(score, n, vr, lr, via)| {
                let (snip, truncated) = if lines == 0 {
                    (String::new(), false)
                } else {
                    snippet(&snap.chunk(n).text, lines, max_chars)
                };
                CodeHit {
                    score: (score * 1e4).round() / 1e4,
                    symbol: symbol_ref(&snap, n),
                    repo: snap.file(n).repo.to_string(),
                    source: if via.is_some() { "graph" } else { "search" },
                    via,
                    vector_rank: vr,
                    lexical_rank: lr,
                    snippet: snip,
                    truncated,
                }
            })
            .collect();
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

/// Whether a chunk passes the search filters (for graph neighbours, which bypass the bitmaps).
fn passes(s: &Snapshot, n: NodeRef, o: &SearchOptions) -> bool {
    let f = s.file(n);
    let c = s.chunk(n);
    o.language.as_deref().is_none_or(|l| f.language == l)
        && o.kind.as_deref().is_none_or(|k| c.kind == k)
        && o.repo.as_deref().is_none_or(|r| f.repo == r)
        && o.path_glob
            .as_ref()
            .is_none_or(|g| g.is_match(f.path.as_str()))
}

// ---------------------------------------------------------------------------------------------
// get_symbol

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SymbolArgs {
    /// A symbol id from another tool's answer (`rust repo src/lib.rs/Dictionary#suggest().`), a
    /// qualified name (`Dictionary::suggest`, `Circle.area`) or a simple name (`suggest`).
    pub symbol: String,
    /// Characters of code at most (default 4000).
    #[serde(default)]
    pub max_chars: Option<usize>,
    /// Return a per-phase timing breakdown.
    #[serde(default)]
    pub debug: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SymbolAnswer {
    #[serde(flatten)]
    pub symbol: SymbolRef,
    pub repo: String,
    pub code: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Enclosing symbols, innermost first, then the file.
    pub parents: Vec<SymbolRef>,
    /// Symbols defined inside it (methods of a class, ...).
    pub children: Vec<SymbolRef>,
    /// Other symbols with the same name (when a name, not an id, was given).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub other_matches: Vec<SymbolRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

impl Engine {
    fn not_found(&self, snap: &Snapshot, symbol: &str) -> ToolError {
        ToolError::NotFound {
            message: format!(
                "no symbol `{symbol}` in the index (generation {}); pass a symbol id from search_code or a name",
                snap.generation()
            ),
            suggestions: snap.suggest(symbol, 5),
        }
    }

    /// The full code of a symbol: its pieces (long bodies are split) joined in order.
    fn code_of(snap: &Snapshot, n: NodeRef) -> String {
        let c = snap.chunk(n);
        let id = c.symbol_id.as_str();
        if id.is_empty() {
            return c.text.to_string();
        }
        let pieces = snap.by_symbol_id(id);
        if pieces.len() <= 1 {
            return c.text.to_string();
        }
        pieces
            .iter()
            .map(|&p| snap.chunk(p).text.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn parents(snap: &Snapshot, n: NodeRef) -> Vec<SymbolRef> {
        let mut out = Vec::new();
        let mut cur = n;
        for _ in 0..32 {
            let p = snap.chunk(cur).parent.to_native();
            if p == NO_PARENT
                || p as usize >= snap.index.segments[cur.0].segment.table().chunks.len()
            {
                break;
            }
            cur = (cur.0, p);
            out.push(symbol_ref(snap, cur));
        }
        let t = snap.index.segments[n.0].segment.table();
        let file_node = (n.0, t.chunks.len() as u32 + snap.chunk(n).file.to_native());
        out.push(symbol_ref(snap, file_node));
        out
    }

    fn children(snap: &Snapshot, n: NodeRef) -> Vec<SymbolRef> {
        let mut kids: Vec<NodeRef> = snap
            .out_edges(n, EdgeKind::Contains)
            .into_iter()
            .map(|x| x.0)
            .filter(|&x| snap.is_live_chunk(x))
            .collect();
        if kids.is_empty() {
            // Containment by the parent field (same segment).
            let t = snap.index.segments[n.0].segment.table();
            kids = (0..t.chunks.len() as u32)
                .filter(|&c| t.chunks[c as usize].parent.to_native() == n.1)
                .map(|c| (n.0, c))
                .filter(|&x| snap.is_live_chunk(x))
                .collect();
        }
        let own = snap.chunk(n).symbol_id.as_str();
        kids.into_iter()
            .filter(|&k| own.is_empty() || snap.chunk(k).symbol_id != own)
            .take(50)
            .map(|k| symbol_ref(snap, k))
            .collect()
    }

    pub fn get_symbol(&self, a: &SymbolArgs) -> ToolResult<SymbolAnswer> {
        let t0 = Instant::now();
        check_symbol(&a.symbol)?;
        let snap = self.snapshot();
        let found = snap.resolve(&a.symbol);
        let Some(&n) = found.first() else {
            return Err(self.not_found(&snap, &a.symbol));
        };
        let lookup = t0.elapsed();
        let t = Instant::now();
        let (code, truncated) = snippet(
            &Self::code_of(&snap, n),
            usize::MAX,
            a.max_chars.unwrap_or(4000),
        );
        let ans = SymbolAnswer {
            symbol: symbol_ref(&snap, n),
            repo: snap.file(n).repo.to_string(),
            code,
            truncated,
            parents: Self::parents(&snap, n),
            children: Self::children(&snap, n),
            other_matches: found[1..]
                .iter()
                .take(10)
                .map(|&m| symbol_ref(&snap, m))
                .collect(),
            debug: None,
        };
        let graph = t.elapsed();
        Ok(SymbolAnswer {
            debug: a.debug.then(|| Debug {
                graph_ms: ms(graph),
                other_ms: ms(lookup),
                total_ms: ms(t0.elapsed()),
                generation: snap.generation(),
                ..Debug::default()
            }),
            ..ans
        })
    }
}

// ---------------------------------------------------------------------------------------------
// find_callers / find_callees

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallArgs {
    /// A symbol id, qualified name (`Dictionary::suggest`) or simple name (`closest_match`).
    pub symbol: String,
    /// Results to return (default 20, at most 100).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Return a per-phase timing breakdown.
    #[serde(default)]
    pub debug: bool,
}

/// Which stage of the cascade answered.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// CALLS edges of the code graph (exact).
    Graph,
    /// Whole-word occurrences of the identifier in indexed code (likely, unconfirmed).
    Text,
    /// Semantic search on the identifier split into words (related code, not confirmed calls).
    Semantic,
    /// Nothing found; see `suggestions`.
    NotFound,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CallSite {
    #[serde(flatten)]
    pub symbol: SymbolRef,
    /// Graph stage: whether the edge was resolved through the file or its imports (true) or
    /// inferred from a globally unique name (false).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved: Option<bool>,
    /// Text stage: the line of the match and its text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line_text: Option<String>,
    /// Semantic stage: cosine similarity to the identifier's words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub similarity: Option<f32>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CallAnswer {
    pub symbol: String,
    /// The symbols the name resolved to.
    pub resolved_to: Vec<SymbolRef>,
    pub stage: Stage,
    /// What the stage means for these results.
    pub note: String,
    pub results: Vec<CallSite>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub suggestions: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

/// Minimum cosine similarity for the semantic stage of the cascade.
pub const SEMANTIC_MIN_SIMILARITY: f32 = 0.45;

/// Splits an identifier into lower-case words: `closest_match` → `closest match`,
/// `HttpServer.serveHTTP` → `http server serve http`.
pub fn identifier_words(ident: &str) -> String {
    let mut words = Vec::new();
    for part in ident.split(|c: char| !c.is_alphanumeric()) {
        if part.is_empty() {
            continue;
        }
        let toks = format::text::tokenize(part);
        if toks.len() > 1 {
            words.extend(toks.into_iter().skip(1));
        } else {
            words.extend(toks);
        }
    }
    words.join(" ")
}

/// The identifier to look for in text: the last component of a name or symbol id.
pub fn simple_name(symbol: &str) -> String {
    let s = symbol
        .trim()
        .trim_end_matches("().")
        .trim_end_matches(['.', '#', '(', ')', '/']);
    s.rsplit(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
        .find(|p| !p.is_empty())
        .unwrap_or("")
        .to_string()
}

/// Positions where `ident` occurs as a whole word in `text`.
pub fn whole_word_lines(text: &str, ident: &str) -> Vec<(u32, String)> {
    let is_id = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    let mut out = Vec::new();
    if ident.is_empty() {
        return out;
    }
    for (i, line) in text.lines().enumerate() {
        let mut from = 0;
        while let Some(p) = line[from..].find(ident) {
            let a = from + p;
            let b = a + ident.len();
            let before = line[..a].chars().next_back();
            let after = line[b..].chars().next();
            if !before.is_some_and(is_id) && !after.is_some_and(is_id) {
                out.push((i as u32, line.trim().chars().take(200).collect()));
                break;
            }
            from = b;
        }
    }
    out
}

/// Identifiers directly followed by `(` in `text` (call sites), in order, without duplicates.
pub fn called_identifiers(text: &str) -> Vec<String> {
    let is_id = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    let mut out: Vec<String> = Vec::new();
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        if is_id(chars[i].1) && !chars[i].1.is_ascii_digit() {
            let start = chars[i].0;
            let mut j = i;
            while j < chars.len() && is_id(chars[j].1) {
                j += 1;
            }
            let end = chars.get(j).map_or(text.len(), |c| c.0);
            let mut k = j;
            while k < chars.len() && chars[k].1 == ' ' {
                k += 1;
            }
            if chars.get(k).is_some_and(|c| c.1 == '(') {
                let w = &text[start..end];
                if !KEYWORDS.contains(&w) && !out.iter().any(|o| o == w) {
                    out.push(w.to_string());
                }
            }
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

const KEYWORDS: &[&str] = &[
    "if", "for", "while", "match", "return", "switch", "catch", "fn", "def", "function", "sizeof",
    "typeof", "new", "super", "self", "this", "print", "println", "assert", "Some", "Ok", "Err",
    "elif", "and", "or", "not", "in", "func", "else", "with", "await", "async", "lambda", "vec",
];

impl Engine {
    fn call_cascade(&self, a: &CallArgs, callers: bool) -> ToolResult<CallAnswer> {
        let t0 = Instant::now();
        check_symbol(&a.symbol)?;
        let limit = a.limit.unwrap_or(20).clamp(1, MAX_LIMIT);
        let snap = self.snapshot();
        let mut dbg = Debug {
            generation: snap.generation(),
            ..Debug::default()
        };
        let targets = snap.resolve(&a.symbol);
        let resolved_to: Vec<SymbolRef> = targets
            .iter()
            .take(10)
            .map(|&n| symbol_ref(&snap, n))
            .collect();
        let ident = simple_name(&a.symbol);
        let answer =
            |stage: Stage, note: String, results: Vec<CallSite>, suggestions, dbg| CallAnswer {
                symbol: a.symbol.clone(),
                resolved_to: resolved_to.clone(),
                stage,
                note,
                results,
                suggestions,
                debug: dbg,
            };

        // 1. Graph.
        let t = Instant::now();
        let mut results = Vec::new();
        let mut seen = HashSet::new();
        for &n in &targets {
            let edges = if callers {
                snap.in_edges(n, EdgeKind::Calls)
            } else {
                snap.out_edges(n, EdgeKind::Calls)
            };
            for (m, fl) in edges {
                if seen.insert(m) && results.len() < limit {
                    results.push(CallSite {
                        symbol: symbol_ref(&snap, m),
                        resolved: Some(fl & EDGE_RESOLVED != 0),
                        line: None,
                        line_text: None,
                        similarity: None,
                    });
                }
            }
        }
        dbg.graph_ms = ms(t.elapsed());
        if !results.is_empty() {
            dbg.total_ms = ms(t0.elapsed());
            let what = if callers { "callers" } else { "callees" };
            return Ok(answer(
                Stage::Graph,
                format!("{what} from the code graph's CALLS edges"),
                results,
                Vec::new(),
                a.debug.then_some(dbg),
            ));
        }

        // 2. Exact text match.
        let t = Instant::now();
        let target_ids: HashSet<&str> = targets
            .iter()
            .map(|&n| snap.chunk(n).symbol_id.as_str())
            .filter(|s| !s.is_empty())
            .collect();
        if callers && !ident.is_empty() {
            for n in snap.live_chunks() {
                let c = snap.chunk(n);
                if target_ids.contains(c.symbol_id.as_str()) {
                    continue;
                }
                let hits = whole_word_lines(&c.text, &ident);
                let Some((off, text)) = hits.into_iter().find(|(_, l)| {
                    // A call or a reference, not the definition of another symbol of the same name.
                    !(l.contains(&format!("fn {ident}"))
                        || l.contains(&format!("def {ident}"))
                        || l.contains(&format!("function {ident}")))
                }) else {
                    continue;
                };
                results.push(CallSite {
                    symbol: symbol_ref(&snap, n),
                    resolved: None,
                    line: Some(c.start_line.to_native() + off),
                    line_text: Some(text),
                    similarity: None,
                });
                if results.len() >= limit {
                    break;
                }
            }
        } else if !callers {
            for &n in &targets {
                let own = snap.chunk(n).name.to_string();
                for w in called_identifiers(&Self::code_of(&snap, n)) {
                    if w == own {
                        continue;
                    }
                    if let Some(&m) = snap.by_name(&w).first() {
                        if seen.insert(m) && results.len() < limit {
                            results.push(CallSite {
                                symbol: symbol_ref(&snap, m),
                                resolved: None,
                                line: None,
                                line_text: None,
                                similarity: None,
                            });
                        }
                    }
                }
            }
        }
        dbg.other_ms = ms(t.elapsed());
        if !results.is_empty() {
            dbg.total_ms = ms(t0.elapsed());
            let note = if callers {
                format!("no CALLS edges; these chunks mention `{ident}` as a whole word (likely callers, unconfirmed)")
            } else {
                "no CALLS edges; these indexed symbols are called by name in its code (unconfirmed)"
                    .to_string()
            };
            return Ok(answer(
                Stage::Text,
                note,
                results,
                Vec::new(),
                a.debug.then_some(dbg),
            ));
        }

        // 3. Semantic search on the identifier's words (callers only: callees of an unknown
        // body cannot be guessed).
        if callers || !targets.is_empty() {
            let words = identifier_words(&ident);
            if !words.is_empty() {
                let t = Instant::now();
                let (qv, cached) = self.embed_query(&words).map_err(ToolError::Internal)?;
                dbg.embed_ms = ms(t.elapsed());
                dbg.embed_cached = cached;
                let t = Instant::now();
                let mut hits: Vec<(f32, NodeRef)> = Vec::new();
                for (si, ls) in snap.index.segments.iter().enumerate() {
                    let found = ls
                        .segment
                        .search_vectors(
                            &qv,
                            limit + targets.len(),
                            format::vectors::DEFAULT_NPROBE,
                            None,
                            Some(&ls.tombstones),
                        )
                        .map_err(|e| ToolError::Internal(e.to_string()))?;
                    hits.extend(found.into_iter().map(|(c, s)| (s, (si, c))));
                }
                hits.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                dbg.vector_ms = ms(t.elapsed());
                let results: Vec<CallSite> = hits
                    .into_iter()
                    .filter(|(s, n)| {
                        *s >= SEMANTIC_MIN_SIMILARITY
                            && !target_ids.contains(snap.chunk(*n).symbol_id.as_str())
                    })
                    .take(limit)
                    .map(|(s, n)| CallSite {
                        symbol: symbol_ref(&snap, n),
                        resolved: None,
                        line: None,
                        line_text: None,
                        similarity: Some((s * 1e4).round() / 1e4),
                    })
                    .collect();
                if !results.is_empty() {
                    dbg.total_ms = ms(t0.elapsed());
                    return Ok(answer(
                        Stage::Semantic,
                        format!("no graph edges or text matches; code semantically close to \"{words}\" (related, not confirmed calls)"),
                        results,
                        Vec::new(),
                        a.debug.then_some(dbg),
                    ));
                }
            }
        }

        // 4. Not found.
        dbg.total_ms = ms(t0.elapsed());
        let what = if callers { "callers" } else { "callees" };
        let note = if targets.is_empty() {
            format!("`{}` is not a known symbol and nothing mentions it; check the spelling or try the suggestions", a.symbol)
        } else {
            format!("no {what} found in the graph, in the text or semantically; it may be unused, called dynamically or from outside the index")
        };
        Ok(answer(
            Stage::NotFound,
            note,
            Vec::new(),
            snap.suggest(&a.symbol, 5),
            a.debug.then_some(dbg),
        ))
    }

    pub fn find_callers(&self, a: &CallArgs) -> ToolResult<CallAnswer> {
        self.call_cascade(a, true)
    }

    pub fn find_callees(&self, a: &CallArgs) -> ToolResult<CallAnswer> {
        self.call_cascade(a, false)
    }
}

// ---------------------------------------------------------------------------------------------
// impact_analysis

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImpactArgs {
    /// A symbol id, qualified name or simple name.
    pub symbol: String,
    /// How many call levels up to follow (default 3, at most 8).
    #[serde(default)]
    pub depth: Option<usize>,
    /// Affected symbols to return at most (default 50, at most 100).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Return a per-phase timing breakdown.
    #[serde(default)]
    pub debug: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Affected {
    #[serde(flatten)]
    pub symbol: SymbolRef,
    /// Call levels between it and the changed symbol (1 = direct caller).
    pub depth: usize,
    /// Names from the changed symbol up to this one.
    pub path: Vec<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ImpactAnswer {
    pub symbol: SymbolRef,
    pub depth: usize,
    pub affected: Vec<Affected>,
    /// Files holding affected symbols.
    pub files: Vec<String>,
    /// True when `limit` cut the list.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

impl Engine {
    pub fn impact_analysis(&self, a: &ImpactArgs) -> ToolResult<ImpactAnswer> {
        let t0 = Instant::now();
        check_symbol(&a.symbol)?;
        let depth = a.depth.unwrap_or(3).clamp(1, 8);
        let limit = a.limit.unwrap_or(50).clamp(1, MAX_LIMIT);
        let snap = self.snapshot();
        let Some(&root) = snap.resolve(&a.symbol).first() else {
            return Err(self.not_found(&snap, &a.symbol));
        };
        let t = Instant::now();
        let mut parent: HashMap<NodeRef, NodeRef> = HashMap::new();
        let mut level: HashMap<NodeRef, usize> = HashMap::from([(root, 0)]);
        let mut order = Vec::new();
        let mut q = VecDeque::from([root]);
        let mut truncated = false;
        while let Some(n) = q.pop_front() {
            let d = level[&n];
            if d >= depth {
                continue;
            }
            for (m, _) in snap.in_edges(n, EdgeKind::Calls) {
                if level.contains_key(&m) {
                    continue;
                }
                if order.len() >= limit {
                    truncated = true;
                    break;
                }
                level.insert(m, d + 1);
                parent.insert(m, n);
                order.push(m);
                q.push_back(m);
            }
        }
        let graph = t.elapsed();
        let t = Instant::now();
        let name = |n: NodeRef| label(&symbol_ref(&snap, n));
        let affected: Vec<Affected> = order
            .iter()
            .map(|&m| {
                let mut path = vec![name(m)];
                let mut cur = m;
                while let Some(&p) = parent.get(&cur) {
                    path.push(name(p));
                    cur = p;
                }
                path.reverse();
                Affected {
                    symbol: symbol_ref(&snap, m),
                    depth: level[&m],
                    path,
                }
            })
            .collect();
        let mut files: Vec<String> = affected.iter().map(|x| x.symbol.path.clone()).collect();
        files.sort();
        files.dedup();
        Ok(ImpactAnswer {
            symbol: symbol_ref(&snap, root),
            depth,
            affected,
            files,
            truncated,
            debug: a.debug.then(|| Debug {
                graph_ms: ms(graph),
                format_ms: ms(t.elapsed()),
                total_ms: ms(t0.elapsed()),
                generation: snap.generation(),
                ..Debug::default()
            }),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// explain_code

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ExplainAnswer {
    #[serde(flatten)]
    pub symbol: SymbolAnswer,
    /// Doc comment or leading comment lines, when the code starts with them.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub doc: String,
    pub callers: Vec<SymbolRef>,
    pub callees: Vec<SymbolRef>,
    /// Imports of its file as written.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub file_imports: Vec<String>,
    /// Active memories whose code references point at this symbol (by symbol id, or lines
    /// overlapping it), each checked against the current file.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub memories: Vec<crate::memory::tools::MemoryOut>,
}

fn leading_doc(code: &str) -> String {
    let mut doc = Vec::new();
    for l in code.lines() {
        let t = l.trim();
        if t.starts_with("///")
            || t.starts_with("//")
            || t.starts_with('#') && !t.starts_with("#[")
            || t.starts_with("/**")
            || t.starts_with('*')
            || t.starts_with("\"\"\"")
        {
            doc.push(
                t.trim_start_matches(['/', '*', '#', '!', '"'])
                    .trim()
                    .to_string(),
            );
        } else if !doc.is_empty() || !t.is_empty() && !t.starts_with('@') && !t.starts_with("#[") {
            break;
        }
    }
    doc.retain(|l| !l.is_empty());
    doc.join(" ")
}

impl Engine {
    pub fn explain_code(&self, a: &SymbolArgs) -> ToolResult<ExplainAnswer> {
        let t0 = Instant::now();
        let mut sym = self.get_symbol(&SymbolArgs {
            debug: false,
            max_chars: Some(a.max_chars.unwrap_or(2000)),
            symbol: a.symbol.clone(),
        })?;
        let snap = self.snapshot();
        let t = Instant::now();
        let n = snap
            .resolve(&a.symbol)
            .first()
            .copied()
            .ok_or_else(|| self.not_found(&snap, &a.symbol))?;
        let callers = snap
            .in_edges(n, EdgeKind::Calls)
            .into_iter()
            .take(20)
            .map(|(m, _)| symbol_ref(&snap, m))
            .collect();
        let callees = snap
            .out_edges(n, EdgeKind::Calls)
            .into_iter()
            .take(20)
            .map(|(m, _)| symbol_ref(&snap, m))
            .collect();
        let mut doc = leading_doc(&sym.code);
        if doc.is_empty() {
            // Python docstrings sit after the signature.
            if let Some(l) = sym.code.lines().skip(1).find(|l| !l.trim().is_empty()) {
                let l = l.trim();
                if l.starts_with("\"\"\"") || l.starts_with("'''") {
                    doc = l.trim_matches(['"', '\'']).trim().to_string();
                }
            }
        }
        let file_imports = snap
            .file(n)
            .imports
            .iter()
            .map(|s| s.to_string())
            .take(30)
            .collect();
        let graph = t.elapsed();
        let memories = {
            let c = snap.chunk(n);
            let (sid, s, e) = (
                c.symbol_id.to_string(),
                c.start_line.to_native(),
                c.end_line.to_native(),
            );
            let path = snap.file(n).path.to_string();
            self.memories_for_code(&crate::memory::code_tools::MemoriesForCodeArgs {
                path: path.clone(),
                line: None,
                include_inactive: false,
                limit: Some(MAX_LIMIT),
                debug: false,
            })
            .map(|a| a.memories)
            .unwrap_or_default()
            .into_iter()
            .map(|m| m.memory)
            .filter(|m| {
                m.code_refs.iter().any(|r| {
                    (!sid.is_empty() && r.symbol_id == sid)
                        || (r.path == path && r.start_line <= e && r.end_line >= s)
                })
            })
            .take(10)
            .collect()
        };
        sym.debug = None;
        Ok(ExplainAnswer {
            symbol: SymbolAnswer {
                debug: a.debug.then(|| Debug {
                    graph_ms: ms(graph),
                    total_ms: ms(t0.elapsed()),
                    generation: snap.generation(),
                    ..Debug::default()
                }),
                ..sym
            },
            doc,
            callers,
            callees,
            file_imports,
            memories,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// find_duplicates

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DuplicatesArgs {
    /// Code to compare against the index (give this or `symbol`).
    #[serde(default)]
    pub code: Option<String>,
    /// A symbol id or name whose stored embedding is compared (give this or `code`).
    #[serde(default)]
    pub symbol: Option<String>,
    /// Minimum cosine similarity, 0..1 (default 0.85 for a symbol, 0.75 for code).
    #[serde(default)]
    pub threshold: Option<f32>,
    /// Results to return (default 10, at most 100).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Lines of each result's code to include (default 6).
    #[serde(default)]
    pub snippet_lines: Option<usize>,
    /// Return a per-phase timing breakdown.
    #[serde(default)]
    pub debug: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Duplicate {
    pub similarity: f32,
    #[serde(flatten)]
    pub symbol: SymbolRef,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub snippet: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct DuplicatesAnswer {
    /// The symbol compared (when `symbol` was given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub of: Option<SymbolRef>,
    pub threshold: f32,
    pub duplicates: Vec<Duplicate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

impl Engine {
    pub fn find_duplicates(&self, a: &DuplicatesArgs) -> ToolResult<DuplicatesAnswer> {
        let t0 = Instant::now();
        let snap = self.snapshot();
        let mut dbg = Debug {
            generation: snap.generation(),
            ..Debug::default()
        };
        let limit = a.limit.unwrap_or(10).clamp(1, MAX_LIMIT);
        let (qv, of, exclude, default_threshold): (
            Vec<f32>,
            Option<SymbolRef>,
            HashSet<String>,
            f32,
        ) = match (a.code.as_deref(), a.symbol.as_deref()) {
            (Some(code), None) => {
                check_text("code", code)?;
                let t = Instant::now();
                let v = self.embed_text(code).map_err(ToolError::Internal)?;
                dbg.embed_ms = ms(t.elapsed());
                (v, None, HashSet::new(), 0.75)
            }
            (None, Some(s)) => {
                check_symbol(s)?;
                let Some(&n) = snap.resolve(s).first() else {
                    return Err(self.not_found(&snap, s));
                };
                let v = snap
                    .vector(n)
                    .ok_or_else(|| ToolError::Internal("the symbol has no stored vector".into()))?
                    .to_vec();
                let id = snap.chunk(n).symbol_id.to_string();
                (v, Some(symbol_ref(&snap, n)), HashSet::from([id]), 0.85)
            }
            _ => return Err(ToolError::InvalidInput(
                "give exactly one of `code` (a code fragment) or `symbol` (a symbol id or name)"
                    .into(),
            )),
        };
        let threshold = a.threshold.unwrap_or(default_threshold);
        if !(0.0..=1.0).contains(&threshold) {
            return Err(ToolError::InvalidInput(format!(
                "`threshold` is {threshold}; use a cosine similarity between 0 and 1 (e.g. 0.85)"
            )));
        }
        let t = Instant::now();
        let mut hits: Vec<(f32, NodeRef)> = Vec::new();
        for (si, ls) in snap.index.segments.iter().enumerate() {
            let found = ls
                .segment
                .search_vectors(
                    &qv,
                    limit + 8,
                    format::vectors::DEFAULT_NPROBE,
                    None,
                    Some(&ls.tombstones),
                )
                .map_err(|e| ToolError::Internal(e.to_string()))?;
            hits.extend(found.into_iter().map(|(c, s)| (s, (si, c))));
        }
        hits.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        dbg.vector_ms = ms(t.elapsed());
        let t = Instant::now();
        let lines = a.snippet_lines.unwrap_or(6);
        let duplicates = hits
            .into_iter()
            .filter(|(s, n)| {
                *s >= threshold && {
                    let id = snap.chunk(*n).symbol_id.as_str();
                    id.is_empty() || !exclude.contains(id)
                }
            })
            .take(limit)
            .map(|(s, n)| Duplicate {
                similarity: (s * 1e4).round() / 1e4,
                symbol: symbol_ref(&snap, n),
                snippet: if lines == 0 {
                    String::new()
                } else {
                    snippet(&snap.chunk(n).text, lines, 600).0
                },
            })
            .collect();
        dbg.format_ms = ms(t.elapsed());
        dbg.total_ms = ms(t0.elapsed());
        Ok(DuplicatesAnswer {
            of,
            threshold,
            duplicates,
            debug: a.debug.then_some(dbg),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// index_status

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusArgs {
    /// Return a per-phase timing breakdown.
    #[serde(default)]
    pub debug: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SegmentStatus {
    pub id: String,
    pub chunks: u32,
    pub live_chunks: u64,
    pub files: u32,
    pub vector_index: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct StatusAnswer {
    /// `ok`, or `degraded` when a newer index generation could not be loaded (the previous one
    /// is still served; see `reload_error`).
    pub health: &'static str,
    pub index_dir: String,
    pub generation: u64,
    pub model_id: String,
    pub dim: u32,
    pub segments: Vec<SegmentStatus>,
    pub live_chunks: u64,
    pub files: u64,
    /// Live chunks per language.
    pub languages: std::collections::BTreeMap<String, u64>,
    /// Seconds since the served MANIFEST was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index_age_s: Option<u64>,
    /// Seconds since this generation was loaded.
    pub loaded_s_ago: u64,
    pub reloads: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reload_error: Option<String>,
    pub uptime_s: u64,
    pub embed_cache: CacheStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CacheStatus {
    pub entries: usize,
    pub hits: u64,
    pub misses: u64,
}

impl Engine {
    pub fn index_status(&self, a: &StatusArgs) -> ToolResult<StatusAnswer> {
        let t0 = Instant::now();
        let snap = self.snapshot();
        let now = SystemTime::now();
        let age = |t: SystemTime| now.duration_since(t).map_or(0, |d| d.as_secs());
        let mut languages = std::collections::BTreeMap::new();
        let mut files = 0u64;
        let mut segments = Vec::new();
        for ls in &snap.index.segments {
            let t = ls.segment.table();
            for f in t.files.iter() {
                let first = f.first_chunk.to_native();
                let live = (first..first + f.chunk_count.to_native())
                    .filter(|c| !ls.tombstones.contains(*c))
                    .count() as u64;
                if live > 0 {
                    files += 1;
                    *languages.entry(f.language.to_string()).or_insert(0) += live;
                }
            }
            let m = ls.segment.meta();
            segments.push(SegmentStatus {
                id: ls.segment.id().chars().take(16).collect(),
                chunks: m.chunk_count,
                live_chunks: u64::from(m.chunk_count) - ls.tombstones.len(),
                files: m.file_count,
                vector_index: m.vector_index.clone(),
            });
        }
        let failure = self.last_failure();
        Ok(StatusAnswer {
            health: if failure.is_some() { "degraded" } else { "ok" },
            index_dir: self.dir().display().to_string(),
            generation: snap.generation(),
            model_id: snap.index.manifest.model_id.clone(),
            dim: snap.index.manifest.dim,
            segments,
            live_chunks: snap.index.live_chunks(),
            files,
            languages,
            index_age_s: snap.manifest_mtime.map(age),
            loaded_s_ago: age(snap.loaded_at),
            reloads: self.reloads.load(Ordering::Relaxed),
            reload_error: failure.map(|f| format!("{} (at unix {})", f.error, f.at_unix)),
            uptime_s: unix_secs(now).saturating_sub(unix_secs(self.started)),
            embed_cache: CacheStatus {
                entries: self.cache.len(),
                hits: self.cache.hits.load(Ordering::Relaxed),
                misses: self.cache.misses.load(Ordering::Relaxed),
            },
            debug: a.debug.then(|| Debug {
                other_ms: ms(t0.elapsed()),
                total_ms: ms(t0.elapsed()),
                generation: snap.generation(),
                ..Debug::default()
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_split_into_words() {
        assert_eq!(identifier_words("closest_match"), "closest match");
        assert_eq!(identifier_words("HttpServer"), "http server");
        assert_eq!(identifier_words("Server.serveHTTP"), "server serve http");
        assert_eq!(
            simple_name("rust polyglot src/lib.rs/Dictionary#suggest()."),
            "suggest"
        );
        assert_eq!(simple_name("Dictionary::suggest"), "suggest");
        assert_eq!(simple_name("closest_match"), "closest_match");
    }

    #[test]
    fn text_stage_matches_whole_words_only() {
        let text = "fn a() {\n    let x = closest_match(w, c);\n    closest_matches();\n}\n";
        assert_eq!(
            whole_word_lines(text, "closest_match"),
            vec![(1, "let x = closest_match(w, c);".to_string())]
        );
        assert!(whole_word_lines("my_closest_match()", "closest_match").is_empty());
        assert!(whole_word_lines("", "x").is_empty());
    }

    #[test]
    fn callee_stage_finds_call_sites() {
        let text = "def total(shapes):\n    if x:\n        return sum(s.area() for s in shapes)\n";
        assert_eq!(called_identifiers(text), vec!["total", "sum", "area"]);
    }

    #[test]
    fn snippets_are_bounded() {
        assert_eq!(snippet("a\nb\nc", 2, 100), ("a\nb".to_string(), true));
        assert_eq!(snippet("abcdef", 5, 3), ("abc".to_string(), true));
        assert_eq!(snippet("ab", 5, 3), ("ab".to_string(), false));
    }

    #[test]
    fn input_limits() {
        assert!(check_text("query", "  ").is_err());
        assert!(check_text("query", &"x".repeat(MAX_QUERY_BYTES + 1)).is_err());
        assert!(check_text("query", "ok").is_ok());
        assert!(check_symbol("").is_err());
        let e = ToolError::NotFound {
            message: "no symbol `x`".into(),
            suggestions: vec!["y".into()],
        };
        assert_eq!(e.to_string(), "no symbol `x`; did you mean: y?");
    }

    #[test]
    fn docs_are_read_from_leading_comments() {
        assert_eq!(
            leading_doc("/// Adds a word.\n/// Counts it.\npub fn insert() {}"),
            "Adds a word. Counts it."
        );
        assert_eq!(leading_doc("pub fn f() {}"), "");
    }
}
