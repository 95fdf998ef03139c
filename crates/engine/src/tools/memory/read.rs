//! The memory read tools: `get_memory`, `list_memories` and `search_memory` (hybrid search
//! over memory segments and the delta, then confidence re-ranking and graph context).

use std::time::Instant;

use code::search::{Mode, SearchOptions};
use memory::now_ms;
use memory::search::{Boosts, MemHit, MemKey};

use super::args::*;
use super::input::*;
use super::output::*;
use crate::engine::Engine;
use crate::tools::common::{
    check_text, check_weights, limit_arg, ms, Debug, ToolError, ToolResult, MAX_LIMIT,
};
use crate::tools::relations::{relations, RelationDetail};

/// A result's score is multiplied by `CONFIDENCE_FLOOR + (1 − CONFIDENCE_FLOOR) · confidence`.
pub const CONFIDENCE_FLOOR: f32 = 0.7;

impl Engine {
    pub fn get_memory(&self, a: &GetMemoryArgs) -> ToolResult<MemoryAnswer> {
        let t0 = Instant::now();
        check_id(a.id.trim())?;
        let level = RelationDetail::parse(a.relation_detail.as_deref())?;
        let snap = self.snapshot();
        let (r, _) = snap
            .memory
            .lookup(a.id.trim())
            .ok_or_else(|| not_found(&a.id))?;
        let mut o = self.annotated(&snap, &r);
        o.relations = relations(&snap.memory, &r.id, level);
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
        let limit = limit_arg(a.limit, 20, MAX_LIMIT)?;
        let snap = self.snapshot();
        let mut all = snap.memory.all_memories(&f);
        all.sort_by(|x, y| y.created_at.cmp(&x.created_at).then(y.id.cmp(&x.id)));
        let total = all.len();
        let offset = match (&a.after, a.offset) {
            (Some(_), Some(_)) => {
                return Err(ToolError::InvalidInput(
                    "pass `after` (a next_cursor) or `offset`, not both".into(),
                ))
            }
            (Some(c), None) => {
                let (at, id) = c
                    .split_once(':')
                    .and_then(|(t, id)| Some((t.parse::<i64>().ok()?, id)))
                    .ok_or_else(|| {
                        ToolError::InvalidInput(format!(
                            "`after` must be a next_cursor from list_memories (`<created_at>:<id>`), not `{}`",
                            format::memory::clip(c)
                        ))
                    })?;
                // The list is by (created_at, id) descending: the first one below the cursor.
                all.iter()
                    .position(|m| (m.created_at, m.id.as_str()) < (at, id))
                    .unwrap_or(total)
            }
            (None, o) => o.unwrap_or(0),
        };
        let page: Vec<MemoryOut> = all
            .iter()
            .skip(offset)
            .take(limit)
            .map(|m| self.annotated(&snap, m))
            .collect();
        let next = offset + page.len();
        let more = next < total;
        // `more` means `next` < `total`, and a page that leaves more is not empty.
        let next_cursor = (more && next > 0).then(|| {
            let m = &all[next - 1];
            format!("{}:{}", m.created_at, m.id)
        });
        Ok(ListMemoriesAnswer {
            memories: page,
            total,
            next_offset: more.then_some(next),
            next_cursor,
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
            .map_err(|e: code::search::UnknownMode| ToolError::InvalidInput(e.to_string()))?;
        if a.half_life_days
            .is_some_and(|h| !(h.is_finite() && h >= 0.0))
        {
            return Err(ToolError::InvalidInput(
                "`half_life_days` must be a non-negative number (0 turns recency off)".into(),
            ));
        }
        let limit = limit_arg(a.limit, 10, MAX_LIMIT)?;
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
        let now = match a.as_of.as_deref() {
            Some(t) => parse_time("as_of", t)?,
            None => now_ms(),
        };
        let when = memory::when::window(&a.query, now);
        let boosts = Boosts {
            entity: a.boost_entity.clone().filter(|s| !s.trim().is_empty()),
            category: a.boost_category.clone().filter(|s| !s.trim().is_empty()),
            tags: canonical_tags(a.boost_tags.as_deref().unwrap_or_default())?,
            half_life_days: a
                .half_life_days
                .unwrap_or(memory::search::DEFAULT_HALF_LIFE_DAYS),
            recency_weight: memory::search::DEFAULT_RECENCY_WEIGHT,
            now_ms: now,
            when: when.as_ref().map(|w| (w.start, w.end)),
            sessions: if a.session_context {
                memory::search::SESSION_WEIGHTS
            } else {
                memory::search::NO_SESSION_CONTEXT
            },
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
            memory::search::search(&snap.memory, a.query.trim(), qv.as_deref(), &f, &boosts, &o)
                .map_err(|e| ToolError::Internal(e.to_string()))?;
        dbg.filter_ms = ms(tm.filter);
        dbg.vector_ms = ms(tm.vector);
        dbg.bm25_ms = ms(tm.bm25);
        dbg.fusion_ms = ms(tm.fusion);
        dbg.fusion = tm.choice.as_ref().map(|c| c.reason.clone());
        dbg.time_window = when.map(|w| {
            format!(
                "\"{}\": {} to {} boosted",
                w.phrase,
                memory::time::rfc3339(w.start),
                memory::time::rfc3339(w.end)
            )
        });
        let t = Instant::now();
        let max_chars = a.max_chars.unwrap_or(1000).max(1);
        let mut results: Vec<MemoryOut> = hits
            .iter()
            .filter_map(|h: &MemHit| {
                let rec = match &h.key {
                    MemKey::Delta(e) => e.record.clone(),
                    MemKey::Segment(si, c) => {
                        let m = snap.memory.index.memory[*si]
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
            o.relations = relations(&snap.memory, &o.id, level);
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
