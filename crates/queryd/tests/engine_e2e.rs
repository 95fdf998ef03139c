//! The engine and its tools in-process, on an index of the polyglot fixture built with the real
//! model: every tool, each stage of the callers/callees cascade, cross-segment graph remapping
//! after an incremental build, snapshot swaps while queries run, and a corrupt MANIFEST.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use queryd::tools::{
    CallArgs, DuplicatesArgs, ImpactArgs, ModeArg, SearchCodeArgs, Stage, StatusArgs, SymbolArgs,
    ToolError,
};
use queryd::Engine;

fn engine(index: &std::path::Path) -> Arc<Engine> {
    Arc::new(Engine::open(index, &common::model_dir()).expect("open the engine"))
}

fn search(q: &str) -> SearchCodeArgs {
    SearchCodeArgs {
        query: q.into(),
        ..Default::default()
    }
}

fn call(s: &str) -> CallArgs {
    CallArgs {
        symbol: s.into(),
        ..Default::default()
    }
}

fn names<'a>(it: impl Iterator<Item = &'a queryd::tools::SymbolRef>) -> Vec<String> {
    it.map(|s| s.name.clone()).collect()
}

#[test]
fn every_tool_answers_on_the_fixture() {
    let ix = common::indexed_fixture();
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
        .get_symbol(&SymbolArgs {
            symbol: "levenshtein_distance".into(),
            ..Default::default()
        })
        .unwrap();
    assert!(s.code.contains("fn levenshtein_distance"));
    assert_eq!(s.parents.last().unwrap().kind, "file");
    let by_id = e
        .get_symbol(&SymbolArgs {
            symbol: s.symbol.symbol_id.clone(),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(by_id.symbol, s.symbol);
    let circle = e
        .get_symbol(&SymbolArgs {
            symbol: "Circle".into(),
            ..Default::default()
        })
        .unwrap();
    assert!(
        names(circle.children.iter()).contains(&"area".to_string()),
        "{circle:#?}"
    );
    let area = e
        .get_symbol(&SymbolArgs {
            symbol: "Circle.area".into(),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(area.symbol.name, "area");
    assert!(names(area.parents.iter()).contains(&"Circle".to_string()));
    match e.get_symbol(&SymbolArgs {
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
    let c = e.find_callers(&call("levenshtein_distance")).unwrap();
    assert_eq!(c.stage, Stage::Graph);
    assert!(names(c.results.iter().map(|r| &r.symbol)).contains(&"closest_match".to_string()));
    // find_callees: graph stage.
    let c = e.find_callees(&call("closest_match")).unwrap();
    assert_eq!(c.stage, Stage::Graph);
    let callees = names(c.results.iter().map(|r| &r.symbol));
    assert!(
        callees.contains(&"levenshtein_distance".to_string()),
        "{callees:?}"
    );
    // Text stage: a name that is no indexed symbol but is written in code.
    let c = e.find_callers(&call("HashMap")).unwrap();
    assert_eq!(c.stage, Stage::Text, "{c:#?}");
    assert!(c
        .results
        .iter()
        .all(|r| r.line.is_some() && r.line_text.is_some()));
    // Semantic stage: a name nothing mentions, whose words describe indexed code.
    let c = e.find_callers(&call("compute_edit_distance")).unwrap();
    assert_eq!(c.stage, Stage::Semantic, "{c:#?}");
    assert_eq!(c.results[0].symbol.name, "levenshtein_distance", "{c:#?}");
    assert!(c.results.iter().all(|r| r.similarity.is_some()));
    // Not found, with suggestions.
    let c = e.find_callers(&call("qzxv_wplk")).unwrap();
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
        .explain_code(&SymbolArgs {
            symbol: "closest_match".into(),
            ..Default::default()
        })
        .unwrap();
    assert!(x.doc.contains("smallest edit distance"), "{:?}", x.doc);
    assert!(names(x.callers.iter()).contains(&"suggest".to_string()));
    assert!(names(x.callees.iter()).contains(&"levenshtein_distance".to_string()));

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

#[test]
fn incremental_build_keeps_the_graph_whole_and_swaps_snapshots_under_load() {
    let ix = common::indexed_fixture();
    let e = engine(&ix.index);
    let gen0 = e.snapshot().generation();
    e.spawn_watcher(Duration::from_millis(100));

    // Queries run while the index is rebuilt.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let worker = {
        let (e, stop, done) = (e.clone(), stop.clone(), done.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let r = e
                    .search_code(&SearchCodeArgs {
                        query: "normalize_word".into(),
                        mode: Some(ModeArg::Lexical),
                        ..Default::default()
                    })
                    .expect("queries never fail during a swap");
                assert!(!r.results.is_empty());
                e.find_callers(&call("normalize_word"))
                    .expect("callers during a swap");
                done.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    // Change util.rs: normalize_word moves to a new segment, its old chunk is tombstoned, and
    // its callers (in lib.rs, unchanged) still point at the old chunk.
    let util = ix.repo.join("src/util.rs");
    let mut text = std::fs::read_to_string(&util).unwrap();
    text.push_str(
        "\n/// Paints zebra stripes onto a canvas.\npub fn zebra_stripe_painter(width: u32) -> u32 {\n    normalize_word(\"zebra\").len() as u32 * width\n}\n",
    );
    std::fs::write(&util, text).unwrap();
    common::build_index(&ix.repo, &ix.index);

    let t = Instant::now();
    while e.snapshot().generation() == gen0 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the new generation was not picked up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    worker.join().expect("the query thread saw no errors");
    assert!(done.load(Ordering::Relaxed) > 0);

    let snap = e.snapshot();
    assert_eq!(
        snap.index.segments.len(),
        2,
        "an incremental build adds a segment"
    );
    // New code is visible.
    let r = e
        .search_code(&SearchCodeArgs {
            query: "zebra_stripe_painter".into(),
            mode: Some(ModeArg::Lexical),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(r.results[0].symbol.name, "zebra_stripe_painter");
    // Callers of the moved function: the old segment's edges into its tombstoned chunk are
    // remapped by symbol id, and the new caller in the new segment is found too.
    let c = e.find_callers(&call("normalize_word")).unwrap();
    assert_eq!(c.stage, Stage::Graph, "{c:#?}");
    let callers = names(c.results.iter().map(|r| &r.symbol));
    for n in ["insert", "closest_match", "zebra_stripe_painter"] {
        assert!(
            callers.contains(&n.to_string()),
            "{n} missing from {callers:?}"
        );
    }
    // Callees of an unchanged function whose callee moved.
    let c = e.find_callees(&call("closest_match")).unwrap();
    let callees = names(c.results.iter().map(|r| &r.symbol));
    assert!(
        callees.contains(&"normalize_word".to_string()),
        "{callees:?}"
    );
    // Every reference points at live chunks of the current snapshot.
    for r in &c.results {
        let found = snap.resolve(&r.symbol.symbol_id);
        assert_eq!(found.len(), 1);
        assert!(snap.is_live_chunk(found[0]));
    }
    assert_eq!(e.index_status(&StatusArgs::default()).unwrap().reloads, 1);
}

#[test]
fn corrupt_manifest_keeps_the_old_snapshot_serving() {
    let ix = common::indexed_fixture();
    let e = engine(&ix.index);
    let manifest = ix.index.join("MANIFEST");
    let good = std::fs::read(&manifest).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&manifest, b"{ not json").unwrap();
    let err = e
        .reload_if_changed()
        .expect_err("a corrupt MANIFEST is reported");
    assert!(err.contains("MANIFEST"), "{err}");
    let st = e.index_status(&StatusArgs::default()).unwrap();
    assert_eq!(st.health, "degraded");
    assert!(st.reload_error.unwrap().contains("MANIFEST"));
    // Still serving the old generation.
    let r = e.search_code(&search("edit distance")).unwrap();
    assert!(!r.results.is_empty());
    // Restored: healthy again, nothing reloaded.
    std::fs::write(&manifest, good).unwrap();
    assert_eq!(e.reload_if_changed(), Ok(false));
    assert_eq!(e.index_status(&StatusArgs::default()).unwrap().health, "ok");
}

#[test]
fn missing_or_corrupt_index_fails_to_open_with_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let err = match Engine::open(&tmp.path().join("nope"), &common::model_dir()) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("opened a missing index"),
    };
    assert!(err.contains("indexer build"), "{err}");
    std::fs::write(tmp.path().join("MANIFEST"), b"garbage").unwrap();
    let err = match Engine::open(tmp.path(), &common::model_dir()) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("opened a corrupt index"),
    };
    assert!(err.contains("corrupt"), "{err}");
}
