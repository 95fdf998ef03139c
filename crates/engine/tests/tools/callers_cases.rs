//! The call-graph cases of issue 14, on a repository holding CPython's `json` package and the
//! Rust crates `strsim` and `itoa` (vendored under `tests/fixtures/callgraph/`), indexed with
//! the real model: no caller ever crosses languages, Rust callers in `mod tests`, `tests/` and
//! path-qualified calls in `benches/` are found and exact, and `stage: "graph"` means exact.

use std::path::Path;

use engine::tools::calls::{Confidence, ImpactArgs, Stage};

use crate::common::{callees, callers, engine, search};
use cix_tests::{build_index, copy_dir, fixture};

/// `repo/{json,strsim,itoa}` and its index, under `tmp`.
fn json_strsim_itoa(tmp: &Path) -> std::path::PathBuf {
    let repo = tmp.join("repo");
    copy_dir(&fixture("callgraph/python-json/json"), &repo.join("json"));
    copy_dir(&fixture("callgraph/rust-strsim"), &repo.join("strsim"));
    copy_dir(&fixture("callgraph/rust-itoa"), &repo.join("itoa"));
    let index = tmp.join("index");
    build_index(&repo, &index);
    index
}

#[test]
fn callers_stay_in_their_language_and_find_rust_tests_and_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let e = engine(&json_strsim_itoa(tmp.path()));

    // 1. Rust's `Buffer::format` has no Python callers (Python's `str.format` is another
    //    method), and Python code calls no Rust.
    let c = e.find_callers(&callers("Buffer::format")).unwrap();
    assert!(
        c.results.iter().all(|r| r.symbol.language == "rust"),
        "{c:#?}"
    );
    let i = e
        .impact_analysis(&ImpactArgs {
            symbol: "Buffer::format".into(),
            ..Default::default()
        })
        .unwrap();
    assert!(
        i.affected.iter().all(|a| a.symbol.language == "rust"),
        "{i:#?}"
    );
    let c = e
        .find_callees(&callees("py_encode_basestring_ascii"))
        .unwrap();
    assert!(
        c.results.iter().all(|r| r.symbol.language == "python"),
        "{c:#?}"
    );

    // 2. `levenshtein`'s callers: the unit tests in `mod tests`, `tests/lib.rs`, and the
    //    path-qualified `strsim::levenshtein(..)` in `benches/benches.rs`, all exact.
    let c = e.find_callers(&callers("levenshtein")).unwrap();
    let exact: Vec<(String, String)> = c
        .results
        .iter()
        .filter(|r| r.confidence == Confidence::Exact)
        .map(|r| (r.symbol.path.clone(), r.symbol.qualified.clone()))
        .collect();
    assert!(exact.len() >= 10, "{c:#?}");
    for path in [
        "strsim/src/lib.rs",
        "strsim/tests/lib.rs",
        "strsim/benches/benches.rs",
    ] {
        assert!(exact.iter().any(|(p, _)| p == path), "{path}: {c:#?}");
    }
    assert!(
        exact.iter().any(|(_, q)| q.starts_with("tests/")),
        "a caller inside `mod tests`: {c:#?}"
    );

    // 3. `stage: "graph"` means every result is exact.
    for s in [
        "levenshtein",
        "Buffer::format",
        "JSONDecoder.raw_decode",
        "dumps",
    ] {
        let c = e.find_callers(&callers(s)).unwrap();
        if c.stage == Stage::Graph {
            assert!(
                c.results.iter().all(|r| r.confidence == Confidence::Exact),
                "{s}: {c:#?}"
            );
        }
    }
}

#[test]
fn search_on_the_same_repository_is_stable_named_and_unique() {
    let tmp = tempfile::tempdir().unwrap();
    let e = engine(&json_strsim_itoa(tmp.path()));
    let key = |h: &engine::tools::search::CodeHit| {
        (
            h.symbol.path.clone(),
            h.symbol.start_line,
            h.symbol.end_line,
        )
    };
    // 3. The top results do not change when only `limit` grows (graph neighbours follow
    //    the first `limit` hits).
    let q = "levenshtein distance between two strings";
    let at = |limit: usize| {
        let mut a = search(q);
        a.limit = Some(limit);
        e.search_code(&a).unwrap().results
    };
    let (five, forty) = (at(5), at(40));
    assert_eq!(
        five.iter().take(5).map(key).collect::<Vec<_>>(),
        forty.iter().take(5).map(key).collect::<Vec<_>>()
    );
    // The identifier query ranks its own function first.
    let r = e.search_code(&search("levenshtein")).unwrap().results;
    assert_eq!(r[0].symbol.name, "levenshtein", "{r:#?}");
    assert_eq!(r[0].symbol.path, "strsim/src/lib.rs", "{r:#?}");
    // 4. No two results share a (path, line range).
    for q in [
        q,
        "levenshtein",
        "format an integer into a buffer",
        "decode json",
    ] {
        let mut a = search(q);
        a.limit = Some(10);
        let r = e.search_code(&a).unwrap().results;
        let mut keys: Vec<_> = r.iter().map(key).collect();
        let n = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n, "{q}: {r:#?}");
    }
}

/// What a caller list leaves out is said: a list cut at `limit` says so (`truncated`, the
/// graph edges in all, the note), and a name that resolves to several symbols says how many
/// and names, on each graph result, the symbol it concerns; `explain_code` gives each graph
/// neighbour its confidence.
#[test]
fn cut_and_ambiguous_caller_lists_say_so() {
    let tmp = tempfile::tempdir().unwrap();
    let e = engine(&json_strsim_itoa(tmp.path()));
    let mut a = callers("levenshtein");
    a.limit = Some(100);
    let all = e.find_callers(&a).unwrap();
    assert!(!all.truncated && all.graph_edges.is_none(), "{all:#?}");
    let graph_n = all
        .results
        .iter()
        .filter(|r| matches!(r.confidence, Confidence::Exact | Confidence::Likely))
        .count();
    let name_only_n = all.results.len() - graph_n;
    // The graph edges exactly fill the limit: cut only if name-only callers exist.
    a.limit = Some(graph_n);
    let full = e.find_callers(&a).unwrap();
    assert_eq!(full.results.len(), graph_n);
    assert_eq!(full.truncated, name_only_n > 0, "{full:#?}");
    let mut a = callers("levenshtein");
    a.limit = Some(3);
    let cut = e.find_callers(&a).unwrap();
    assert_eq!(cut.results.len(), 3);
    assert!(cut.truncated, "{cut:#?}");
    assert!(cut.graph_edges.unwrap() >= 10, "{cut:#?}");
    assert!(cut.note.contains("Cut at limit 3"), "{}", cut.note);

    // `default`: a method of several types.
    let amb = e.find_callers(&callers("default")).unwrap();
    let n = amb.resolved_count.expect("several symbols");
    assert!(n > 1 && amb.note.contains("resolved to"), "{amb:#?}");
    let ids: std::collections::HashSet<&str> = amb
        .resolved_to
        .iter()
        .map(|s| s.symbol_id.as_str())
        .collect();
    let targets: Vec<&str> = amb
        .results
        .iter()
        .filter(|r| matches!(r.confidence, Confidence::Exact | Confidence::Likely))
        .map(|r| {
            r.target
                .as_deref()
                .expect("a graph result names its target")
        })
        .collect();
    assert!(!targets.is_empty(), "{amb:#?}");
    assert!(targets.iter().any(|t| ids.contains(t)), "{amb:#?}");
    if n <= 10 {
        assert!(targets.iter().all(|t| ids.contains(t)), "{amb:#?}");
    }
    let one = e.find_callers(&callers("levenshtein")).unwrap();
    assert!(one.resolved_count.is_none() && one.results.iter().all(|r| r.target.is_none()));

    let x = e
        .explain_code(&engine::tools::symbols::ExplainCodeArgs {
            symbol: "levenshtein".into(),
            ..Default::default()
        })
        .unwrap();
    assert!(
        x.callers.iter().any(|c| c.confidence == Confidence::Exact),
        "{x:#?}"
    );
    assert_eq!(x.callers.len(), graph_n.min(20), "{x:#?}");
    assert_eq!(x.callers_total, (graph_n > 20).then_some(graph_n), "{x:#?}");
}

/// `impact_analysis` says what it does not follow: the direct callers the graph did not
/// resolve (as many as `find_callers` lists as name-only), callers past `depth`, and the other
/// symbols an ambiguous name resolved to.
#[test]
fn impact_analysis_says_what_it_leaves_out() {
    let tmp = tempfile::tempdir().unwrap();
    let e = engine(&json_strsim_itoa(tmp.path()));
    let mut checked = 0;
    for name in [
        "JSONDecoder.raw_decode",
        "JSONDecoder.decode",
        "JSONEncoder.encode",
        "JSONEncoder.iterencode",
        "py_scanstring",
        "levenshtein",
        "generic_levenshtein",
    ] {
        let mut a = callers(name);
        a.limit = Some(100);
        let c = e.find_callers(&a).unwrap();
        // Name-only calls; not the mentions find_callers falls back to when there are none.
        let name_only = if c.note.contains("mention it as a whole word") {
            0
        } else {
            c.results
                .iter()
                .filter(|r| r.confidence == Confidence::NameOnly)
                .count()
        };
        let i = e
            .impact_analysis(&ImpactArgs {
                symbol: name.into(),
                depth: Some(1),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(i.name_only_callers, name_only, "{name}: {c:#?} {i:#?}");
        assert_eq!(i.note.contains("by name"), name_only > 0, "{}", i.note);
        if name_only > 0 {
            checked += 1;
        }
        let deep = e
            .impact_analysis(&ImpactArgs {
                symbol: name.into(),
                depth: Some(8),
                ..Default::default()
            })
            .unwrap();
        if deep.affected.iter().any(|x| x.depth > 1) {
            assert!(
                i.deeper && i.note.contains("past depth 1"),
                "{name}: {i:#?}"
            );
        }
    }
    assert!(checked > 0, "no symbol with name-only callers");
    let i = e
        .impact_analysis(&ImpactArgs {
            symbol: "__init__".into(),
            ..Default::default()
        })
        .unwrap();
    assert!(
        !i.other_matches.is_empty() && i.note.contains("only the first was analysed"),
        "{i:#?}"
    );
}
