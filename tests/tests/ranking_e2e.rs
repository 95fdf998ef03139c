//! Ranking invariants of `code::search` on real indexes built with the real model:
//!
//! - top-k does not depend on `limit`: over 200 queries derived from an index of three of this
//!   workspace's crates (chunk names and doc-comment lines), the first 5 results at limit 5
//!   equal the first 5 at limit 50, for hybrid (linear and RRF fusion), vector and lexical;
//! - no two results share (path, line range), and `limit` results come back when the index
//!   has them;
//! - the exact-name tier: in a strsim-like fixture, the query `levenshtein` ranks the function
//!   `levenshtein` first (its callers and the tests that mention it come after), and
//!   `closest match` / `closestMatch` rank `closest_match` first.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;

use cix_tests::{build_index, copy_dir, embed_one, fixture, workspace_root};
use code::search::Fusion;
use code::{Hit, Mode, SearchOptions};
use format::Index;

fn search(ix: &Index, q: &str, qv: Option<&[f32]>, o: &SearchOptions) -> Vec<Hit> {
    code::search(ix, q, qv, o)
        .unwrap_or_else(|e| panic!("search {q:?}: {e}"))
        .0
}

/// What identifies a result, score included.
fn key(h: &Hit) -> (usize, u32, u32, u32, u32) {
    (
        h.segment,
        h.chunk,
        h.start_line,
        h.end_line,
        h.score.to_bits(),
    )
}

fn assert_unique_ranges(hits: &[Hit], what: &str) {
    let mut seen = HashSet::new();
    for h in hits {
        assert!(
            seen.insert((h.repo.as_str(), h.path.as_str(), h.start_line, h.end_line)),
            "{what}: {}:{}-{} appears twice",
            h.path,
            h.start_line,
            h.end_line
        );
    }
}

/// 200 queries from the index itself: 100 chunk names (identifier queries) and 100 doc-comment
/// lines (sentence queries), each list sorted and sampled at an even stride.
fn derived_queries(ix: &Index) -> Vec<String> {
    let mut names = BTreeSet::new();
    let mut docs = BTreeSet::new();
    for ls in &ix.segments {
        for (i, c) in ls.segment.table().chunks.iter().enumerate() {
            if !c.name.is_empty() && c.name.len() > 2 {
                names.insert(c.name.to_string());
            }
            for l in ls.segment.chunk_text(i as u32).unwrap().lines() {
                let l = l.trim_start();
                let Some(rest) = l.strip_prefix("///").or_else(|| l.strip_prefix("//!")) else {
                    continue;
                };
                let rest = rest.trim();
                if rest.split_whitespace().count() >= 4 {
                    docs.insert(rest.to_string());
                    break;
                }
            }
        }
    }
    let pick = |set: &BTreeSet<String>, n: usize| -> Vec<String> {
        let v: Vec<&String> = set.iter().collect();
        assert!(v.len() >= n, "only {} candidates for {n} queries", v.len());
        (0..n).map(|i| v[i * v.len() / n].clone()).collect()
    };
    let mut q = pick(&names, 100);
    q.extend(pick(&docs, 100));
    q
}

#[test]
fn top_k_does_not_depend_on_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("cix");
    for c in ["code", "format", "memory"] {
        copy_dir(
            &workspace_root().join("crates").join(c).join("src"),
            &repo.join(c),
        );
    }
    let out = tmp.path().join("index");
    build_index(&repo, &out);
    let ix = Index::open(&out).unwrap();
    let chunks = ix.live_chunks();
    assert!(
        chunks > 400,
        "index too small to exercise the depth: {chunks}"
    );
    let queries = derived_queries(&ix);
    assert_eq!(queries.len(), 200);
    let configs = [
        ("hybrid", Mode::Hybrid, Fusion::LinearZScore),
        ("hybrid rrf", Mode::Hybrid, Fusion::Rrf { k: 60.0 }),
        ("vector", Mode::Vector, Fusion::LinearZScore),
        ("lexical", Mode::Lexical, Fusion::LinearZScore),
    ];
    let mut compared = 0;
    for q in &queries {
        let qv = embed_one(q);
        for (name, mode, fusion) in configs {
            let o = |limit| SearchOptions {
                limit,
                mode,
                fusion,
                ..SearchOptions::default()
            };
            let h5 = search(&ix, q, Some(&qv), &o(5));
            let h50 = search(&ix, q, Some(&qv), &o(50));
            let a: Vec<_> = h5.iter().map(key).collect();
            let b: Vec<_> = h50.iter().take(5).map(key).collect();
            assert_eq!(a, b, "{name} {q:?}: limit 5 vs the first 5 at limit 50");
            assert_unique_ranges(&h50, &format!("{name} {q:?}"));
            if mode != Mode::Lexical {
                // The vector list alone holds 200 candidates: 50 results must come back.
                assert_eq!(h50.len(), 50, "{name} {q:?}");
            }
            compared += 1;
        }
    }
    assert_eq!(compared, 800);
}

/// A copy of the strsim-like fixture and its index.
fn strsim_index(parent: &Path) -> Index {
    let repo = parent.join("strsim");
    copy_dir(&fixture("strsim"), &repo);
    let out = parent.join("index");
    build_index(&repo, &out);
    Index::open(&out).unwrap()
}

#[test]
fn a_query_naming_a_function_ranks_it_first() {
    let tmp = tempfile::tempdir().unwrap();
    let ix = strsim_index(tmp.path());
    for (q, want) in [
        ("levenshtein", "levenshtein"),
        ("Levenshtein", "levenshtein"),
        ("closest match", "closest_match"),
        ("closestMatch", "closest_match"),
        ("jaro_winkler", "jaro_winkler"),
        ("Dictionary::suggest", "suggest"),
    ] {
        let qv = embed_one(q);
        for mode in [Mode::Hybrid, Mode::Lexical] {
            let o = SearchOptions {
                limit: 10,
                mode,
                ..SearchOptions::default()
            };
            let hits = search(&ix, q, Some(&qv), &o);
            let top = hits.first().map(|h| (h.name.as_str(), h.kind.as_str()));
            assert!(
                top.is_some_and(|(n, k)| n == want && k != "body_part"),
                "{mode:?} {q:?}: top {top:?}, all {:?}",
                hits.iter().map(|h| &h.name).collect::<Vec<_>>()
            );
            assert_unique_ranges(&hits, q);
        }
    }
    // A sentence is not a name: no tier, the fused ranking alone (4th when this was written,
    // behind other edit-distance functions).
    let q = "levenshtein distance between two strings";
    let hits = search(&ix, q, Some(&embed_one(q)), &SearchOptions::default());
    assert!(
        hits.iter().take(5).any(|h| h.name == "levenshtein"),
        "{:?}",
        hits.iter().map(|h| &h.name).collect::<Vec<_>>()
    );
}
