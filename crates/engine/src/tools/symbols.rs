//! `get_symbol` and `explain_code`: a symbol's code, place, parents and members; and the
//! context to understand it (callers, callees, imports, linked memories).

use std::time::Instant;

use code::NodeRef;
use format::records::{EdgeKind, NO_PARENT};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    check_symbol, ms, snippet, symbol_ref, Debug, SymbolRef, ToolError, ToolResult, MAX_LIMIT,
};
use crate::engine::Engine;
use crate::snapshot::Snapshot;

/// The code and location of a symbol (by symbol id, qualified name like `Server::run` /
/// `Circle.area`, or simple name), with its enclosing symbols and its members.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "SymbolArgs")]
pub struct GetSymbolArgs {
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

/// Context to understand a symbol in one call: its code, doc comment, location, parents,
/// members, direct callers and callees, and its file's imports.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "SymbolArgs")]
pub struct ExplainCodeArgs {
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
    pub(crate) fn not_found(&self, snap: &Snapshot, symbol: &str) -> ToolError {
        ToolError::NotFound {
            message: format!(
                "no symbol `{symbol}` in the index (generation {}); pass a symbol id from search_code or a name",
                snap.generation()
            ),
            suggestions: snap.code.suggest(symbol, 5),
        }
    }

    /// The full code of a symbol: its pieces joined in order. A long symbol is its head chunk
    /// and its body parts, each part's text being the signature, an elision line and the part
    /// ([`super::common::part_body`]): the head, then every part's own lines. (Before, only the head came
    /// back, cut short without saying so.)
    pub(crate) fn code_of(snap: &Snapshot, n: NodeRef) -> ToolResult<String> {
        let id = snap.code.chunk(n).symbol_id.as_str();
        let pieces = if id.is_empty() {
            Vec::new()
        } else {
            snap.code.by_symbol_id(id)
        };
        let mut out: Vec<&str> = if pieces.len() <= 1 {
            vec![snap.code.text(n)?]
        } else {
            pieces
                .iter()
                .map(|&p| snap.code.text(p))
                .collect::<Result<Vec<_>, _>>()?
        };
        // The blank lines between two pieces, which their texts leave out, so that the code's
        // lines are the symbol's (a part that carries its symbol's range adds none).
        let mut end = snap.code.chunk(n).end_line.to_native();
        let mut owned: Vec<String> = Vec::new();
        for p in snap.code.body_parts(n) {
            let c = snap.code.chunk(p);
            let gap = c
                .start_line
                .to_native()
                .saturating_sub(end.saturating_add(1));
            owned.push("\n".repeat(gap as usize) + super::common::part_body(snap.code.text(p)?));
            end = end.max(c.end_line.to_native());
        }
        out.extend(owned.iter().map(String::as_str));
        Ok(out.join("\n"))
    }

    /// The last line of symbol `n` with its body parts (a head chunk ends where its first
    /// part begins).
    pub(crate) fn end_line_of(snap: &Snapshot, n: NodeRef) -> u32 {
        (snap.code.body_parts(n).into_iter())
            .map(|p| snap.code.chunk(p).end_line.to_native())
            .fold(snap.code.chunk(n).end_line.to_native(), u32::max)
    }

    fn parents(snap: &Snapshot, n: NodeRef) -> Vec<SymbolRef> {
        let mut out = Vec::new();
        let mut cur = n;
        for _ in 0..32 {
            let p = snap.code.chunk(cur).parent.to_native();
            if p == NO_PARENT
                || p as usize >= snap.code.index.segments[cur.0].segment.table().chunks.len()
            {
                break;
            }
            cur = (cur.0, p);
            out.push(symbol_ref(&snap.code, cur));
        }
        let t = snap.code.index.segments[n.0].segment.table();
        let file_node = (
            n.0,
            t.chunks.len() as u32 + snap.code.chunk(n).file.to_native(),
        );
        out.push(symbol_ref(&snap.code, file_node));
        out
    }

    fn children(snap: &Snapshot, n: NodeRef) -> Vec<SymbolRef> {
        let mut kids: Vec<NodeRef> = snap
            .code
            .out_edges(n, EdgeKind::Contains)
            .into_iter()
            .map(|x| x.0)
            .filter(|&x| snap.code.is_live_chunk(x))
            .collect();
        if kids.is_empty() {
            // Containment by the parent field (same segment).
            let t = snap.code.index.segments[n.0].segment.table();
            kids = (0..t.chunks.len() as u32)
                .filter(|&c| t.chunks[c as usize].parent.to_native() == n.1)
                .map(|c| (n.0, c))
                .filter(|&x| snap.code.is_live_chunk(x))
                .collect();
        }
        let own = snap.code.chunk(n).symbol_id.as_str();
        kids.into_iter()
            // A header (its symbol's search aid) and a body part (a piece of it) are the
            // symbol itself, not children.
            .filter(|&k| snap.code.chunk(k).symbol_chunk(k.1) == k.1)
            .filter(|&k| own.is_empty() || snap.code.chunk(k).symbol_id != own)
            .take(50)
            .map(|k| symbol_ref(&snap.code, k))
            .collect()
    }

    pub fn get_symbol(&self, a: &GetSymbolArgs) -> ToolResult<SymbolAnswer> {
        let t0 = Instant::now();
        check_symbol(&a.symbol)?;
        let snap = self.snapshot();
        let found = snap.code.resolve(&a.symbol);
        let Some(&n) = found.first() else {
            return Err(self.not_found(&snap, &a.symbol));
        };
        let lookup = t0.elapsed();
        let t = Instant::now();
        let (code, truncated) = snippet(
            &Self::code_of(&snap, n)?,
            usize::MAX,
            a.max_chars.unwrap_or(4000),
        );
        let mut symbol = symbol_ref(&snap.code, n);
        symbol.end_line = Self::end_line_of(&snap, n);
        let ans = SymbolAnswer {
            symbol,
            repo: snap.code.file(n).repo.to_string(),
            code,
            truncated,
            parents: Self::parents(&snap, n),
            children: Self::children(&snap, n),
            other_matches: found[1..]
                .iter()
                .take(10)
                .map(|&m| symbol_ref(&snap.code, m))
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
// explain_code

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ExplainAnswer {
    #[serde(flatten)]
    pub symbol: SymbolAnswer,
    /// Doc comment or leading comment lines, when the code starts with them.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub doc: String,
    /// Callers from the code graph's CALLS edges only (exact first), at most 20: calls the
    /// graph did not resolve are not here (`find_callers` also searches the text).
    pub callers: Vec<GraphNeighbour>,
    /// Callees from the code graph's CALLS edges only (exact first), at most 20.
    pub callees: Vec<GraphNeighbour>,
    /// Graph callers in all, when more than are listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callers_total: Option<usize>,
    /// Graph callees in all, when more than are listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callees_total: Option<usize>,
    /// Imports of its file as written.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub file_imports: Vec<String>,
    /// Active memories whose code references point at this symbol (by symbol id, or lines
    /// overlapping it), each checked against the current file.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub memories: Vec<crate::tools::memory::output::MemoryOut>,
}

/// A caller or callee from the code graph, with how its edge was resolved.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct GraphNeighbour {
    #[serde(flatten)]
    pub symbol: SymbolRef,
    /// `exact` (resolved through scope and imports) or `likely` (a name unique in the
    /// language).
    pub confidence: crate::tools::calls::Confidence,
}

/// Most callers and callees `explain_code` lists.
const EXPLAIN_NEIGHBOURS: usize = 20;

/// The graph neighbours `edges` lists, exact ones first, at most [`EXPLAIN_NEIGHBOURS`], and
/// how many there are when more.
fn neighbours(
    code: &code::CodeView,
    edges: Vec<(NodeRef, u8)>,
) -> (Vec<GraphNeighbour>, Option<usize>) {
    let total = edges.len();
    let mut v: Vec<GraphNeighbour> = edges
        .into_iter()
        .map(|(m, fl)| GraphNeighbour {
            symbol: symbol_ref(code, m),
            confidence: crate::tools::calls::edge_confidence(fl),
        })
        .collect();
    v.sort_by_key(|g| std::cmp::Reverse(g.confidence));
    v.truncate(EXPLAIN_NEIGHBOURS);
    (v, (total > EXPLAIN_NEIGHBOURS).then_some(total))
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
    pub fn explain_code(&self, a: &ExplainCodeArgs) -> ToolResult<ExplainAnswer> {
        let t0 = Instant::now();
        let mut sym = self.get_symbol(&GetSymbolArgs {
            debug: false,
            max_chars: Some(a.max_chars.unwrap_or(2000)),
            symbol: a.symbol.clone(),
        })?;
        let snap = self.snapshot();
        let t = Instant::now();
        let n = snap
            .code
            .resolve(&a.symbol)
            .first()
            .copied()
            .ok_or_else(|| self.not_found(&snap, &a.symbol))?;
        let (callers, callers_total) =
            neighbours(&snap.code, snap.code.in_edges(n, EdgeKind::Calls));
        let (callees, callees_total) =
            neighbours(&snap.code, snap.code.out_edges(n, EdgeKind::Calls));
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
            .code
            .file(n)
            .imports
            .iter()
            .map(|s| s.to_string())
            .take(30)
            .collect();
        let graph = t.elapsed();
        let memories = {
            let c = snap.code.chunk(n);
            let (sid, s, e) = (
                c.symbol_id.to_string(),
                c.start_line.to_native(),
                Self::end_line_of(&snap, n),
            );
            let path = snap.code.file(n).path.to_string();
            self.memories_for_code(&crate::tools::code_links::MemoriesForCodeArgs {
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
            callers_total,
            callees_total,
            file_imports,
            memories,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_are_read_from_leading_comments() {
        assert_eq!(
            leading_doc("/// Adds a word.\n/// Counts it.\npub fn insert() {}"),
            "Adds a word. Counts it."
        );
        assert_eq!(leading_doc("pub fn f() {}"), "");
    }
}
