//! Snapshots: cross-segment graph remapping after an incremental build, snapshot swaps while
//! queries run, a corrupt MANIFEST (the old snapshot keeps serving), and opening a missing or
//! corrupt index.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::tools::calls::Stage;
use engine::tools::search::{ModeArg, SearchCodeArgs};
use engine::tools::status::StatusArgs;
use engine::Engine;

use crate::common::{callees, callers, engine, names, search};

#[test]
fn incremental_build_keeps_the_graph_whole_and_swaps_snapshots_under_load() {
    let ix = crate::common::indexed_fixture();
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
                e.find_callers(&callers("normalize_word"))
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
    crate::common::build_index(&ix.repo, &ix.index);

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
        snap.code.index.segments.len(),
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
    let c = e.find_callers(&callers("normalize_word")).unwrap();
    assert_eq!(c.stage, Stage::Graph, "{c:#?}");
    let callers = names(c.results.iter().map(|r| &r.symbol));
    for n in ["insert", "closest_match", "zebra_stripe_painter"] {
        assert!(
            callers.contains(&n.to_string()),
            "{n} missing from {callers:?}"
        );
    }
    // Callees of an unchanged function whose callee moved.
    let c = e.find_callees(&callees("closest_match")).unwrap();
    let callees = names(c.results.iter().map(|r| &r.symbol));
    assert!(
        callees.contains(&"normalize_word".to_string()),
        "{callees:?}"
    );
    // Every reference points at live chunks of the current snapshot.
    for r in &c.results {
        let found = snap.code.resolve(&r.symbol.symbol_id);
        assert_eq!(found.len(), 1);
        assert!(snap.code.is_live_chunk(found[0]));
    }
    assert_eq!(e.index_status(&StatusArgs::default()).unwrap().reloads, 1);
}

#[test]
fn corrupt_manifest_keeps_the_old_snapshot_serving() {
    let ix = crate::common::indexed_fixture();
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
    let err = match Engine::open(&tmp.path().join("nope"), &crate::common::model_dir()) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("opened a missing index"),
    };
    assert!(err.contains("indexer build"), "{err}");
    std::fs::write(tmp.path().join("MANIFEST"), b"garbage").unwrap();
    let err = match Engine::open(tmp.path(), &crate::common::model_dir()) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("opened a corrupt index"),
    };
    // One sentence naming the file (the cause once), then a repair that keeps memories.
    assert_eq!(err.matches("corrupt").count(), 1, "{err}");
    assert!(err.contains("MANIFEST is corrupt (not valid JSON"), "{err}");
    assert!(
        err.lines()
            .nth(1)
            .is_some_and(|h| h.starts_with("hint:") && h.contains("--rebuild")),
        "{err}"
    );
}
