//! Concurrent writers and readers on one engine while the delta flushes in the background.

use std::collections::HashSet;

use serde_json::{json, Value};

/// Writers and readers at once on one engine, with flushes (and merges) happening meanwhile:
/// readers never fail and never see the visible set shrink (writes only add here); at the end
/// every acknowledged memory is there exactly once.
#[test]
fn concurrent_writers_and_readers_with_flushes() {
    use engine::tools::memory::args::{AddMemoriesArgs, ListMemoriesArgs, SearchMemoryArgs};
    use engine::tools::memory::input::MemoryInput;
    let ix = crate::common::indexed_fixture();
    let e =
        std::sync::Arc::new(engine::Engine::open(&ix.index, &crate::common::model_dir()).unwrap());
    e.set_flush_at(5);
    e.spawn_flusher();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let list_all = |e: &engine::Engine| -> Vec<String> {
        let mut out = Vec::new();
        let mut offset = 0;
        loop {
            let a: ListMemoriesArgs =
                serde_json::from_value(json!({"limit": 100, "offset": offset})).unwrap();
            let v = e.list_memories(&a).expect("list");
            out.extend(v.memories.iter().map(|m| m.id.clone()));
            match v.next_offset {
                Some(n) => offset = n,
                None => return out,
            }
        }
    };
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (e, stop) = (e.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut last = 0usize;
                let mut rounds = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // One snapshot per call: the count can only grow while writers only add.
                    let ids = list_all(&e);
                    let uniq: HashSet<&String> = ids.iter().collect();
                    assert_eq!(
                        uniq.len(),
                        ids.len(),
                        "reader {r}: duplicate ids in one listing"
                    );
                    assert!(
                        ids.len() >= last,
                        "reader {r}: {} visible after {last}",
                        ids.len()
                    );
                    last = ids.len();
                    let a: SearchMemoryArgs =
                        serde_json::from_value(json!({"query": "concurrent note", "limit": 5}))
                            .unwrap();
                    e.search_memory(&a).expect("search while writing");
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let e = e.clone();
            std::thread::spawn(move || {
                let mut ids = Vec::new();
                for i in 0..12 {
                    let a = AddMemoriesArgs {
                        auto_link: false,
                        memories: vec![MemoryInput {
                            text: format!("concurrent note {w}-{i} about topic {}", i % 4),
                            category: None,
                            scope: None,
                            entity: None,
                            tags: None,
                            source: None,
                            evidence: None,
                            code_refs: None,
                            session: None,
                            time: None,
                        }],
                        debug: false,
                    };
                    ids.extend(e.add_memories(&a).expect("write").ids);
                }
                ids
            })
        })
        .collect();
    let mut acked = Vec::new();
    for w in writers {
        acked.extend(w.join().unwrap());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    let seen = list_all(&e);
    assert_eq!(seen.len(), acked.len());
    let seen: HashSet<String> = seen.into_iter().collect();
    for id in &acked {
        assert!(seen.contains(id), "{id} missing");
    }
    // Flushes happened while reading.
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(ix.index.join("MANIFEST")).unwrap()).unwrap();
    assert!(!m["memory_segments"].as_array().unwrap().is_empty());
}
