//! `find_duplicates`: chunks whose embedding is close to a symbol's or a piece of code's.

use std::collections::HashSet;
use std::time::Instant;

use code::NodeRef;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    check_symbol, check_text, limit_arg, ms, snippet, symbol_ref, Debug, SymbolRef, ToolError,
    ToolResult, MAX_LIMIT,
};
use crate::engine::Engine;

/// Code that is near-identical in meaning to a given code fragment or symbol (cosine similarity
/// of embeddings above `threshold`): copy-paste, parallel implementations.
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

/// The deepest vector list `find_duplicates` asks for while headers and the excluded symbol
/// crowd out the duplicates above the threshold.
const MAX_DUPLICATE_DEPTH: usize = 4096;

impl Engine {
    pub fn find_duplicates(&self, a: &DuplicatesArgs) -> ToolResult<DuplicatesAnswer> {
        let t0 = Instant::now();
        let snap = self.snapshot();
        let mut dbg = Debug {
            generation: snap.generation(),
            ..Debug::default()
        };
        let limit = limit_arg(a.limit, 10, MAX_LIMIT)?;
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
                let Some(&n) = snap.code.resolve(s).first() else {
                    return Err(self.not_found(&snap, s));
                };
                let v = snap
                    .code
                    .vector(n)
                    .ok_or_else(|| ToolError::Internal("the symbol has no stored vector".into()))?
                    .to_vec();
                let id = snap.code.chunk(n).symbol_id.to_string();
                (
                    v,
                    Some(symbol_ref(&snap.code, n)),
                    HashSet::from([id]),
                    0.85,
                )
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
        let kept = |s: f32, n: NodeRef| {
            s >= threshold && {
                // Headers are search aids, not code: never a duplicate. A body part is its
                // symbol's (the excluded symbol's own parts are not its duplicates).
                let ch = snap.code.chunk(n);
                let id = snap
                    .code
                    .chunk((n.0, ch.symbol_chunk(n.1)))
                    .symbol_id
                    .as_str();
                !ch.is_header() && (id.is_empty() || !exclude.contains(id))
            }
        };
        // Probes planned across segments at the default nprobe, as `search_code`'s vector list.
        // Headers and the excluded symbol take places in it: asked for again, deeper, while
        // fewer than `limit` remain and the list was full above the threshold.
        let mut k = limit + 8;
        let hits = loop {
            let found = code::search::vector_list(&snap.code.index, &qv, k, None, &[])
                .map_err(|e| ToolError::Internal(e.to_string()))?;
            let full = found.len() >= k;
            let mut hits: Vec<(f32, NodeRef)> =
                found.into_iter().map(|(si, c, s)| (s, (si, c))).collect();
            hits.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let enough = hits.iter().filter(|&&(s, n)| kept(s, n)).count() >= limit;
            let above = hits.last().is_some_and(|&(s, _)| s >= threshold);
            if enough || !full || !above || k >= MAX_DUPLICATE_DEPTH {
                break hits;
            }
            k = (k * 4).min(MAX_DUPLICATE_DEPTH);
        };
        dbg.vector_ms = ms(t.elapsed());
        let t = Instant::now();
        let lines = a.snippet_lines.unwrap_or(6);
        let duplicates = hits
            .into_iter()
            .filter(|&(s, n)| kept(s, n))
            .take(limit)
            .map(|(s, n)| {
                Ok(Duplicate {
                    similarity: (s * 1e4).round() / 1e4,
                    symbol: symbol_ref(&snap.code, n),
                    snippet: if lines == 0 {
                        String::new()
                    } else {
                        snippet(snap.code.text(n)?, lines, 600).0
                    },
                })
            })
            .collect::<ToolResult<_>>()?;
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
