//! `search_memory`: hybrid search over memory segments and the delta, filters applied before
//! ranking, then boosts.
//!
//! Per memory segment, the vector index and BM25 run with an allow bitmap (the filters, when
//! any beyond the default "active") and a deny bitmap (tombstoned, superseded and, by default,
//! inactive records). The delta is searched exactly: a dot product per filtered entry, and BM25
//! with the delta's own statistics, like a segment's. The vector and lexical lists are fused
//! like code results ([`code::search::fuse`]); then each hit's score is multiplied by
//! `1 + boost`, where boost adds [`ENTITY_BOOST`] for the preferred entity, [`TAG_BOOST`] per
//! preferred tag (at most [`MAX_TAG_BOOSTS`]), [`CATEGORY_BOOST`] for the preferred category,
//! and `recency_weight · 2^(−age / half_life)`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use format::bm25::TermStats;
use roaring::RoaringBitmap;

pub use crate::context::{SessionWeights, NO_SESSION_CONTEXT, SESSION_TAG, SESSION_WEIGHTS};
pub use crate::filter::{
    Boosts, MemFields, MemFilter, MemKey, CATEGORY_BOOST, DEFAULT_HALF_LIFE_DAYS,
    DEFAULT_RECENCY_WEIGHT, ENTITY_BOOST, MAX_TAG_BOOSTS, TAG_BOOST, WHEN_BOOST,
};
use crate::view::MemoryView;
use code::search::{fuse, Mode, SearchOptions};

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
    /// The weights hybrid fusion chose.
    pub choice: Option<code::search::FusionChoice>,
}

/// Index-wide IDF statistics of `query`'s terms over the memory segments and the delta.
pub fn mem_term_stats(snap: &MemoryView, query: &str) -> TermStats {
    let mut st = TermStats::default();
    for ls in &snap.index.memory {
        st.add_segment(ls.segment.postings(), query);
    }
    let d = &snap.delta;
    st.add_docs(d.entries.len() as u32, query, |t| d.df(t));
    st
}

/// Memories (segments and delta, tombstoned ones included) that hold `term`.
fn mem_df(snap: &MemoryView, term: &str) -> u32 {
    let segs: u32 = snap
        .index
        .memory
        .iter()
        .map(|ls| ls.segment.postings().df(term))
        .sum();
    segs + snap.delta.df(term)
}

/// BM25 over the delta through its postings: IDF from `stats` (index-wide), average length
/// the delta's own, so scores are computed exactly as a segment of these memories would
/// compute them. Returns (slot, score) for entries passing `filter`.
fn delta_bm25(
    delta: &crate::delta::Delta,
    query: &str,
    filter: &MemFilter,
    stats: &TermStats,
) -> Vec<(u32, f32)> {
    let mut q: std::collections::BTreeMap<String, u32> = std::collections::BTreeMap::new();
    format::text::for_each_token(query, |t| *q.entry(t.to_string()).or_insert(0) += 1);
    let live = delta.entries.len() as u32;
    let mut acc: std::collections::HashMap<u32, f32> = std::collections::HashMap::new();
    let mut admitted: std::collections::HashMap<u32, bool> = std::collections::HashMap::new();
    for (t, &qtf) in &q {
        let Some(pl) = delta.postings.get(t) else {
            continue;
        };
        let Some((n, df)) = stats.get(t) else {
            continue;
        };
        for (&slot, &tf) in pl.iter() {
            let Some(e) = delta.slot(slot) else { continue };
            let ok = *admitted
                .entry(slot)
                .or_insert_with(|| filter.matches(&e.record));
            if ok {
                *acc.entry(slot).or_insert(0.0) +=
                    format::bm25::term_score_with(n, df, qtf, tf, e.len, delta.total_len, live);
            }
        }
    }
    acc.into_iter().collect()
}

/// Searches memories. `o` gives mode, limit, weights and nprobe; `qv` is required unless the
/// mode is lexical.
pub fn search(
    snap: &MemoryView,
    query: &str,
    qv: Option<&[f32]>,
    filter: &MemFilter,
    boosts: &Boosts,
    o: &SearchOptions,
) -> Result<(Vec<MemHit>, MemTimings), format::FormatError> {
    let mut tm = MemTimings::default();
    // Candidates per ranking: independent of `limit`, so more results only append.
    let depth = code::search::candidate_depth(o.limit);
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
    let delta = &snap.delta;
    let all_pass = filter.is_default();
    tm.filter = t.elapsed();
    // The delta's items are keyed (segments.len(), slot).
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
                let nprobe = match o.nprobe {
                    Some(n) => n,
                    // A filter that makes the scan exact needs no probes (and no IVF map).
                    None => match ls.segment.probe_plan(allows[si].as_ref())? {
                        Some(ivf) => format::ivf_map::default_nprobe(&[Some(ivf)]),
                        None => format::vectors::DEFAULT_NPROBE,
                    },
                };
                for (c, s) in ls.segment.search_vectors(
                    q,
                    depth,
                    nprobe,
                    allows[si].as_ref(),
                    Some(deny(si)),
                )? {
                    vec_list.push((si, c, s));
                }
            }
            let scored = delta.slots.iter().flatten().filter_map(|e| {
                let pass = if all_pass {
                    e.record.state == "active"
                } else {
                    filter.matches(&e.record)
                };
                pass.then(|| (e.slot, format::vectors::dot(&e.vector, q)))
            });
            for (slot, s) in format::top_k(scored, depth) {
                vec_list.push((dseg, slot, s));
            }
        }
        sort(&mut vec_list);
        tm.vector = t.elapsed();
    }
    let mut lex_list = Vec::new();
    if o.mode != Mode::Vector {
        let t = Instant::now();
        // The lexical query: a sentence without its question words, with the other forms of
        // its words that these memories hold ([`code::search::expand_query`]).
        let expanded;
        let query = if o.expand {
            expanded = code::search::expand_query(query, |t| mem_df(snap, t));
            expanded.as_str()
        } else {
            query
        };
        let stats = mem_term_stats(snap, query);
        for (si, ls) in segs.iter().enumerate() {
            for (c, s) in ls.segment.search_bm25_above(
                query,
                depth,
                allows[si].as_ref(),
                Some(deny(si)),
                f32::NEG_INFINITY,
                Some(&stats),
            ) {
                lex_list.push((si, c, s));
            }
        }
        for (slot, s) in format::top_k(delta_bm25(delta, query, filter, &stats).into_iter(), depth)
        {
            lex_list.push((dseg, slot, s));
        }
        sort(&mut lex_list);
        tm.bm25 = t.elapsed();
    }
    let t = Instant::now();
    let fo = SearchOptions {
        limit: depth,
        corpus: code::search::Corpus::Memory,
        ..o.clone()
    };
    let (fused, choice) = fuse(&vec_list, &lex_list, query, &fo);
    if o.mode == Mode::Hybrid {
        tm.choice = choice;
    }
    // Each candidate's record fields: boost, session, time.
    let mut keyed: Vec<(MemKey, f32, Option<usize>, Option<usize>)> = Vec::new();
    let mut sessions: Vec<Option<String>> = Vec::new();
    let mut times: Vec<i64> = Vec::new();
    for ((si, c), (score, vr, lr)) in fused {
        let (key, b, sess, at) = if si == dseg {
            let Some(e) = delta.slot(c) else { continue };
            let r = &e.record;
            (
                MemKey::Delta(Arc::clone(e)),
                boosts.boost(r),
                r.tag_value(SESSION_TAG).map(str::to_string),
                r.created_at,
            )
        } else {
            let Some(m) = segs[si]
                .segment
                .memories()
                .and_then(|t| t.memories.get(c as usize))
            else {
                continue;
            };
            (
                MemKey::Segment(si, c),
                boosts.boost(m),
                m.tag_value(SESSION_TAG).map(str::to_string),
                m.created_at.to_native(),
            )
        };
        keyed.push((key, score * (1.0 + b), vr, lr));
        sessions.push(sess);
        times.push(at);
    }
    let cands: Vec<crate::context::Candidate<'_>> = keyed
        .iter()
        .zip(&sessions)
        .zip(&times)
        .map(|((k, s), &at)| crate::context::Candidate {
            score: k.1,
            session: s.as_deref(),
            at,
        })
        .collect();
    let scores = crate::context::rescore(&cands, boosts.sessions);
    let mut hits: Vec<MemHit> = keyed
        .into_iter()
        .zip(scores)
        .map(|((key, _, vr, lr), score)| MemHit {
            key,
            score,
            vector_rank: vr,
            lexical_rank: lr,
        })
        .collect();
    hits.sort_by(|a, b| b.score.total_cmp(&a.score));
    hits.truncate(o.limit);
    tm.fusion = t.elapsed();
    Ok((hits, tm))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta::Delta;
    use crate::new_id;
    use crate::wal::WalOp;
    use format::memory::MemoryRecord;

    fn rec(text: &str, entity: &str, tags: &[&str]) -> MemoryRecord {
        MemoryRecord {
            id: new_id(),
            text: text.into(),
            category: "note".into(),
            scope: "project".into(),
            entity: entity.into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            source: "agent".into(),
            evidence: vec![],
            code_refs: vec![],
            created_at: 1,
            updated_at: 1,
            state: "active".into(),
            similar: vec![],
        }
    }

    /// The delta must score BM25 exactly like a segment of the same memories, so results do
    /// not change when a flush moves them.
    #[test]
    fn delta_bm25_equals_segment_bm25() {
        let words = [
            "upload", "retry", "cache", "token", "parser", "deploy", "queue",
        ];
        let mut recs = Vec::new();
        for i in 0..60usize {
            let text: Vec<&str> = (0..3 + i % 7).map(|j| words[(i * 7 + j * 3) % 7]).collect();
            recs.push(rec(&text.join(" "), words[i % 3], &["area=io"]));
        }
        let mut d = Delta::default();
        for (i, r) in recs.iter().enumerate() {
            let op = WalOp::Put {
                record: Box::new(r.clone()),
                vector: vec![0.0; 4],
            };
            d.apply(i as u64 + 1, &op, |_| false);
        }
        // Replace one and delete one: the delta's statistics must follow.
        let mut changed = recs[5].clone();
        changed.text = "totally different words here".into();
        d.apply(
            100,
            &WalOp::Put {
                record: Box::new(changed.clone()),
                vector: vec![0.0; 4],
            },
            |_| false,
        );
        d.apply(
            101,
            &WalOp::Delete {
                id: recs[9].id.clone(),
            },
            |_| false,
        );
        let mut live: Vec<MemoryRecord> = recs.clone();
        live[5] = changed;
        live.remove(9);
        live.sort_by(|a, b| a.id.cmp(&b.id));
        let dir = tempfile::tempdir().unwrap();
        let n = live.len();
        let (id, _) = format::SegmentBuilder::for_memories(live.clone(), vec![0.5; n * 4])
            .write(dir.path(), "m", 4)
            .unwrap();
        let seg = format::Segment::open(dir.path(), &id, "m", 4).unwrap();
        let f = MemFilter::default();
        for q in [
            "upload retry",
            "cache",
            "queue deploy parser",
            "different",
            "uploads",
        ] {
            let mut st = TermStats::default();
            st.add_docs(d.entries.len() as u32, q, |t| d.df(t));
            let mut a: Vec<(String, f32)> = delta_bm25(&d, q, &f, &st)
                .into_iter()
                .map(|(slot, s)| (d.slot(slot).unwrap().record.id.clone(), s))
                .collect();
            let mut b: Vec<(String, f32)> = seg
                .search_bm25(q, 1000, None, None)
                .into_iter()
                .map(|(c, s)| (live[c as usize].id.clone(), s))
                .collect();
            a.sort_by(|x, y| x.0.cmp(&y.0));
            b.sort_by(|x, y| x.0.cmp(&y.0));
            assert_eq!(a, b, "{q}");
            assert!(!a.is_empty() || q == "uploads");
        }
    }

    #[test]
    fn filters_and_boosts() {
        let mut r = rec("x", "Uploads", &["area=io", "retry"]);
        r.created_at = 1_000;
        let f = MemFilter {
            entity: Some("uploads".into()),
            tags: vec!["area".into(), "retry".into()],
            ..MemFilter::default()
        };
        assert!(f.matches(&r));
        let f2 = MemFilter {
            tags: vec!["area=db".into(), "retry".into()],
            tags_all: false,
            ..MemFilter::default()
        };
        assert!(f2.matches(&r));
        let f3 = MemFilter {
            tags: vec!["area=db".into(), "retry".into()],
            ..MemFilter::default()
        };
        assert!(!f3.matches(&r));
        assert!(!MemFilter {
            created_after: Some(2_000),
            ..MemFilter::default()
        }
        .matches(&r));
        r.state = "archived".into();
        assert!(!MemFilter::default().matches(&r));
        let b = Boosts {
            entity: Some("uploads".into()),
            category: None,
            tags: vec!["retry".into()],
            half_life_days: 1.0,
            recency_weight: 0.1,
            now_ms: 1_000 + 86_400_000,
            when: None,
            sessions: NO_SESSION_CONTEXT,
        };
        // entity 0.1 + tag 0.05 + recency 0.1 · 2^-1.
        assert!((b.boost(&r) - 0.2).abs() < 1e-6, "{}", b.boost(&r));
    }
}
