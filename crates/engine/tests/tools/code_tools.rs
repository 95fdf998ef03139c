//! The code tools in-process on an index of the polyglot fixture built with the real model:
//! search_code, get_symbol, explain_code, each stage of the callers/callees cascade,
//! impact_analysis, find_duplicates, index_status, and their input errors.

use engine::tools::calls::{ImpactArgs, Stage};
use engine::tools::duplicates::DuplicatesArgs;
use engine::tools::search::{ModeArg, SearchCodeArgs};
use engine::tools::status::StatusArgs;
use engine::tools::symbols::{ExplainCodeArgs, GetSymbolArgs};
use engine::ToolError;

use crate::common::{callees, callers, engine, names, search};

#[test]
fn every_tool_answers_on_the_fixture() {
    let ix = crate::common::indexed_fixture();
    let e = engine(&ix.index);

    // search_code: a sentence finds the function, with a debug breakdown; graph neighbours are marked.
    let mut a = search("edit distance between two strings");
    a.debug = true;
    // Few hits, so that graph neighbours of the seeds are not already among them.
    a.limit = Some(3);
    let r = e.search_code(&a).unwrap();
    assert_eq!(r.results[0].symbol.name, "levenshtein_distance", "{r:#?}");
    let d = r.debug.as_ref().expect("debug requested");
    assert!(d.embed_ms > 0.0 && !d.embed_cached && d.total_ms >= d.embed_ms);
    assert!(
        r.results
            .iter()
            .any(|h| h.source == "graph" && h.via.is_some()),
        "{r:#?}"
    );
    // The same query again is served from the embedding cache.
    let r2 = e.search_code(&a).unwrap();
    assert!(r2.debug.unwrap().embed_cached);

    // Filters: a path glob and a language; lexical mode.
    let r = e
        .search_code(&SearchCodeArgs {
            query: "area".into(),
            path: Some("*.py".into()),
            mode: Some(ModeArg::Lexical),
            expand_graph: Some(false),
            ..Default::default()
        })
        .unwrap();
    assert!(!r.results.is_empty());
    assert!(
        r.results.iter().all(|h| h.symbol.path.ends_with(".py")),
        "{r:#?}"
    );
    // The same filters given as absolute paths inside the indexed root (what an agent knows
    // files by): the same hits. Outside every root: an error naming the roots, not silence.
    let root = format::IndexManifest::read(&ix.index).unwrap().roots[0].clone();
    let lexical = |path: &str| SearchCodeArgs {
        query: "area".into(),
        path: Some(path.into()),
        mode: Some(ModeArg::Lexical),
        expand_graph: Some(false),
        ..Default::default()
    };
    let hits = |path: &str| -> Vec<(String, u32)> {
        e.search_code(&lexical(path))
            .unwrap()
            .results
            .iter()
            .map(|h| (h.symbol.path.clone(), h.symbol.start_line))
            .collect()
    };
    let pkg = hits("pkg/");
    assert!(!pkg.is_empty() && pkg.iter().all(|h| h.0.starts_with("pkg/")));
    assert_eq!(hits(&format!("{}/pkg", root.path)), pkg);
    assert_eq!(hits(&format!("{}/pkg/", root.path)), pkg);
    assert_eq!(hits(&format!("{}/**/*.py", root.path)), hits("**/*.py"));
    assert_eq!(hits(&format!("{}/pkg/*.py", root.path)), hits("pkg/*.py"));
    // A pattern right under the root stays anchored there: top-level files only (the
    // fixture has no Python file at its top level; `*.py` alone means any depth).
    let top = hits(&format!("{}/*.py", root.path));
    assert_eq!(top, hits("./*.py"));
    assert!(top.is_empty() && !hits("*.py").is_empty(), "{top:?}");
    // The root itself: the whole repository.
    assert_eq!(hits(&root.path), hits("**"));
    for outside in ["/definitely/not/indexed/src", "/"] {
        match e.search_code(&lexical(outside)) {
            Err(ToolError::InvalidInput(m)) => {
                assert!(
                    m.contains("not inside an indexed root") && m.contains(&root.path),
                    "{m}"
                )
            }
            other => panic!("{outside}: {other:?}"),
        }
    }
    let r = e
        .search_code(&SearchCodeArgs {
            query: "serve http requests".into(),
            language: Some("go".into()),
            snippet_lines: Some(2),
            ..Default::default()
        })
        .unwrap();
    assert!(r.results.iter().all(|h| h.symbol.language == "go"));
    assert!(r.results.iter().all(|h| h.snippet.lines().count() <= 2));

    // get_symbol by name and by id; parents and children.
    let s = e
        .get_symbol(&GetSymbolArgs {
            symbol: "levenshtein_distance".into(),
            ..Default::default()
        })
        .unwrap();
    assert!(s.code.contains("fn levenshtein_distance"));
    assert_eq!(s.parents.last().unwrap().kind, "file");
    let by_id = e
        .get_symbol(&GetSymbolArgs {
            symbol: s.symbol.symbol_id.clone(),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(by_id.symbol, s.symbol);
    let circle = e
        .get_symbol(&GetSymbolArgs {
            symbol: "Circle".into(),
            ..Default::default()
        })
        .unwrap();
    assert!(
        names(circle.children.iter()).contains(&"area".to_string()),
        "{circle:#?}"
    );
    let area = e
        .get_symbol(&GetSymbolArgs {
            symbol: "Circle.area".into(),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(area.symbol.name, "area");
    assert!(names(area.parents.iter()).contains(&"Circle".to_string()));
    match e.get_symbol(&GetSymbolArgs {
        symbol: "levenshtein_distanse".into(),
        ..Default::default()
    }) {
        Err(ToolError::NotFound { suggestions, .. }) => {
            assert!(
                suggestions
                    .iter()
                    .any(|s| s.contains("levenshtein_distance")),
                "{suggestions:?}"
            )
        }
        other => panic!("expected not found, got {other:?}"),
    }

    // find_callers: graph stage.
    let c = e.find_callers(&callers("levenshtein_distance")).unwrap();
    assert_eq!(c.stage, Stage::Graph);
    assert!(names(c.results.iter().map(|r| &r.symbol)).contains(&"closest_match".to_string()));
    // find_callees: graph stage.
    let c = e.find_callees(&callees("closest_match")).unwrap();
    assert_eq!(c.stage, Stage::Graph);
    let callees = names(c.results.iter().map(|r| &r.symbol));
    assert!(
        callees.contains(&"levenshtein_distance".to_string()),
        "{callees:?}"
    );
    // Text stage: a name that is no indexed symbol but is written in code.
    let c = e.find_callers(&callers("HashMap")).unwrap();
    assert_eq!(c.stage, Stage::Text, "{c:#?}");
    assert!(c
        .results
        .iter()
        .all(|r| r.line.is_some() && r.line_text.is_some()));
    // Semantic stage: a name nothing mentions, whose words describe indexed code.
    let c = e.find_callers(&callers("compute_edit_distance")).unwrap();
    assert_eq!(c.stage, Stage::Semantic, "{c:#?}");
    assert_eq!(c.results[0].symbol.name, "levenshtein_distance", "{c:#?}");
    assert!(c.results.iter().all(|r| r.similarity.is_some()));
    // Not found, with suggestions.
    let c = e.find_callers(&callers("qzxv_wplk")).unwrap();
    assert_eq!(c.stage, Stage::NotFound, "{c:#?}");
    assert!(c.results.is_empty());

    // impact_analysis: transitive callers with paths.
    let i = e
        .impact_analysis(&ImpactArgs {
            symbol: "levenshtein_distance".into(),
            depth: Some(3),
            ..Default::default()
        })
        .unwrap();
    let cm = i
        .affected
        .iter()
        .find(|a| a.symbol.name == "closest_match")
        .unwrap();
    assert_eq!(cm.depth, 1);
    let sg = i
        .affected
        .iter()
        .find(|a| a.symbol.name == "suggest")
        .expect("suggest at depth 2");
    assert_eq!(sg.depth, 2);
    assert_eq!(sg.path.len(), 3, "{:?}", sg.path);
    assert!(i.files.contains(&"src/lib.rs".to_string()));

    // explain_code: symbol + neighbours + doc.
    let x = e
        .explain_code(&ExplainCodeArgs {
            symbol: "closest_match".into(),
            ..Default::default()
        })
        .unwrap();
    assert!(x.doc.contains("smallest edit distance"), "{:?}", x.doc);
    assert!(names(x.callers.iter().map(|g| &g.symbol)).contains(&"suggest".to_string()));
    assert!(
        names(x.callees.iter().map(|g| &g.symbol)).contains(&"levenshtein_distance".to_string())
    );

    // find_duplicates: by code and by symbol; exactly one of the two.
    let d = e
        .find_duplicates(&DuplicatesArgs {
            code: Some(s.code.clone()),
            threshold: Some(0.6),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        d.duplicates[0].symbol.name, "levenshtein_distance",
        "{d:#?}"
    );
    let d = e
        .find_duplicates(&DuplicatesArgs {
            symbol: Some("levenshtein_distance".into()),
            threshold: Some(0.3),
            ..Default::default()
        })
        .unwrap();
    assert!(d
        .duplicates
        .iter()
        .all(|x| x.symbol.name != "levenshtein_distance"));
    assert!(d
        .duplicates
        .windows(2)
        .all(|w| w[0].similarity >= w[1].similarity));
    assert!(matches!(
        e.find_duplicates(&DuplicatesArgs::default()),
        Err(ToolError::InvalidInput(_))
    ));

    // index_status.
    let st = e.index_status(&StatusArgs { debug: true }).unwrap();
    assert_eq!(st.health, "ok");
    assert!(st.live_chunks > 0 && st.files > 5);
    assert!(st.languages.contains_key("rust") && st.languages.contains_key("python"));
    assert_eq!(st.segments.len(), 1);

    // Bad input.
    assert!(matches!(
        e.search_code(&search("   ")),
        Err(ToolError::InvalidInput(_))
    ));
    let huge = "x ".repeat(5000);
    assert!(matches!(
        e.search_code(&search(&huge)),
        Err(ToolError::InvalidInput(_))
    ));
    let mut bad_glob = search("x");
    bad_glob.path = Some("src/[".into());
    assert!(matches!(
        e.search_code(&bad_glob),
        Err(ToolError::InvalidInput(_))
    ));
}

/// `search_code`'s first results do not change when only `limit` grows (graph neighbours
/// included), and no two results share a path and line range.
#[test]
fn search_code_top_k_does_not_depend_on_limit() {
    let ix = crate::common::indexed_fixture();
    let e = engine(&ix.index);
    for q in [
        "edit distance between two strings",
        "levenshtein_distance",
        "area of a circle",
        "serve http requests",
        "hash",
        "closest match",
    ] {
        for mode in [ModeArg::Hybrid, ModeArg::Vector, ModeArg::Lexical] {
            let run = |limit: usize| {
                let r = e
                    .search_code(&SearchCodeArgs {
                        query: q.into(),
                        mode: Some(mode),
                        limit: Some(limit),
                        ..Default::default()
                    })
                    .unwrap();
                r.results
                    .iter()
                    .map(|h| {
                        (
                            h.symbol.path.clone(),
                            h.symbol.start_line,
                            h.symbol.end_line,
                            h.source,
                            h.score.to_bits(),
                        )
                    })
                    .collect::<Vec<_>>()
            };
            let big = run(50);
            let mut uniq: Vec<_> = big.iter().map(|r| (&r.0, r.1, r.2)).collect();
            uniq.sort();
            uniq.dedup();
            assert_eq!(uniq.len(), big.len(), "{q} {mode:?}: {big:?}");
            for k in [1, 3, 5] {
                let small = run(k);
                assert_eq!(
                    small[..k.min(small.len())],
                    big[..k.min(big.len())],
                    "{q} {mode:?} limit {k}"
                );
            }
        }
    }
}

/// A function long enough to be cut into a head and body parts is one symbol to every tool:
/// a search hit in a body part carries the function's kind, name and id (what `get_symbol`
/// and `find_callers` take), its name resolves once, and its parts are not its children.
#[test]
fn a_long_functions_body_parts_are_the_function() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("longfn");
    std::fs::create_dir_all(repo.join("src")).unwrap();
    let mut src = String::from("/// Adds up a weighted series.\npub fn weighted_series(x: u32) -> u32 {\n    let mut total = 0;\n");
    for i in 0..400 {
        if i == 300 {
            src.push_str("    let zebra_marker_total = total;\n");
        }
        src.push_str(&format!("    total += x.wrapping_mul({i});\n"));
    }
    src.push_str(
        "    finish_series(total)\n}\n\npub fn finish_series(v: u32) -> u32 {\n    v + 1\n}\n",
    );
    std::fs::write(repo.join("src/lib.rs"), src).unwrap();
    let index = tmp.path().join("index");
    crate::common::build_index(&repo, &index);
    let e = engine(&index);
    let parts = format::Index::open(&index).unwrap().segments[0]
        .segment
        .table()
        .chunks
        .iter()
        .filter(|c| c.kind.as_str() == "body_part")
        .count();
    assert!(
        parts >= 2,
        "the fixture's function was not cut into parts ({parts})"
    );

    let mut a = search("zebra_marker_total");
    a.mode = Some(ModeArg::Lexical);
    a.expand_graph = Some(false);
    let r = e.search_code(&a).unwrap();
    let top = &r.results[0].symbol;
    assert_eq!(
        (top.kind.as_str(), top.name.as_str()),
        ("function", "weighted_series"),
        "{r:#?}"
    );
    assert!(top.symbol_id.contains("weighted_series"), "{r:#?}");
    assert!(
        r.results.iter().all(|h| h.symbol.kind != "body_part"),
        "{r:#?}"
    );
    // The id it gave is one a symbol tool takes.
    let s = e
        .get_symbol(&GetSymbolArgs {
            symbol: top.symbol_id.clone(),
            max_chars: Some(1 << 20),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(s.symbol.name, "weighted_series");
    // The whole function, its parts' own lines after its head (not only the head), to its
    // last line.
    assert!(!s.truncated);
    assert!(s.code.contains("zebra_marker_total") && s.code.contains("finish_series(total)"));
    assert_eq!(
        s.code.matches("pub fn weighted_series").count(),
        1,
        "{}",
        s.code
    );
    assert_eq!(s.code.lines().count(), 406, "{}", s.code);
    assert_eq!((s.symbol.start_line, s.symbol.end_line), (1, 406));
    // Its own parts are not its duplicates.
    let d = e
        .find_duplicates(&DuplicatesArgs {
            symbol: Some("weighted_series".into()),
            threshold: Some(0.5),
            ..Default::default()
        })
        .unwrap();
    assert!(
        d.duplicates
            .iter()
            .all(|x| x.symbol.name != "weighted_series"),
        "{d:#?}"
    );

    let c = e.find_callees(&callees("weighted_series")).unwrap();
    assert_eq!(c.resolved_to.len(), 1, "{c:#?}");
    assert!(c.resolved_count.is_none(), "{c:#?}");
    assert_eq!(
        names(c.results.iter().map(|s| &s.symbol)),
        vec!["finish_series"]
    );
    let x = e
        .explain_code(&ExplainCodeArgs {
            symbol: "weighted_series".into(),
            ..Default::default()
        })
        .unwrap();
    assert!(
        x.symbol
            .children
            .iter()
            .all(|k| k.name != "weighted_series"),
        "{:#?}",
        x.symbol.children
    );
}

/// Filters are taken as the index stores them (`Rust` is `rust`), and a value the index does
/// not hold is an error naming those it does, not an empty answer; a relative path filter with
/// `..` can match nothing and is refused.
#[test]
fn filter_values_the_index_does_not_hold_are_named() {
    let ix = crate::common::indexed_fixture();
    let e = engine(&ix.index);
    let with = |f: &dyn Fn(&mut SearchCodeArgs)| {
        let mut a = search("area");
        a.mode = Some(ModeArg::Lexical);
        a.expand_graph = Some(false);
        f(&mut a);
        e.search_code(&a)
    };
    let r = with(&|a| a.language = Some(" Python".into())).unwrap();
    assert!(!r.results.is_empty());
    assert!(r.results.iter().all(|h| h.symbol.language == "python"));
    for (f, want) in [
        (
            &(|a: &mut SearchCodeArgs| a.language = Some("klingon".into()))
                as &dyn Fn(&mut SearchCodeArgs),
            "language `klingon`; it holds: ",
        ),
        (
            &|a| a.kind = Some("widget".into()),
            "kind `widget`; it holds: ",
        ),
        (
            &|a| a.repo = Some("nope".into()),
            "repository `nope`; it holds: polyglot",
        ),
        (&|a| a.path = Some("../../etc/passwd".into()), "holds `..`"),
    ] {
        let err = with(f).unwrap_err();
        assert!(matches!(err, ToolError::InvalidInput(_)), "{err:?}");
        assert!(err.to_string().contains(want), "{err}");
    }
    let err = with(&|a| a.language = Some("klingon".into()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("python") && err.contains("rust"), "{err}");
    // A value the index holds with nothing matching the query is an empty answer.
    let mut a = search("zzqxv_nothing_like_this");
    a.mode = Some(ModeArg::Lexical);
    a.language = Some("python".into());
    assert!(e.search_code(&a).unwrap().results.is_empty());
}
