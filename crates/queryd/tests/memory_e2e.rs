//! Memories end to end over a real MCP client (rmcp over stdio against the `queryd` binary):
//! every memory tool, bad input, flushes into segments, restart, export; and a crash test that
//! SIGKILLs the server at random points while writes stream in.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_queryd");

type Client = RunningService<RoleClient, ()>;

async fn start(index: &std::path::Path, extra: &[&str]) -> (Client, u32) {
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    let transport = TokioChildProcess::new(tokio::process::Command::new(BIN).configure(|c| {
        c.arg("--index")
            .arg(index)
            .arg("--model")
            .arg(common::model_dir())
            .arg("--no-watch")
            .args(&extra);
    }))
    .expect("spawn queryd");
    let pid = transport.id().expect("child pid");
    let client = ().serve(transport).await.expect("MCP handshake over stdio");
    (client, pid)
}

async fn call(c: &Client, name: &str, a: Value) -> Result<Value, Value> {
    let r: CallToolResult = c
        .call_tool(
            CallToolRequestParams::new(name.to_string())
                .with_arguments(a.as_object().expect("object").clone()),
        )
        .await
        .map_err(|e| json!({ "protocol": e.to_string() }))?;
    let v = r.structured_content.clone().expect("structured content");
    if r.is_error == Some(true) {
        Err(v)
    } else {
        Ok(v)
    }
}

fn err_text(e: Value) -> String {
    e["error"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| e.to_string())
}

async fn list_all(c: &Client) -> Vec<Value> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let v = call(
            c,
            "list_memories",
            json!({"state": "all", "limit": 100, "offset": offset}),
        )
        .await
        .unwrap();
        out.extend(v["memories"].as_array().unwrap().iter().cloned());
        match v["next_offset"].as_u64() {
            Some(n) => offset = n,
            None => return out,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_tools_flush_restart_and_export() {
    let ix = common::indexed_fixture();
    let (c, _) = start(&ix.index, &["--memory-flush-at", "4"]).await;

    // add: one call, several memories; ids in order.
    let v = call(
        &c,
        "add_memories",
        json!({"memories": [
            {"text": "The upload service retries failed chunk uploads three times with exponential backoff",
             "category": "decision", "entity": "uploads", "tags": ["area=io", "retry"],
             "evidence": ["PR-42"],
             "code_refs": [{"path": "src/lib.rs", "start_line": 10, "end_line": 20}]},
            {"text": "Use snake_case for all JSON field names in the public API",
             "category": "convention", "scope": "team", "tags": ["area=api"], "source": "user"}
        ], "debug": true}),
    )
    .await
    .unwrap();
    let ids: Vec<String> = v["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2);
    assert!(v["debug"]["embed_ms"].as_f64().unwrap() > 0.0);

    // get: every field back, code link as a URI.
    let m = call(&c, "get_memory", json!({"id": ids[0]})).await.unwrap()["memory"].clone();
    assert_eq!(m["entity"], "uploads");
    assert_eq!(m["tags"], json!(["area=io", "retry"]));
    assert_eq!(m["scope"], "project");
    assert_eq!(m["source"], "agent");
    assert_eq!(m["code_refs"][0]["code_link"], "file:src/lib.rs#L10-L20");
    assert!(m["created_at"].as_str().unwrap().ends_with('Z'));

    // search: a paraphrase finds it (vector), a keyword finds it (BM25); filters apply.
    let s = call(
        &c,
        "search_memory",
        json!({"query": "how often do we retry uploads", "debug": true}),
    )
    .await
    .unwrap();
    assert_eq!(s["results"][0]["id"], ids[0], "{s:#}");
    assert!(s["debug"]["vector_ms"].is_number());
    let s = call(
        &c,
        "search_memory",
        json!({"query": "snake_case", "mode": "lexical"}),
    )
    .await
    .unwrap();
    assert_eq!(s["results"][0]["id"], ids[1]);
    let s = call(
        &c,
        "search_memory",
        json!({"query": "retry uploads", "tags": ["area=api"]}),
    )
    .await
    .unwrap();
    assert!(s["results"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["id"] == ids[1]));
    let s = call(
        &c,
        "search_memory",
        json!({"query": "retry uploads", "scope": "team"}),
    )
    .await
    .unwrap();
    assert_eq!(s["results"].as_array().unwrap().len(), 1);
    let s = call(
        &c,
        "search_memory",
        json!({"query": "anything", "created_after": "2999-01-01"}),
    )
    .await
    .unwrap();
    assert!(s["results"].as_array().unwrap().is_empty());

    // update: text re-embedded, tags merged, state hides from default search.
    let u = call(
        &c,
        "update_memory",
        json!({"id": ids[1], "text": "Public API JSON fields use camelCase since v2",
               "add_tags": ["since=v2"], "remove_tags": ["area"]}),
    )
    .await
    .unwrap();
    assert_eq!(u["memory"]["tags"], json!(["since=v2"]));
    let s = call(
        &c,
        "search_memory",
        json!({"query": "camelCase", "mode": "lexical"}),
    )
    .await
    .unwrap();
    assert_eq!(s["results"][0]["id"], ids[1]);
    call(
        &c,
        "update_memory",
        json!({"id": ids[1], "state": "archived"}),
    )
    .await
    .unwrap();
    let s = call(
        &c,
        "search_memory",
        json!({"query": "camelCase", "mode": "lexical"}),
    )
    .await
    .unwrap();
    assert!(s["results"].as_array().unwrap().is_empty());
    let s = call(
        &c,
        "search_memory",
        json!({"query": "camelCase", "mode": "lexical", "state": "archived"}),
    )
    .await
    .unwrap();
    assert_eq!(s["results"][0]["id"], ids[1]);

    // Bad input: clear errors, nothing written.
    for (name, a, expect) in [
        (
            "add_memories",
            json!({"memories": [{"text": "  "}]}),
            "empty",
        ),
        (
            "add_memories",
            json!({"memories": [{"text": "x".repeat(20_000)}]}),
            "limit",
        ),
        (
            "add_memories",
            json!({"memories": [{"text": "ok", "scope": "galaxy"}]}),
            "unknown scope",
        ),
        (
            "add_memories",
            json!({"memories": [{"text": "ok", "tags": ["a b"]}]}),
            "malformed tag",
        ),
        (
            "add_memories",
            json!({"memories": [{"text": "ok", "code_refs": [{"path": "a.rs", "start_line": 5, "end_line": 2}]}]}),
            "end ≥ start",
        ),
        ("add_memories", json!({"memories": []}), "empty"),
        ("get_memory", json!({"id": "nope"}), "not a memory id"),
        (
            "get_memory",
            json!({"id": "00000000-0000-7000-8000-000000000000"}),
            "no memory",
        ),
        (
            "update_memory",
            json!({"id": ids[0], "state": "gone"}),
            "unknown state",
        ),
        (
            "delete_memories",
            json!({"ids": [ids[0], "00000000-0000-7000-8000-000000000000"]}),
            "nothing was deleted",
        ),
        ("list_memories", json!({"tags_mode": "some"}), "tags_mode"),
        (
            "search_memory",
            json!({"query": "x", "created_before": "tomorrow"}),
            "not a date",
        ),
    ] {
        let e = call(&c, name, a).await.expect_err(name);
        assert!(err_text(e.clone()).contains(expect), "{name}: {e}");
    }
    let e = call(
        &c,
        "add_memories",
        json!({"memories": [{"text": "x", "bogus": 1}]}),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("unknown field"), "{e}");
    assert_eq!(list_all(&c).await.len(), 2);

    // More writes cross the flush size (4): the delta becomes a segment in the background.
    let mut more = Vec::new();
    for i in 0..5 {
        let v = call(
            &c,
            "add_memories",
            json!({"memories": [{"text": format!("flush test memory number {i} about widgets"), "entity": "widgets"}]}),
        )
        .await
        .unwrap();
        more.push(v["ids"][0].as_str().unwrap().to_string());
    }
    let mut flushed = false;
    for _ in 0..100 {
        let st = std::fs::read_to_string(ix.index.join("MANIFEST")).unwrap();
        let m: Value = serde_json::from_str(&st).unwrap();
        if m["memory_segments"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
        {
            flushed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(flushed, "no memory segment after crossing the flush size");
    // Flushed records are still found, updated (shadowing the segment copy) and deleted.
    let s = call(
        &c,
        "search_memory",
        json!({"query": "widgets", "entity": "widgets", "limit": 20}),
    )
    .await
    .unwrap();
    assert_eq!(s["results"].as_array().unwrap().len(), 5, "{s:#}");
    call(
        &c,
        "update_memory",
        json!({"id": ids[0], "text": "Uploads retry five times now"}),
    )
    .await
    .unwrap();
    call(&c, "delete_memories", json!({"ids": [more[0]]}))
        .await
        .unwrap();
    let e = call(&c, "get_memory", json!({"id": more[0]}))
        .await
        .unwrap_err();
    assert!(err_text(e).contains("no memory"));
    let all = list_all(&c).await;
    assert_eq!(all.len(), 6);
    let texts: Vec<&str> = all.iter().filter_map(|m| m["text"].as_str()).collect();
    assert!(texts.contains(&"Uploads retry five times now"));
    assert!(!texts.iter().any(|t| t.contains("three times")));
    let before: Vec<Value> = all;

    // Restart (clean shutdown flushes): everything is back, exactly once.
    c.cancel().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (c, _) = start(&ix.index, &[]).await;
    let after = list_all(&c).await;
    assert_eq!(after, before);
    let s = call(
        &c,
        "search_memory",
        json!({"query": "how many times do uploads retry"}),
    )
    .await
    .unwrap();
    assert_eq!(s["results"][0]["id"], ids[0]);
    c.cancel().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Export: JSONL sorted by id, every record, exactly what list_memories shows.
    let out = std::process::Command::new(BIN)
        .args(["export", "--index"])
        .arg(&ix.index)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 6);
    let exported: HashSet<&str> = lines.iter().map(|l| l["id"].as_str().unwrap()).collect();
    let listed: HashSet<&str> = after.iter().map(|l| l["id"].as_str().unwrap()).collect();
    assert_eq!(exported, listed);
    assert!(lines
        .windows(2)
        .all(|w| w[0]["id"].as_str() < w[1]["id"].as_str()));

    // Round trip: the dump ingested into a new index exports byte for byte the same.
    let dump = ix.tmp.path().join("dump.jsonl");
    std::fs::write(&dump, &out.stdout).unwrap();
    let fresh = ix.tmp.path().join("fresh");
    let r = indexer::memories::ingest(&dump, &fresh, common::encoder()).unwrap();
    assert_eq!(r.read, 6);
    let export = |dir: &std::path::Path| {
        let o = std::process::Command::new(BIN)
            .args(["export", "--index"])
            .arg(dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o.stdout
    };
    assert_eq!(export(&fresh), out.stdout);
    // Ingesting it again replaces every record instead of duplicating it.
    let r = indexer::memories::ingest(&dump, &fresh, common::encoder()).unwrap();
    assert_eq!(r.replaced, 6);
    assert_eq!(export(&fresh), out.stdout);
    // A bad dump names its line and writes nothing.
    std::fs::write(
        &dump,
        "{\"text\": \"fine\"}\n{\"text\": \"x\", \"scope\": \"nowhere\"}\n",
    )
    .unwrap();
    let e = indexer::memories::ingest(&dump, &fresh, common::encoder()).unwrap_err();
    assert!(e.to_string().contains("line 2"), "{e}");
    assert_eq!(export(&fresh), out.stdout);
}

/// Streams writes (adds and deletes) into a server and SIGKILLs it at random moments, many
/// rounds. After each restart: every acknowledged add is present exactly once with its exact
/// text, every acknowledged delete is absent, and anything else present is a complete write
/// that was in flight when the server died.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill() {
    let ix = common::indexed_fixture();
    let mut acked: HashMap<String, String> = HashMap::new(); // id → text
    let mut deleted: HashSet<String> = HashSet::new();
    let mut sent: HashSet<String> = HashSet::new(); // every text ever sent
    let mut batch_len: HashMap<String, usize> = HashMap::new(); // "round r write w" → parts
    let mut seed = 0x2545F4914F6CDD1Du64;
    let mut rnd = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let rounds = 8;
    for round in 0..rounds {
        // A small flush size so some kills land during or right after a flush.
        let (c, pid) = start(&ix.index, &["--memory-flush-at", "7"]).await;
        let c = std::sync::Arc::new(c);
        // Check what survived the previous kill.
        let present = list_all(&c).await;
        let mut seen: HashMap<String, String> = HashMap::new();
        for m in &present {
            let id = m["id"].as_str().unwrap().to_string();
            let text = m["text"].as_str().unwrap().to_string();
            assert!(
                seen.insert(id.clone(), text.clone()).is_none(),
                "{id} twice"
            );
            assert!(sent.contains(&text), "round {round}: unknown text {text:?}");
        }
        for (id, text) in &acked {
            assert_eq!(
                seen.get(id),
                Some(text),
                "round {round}: acknowledged {id} lost"
            );
        }
        for id in &deleted {
            assert!(
                !seen.contains_key(id),
                "round {round}: deleted {id} came back"
            );
        }
        // An unacknowledged call that made it made it whole (one batch in the log).
        let mut parts: HashMap<String, usize> = HashMap::new();
        for (id, text) in &seen {
            if !acked.contains_key(id) {
                let batch = text.split(" part ").next().unwrap().to_string();
                *parts.entry(batch).or_default() += 1;
            }
        }
        for (batch, n) in parts {
            assert_eq!(
                Some(&n),
                batch_len.get(&batch),
                "round {round}: {batch} is half there"
            );
        }
        // Unacknowledged writes that made it are now facts.
        for (id, text) in seen {
            acked.entry(id).or_insert(text);
        }

        // Stream writes; kill at a random moment.
        let kill_after = Duration::from_millis(300 + rnd(1500));
        let writer = {
            let c = c.clone();
            let mut texts = Vec::new();
            for w in 0..200 {
                let n = 1 + rnd(3) as usize;
                texts.push(
                    (0..n)
                        .map(|j| {
                            format!(
                                "crash round {round} write {w} part {j} token{}",
                                rnd(1_000_000)
                            )
                        })
                        .collect::<Vec<_>>(),
                );
            }
            for (w, batch) in texts.iter().enumerate() {
                batch_len.insert(format!("crash round {round} write {w}"), batch.len());
                for t in batch {
                    sent.insert(t.clone());
                }
            }
            let victims: Vec<String> = acked.keys().take(rnd(3) as usize).cloned().collect();
            tokio::spawn(async move {
                let mut ok: Vec<(String, String)> = Vec::new();
                let mut del_ok: Vec<String> = Vec::new();
                for (w, batch) in texts.into_iter().enumerate() {
                    if w == 3 && !victims.is_empty() {
                        if call(&c, "delete_memories", json!({"ids": victims}))
                            .await
                            .is_ok()
                        {
                            del_ok.extend(victims.iter().cloned());
                        } else {
                            break;
                        }
                    }
                    let mems: Vec<Value> = batch.iter().map(|t| json!({"text": t})).collect();
                    match call(&c, "add_memories", json!({"memories": mems})).await {
                        Ok(v) => {
                            for (id, t) in v["ids"].as_array().unwrap().iter().zip(batch) {
                                ok.push((id.as_str().unwrap().to_string(), t));
                            }
                        }
                        Err(_) => break,
                    }
                }
                (ok, del_ok)
            })
        };
        tokio::time::sleep(kill_after).await;
        std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
        let (ok, del_ok) = writer.await.unwrap();
        for id in &del_ok {
            acked.remove(id);
            deleted.insert(id.clone());
        }
        for (id, t) in ok {
            acked.insert(id, t);
        }
        drop(c);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        acked.len() > 20,
        "too few writes were acknowledged: {}",
        acked.len()
    );
    // Final check after the last kill.
    let (c, _) = start(&ix.index, &[]).await;
    let present = list_all(&c).await;
    let got: HashMap<String, String> = present
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap().to_string(),
                m["text"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(got.len(), present.len(), "duplicate ids");
    for (id, text) in &acked {
        assert_eq!(got.get(id), Some(text), "acknowledged {id} lost");
    }
    for id in &deleted {
        assert!(!got.contains_key(id));
    }
    for t in got.values() {
        assert!(sent.contains(t));
    }
    // Flushes merged older memory segments instead of piling them up.
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(ix.index.join("MANIFEST")).unwrap()).unwrap();
    let n = m["memory_segments"].as_array().unwrap().len();
    assert!(
        (1..=queryd::memory::tools::MERGE_AT).contains(&n),
        "{n} memory segments"
    );
    c.cancel().await.unwrap();
}

/// Writers and readers at once on one engine, with flushes (and merges) happening meanwhile:
/// readers never fail and never see the visible set shrink (writes only add here); at the end
/// every acknowledged memory is there exactly once.
#[test]
fn concurrent_writers_and_readers_with_flushes() {
    use queryd::memory::tools::{AddMemoriesArgs, ListMemoriesArgs, MemoryInput, SearchMemoryArgs};
    let ix = common::indexed_fixture();
    let e = std::sync::Arc::new(queryd::Engine::open(&ix.index, &common::model_dir()).unwrap());
    e.set_flush_at(5);
    e.spawn_flusher();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let list_all = |e: &queryd::Engine| -> Vec<String> {
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

/// The memory graph over MCP: SIMILAR links (stored at write, both directions, across the
/// delta and a flushed segment), mentions, related memories, subgraph, aggregates, tag PMI,
/// the entity network, shortest paths and `relation_detail`; bad input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_graph_tools() {
    let ix = common::indexed_fixture();
    let (c, _) = start(&ix.index, &["--memory-flush-at", "3"]).await;
    let mems = [
        ("The upload service retries failed chunk uploads three times with exponential backoff", "uploads", vec!["area=io", "retry"]),
        ("Uploads are retried three times by the upload service, with exponential backoff between tries", "uploads", vec!["area=io", "retry"]),
        ("The billing service calls the uploads API to store invoices as PDF files", "billing", vec!["area=io", "pdf"]),
        ("Invoices are generated by the billing service every night", "billing", vec!["cron"]),
        ("The auth gateway issues the tokens that billing checks on every request", "auth gateway", vec!["area=security"]),
        ("The frontend CSS uses a dark theme by default", "frontend", vec!["ui"]),
    ];
    let mut ids = Vec::new();
    for (text, entity, tags) in &mems {
        let v = call(
            &c,
            "add_memories",
            json!({"memories": [{"text": text, "entity": entity, "tags": tags}]}),
        )
        .await
        .unwrap();
        ids.push(v["ids"][0].as_str().unwrap().to_string());
    }
    // Wait for the first 3 to be flushed into a segment: edges then span segment and delta.
    for _ in 0..100 {
        let m: Value =
            serde_json::from_str(&std::fs::read_to_string(ix.index.join("MANIFEST")).unwrap())
                .unwrap();
        if m["memory_segments"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // SIMILAR: the paraphrase links both ways; the unrelated memory links to neither.
    for (a, b) in [(0, 1), (1, 0)] {
        let s = call(&c, "graph_similar_memories", json!({"id": ids[a]}))
            .await
            .unwrap();
        let got: Vec<&str> = s["similar"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["memory"]["id"].as_str().unwrap())
            .collect();
        assert_eq!(got.first(), Some(&ids[b].as_str()), "{s:#}");
        assert!(!got.contains(&ids[5].as_str()));
        assert!(s["similar"][0]["score"].as_f64().unwrap() >= 0.55);
    }
    // relation_detail: minimal (default) gives SIMILAR ids; standard adds mentions and
    // related memories; none gives nothing; full says what related memories share.
    let s = call(
        &c,
        "search_memory",
        json!({"query": "how often are uploads retried"}),
    )
    .await
    .unwrap();
    let top = &s["results"][0];
    assert!(top["id"] == ids[0] || top["id"] == ids[1], "{s:#}");
    let other = if top["id"] == ids[0] {
        &ids[1]
    } else {
        &ids[0]
    };
    assert_eq!(top["relations"]["similar_ids"][0], *other, "{s:#}");
    let s = call(
        &c,
        "search_memory",
        json!({"query": "billing invoices PDF", "relation_detail": "standard"}),
    )
    .await
    .unwrap();
    let r = s["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == ids[2])
        .unwrap();
    assert_eq!(r["relations"]["mentions"], json!(["uploads"]), "{r:#}");
    assert!(!r["relations"]["related"].as_array().unwrap().is_empty());
    let s = call(
        &c,
        "search_memory",
        json!({"query": "billing", "relation_detail": "none"}),
    )
    .await
    .unwrap();
    assert!(s["results"][0].get("relations").is_none());
    let g = call(
        &c,
        "get_memory",
        json!({"id": ids[0], "relation_detail": "full"}),
    )
    .await
    .unwrap();
    let rel = &g["memory"]["relations"];
    assert_eq!(rel["related"][0]["id"], ids[1], "{g:#}");
    assert_eq!(rel["related"][0]["shared_entities"], json!(["uploads"]));
    assert_eq!(
        rel["related"][0]["shared_tags"],
        json!(["area=io", "retry"])
    );
    assert_eq!(rel["co_mentioned"][0]["name"], "billing");

    // related: the paraphrase first (shared entity and both tags), then the billing memory
    // that mentions uploads and shares area=io.
    let r = call(&c, "graph_related_memories", json!({"id": ids[0]}))
        .await
        .unwrap();
    let rel: Vec<&str> = r["related"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["memory"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(rel[..2], [ids[1].as_str(), ids[2].as_str()], "{r:#}");

    // subgraph around an entity: depth 1 its memories, depth 2 their entities and tags.
    let sg = call(&c, "graph_subgraph", json!({"node": "entity:Billing"}))
        .await
        .unwrap();
    let nodes: HashSet<String> = sg["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_string())
        .collect();
    for i in [2, 3, 4] {
        assert!(nodes.contains(&format!("memory:{}", ids[i])), "{sg:#}");
    }
    assert_eq!(nodes.len(), 4);
    let sg = call(
        &c,
        "graph_subgraph",
        json!({"node": "entity:billing", "depth": 2, "edge_types": ["about", "mentions"]}),
    )
    .await
    .unwrap();
    let nodes: HashSet<&str> = sg["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert!(nodes.contains("entity:uploads") && nodes.contains("entity:auth gateway"));
    assert!(!nodes.iter().any(|n| n.starts_with("tag:")));
    assert!(sg["edges"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["type"] == "MENTIONS"
            && e["from"] == format!("memory:{}", ids[2])
            && e["to"] == "entity:uploads"));
    let sg = call(&c, "graph_subgraph", json!({"node": ids[0], "limit": 3}))
        .await
        .unwrap();
    assert_eq!(sg["nodes"].as_array().unwrap().len(), 3);
    assert_eq!(sg["truncated"], true);

    // aggregates, tag PMI, entity network, shortest path.
    let a = call(&c, "graph_aggregate", json!({"group_by": "tag"}))
        .await
        .unwrap();
    assert_eq!(a["total"], 6);
    assert_eq!(a["groups"][0], json!({"name": "area=io", "count": 3}));
    let a = call(
        &c,
        "graph_aggregate",
        json!({"group_by": "entity", "tags": ["area=io"]}),
    )
    .await
    .unwrap();
    assert_eq!(a["total"], 3);
    assert_eq!(a["groups"][0], json!({"name": "uploads", "count": 2}));
    let a = call(&c, "graph_aggregate", json!({"group_by": "month"}))
        .await
        .unwrap();
    assert_eq!(a["groups"].as_array().unwrap().len(), 1);
    assert_eq!(a["groups"][0]["count"], 6);
    let t = call(&c, "graph_tag_cooccurrence", json!({})).await.unwrap();
    // area=io and retry: both on 2 of 6 memories, area=io on 3, retry on 2: ln(2·6/(3·2)).
    assert_eq!(t["pairs"].as_array().unwrap().len(), 1, "{t:#}");
    assert_eq!(t["pairs"][0]["a"], "area=io");
    assert_eq!(t["pairs"][0]["b"], "retry");
    assert!((t["pairs"][0]["pmi"].as_f64().unwrap() - 2f64.ln()).abs() < 1e-3);
    let t = call(
        &c,
        "graph_tag_cooccurrence",
        json!({"with_tag": "pdf", "min_count": 1}),
    )
    .await
    .unwrap();
    assert_eq!(t["pairs"][0]["a"], "area=io");
    assert_eq!(t["pairs"][0]["b"], "pdf");
    let n = call(&c, "graph_entity_network", json!({"center": "billing"}))
        .await
        .unwrap();
    let mut e: Vec<&str> = n["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["b"].as_str().unwrap())
        .collect();
    e.sort();
    assert_eq!(e, ["auth gateway", "uploads"], "{n:#}");
    assert_eq!(n["entities"][0]["name"], "billing");
    assert_eq!(n["entities"][0]["about"], 2);
    assert_eq!(n["entities"][0]["mentioned_by"], 1);
    let p = call(
        &c,
        "graph_path_between_entities",
        json!({"from": "auth gateway", "to": "uploads"}),
    )
    .await
    .unwrap();
    assert_eq!(p["found"], true);
    assert_eq!(p["hops"], 2);
    let path: Vec<&str> = p["path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        path,
        [
            "auth gateway",
            ids[4].as_str(),
            "billing",
            ids[2].as_str(),
            "uploads"
        ]
    );
    let p = call(
        &c,
        "graph_path_between_entities",
        json!({"from": "frontend", "to": "uploads"}),
    )
    .await
    .unwrap();
    assert_eq!(p["found"], false);

    // A deleted memory leaves the graph: no SIMILAR link to it remains.
    call(&c, "delete_memories", json!({"ids": [ids[1]]}))
        .await
        .unwrap();
    let s = call(&c, "graph_similar_memories", json!({"id": ids[0]}))
        .await
        .unwrap();
    assert!(!s.to_string().contains(&ids[1]));

    // Bad input.
    for (name, a, expect) in [
        (
            "graph_subgraph",
            json!({"node": "entity:nobody"}),
            "no active memory",
        ),
        (
            "graph_subgraph",
            json!({"node": "what"}),
            "must be a memory id",
        ),
        (
            "graph_subgraph",
            json!({"node": ids[0], "depth": 4}),
            "depth",
        ),
        (
            "graph_subgraph",
            json!({"node": ids[0], "edge_types": ["LIKES"]}),
            "unknown edge type",
        ),
        (
            "graph_aggregate",
            json!({"group_by": "colour"}),
            "unknown group_by",
        ),
        ("graph_related_memories", json!({"id": ids[1]}), "no memory"),
        (
            "graph_similar_memories",
            json!({"id": "x"}),
            "not a memory id",
        ),
        (
            "graph_path_between_entities",
            json!({"from": "billin", "to": "uploads"}),
            "no active memory",
        ),
        (
            "search_memory",
            json!({"query": "x", "relation_detail": "huge"}),
            "relation_detail",
        ),
    ] {
        let e = call(&c, name, a).await.expect_err(name);
        assert!(err_text(e.clone()).contains(expect), "{name}: {e}");
    }
    let e = call(
        &c,
        "graph_path_between_entities",
        json!({"from": "billin", "to": "uploads"}),
    )
    .await
    .unwrap_err();
    assert!(
        e.to_string().contains("billing"),
        "suggests the close name: {e}"
    );
    c.cancel().await.unwrap();
}

/// `reindex` and `job_status` over MCP: a new file becomes searchable, a path-limited job
/// leaves other changed files alone, a whole-root job picks them up and drops deleted files,
/// memories written meanwhile stay, and bad paths are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reindex_jobs_update_the_served_index() {
    let ix = common::indexed_fixture();
    let (c, _) = start(&ix.index, &[]).await;
    let names = |v: &Value| -> Vec<String> {
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r["name"].as_str().map(str::to_string))
            .collect()
    };
    let q = json!({"query": "compute_invoice_total", "mode": "lexical"});
    let before = call(&c, "search_code", q.clone()).await.unwrap();
    assert!(!names(&before).contains(&"compute_invoice_total".to_string()));
    let m = call(
        &c,
        "add_memories",
        json!({"memories": [{"text": "Invoices are summed in pkg/billing.py"}]}),
    )
    .await
    .unwrap();
    let mem_id = m["ids"][0].as_str().unwrap().to_string();

    // A new file, re-indexed by path; a change elsewhere stays out of that job.
    std::fs::write(
        ix.repo.join("pkg/billing.py"),
        "def compute_invoice_total(lines):\n    \"\"\"Sums invoice lines.\"\"\"\n    return sum(l.amount for l in lines)\n",
    )
    .unwrap();
    let g = ix.repo.join("pkg/geometry.py");
    let text = std::fs::read_to_string(&g).unwrap();
    std::fs::write(
        &g,
        format!("{text}\n\ndef hexagon_area(side):\n    return 2.598 * side * side\n"),
    )
    .unwrap();
    let j = call(
        &c,
        "reindex",
        json!({"paths": ["pkg/billing.py"], "wait": true}),
    )
    .await
    .unwrap();
    assert_eq!(j["state"], "done", "{j:#}");
    assert_eq!(j["files_changed"], 1);
    assert!(j["chunks_embedded"].as_u64().unwrap() >= 1);
    assert_eq!(j["paths"], json!(["polyglot/pkg/billing.py"]));
    let after = call(&c, "search_code", q.clone()).await.unwrap();
    assert_eq!(names(&after)[0], "compute_invoice_total", "{after:#}");
    let hex = json!({"query": "hexagon_area", "mode": "lexical"});
    let h = call(&c, "search_code", hex.clone()).await.unwrap();
    assert!(!names(&h).contains(&"hexagon_area".to_string()));

    // The whole root, in the background: poll job_status; queries work meanwhile.
    std::fs::remove_file(ix.repo.join("pkg/billing.py")).unwrap();
    let j = call(&c, "reindex", json!({})).await.unwrap();
    let id = j["job_id"].as_u64().unwrap();
    let mut last = Value::Null;
    for _ in 0..600 {
        call(&c, "search_code", json!({"query": "circle area"}))
            .await
            .unwrap();
        last = call(&c, "job_status", json!({"job_id": id})).await.unwrap()["jobs"][0].clone();
        if last["state"] == "done" || last["state"] == "failed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(last["state"], "done", "{last:#}");
    assert_eq!(last["files_changed"], 1, "{last:#}");
    assert_eq!(last["files_deleted"], 1, "{last:#}");
    let h = call(&c, "search_code", hex).await.unwrap();
    assert_eq!(names(&h)[0], "hexagon_area", "{h:#}");
    let gone = call(&c, "search_code", q).await.unwrap();
    assert!(!names(&gone).contains(&"compute_invoice_total".to_string()));
    // Nothing changed since: a no-op job.
    let j = call(&c, "reindex", json!({"wait": true})).await.unwrap();
    assert_eq!(
        (j["state"].as_str(), j["files_changed"].as_u64()),
        (Some("done"), Some(0))
    );
    let all = call(&c, "job_status", json!({})).await.unwrap();
    assert_eq!(all["jobs"].as_array().unwrap().len(), 3);
    assert!(all["jobs"][0]["job_id"].as_u64() > all["jobs"][1]["job_id"].as_u64());
    // The memory written before is still there.
    call(&c, "get_memory", json!({"id": mem_id})).await.unwrap();

    // Bad input.
    for (a, expect) in [
        (json!({"paths": ["../elsewhere"]}), "inside its root"),
        (
            json!({"paths": ["/etc/passwd"]}),
            "not inside an indexed root",
        ),
        (json!({"paths": [""]}), "empty path"),
    ] {
        let e = call(&c, "reindex", a.clone()).await.expect_err("bad path");
        assert!(err_text(e.clone()).contains(expect), "{a}: {e}");
    }
    let e = call(&c, "job_status", json!({"job_id": 999}))
        .await
        .unwrap_err();
    assert!(err_text(e).contains("no job 999"));
    c.cancel().await.unwrap();
}

/// Code-linked memories over MCP (the PRD's acceptance criteria): references completed from a
/// symbol, a URI or path + lines (hash from the file), bad references refused (lines, paths
/// outside the roots, missing files and symbols); after edits: a block shifted by an insertion
/// above is relocated and fresh, an edit inside a block makes it stale with a reason, an edit
/// elsewhere leaves it fresh, a deleted file is stale `deleted`; confidence bounds, reverse
/// lookup by line, exclude_stale / min_confidence, check_staleness (idempotent), explain_code,
/// and `queryd staleness`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_linked_memories_track_their_code() {
    let ix = common::indexed_fixture();
    let (c, _) = start(&ix.index, &[]).await;
    let add = |m: Value| {
        let c = &c;
        async move {
            call(c, "add_memories", json!({"memories": [m]}))
                .await
                .map(|v| v["ids"][0].as_str().unwrap().to_string())
        }
    };
    let a = add(
        json!({"text": "levenshtein_distance is the classic two-row DP", "source": "user",
                       "code_refs": [{"symbol": "levenshtein_distance"}]}),
    )
    .await
    .unwrap();
    let b = add(
        json!({"text": "Dictionary::insert normalises words before counting",
                       "code_refs": [{"uri": "file:src/lib.rs#L20-L24"}]}),
    )
    .await
    .unwrap();
    let cc = add(json!({"text": "Circle.area uses math.pi",
                        "code_refs": [{"path": "pkg/geometry.py", "start_line": 12, "end_line": 14}]}))
    .await
    .unwrap();
    let d = add(json!({"text": "main.py is the entry point",
                       "code_refs": [{"path": "pkg/main.py", "start_line": 1, "end_line": 3}]}))
    .await
    .unwrap();
    let get = |id: &str| {
        let c = &c;
        let id = id.to_string();
        async move { call(c, "get_memory", json!({"id": id})).await.unwrap()["memory"].clone() }
    };
    let ma = get(&a).await;
    let r = &ma["code_refs"][0];
    assert_eq!(r["path"], "src/lib.rs", "{ma:#}");
    assert!(
        r["start_line"].as_u64().unwrap() <= 38 && r["end_line"] == 51,
        "{r:#}"
    );
    assert!(r["symbol_id"]
        .as_str()
        .unwrap()
        .contains("levenshtein_distance"));
    assert!(r["code_hash"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(r["code_hash"].as_str().unwrap().len(), 7 + 64);
    assert_eq!(
        (r["status"].as_str(), r["is_stale"].as_bool()),
        (Some("fresh"), Some(false))
    );
    assert!(
        ma["confidence"].as_f64().unwrap() >= 0.8,
        "new user memory: {ma:#}"
    );
    let a_start = r["start_line"].as_u64().unwrap();
    let mb = get(&b).await;
    assert_eq!(mb["code_refs"][0]["code_link"], "file:src/lib.rs#L20-L24");
    assert!(
        mb["code_refs"][0]["symbol_id"]
            .as_str()
            .unwrap()
            .contains("insert"),
        "{mb:#}"
    );

    // Bad references: nothing is added.
    for (r, expect) in [
        (
            json!({"path": "src/lib.rs", "start_line": 5, "end_line": 2}),
            "end ≥ start",
        ),
        (
            json!({"path": "src/lib.rs", "start_line": 0, "end_line": 2}),
            "1-based",
        ),
        (
            json!({"path": "../secret.rs", "start_line": 1, "end_line": 1}),
            "without `..`",
        ),
        (
            json!({"path": "/etc/passwd", "start_line": 1, "end_line": 1}),
            "without `..`",
        ),
        (
            json!({"path": "src/nope.rs", "start_line": 1, "end_line": 1}),
            "no such file",
        ),
        (
            json!({"path": "src/lib.rs", "start_line": 50, "end_line": 99}),
            "the file has",
        ),
        (
            json!({"symbol": "no_such_function_anywhere"}),
            "no indexed symbol",
        ),
        (json!({"uri": "src/lib.rs:10"}), "not a code link"),
        (json!({"path": "src/lib.rs"}), "needs `start_line`"),
    ] {
        let e = add(json!({"text": "x", "code_refs": [r.clone()]}))
            .await
            .unwrap_err();
        assert!(err_text(e.clone()).contains(expect), "{r}: {e}");
    }
    assert_eq!(list_all(&c).await.len(), 4);

    // Reverse lookup by line.
    let m = call(
        &c,
        "memories_for_code",
        json!({"path": "src/lib.rs", "line": 45}),
    )
    .await
    .unwrap();
    let rel: Vec<(String, String)> = m["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["memory"]["id"].as_str().unwrap().into(),
                x["relation"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        rel,
        [(a.clone(), "direct".into()), (b.clone(), "related".into())],
        "{m:#}"
    );
    assert!(m["symbol_id"]
        .as_str()
        .unwrap()
        .contains("levenshtein_distance"));

    // Edits.
    let lib = ix.repo.join("src/lib.rs");
    let text = std::fs::read_to_string(&lib).unwrap();
    let text = text.replace(
        "        let key = util::normalize_word(word);",
        "        let key = util::normalize_word(word).to_lowercase();",
    );
    std::fs::write(&lib, format!("// one\n// two\n// three\n{text}")).unwrap();
    let geo = ix.repo.join("pkg/geometry.py");
    let g = std::fs::read_to_string(&geo).unwrap();
    std::fs::write(&geo, format!("{g}\n\ndef square(x):\n    return x * x\n")).unwrap();
    std::fs::remove_file(ix.repo.join("pkg/main.py")).unwrap();

    let ma = get(&a).await;
    let r = &ma["code_refs"][0];
    assert_eq!(r["status"], "relocated", "{ma:#}");
    assert_eq!(r["start_line"].as_u64().unwrap(), a_start + 3);
    assert_eq!(ma["is_stale"], false);
    let mb = get(&b).await;
    assert_eq!(mb["is_stale"], true, "{mb:#}");
    assert!(mb["code_refs"][0]["reason"]
        .as_str()
        .unwrap()
        .starts_with("changed"));
    assert!(mb["confidence"].as_f64().unwrap() <= 0.5);
    assert_eq!(get(&cc).await["code_refs"][0]["status"], "fresh");
    let md = get(&d).await;
    assert_eq!(md["code_refs"][0]["reason"], "deleted", "{md:#}");
    assert_eq!(md["is_stale"], true);

    // Search: stale memories can be left out.
    let all_q = json!({"query": "levenshtein insert normalises Circle main entry point", "mode": "lexical", "limit": 10});
    let s = call(&c, "search_memory", all_q.clone()).await.unwrap();
    assert_eq!(s["results"].as_array().unwrap().len(), 4);
    let mut q = all_q.clone();
    q["exclude_stale"] = json!(true);
    let s = call(&c, "search_memory", q).await.unwrap();
    let ids: HashSet<&str> = s["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, HashSet::from([a.as_str(), cc.as_str()]), "{s:#}");
    let mut q = all_q.clone();
    q["min_confidence"] = json!(0.6);
    let s = call(&c, "search_memory", q).await.unwrap();
    assert!(s["results"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["confidence"].as_f64().unwrap() >= 0.6));

    // Persisted checks: counts, then idempotent.
    let r = call(&c, "check_staleness", json!({})).await.unwrap();
    assert_eq!(
        (
            r["memories"].as_u64(),
            r["relocated"].as_u64(),
            r["stale"].as_u64(),
            r["fresh"].as_u64()
        ),
        (Some(4), Some(1), Some(2), Some(1)),
        "{r:#}"
    );
    assert_eq!(r["updated"], 3, "{r:#}");
    let r = call(&c, "check_staleness", json!({})).await.unwrap();
    assert_eq!(
        (
            r["updated"].as_u64(),
            r["relocated"].as_u64(),
            r["fresh"].as_u64()
        ),
        (Some(0), Some(0), Some(2)),
        "{r:#}"
    );
    let md = get(&d).await;
    assert!(md["code_refs"][0]["stale_since"].is_string(), "{md:#}");
    let ma = get(&a).await;
    assert_eq!(ma["code_refs"][0]["status"], "fresh");
    assert_eq!(
        ma["code_refs"][0]["start_line"].as_u64().unwrap(),
        a_start + 3
    );
    let r = call(
        &c,
        "check_staleness",
        json!({"changed_files": ["pkg/geometry.py"]}),
    )
    .await
    .unwrap();
    assert_eq!(r["memories"], 1);
    let e = call(
        &c,
        "check_staleness",
        json!({"ids": ["00000000-0000-7000-8000-000000000000"]}),
    )
    .await
    .unwrap_err();
    assert!(err_text(e).contains("no memory"));

    // explain_code lists the memory linked to the symbol.
    let x = call(
        &c,
        "explain_code",
        json!({"symbol": "levenshtein_distance"}),
    )
    .await
    .unwrap();
    assert_eq!(x["memories"][0]["id"], a, "{x:#}");

    // The CLI cannot record while this server holds the log; afterwards it can.
    let o = std::process::Command::new(BIN)
        .args(["staleness", "--index"])
        .arg(&ix.index)
        .arg("--model")
        .arg(common::model_dir())
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("check_staleness"));
    c.cancel().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::write(&geo, "# emptied\n").unwrap();
    let o = std::process::Command::new(BIN)
        .args(["staleness", "--json", "--index"])
        .arg(&ix.index)
        .arg("--model")
        .arg(common::model_dir())
        .args(["--changed-files", "pkg/geometry.py"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (
            r["memories"].as_u64(),
            r["stale"].as_u64(),
            r["updated"].as_u64()
        ),
        (Some(1), Some(1), Some(1)),
        "{r:#}"
    );
}

/// Identifiers in a memory's text become suggested code links; `auto_link: true` attaches
/// them with reason `inferred_from_code_index`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_links_are_suggested_from_text() {
    let ix = common::indexed_fixture();
    let (c, _) = start(&ix.index, &[]).await;
    let text = "closest_match() ranks candidates by levenshtein_distance; words are cleaned in src/util.rs";
    let v = call(&c, "add_memories", json!({"memories": [{"text": text}]}))
        .await
        .unwrap();
    let links = v["suggested_links"].as_array().unwrap();
    let matched: HashSet<&str> = links
        .iter()
        .map(|l| l["matched"].as_str().unwrap())
        .collect();
    assert_eq!(
        matched,
        HashSet::from(["closest_match", "levenshtein_distance", "src/util.rs"]),
        "{v:#}"
    );
    for l in links {
        assert_eq!(l["reason"], "inferred_from_code_index");
        assert_eq!(l["attached"], false);
        assert!(l["code_ref"]["code_hash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"));
    }
    let unique = links
        .iter()
        .find(|l| l["matched"] == "closest_match")
        .unwrap();
    assert!((unique["confidence"].as_f64().unwrap() - 0.8).abs() < 1e-6);
    let m = call(&c, "get_memory", json!({"id": v["ids"][0]}))
        .await
        .unwrap();
    assert!(
        m["memory"].get("code_refs").is_none(),
        "not attached: {m:#}"
    );
    let v = call(
        &c,
        "add_memories",
        json!({"memories": [{"text": text}], "auto_link": true}),
    )
    .await
    .unwrap();
    let m = call(&c, "get_memory", json!({"id": v["ids"][0]}))
        .await
        .unwrap();
    let refs = m["memory"]["code_refs"].as_array().unwrap();
    assert_eq!(refs.len(), 3, "{m:#}");
    assert!(refs
        .iter()
        .all(|r| r["reason"] == "inferred_from_code_index" && r["status"] == "fresh"));
    // Plain prose suggests nothing.
    let v = call(
        &c,
        "add_memories",
        json!({"memories": [{"text": "We prefer small pull requests."}]}),
    )
    .await
    .unwrap();
    assert!(v.get("suggested_links").is_none(), "{v:#}");
    c.cancel().await.unwrap();
}
