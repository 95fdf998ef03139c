//! `find_callers`, `find_callees` (a cascade: graph → text → semantic → not found, the stage
//! named in the answer) and `impact_analysis` (transitive callers).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use code::NodeRef;
use format::records::{EdgeKind, EDGE_RESOLVED};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    check_symbol, label, limit_arg, ms, part_body, symbol_ref, Debug, SymbolRef, ToolError,
    ToolResult, MAX_LIMIT,
};
use crate::engine::Engine;

mod text;
use crate::snapshot::Snapshot;
use text::defines;
pub use text::{call_lines, called_identifiers, identifier_words, simple_name, whole_word_lines};

/// Who calls a function or method. Cascade: code-graph CALLS edges; else whole-word text
/// matches in indexed code; else semantic search on the name's words; else not found with
/// suggested names. `stage` says which answered (graph results are exact, the others are
/// leads).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "CallArgs")]
pub struct FindCallersArgs {
    /// A symbol id, qualified name (`Dictionary::suggest`) or simple name (`closest_match`).
    pub symbol: String,
    /// Results to return (default 20, at most 100).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Return a per-phase timing breakdown.
    #[serde(default)]
    pub debug: bool,
}

/// What a function or method calls. Cascade: code-graph CALLS edges; else indexed symbols
/// called by name in its code; else semantic search; else not found with suggested names.
/// `stage` says which answered.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "CallArgs")]
pub struct FindCalleesArgs {
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
    /// CALLS edges of the code graph, every one `exact` (resolved through scope and imports).
    Graph,
    /// Graph edges together with `likely` edges and/or `name_only` text matches; each result
    /// says which.
    Merged,
    /// Only `name_only` text matches of the identifier (likely, unconfirmed).
    Text,
    /// Semantic search on the identifier split into words (related code, not confirmed calls).
    Semantic,
    /// Nothing found; see `suggestions`.
    NotFound,
}

/// How sure a caller or callee is.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// Semantic neighbour of the name: related code, not a confirmed call.
    Related,
    /// A call of that name found in the text that the graph did not resolve (an unknown
    /// receiver, dynamic dispatch, code the extractor does not model).
    NameOnly,
    /// A graph edge resolved by a name unique within the language (not proven by scope).
    Likely,
    /// A graph edge resolved through the caller's scope: same file, imports, a stated type.
    Exact,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CallSite {
    #[serde(flatten)]
    pub symbol: SymbolRef,
    /// How sure this result is (`exact`, `likely`, `name_only`, `related`).
    pub confidence: Confidence,
    /// Text matches: the line of the call and its text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line_text: Option<String>,
    /// Semantic stage: cosine similarity to the identifier's words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub similarity: Option<f32>,
    /// When the name resolved to several symbols: the symbol id of the one this graph edge
    /// calls (callers) or comes from (callees).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CallAnswer {
    pub symbol: String,
    /// The symbols the name resolved to (at most 10 listed).
    pub resolved_to: Vec<SymbolRef>,
    /// How many symbols the name resolved to, when more than one: the results are then those
    /// of all of them, each graph result naming its `target`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved_count: Option<usize>,
    pub stage: Stage,
    /// The weakest confidence among the results (absent when there are none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence: Option<Confidence>,
    /// What the stage means for these results.
    pub note: String,
    pub results: Vec<CallSite>,
    /// The results were cut at `limit`: more exist (`graph_edges` says how many graph edges
    /// there were; name-only matches past the limit are not searched for).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Graph edges found before the cut, when `truncated`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph_edges: Option<usize>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub suggestions: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

/// Minimum cosine similarity for the semantic stage of the cascade.
pub const SEMANTIC_MIN_SIMILARITY: f32 = 0.45;

/// What every stage of the caller/callee cascade works from: the request, the snapshot, the
/// symbols the name resolved to, and the timings so far.
struct Cascade<'a> {
    symbol: &'a str,
    limit: usize,
    debug: bool,
    t0: Instant,
    snap: Arc<Snapshot>,
    targets: Vec<NodeRef>,
    resolved_to: Vec<SymbolRef>,
    /// The simple name to look for in text.
    ident: String,
    /// Graph edges the graph stage found (before the cut to `limit`).
    graph_found: usize,
    /// A stage stopped at `limit` with more to give.
    truncated: bool,
    dbg: Debug,
}

impl Cascade<'_> {
    fn answer(&mut self, stage: Stage, note: String, results: Vec<CallSite>) -> CallAnswer {
        self.dbg.total_ms = ms(self.t0.elapsed());
        let ambiguous = self.targets.len() > 1;
        let mut note = note;
        if ambiguous {
            note = format!(
                "`{}` resolved to {} symbols: the results are those of all of them, each graph \
                 result naming the one it concerns (`target`); pass a qualified name or a \
                 symbol id for one. {note}",
                self.symbol,
                self.targets.len()
            );
        }
        if self.truncated {
            note = format!(
                "{note}. Cut at limit {}: more exist ({} graph edges in all); raise `limit` for \
                 the rest",
                self.limit, self.graph_found,
            );
        }
        CallAnswer {
            symbol: self.symbol.to_string(),
            resolved_to: self.resolved_to.clone(),
            resolved_count: ambiguous.then_some(self.targets.len()),
            stage,
            confidence: results.iter().map(|r| r.confidence).min(),
            note,
            results,
            truncated: self.truncated,
            graph_edges: self.truncated.then_some(self.graph_found),
            suggestions: if stage == Stage::NotFound {
                self.snap.code.suggest(self.symbol, 5)
            } else {
                Vec::new()
            },
            debug: self.debug.then(|| self.dbg.clone()),
        }
    }

    fn site(&self, n: NodeRef, confidence: Confidence) -> CallSite {
        CallSite {
            symbol: symbol_ref(&self.snap.code, n),
            confidence,
            line: None,
            line_text: None,
            similarity: None,
            target: None,
        }
    }

    /// Symbol ids of the targets (their own chunks are never their callers).
    fn target_ids(&self) -> HashSet<String> {
        self.targets
            .iter()
            .map(|&n| self.snap.code.chunk(n).symbol_id.to_string())
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// Stage 1: the code graph's CALLS edges (`in_edges` for callers, `out_edges` for callees),
    /// exact ones first.
    fn graph(
        &mut self,
        edges: impl Fn(&code::CodeView, NodeRef) -> Vec<(NodeRef, u8)>,
        seen: &mut HashSet<NodeRef>,
    ) -> Vec<CallSite> {
        let t = Instant::now();
        let mut found: Vec<(NodeRef, Confidence, NodeRef)> = Vec::new();
        for &n in &self.targets {
            for (m, fl) in edges(&self.snap.code, n) {
                if seen.insert(m) {
                    found.push((m, edge_confidence(fl), n));
                }
            }
        }
        // Stable: exact before likely, each in edge order.
        found.sort_by_key(|&(_, c, _)| std::cmp::Reverse(c));
        self.graph_found = found.len();
        self.truncated |= found.len() > self.limit;
        let ambiguous = self.targets.len() > 1;
        let results = found
            .into_iter()
            .take(self.limit)
            .map(|(m, c, n)| CallSite {
                target: ambiguous.then(|| self.snap.code.chunk(n).symbol_id.to_string()),
                ..self.site(m, c)
            })
            .collect();
        self.dbg.graph_ms = ms(t.elapsed());
        results
    }

    /// Language families of the targets (`typescript`/`tsx`/`javascript` are one, `c`/`cpp`
    /// one).
    fn target_families(&self) -> HashSet<String> {
        self.targets
            .iter()
            .map(|&n| family(self.snap.code.file(n).language.as_str()).to_string())
            .collect()
    }

    /// Callers the graph did not resolve: functions and methods of the targets' language that
    /// call the name (`name(`, `.name(`, `::name(`) on a line that does not define it, and
    /// whose calls of that name the graph did not resolve to another symbol.
    fn text_callers(
        &mut self,
        seen: &mut HashSet<NodeRef>,
        room: usize,
    ) -> ToolResult<Vec<CallSite>> {
        let t = Instant::now();
        let ident = self.ident.clone();
        let mut results = Vec::new();
        if ident.is_empty() {
            return Ok(results);
        }
        let own = self.target_ids();
        let families = self.target_families();
        let code = &self.snap.code;
        // Only chunks that may call it: those holding the name as a word (the postings).
        for n in code.live_chunks_with_word(&ident) {
            let c = code.chunk(n);
            // A body part of a function calls for its function (whose edges the graph holds).
            let sym = (n.0, c.symbol_chunk(n.1));
            let s = code.chunk(sym);
            if !matches!(s.kind.as_str(), "function" | "method")
                || c.is_header()
                || own.contains(s.symbol_id.as_str())
                || seen.contains(&sym)
            {
                continue;
            }
            if !families.is_empty() && !families.contains(family(code.file(n).language.as_str())) {
                continue;
            }
            let text = code.text(n)?;
            if !text.contains(ident.as_str()) {
                continue;
            }
            // A part's own lines, not the signature repeated before them.
            let own_text = if sym != n { part_body(text) } else { text };
            let lang = code.file(n).language.as_str();
            let Some((off, text)) = call_lines(own_text, &ident, lang).into_iter().next() else {
                continue;
            };
            // Explained: the graph resolved this chunk's call of that name elsewhere.
            let explained = code
                .out_edges(sym, EdgeKind::Calls)
                .iter()
                .any(|&(m, _)| code.is_chunk(m) && code.chunk(m).name.as_str() == ident);
            if explained {
                continue;
            }
            if results.len() >= room {
                // One more than there is room for: the list is cut.
                self.truncated = true;
                break;
            }
            seen.insert(sym);
            results.push(CallSite {
                line: Some(c.start_line.to_native() + off),
                line_text: Some(text),
                ..self.site(n, Confidence::NameOnly)
            });
        }
        self.dbg.other_ms = ms(t.elapsed());
        Ok(results)
    }

    /// Last resort for callers of an unknown name: chunks that mention it as a whole word (not
    /// defining another symbol of that name).
    fn text_mentions(&mut self) -> ToolResult<Vec<CallSite>> {
        let t = Instant::now();
        let ident = self.ident.clone();
        let mut results = Vec::new();
        if !ident.is_empty() {
            let own = self.target_ids();
            let families = self.target_families();
            for n in self.snap.code.live_chunks_with_word(&ident) {
                let c = self.snap.code.chunk(n);
                // Headers repeat their symbol's signature and doc: not a mention; nor is the
                // target's own body part.
                let id = self
                    .snap
                    .code
                    .chunk((n.0, c.symbol_chunk(n.1)))
                    .symbol_id
                    .as_str();
                if own.contains(id) || c.is_header() {
                    continue;
                }
                let lang = self.snap.code.file(n).language.as_str();
                if !families.is_empty() && !families.contains(family(lang)) {
                    continue;
                }
                let hits = whole_word_lines(self.snap.code.text(n)?, &ident);
                let Some((off, text)) = hits.into_iter().find(|(_, l)| !defines(l, &ident)) else {
                    continue;
                };
                if results.len() >= self.limit {
                    self.truncated = true;
                    break;
                }
                results.push(CallSite {
                    line: Some(c.start_line.to_native() + off),
                    line_text: Some(text),
                    ..self.site(n, Confidence::NameOnly)
                });
            }
        }
        self.dbg.other_ms = ms(t.elapsed());
        Ok(results)
    }

    /// Stage 2 for callees: indexed symbols called by name in the targets' code.
    fn text_calls(&mut self, seen: &mut HashSet<NodeRef>) -> ToolResult<Vec<CallSite>> {
        let t = Instant::now();
        let mut results = Vec::new();
        let fams = self.target_families();
        for &n in &self.targets {
            let own = self.snap.code.chunk(n).name.to_string();
            let lang = self.snap.code.file(n).language.to_string();
            for w in called_identifiers(&Engine::code_of(&self.snap, n)?, &lang) {
                if w == own {
                    continue;
                }
                let same_family = self
                    .snap
                    .code
                    .by_name(&w)
                    .into_iter()
                    .find(|&m| fams.contains(family(self.snap.code.file(m).language.as_str())));
                if let Some(m) = same_family {
                    if seen.insert(m) {
                        if results.len() < self.limit {
                            results.push(self.site(m, Confidence::NameOnly));
                        } else {
                            self.truncated = true;
                        }
                    }
                }
            }
        }
        self.dbg.other_ms = ms(t.elapsed());
        Ok(results)
    }

    /// Stage 3: code semantically close to the name's words. Returns the words searched.
    fn semantic(&mut self, engine: &Engine) -> ToolResult<(String, Vec<CallSite>)> {
        let words = identifier_words(&self.ident);
        if words.is_empty() {
            return Ok((words, Vec::new()));
        }
        let t = Instant::now();
        let (qv, cached) = engine.embed_query(&words).map_err(ToolError::Internal)?;
        self.dbg.embed_ms = ms(t.elapsed());
        self.dbg.embed_cached = cached;
        let t = Instant::now();
        let mut hits: Vec<(f32, NodeRef)> = Vec::new();
        // Probes planned across segments at the default nprobe, as `search_code`'s vector list.
        let found = code::search::vector_list(
            &self.snap.code.index,
            &qv,
            self.limit + self.targets.len(),
            None,
            &[],
        )
        .map_err(|e| ToolError::Internal(e.to_string()))?;
        hits.extend(found.into_iter().map(|(si, c, s)| (s, (si, c))));
        hits.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        self.dbg.vector_ms = ms(t.elapsed());
        let own = self.target_ids();
        // A header or a body part stands for its symbol (once).
        let mut seen = std::collections::HashSet::new();
        let code = &self.snap.code;
        let results = hits
            .into_iter()
            .map(|(s, n)| (s, (n.0, code.chunk(n).symbol_chunk(n.1))))
            .filter(|(_, n)| seen.insert(*n))
            .filter(|(s, n)| {
                *s >= SEMANTIC_MIN_SIMILARITY
                    && !own.contains(self.snap.code.chunk(*n).symbol_id.as_str())
            })
            .take(self.limit)
            .map(|(s, n)| CallSite {
                similarity: Some((s * 1e4).round() / 1e4),
                ..self.site(n, Confidence::Related)
            })
            .collect();
        Ok((words, results))
    }

    /// Stage 4: nothing found; suggestions of close names.
    fn not_found(&mut self, what: &str) -> CallAnswer {
        let note = if self.targets.is_empty() {
            format!("`{}` is not a known symbol and nothing mentions it; check the spelling or try the suggestions", self.symbol)
        } else {
            format!("no {what} found in the graph, in the text or semantically; it may be unused, called dynamically or from outside the index")
        };
        self.answer(Stage::NotFound, note, Vec::new())
    }
}

fn semantic_note(words: &str) -> String {
    format!("no graph edges or text matches; code semantically close to \"{words}\" (related, not confirmed calls)")
}

impl Engine {
    fn cascade<'a>(
        &self,
        symbol: &'a str,
        limit: Option<usize>,
        debug: bool,
    ) -> ToolResult<Cascade<'a>> {
        self.cascade_on(self.snapshot(), symbol, limit, debug)
    }

    /// [`Engine::cascade`] on a snapshot the caller holds.
    fn cascade_on<'a>(
        &self,
        snap: Arc<Snapshot>,
        symbol: &'a str,
        limit: Option<usize>,
        debug: bool,
    ) -> ToolResult<Cascade<'a>> {
        let t0 = Instant::now();
        check_symbol(symbol)?;
        let targets = snap.code.resolve(symbol);
        let resolved_to = targets
            .iter()
            .take(10)
            .map(|&n| symbol_ref(&snap.code, n))
            .collect();
        Ok(Cascade {
            symbol,
            limit: limit_arg(limit, 20, MAX_LIMIT)?,
            debug,
            t0,
            dbg: Debug {
                generation: snap.generation(),
                ..Debug::default()
            },
            snap,
            targets,
            resolved_to,
            ident: simple_name(symbol),
            graph_found: 0,
            truncated: false,
        })
    }

    /// Callers: graph edges into the symbol (exact, then likely) merged with the functions that
    /// call its name where the graph resolved nothing (name-only); else mentions of the name;
    /// else semantic neighbours of its name; else not found.
    pub fn find_callers(&self, a: &FindCallersArgs) -> ToolResult<CallAnswer> {
        let mut c = self.cascade(&a.symbol, a.limit, a.debug)?;
        let mut seen = HashSet::new();
        let mut results = c.graph(|v, n| v.in_edges(n, EdgeKind::Calls), &mut seen);
        let room = c.limit.saturating_sub(results.len());
        let text = c.text_callers(&mut seen, room)?;
        let graph_n = results.len();
        results.extend(text);
        if !results.is_empty() {
            let (stage, note) = merged_note(&results, graph_n, &c.ident, "callers");
            return Ok(c.answer(stage, note, results));
        }
        let results = c.text_mentions()?;
        if !results.is_empty() {
            let note = format!("no calls of `{}` found; these chunks mention it as a whole word (name_only: unconfirmed, e.g. passed as a value)", c.ident);
            return Ok(c.answer(Stage::Text, note, results));
        }
        let (words, results) = c.semantic(self)?;
        if !results.is_empty() {
            return Ok(c.answer(Stage::Semantic, semantic_note(&words), results));
        }
        Ok(c.not_found("callers"))
    }

    /// Callees: graph edges out of the symbol; else indexed symbols of its language called by
    /// name in its code; else (only for a known symbol: the callees of an unknown body cannot
    /// be guessed) semantic neighbours of its name; else not found.
    pub fn find_callees(&self, a: &FindCalleesArgs) -> ToolResult<CallAnswer> {
        let mut c = self.cascade(&a.symbol, a.limit, a.debug)?;
        let mut seen = HashSet::new();
        let results = c.graph(|v, n| v.out_edges(n, EdgeKind::Calls), &mut seen);
        if !results.is_empty() {
            let n = results.len();
            let (stage, note) = merged_note(&results, n, &c.ident, "callees");
            return Ok(c.answer(stage, note, results));
        }
        let results = c.text_calls(&mut seen)?;
        if !results.is_empty() {
            let note = "no CALLS edges; these indexed symbols of its language are called by name in its code (name_only: unconfirmed)".to_string();
            return Ok(c.answer(Stage::Text, note, results));
        }
        if !c.targets.is_empty() {
            let (words, results) = c.semantic(self)?;
            if !results.is_empty() {
                return Ok(c.answer(Stage::Semantic, semantic_note(&words), results));
            }
        }
        Ok(c.not_found("callees"))
    }
}

/// The confidence of a graph edge's flags.
pub fn edge_confidence(flags: u8) -> Confidence {
    if flags & EDGE_RESOLVED != 0 {
        Confidence::Exact
    } else {
        Confidence::Likely
    }
}

/// Languages whose code can call each other.
pub fn family(language: &str) -> &str {
    match language {
        "typescript" | "tsx" | "javascript" => "javascript",
        "cpp" => "c",
        other => other,
    }
}

/// The stage and note of a graph answer, possibly merged with name-only callers.
fn merged_note(results: &[CallSite], graph_n: usize, ident: &str, what: &str) -> (Stage, String) {
    let count = |c: Confidence| results.iter().filter(|r| r.confidence == c).count();
    let (exact, likely, name_only) = (
        count(Confidence::Exact),
        count(Confidence::Likely),
        count(Confidence::NameOnly),
    );
    if graph_n == 0 {
        return (
            Stage::Text,
            format!("no CALLS edges; these functions call `{ident}(` by name (name_only: unconfirmed, e.g. a method of another type with the same name)"),
        );
    }
    if likely == 0 && name_only == 0 {
        return (
            Stage::Graph,
            format!("{what} from the code graph's CALLS edges, all exact (resolved through scope and imports)"),
        );
    }
    (
        Stage::Merged,
        format!("{exact} exact and {likely} likely (a name unique in the language) {what} from the code graph, and {name_only} name_only (calls of `{ident}(` the graph did not resolve: check them)"),
    )
}

// ---------------------------------------------------------------------------------------------
// impact_analysis

/// What may break if a symbol changes: its transitive callers up to `depth` levels, each with
/// the call path from the symbol, and the files involved.
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
    /// The weakest edge on that path: `exact` when every call on it was resolved through
    /// scope and imports, `likely` when one was resolved by a unique name.
    pub confidence: Confidence,
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
    /// True when callers go on past `depth` (not followed; not said when `truncated`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub deeper: bool,
    /// Functions that call the symbol's name where the graph resolved no edge (an unknown
    /// receiver, dynamic dispatch): not followed, and possibly affected (`find_callers` lists
    /// them as `name_only`). At most 100 are counted (the note says "or more" then).
    pub name_only_callers: usize,
    /// Other symbols the name resolved to (at most 10): only `symbol` was analysed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub other_matches: Vec<SymbolRef>,
    /// What the answer covers and what it does not.
    pub note: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

impl Engine {
    pub fn impact_analysis(&self, a: &ImpactArgs) -> ToolResult<ImpactAnswer> {
        let t0 = Instant::now();
        check_symbol(&a.symbol)?;
        let depth = a.depth.unwrap_or(3).clamp(1, 8);
        let limit = limit_arg(a.limit, 50, MAX_LIMIT)?;
        let snap = self.snapshot();
        let resolved = snap.code.resolve(&a.symbol);
        let Some(&root) = resolved.first() else {
            return Err(self.not_found(&snap, &a.symbol));
        };
        let other_matches: Vec<SymbolRef> = resolved
            .iter()
            .skip(1)
            .take(10)
            .map(|&n| symbol_ref(&snap.code, n))
            .collect();
        let t = Instant::now();
        let mut parent: HashMap<NodeRef, NodeRef> = HashMap::new();
        let mut conf: HashMap<NodeRef, Confidence> = HashMap::from([(root, Confidence::Exact)]);
        let mut level: HashMap<NodeRef, usize> = HashMap::from([(root, 0)]);
        let mut order = Vec::new();
        let mut q = VecDeque::from([root]);
        let mut truncated = false;
        let mut deeper = false;
        while let Some(n) = q.pop_front() {
            let d = level[&n];
            if d >= depth {
                deeper |= snap
                    .code
                    .in_edges(n, EdgeKind::Calls)
                    .iter()
                    .any(|(m, _)| !level.contains_key(m));
                continue;
            }
            for (m, fl) in snap.code.in_edges(n, EdgeKind::Calls) {
                if level.contains_key(&m) {
                    continue;
                }
                conf.insert(m, conf[&n].min(edge_confidence(fl)));
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
        let name = |n: NodeRef| label(&symbol_ref(&snap.code, n));
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
                    symbol: symbol_ref(&snap.code, m),
                    depth: level[&m],
                    path,
                    confidence: conf[&m],
                }
            })
            .collect();
        let mut files: Vec<String> = affected.iter().map(|x| x.symbol.path.clone()).collect();
        files.sort();
        files.dedup();
        // The direct callers the graph does not see, as find_callers' text stage finds them.
        // On the same snapshot: its node references are the ones `order` holds.
        let (name_only_callers, more_name_only) = {
            let mut c = self.cascade_on(Arc::clone(&snap), &a.symbol, Some(MAX_LIMIT), false)?;
            c.targets = vec![root];
            let mut seen: HashSet<NodeRef> =
                order.iter().copied().filter(|m| level[m] == 1).collect();
            let n = c.text_callers(&mut seen, MAX_LIMIT)?.len();
            (n, c.truncated)
        };
        let root_ref = symbol_ref(&snap.code, root);
        let mut note = "transitive callers along the code graph's CALLS edges only".to_string();
        if name_only_callers > 0 {
            note.push_str(&format!(
                "; {name_only_callers}{} more function(s) call `{}(` by name without a resolved \
                 edge: not followed, possibly affected (find_callers lists them as name_only)",
                if more_name_only { " or" } else { "" },
                root_ref.name
            ));
        }
        // After a cut, callers left out may sit above `depth`: `truncated` says it then.
        let deeper = deeper && !truncated;
        if deeper {
            note.push_str(&format!("; callers go on past depth {depth}"));
        }
        if truncated {
            note.push_str(&format!("; cut at limit {limit}"));
        }
        if !other_matches.is_empty() {
            note.push_str(&format!(
                "; `{}` resolved to {} symbols and only the first was analysed (`other_matches`: \
                 pass a symbol id for another)",
                a.symbol,
                resolved.len()
            ));
        }
        Ok(ImpactAnswer {
            symbol: root_ref,
            depth,
            affected,
            files,
            truncated,
            deeper,
            name_only_callers,
            other_matches,
            note,
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
