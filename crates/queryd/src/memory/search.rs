//! `search_memory`: hybrid search over memory segments and the delta, filters applied before
//! ranking, then boosts.
//!
//! Per memory segment, the vector index and BM25 run with an allow bitmap (the filters, when
//! any beyond the default "active") and a deny bitmap (tombstoned, superseded and, by default,
//! inactive records). The delta is searched exactly: a dot product per filtered entry, and BM25
//! with the delta's own statistics, like a segment's. The vector and lexical lists are fused
//! like code results ([`crate::search::fuse`]); then each hit's score is multiplied by
//! `1 + boost`, where boost adds [`ENTITY_BOOST`] for the preferred entity, [`TAG_BOOST`] per
//! preferred tag (at most [`MAX_TAG_BOOSTS`]), [`CATEGORY_BOOST`] for the preferred category,
//! and `recency_weight · 2^(−age / half_life)`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use format::memory::{tag_key, ArchivedMemoryRecord, MemoryRecord};
use roaring::RoaringBitmap;

use crate::engine::Snapshot;
use crate::memory::Entry;
use crate::search::{fuse, Mode, SearchOptions};

pub const ENTITY_BOOST: f32 = 0.1;
pub const CATEGORY_BOOST: f32 = 0.1;
pub const TAG_BOOST: f32 = 0.05;
pub const MAX_TAG_BOOSTS: usize = 4;
/// Default recency half-life and weight.
pub const DEFAULT_HALF_LIFE_DAYS: f64 = 30.0;
pub const DEFAULT_RECENCY_WEIGHT: f32 = 0.1;

/// The fields filters and boosts look at, for stored and for delta records.
pub trait MemFields {
    fn category(&self) -> &str;
    fn scope(&self) -> &str;
    fn entity(&self) -> &str;
    fn source(&self) -> &str;
    fn state(&self) -> &str;
    fn created_at(&self) -> i64;
    fn has_tag(&self, t: &str) -> bool;
}

impl MemFields for MemoryRecord {
    fn category(&self) -> &str {
        &self.category
    }
    fn scope(&self) -> &str {
        &self.scope
    }
    fn entity(&self) -> &str {
        &self.entity
    }
    fn source(&self) -> &str {
        &self.source
    }
    fn state(&self) -> &str {
        &self.state
    }
    fn created_at(&self) -> i64 {
        self.created_at
    }
    fn has_tag(&self, t: &str) -> bool {
        self.tags.iter().any(|x| tag_matches(x, t))
    }
}

impl MemFields for ArchivedMemoryRecord {
    fn category(&self) -> &str {
        self.category.as_str()
    }
    fn scope(&self) -> &str {
        self.scope.as_str()
    }
    fn entity(&self) -> &str {
        self.entity.as_str()
    }
    fn source(&self) -> &str {
        self.source.as_str()
    }
    fn state(&self) -> &str {
        self.state.as_str()
    }
    fn created_at(&self) -> i64 {
        self.created_at.to_native()
    }
    fn has_tag(&self, t: &str) -> bool {
        self.tags.iter().any(|x| tag_matches(x.as_str(), t))
    }
}

/// A filter tag `key` matches any tag with that key; `key=value` matches exactly.
fn tag_matches(tag: &str, filter: &str) -> bool {
    if filter.contains('=') {
        tag == filter
    } else {
        tag_key(tag) == filter
    }
}

/// Hard filters. Strings compare exactly, except `entity` (case-insensitive).
#[derive(Debug, Clone)]
pub struct MemFilter {
    pub category: Option<String>,
    pub scope: Option<String>,
    pub entity: Option<String>,
    pub source: Option<String>,
    /// Canonical tags (see [`format::memory::normalize_tag`]).
    pub tags: Vec<String>,
    /// All tags must match (else any).
    pub tags_all: bool,
    /// Unix milliseconds, inclusive / exclusive.
    pub created_after: Option<i64>,
    pub created_before: Option<i64>,
    /// Allowed states; default `["active"]`.
    pub states: Vec<String>,
}

impl Default for MemFilter {
    fn default() -> Self {
        MemFilter {
            category: None,
            scope: None,
            entity: None,
            source: None,
            tags: Vec::new(),
            tags_all: true,
            created_after: None,
            created_before: None,
            states: vec!["active".into()],
        }
    }
}

impl MemFilter {
    /// Only the default state filter: segments can use their precomputed `hidden` bitmap.
    pub fn is_default(&self) -> bool {
        self.category.is_none()
            && self.scope.is_none()
            && self.entity.is_none()
            && self.source.is_none()
            && self.tags.is_empty()
            && self.created_after.is_none()
            && self.created_before.is_none()
            && self.states == ["active"]
    }

    pub fn matches(&self, m: &(impl MemFields + ?Sized)) -> bool {
        self.category.as_deref().is_none_or(|c| m.category() == c)
            && self.scope.as_deref().is_none_or(|s| m.scope() == s)
            && self
                .entity
                .as_deref()
                .is_none_or(|e| m.entity().eq_ignore_ascii_case(e))
            && self.source.as_deref().is_none_or(|s| m.source() == s)
            && self.states.iter().any(|s| s == m.state())
            && self.created_after.is_none_or(|t| m.created_at() >= t)
            && self.created_before.is_none_or(|t| m.created_at() < t)
            && (self.tags.is_empty()
                || if self.tags_all {
                    self.tags.iter().all(|t| m.has_tag(t))
                } else {
                    self.tags.iter().any(|t| m.has_tag(t))
                })
    }
}

/// Soft preferences.
#[derive(Debug, Clone)]
pub struct Boosts {
    pub entity: Option<String>,
    pub category: Option<String>,
    pub tags: Vec<String>,
    /// 0 disables recency.
    pub half_life_days: f64,
    pub recency_weight: f32,
    pub now_ms: i64,
}

impl Boosts {
    pub fn boost(&self, m: &(impl MemFields + ?Sized)) -> f32 {
        let mut b = 0.0;
        if self
            .entity
            .as_deref()
            .is_some_and(|e| m.entity().eq_ignore_ascii_case(e))
        {
            b += ENTITY_BOOST;
        }
        if self.category.as_deref().is_some_and(|c| m.category() == c) {
            b += CATEGORY_BOOST;
        }
        let tags = self.tags.iter().filter(|t| m.has_tag(t)).count();
        b += TAG_BOOST * tags.min(MAX_TAG_BOOSTS) as f32;
        if self.half_life_days > 0.0 {
            let age_days = (self.now_ms - m.created_at()).max(0) as f64 / 86_400_000.0;
            b += self.recency_weight * (-age_days / self.half_life_days).exp2() as f32;
        }
        b
    }
}

/// A result: where the memory is, its final score, its ranks in the two lists.
#[derive(Debug, Clone)]
pub enum MemKey {
    Segment(usize, u32),
    Delta(Arc<Entry>),
}

#[derive(Debug, Clone)]
pub struct MemHit {
    pub key: MemKey,
    pub score: f32,
    pub vector_rank: Option<usize>,
    pub lexical_rank: Option<usize>,
}

#[derive(Debug, Default, Clone)]
pub struct MemTimings {
    pub filter: Duration,
    pub vector: Duration,
    pub bm25: Duration,
    pub fusion: Duration,
}

/// BM25 over the delta: `n`, df and average length are the delta's own.
fn delta_bm25(all: &[&Arc<Entry>], cands: &[Arc<Entry>], query: &str, total_len: u64) -> Vec<f32> {
    let mut q: std::collections::BTreeMap<String, u32> = std::collections::BTreeMap::new();
    format::text::for_each_token(query, |t| *q.entry(t.to_string()).or_insert(0) += 1);
    let n = all.len() as u32;
    let df: Vec<u32> = q
        .keys()
        .map(|t| all.iter().filter(|e| e.tf(t) > 0).count() as u32)
        .collect();
    cands
        .iter()
        .map(|e| {
            let mut s = 0f32;
            for ((t, &qtf), &df) in q.iter().zip(&df) {
                let tf = e.tf(t);
                if tf > 0 {
                    s += format::bm25::term_score(n, df, qtf, tf, e.len, total_len);
                }
            }
            s
        })
        .collect()
}

/// Searches memories. `o` gives mode, limit, weights and nprobe; `qv` is required unless the
/// mode is lexical.
pub fn search(
    snap: &Snapshot,
    query: &str,
    qv: Option<&[f32]>,
    filter: &MemFilter,
    boosts: &Boosts,
    o: &SearchOptions,
) -> Result<(Vec<MemHit>, MemTimings), format::FormatError> {
    let mut tm = MemTimings::default();
    let depth = (o.limit * 4).max(50);
    let t = Instant::now();
    let segs = &snap.index.memory;
    let allows: Vec<Option<RoaringBitmap>> = segs
        .iter()
        .map(|ls| {
            if filter.is_default() {
                return None;
            }
            let mut bits = RoaringBitmap::new();
            if let Some(t) = ls.segment.memories() {
                for (i, m) in t.memories.iter().enumerate() {
                    if filter.matches(m) {
                        bits.insert(i as u32);
                    }
                }
            }
            Some(bits)
        })
        .collect();
    let deny = |si: usize| -> &RoaringBitmap {
        if filter.states == ["active"] {
            &snap.mem[si].hidden
        } else {
            &snap.mem[si].dead
        }
    };
    let all: Vec<&Arc<Entry>> = snap.delta.entries.values().collect();
    let cands: Vec<Arc<Entry>> = all
        .iter()
        .filter(|e| filter.matches(&e.record))
        .map(|e| Arc::clone(e))
        .collect();
    tm.filter = t.elapsed();
    // The delta's items are keyed (segments.len(), index into `cands`).
    let dseg = segs.len();

    let sort = |l: &mut Vec<(usize, u32, f32)>| {
        l.sort_by(|a, b| b.2.total_cmp(&a.2).then((a.0, a.1).cmp(&(b.0, b.1))));
        l.truncate(depth);
    };
    let mut vec_list = Vec::new();
    if o.mode != Mode::Lexical {
        let t = Instant::now();
        if let Some(q) = qv {
            for (si, ls) in segs.iter().enumerate() {
                for (c, s) in ls.segment.search_vectors(
                    q,
                    depth,
                    o.nprobe,
                    allows[si].as_ref(),
                    Some(deny(si)),
                )? {
                    vec_list.push((si, c, s));
                }
            }
            for (i, e) in cands.iter().enumerate() {
                vec_list.push((dseg, i as u32, format::vectors::dot(&e.vector, q)));
            }
        }
        sort(&mut vec_list);
        tm.vector = t.elapsed();
    }
    let mut lex_list = Vec::new();
    if o.mode != Mode::Vector {
        let t = Instant::now();
        for (si, ls) in segs.iter().enumerate() {
            for (c, s) in ls
                .segment
                .search_bm25(query, depth, allows[si].as_ref(), Some(deny(si)))
            {
                lex_list.push((si, c, s));
            }
        }
        for (i, s) in delta_bm25(&all, &cands, query, snap.delta.total_len)
            .into_iter()
            .enumerate()
        {
            if s > 0.0 {
                lex_list.push((dseg, i as u32, s));
            }
        }
        sort(&mut lex_list);
        tm.bm25 = t.elapsed();
    }
    let t = Instant::now();
    let fo = SearchOptions {
        limit: depth,
        ..o.clone()
    };
    let mut hits: Vec<MemHit> = fuse(&vec_list, &lex_list, query, &fo)
        .into_iter()
        .filter_map(|((si, c), (score, vr, lr))| {
            let (key, b) = if si == dseg {
                let e = cands.get(c as usize)?;
                (MemKey::Delta(Arc::clone(e)), boosts.boost(&e.record))
            } else {
                let m = &segs[si].segment.memories()?.memories[c as usize];
                (MemKey::Segment(si, c), boosts.boost(m))
            };
            Some(MemHit {
                key,
                score: score * (1.0 + b),
                vector_rank: vr,
                lexical_rank: lr,
            })
        })
        .collect();
    hits.sort_by(|a, b| b.score.total_cmp(&a.score));
    hits.truncate(o.limit);
    tm.fusion = t.elapsed();
    Ok((hits, tm))
}
