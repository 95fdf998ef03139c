//! Long file: one scenario per memory-durability promise (flush, restart, export, crash,
//! log damage and repair, a read-only second server, rebuild keeping memories), each driven
//! through the real binaries with shared spawn/export helpers.
//!
//! Memories through the `queryd` binary (rmcp over stdio): the memory tools over the protocol,
//! flushes into segments, restart, the `export` and `staleness` commands, and a crash test that
//! SIGKILLs the server at random points while writes stream in. The tools' own scenarios (graph,
//! code links, jobs, concurrency) are direct calls in `crates/engine/tests/tools/`.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_queryd");

use common::{call_tool as call, spawn_queryd as start, Client};

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
    assert!(
        memory_segments_reach(&ix.index, |n| n > 0).await,
        "no memory segment after crossing the flush size"
    );
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
        (1..=memory::store::MERGE_AT).contains(&n),
        "{n} memory segments"
    );
    c.cancel().await.unwrap();
}

/// `queryd staleness` (the git hook's command) cannot record while a server holds the log; once
/// the server is gone it re-checks the references into changed files and records them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staleness_cli_records_when_no_server_holds_the_log() {
    let ix = common::indexed_fixture();
    let (c, _) = start(&ix.index, &[]).await;
    call(
        &c,
        "add_memories",
        json!({"memories": [{"text": "Circle.area uses math.pi",
            "code_refs": [{"path": "pkg/geometry.py", "start_line": 12, "end_line": 14}]}]}),
    )
    .await
    .unwrap();
    let staleness = |json: bool| {
        let mut cmd = std::process::Command::new(BIN);
        cmd.arg("staleness");
        if json {
            cmd.arg("--json");
        }
        cmd.arg("--index")
            .arg(&ix.index)
            .arg("--model")
            .arg(common::model_dir())
            .args(["--changed-files", "pkg/geometry.py"])
            .output()
            .unwrap()
    };
    let o = staleness(false);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("check_staleness"));
    c.cancel().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::write(ix.repo.join("pkg/geometry.py"), "# emptied\n").unwrap();
    let o = staleness(true);
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

/// Byte offsets of the records of a memory log (`[len][crc][payload]` after its header).
fn wal_records(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = match format::walhead::parse(b) {
        format::walhead::WalHeader::Complete { len, .. } => len,
        other => panic!("not a memory log's header: {other:?}"),
    };
    while at + 8 <= b.len() {
        let len = u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
        out.push((at, at + 8 + len));
        at += 8 + len;
    }
    out
}

async fn add_one(c: &Client, text: &str) -> String {
    let v = call(c, "add_memories", json!({"memories": [{"text": text}]}))
        .await
        .unwrap();
    v["ids"][0].as_str().unwrap().to_string()
}

fn kill9(pid: u32) {
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
}

/// A bit flipped in a record in the middle of the log is damage, not a torn tail: export
/// fails naming what it could not read, the server serves the valid prefix with `degraded`
/// health and refuses writes, nothing is cut; `repair-wal` (refused while a server holds the
/// log) salvages every other record and keeps the original aside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mid_log_damage_is_loud_and_repairable() {
    let ix = common::indexed_fixture();
    let n = 12;
    let (c, pid) = start(&ix.index, &[]).await;
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(
            add_one(
                &c,
                &format!("wal damage test memory number {i} about parsers"),
            )
            .await,
        );
    }
    // SIGKILL: a clean shutdown would flush the log into a segment.
    kill9(pid);
    let wal = ix.index.join("memory.wal");
    let mut b = std::fs::read(&wal).unwrap();
    let recs = wal_records(&b);
    assert_eq!(recs.len(), n);
    // One bit in the vector of record 6 (its JSON, with the id, stays readable).
    let bad = 5;
    b[recs[bad].1 - 9] ^= 0x08;
    std::fs::write(&wal, &b).unwrap();

    let export = |dir: &std::path::Path| {
        std::process::Command::new(BIN)
            .args(["export", "--index"])
            .arg(dir)
            .output()
            .unwrap()
    };
    let o = export(&ix.index);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "export of a damaged log succeeded: {err}"
    );
    assert!(
        err.contains("INCOMPLETE")
            && err.contains(&format!(
                "{} records of the memory log could not be read",
                n - bad
            ))
            && err.contains("repair-wal"),
        "{err}"
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), bad);

    // The server: the valid prefix, degraded, writes refused, nothing cut.
    let (c, pid) = start(&ix.index, &[]).await;
    let st = call(&c, "index_status", json!({})).await.unwrap();
    assert_eq!(st["health"], "degraded", "{st:#}");
    assert_eq!(st["memories"], "read-only (damaged log)");
    let dmg = &st["memory_log_damage"];
    assert_eq!(
        dmg["bad_offset"].as_u64(),
        Some(recs[bad].0 as u64),
        "{st:#}"
    );
    assert_eq!(dmg["records_after"].as_u64(), Some((n - bad - 1) as u64));
    assert!(dmg["fix"].as_str().unwrap().contains("repair-wal"));
    assert_eq!(list_all(&c).await.len(), bad);
    let e = err_text(
        call(
            &c,
            "add_memories",
            json!({"memories": [{"text": "refused"}]}),
        )
        .await
        .unwrap_err(),
    );
    assert!(e.contains("damaged") && e.contains("repair-wal"), "{e}");
    assert_eq!(
        std::fs::read(&wal).unwrap(),
        b,
        "the server changed the log"
    );

    let repair = || {
        std::process::Command::new(BIN)
            .args(["repair-wal"])
            .arg(&ix.index)
            .output()
            .unwrap()
    };
    let o = repair();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "repair under a running server");
    assert!(err.contains(&format!("pid {pid}")), "{err}");
    assert_eq!(std::fs::read(&wal).unwrap(), b);
    c.cancel().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        std::fs::read(&wal).unwrap(),
        b,
        "the shutdown flush touched the log"
    );

    let o = repair();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains(&format!("records kept: {}", n - 1))
            && out.contains("records lost: 1")
            && out.contains(&ids[bad]),
        "{out}"
    );
    let aside: Vec<_> = std::fs::read_dir(&ix.index)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("memory.wal.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1);
    assert_eq!(std::fs::read(&aside[0]).unwrap(), b);

    let o = export(&ix.index);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got: HashSet<String> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let want: HashSet<String> = ids
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != bad)
        .map(|(_, id)| id.clone())
        .collect();
    assert_eq!(got, want);

    // Writable again.
    let (c, _) = start(&ix.index, &[]).await;
    let st = call(&c, "index_status", json!({})).await.unwrap();
    assert_eq!(
        (st["health"].as_str(), st["memories"].as_str()),
        (Some("ok"), Some("read-write"))
    );
    add_one(&c, "written after the repair").await;
    c.cancel().await.unwrap();
}

/// A second queryd on the same index says it is read-only and who holds the log, refuses
/// writes, and follows the first one's writes (and its flushes) within a short wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_queryd_is_read_only_and_follows_the_writer() {
    let ix = common::indexed_fixture();
    let (a, pid_a) = start(&ix.index, &["--memory-flush-at", "3"]).await;
    let first = add_one(&a, "written before the second server started").await;
    let (b, _) = start(&ix.index, &[]).await;
    let st = call(&b, "index_status", json!({})).await.unwrap();
    assert_eq!(
        st["memories"],
        format!("read-only (held by pid {pid_a})"),
        "{st:#}"
    );
    assert_eq!(st["health"], "ok");
    let st_a = call(&a, "index_status", json!({})).await.unwrap();
    assert_eq!(st_a["memories"], "read-write");
    call(&b, "get_memory", json!({"id": first})).await.unwrap();
    let e = err_text(
        call(
            &b,
            "add_memories",
            json!({"memories": [{"text": "refused"}]}),
        )
        .await
        .unwrap_err(),
    );
    assert!(e.contains(&format!("pid {pid_a}")), "{e}");

    // New writes through the first server show up on the second; the third write flushes
    // the first server's log into a segment (a new generation, the log truncated).
    let mut ids = vec![first];
    for i in 0..4 {
        ids.push(add_one(&a, &format!("written while both servers run, number {i}")).await);
        let id = ids.last().unwrap();
        let mut seen = false;
        for _ in 0..50 {
            if call(&b, "get_memory", json!({"id": id})).await.is_ok() {
                seen = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(seen, "the second server never saw write {i}");
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let listed: HashSet<String> = list_all(&b)
        .await
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed, ids.iter().cloned().collect::<HashSet<_>>());
    a.cancel().await.unwrap();
    b.cancel().await.unwrap();
}

/// Runs the `indexer` binary (found beside `queryd`) with the real model.
fn indexer(args: &[&str]) -> std::process::Output {
    std::process::Command::new(cix_tests::sibling_bin(BIN, "indexer"))
        .args(args)
        .env("CIX_MODEL_DIR", common::model_dir())
        .output()
        .expect("run the indexer binary")
}

fn described(what: &str, o: &std::process::Output) -> String {
    format!(
        "{what}: {}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `queryd export` of `index`: the JSONL lines.
fn export_lines(index: &std::path::Path) -> Vec<String> {
    let o = std::process::Command::new(BIN)
        .args(["export", "--index"])
        .arg(index)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", described("queryd export", &o));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Every exported memory exactly once, and the same as `before`.
fn assert_same_memories(index: &std::path::Path, before: &[String], what: &str) {
    let after = export_lines(index);
    let ids: Vec<String> = after
        .iter()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!(
        unique.len(),
        ids.len(),
        "{what}: an id exported twice: {ids:?}"
    );
    assert_eq!(
        after.len(),
        before.len(),
        "{what}: {} of {} memories",
        after.len(),
        before.len()
    );
    assert_eq!(after, before, "{what}: the memories differ");
}

fn memory_segments_in(index: &std::path::Path) -> usize {
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(index.join("MANIFEST")).unwrap()).unwrap();
    m["memory_segments"].as_array().map_or(0, Vec::len)
}

/// Polls `index`'s MANIFEST for up to 10 s until its number of memory segments satisfies
/// `ok`.
async fn memory_segments_reach(index: &std::path::Path, ok: impl Fn(usize) -> bool) -> bool {
    for _ in 0..100 {
        if ok(memory_segments_in(index)) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// An index of the fixture holding memories in two flushed segments and in `memory.wal`
/// (updates and a delete of flushed ones included: the server is SIGKILLed before it can flush
/// them), and its export.
async fn index_with_segments_and_log() -> (cix_tests::Indexed, Vec<String>) {
    let ix = common::indexed_fixture();
    let (c, pid) = start(&ix.index, &["--memory-flush-at", "4"]).await;
    let mut ids = Vec::new();
    for round in 1..=2 {
        for i in 0..4 {
            let v = call(
                &c,
                "add_memories",
                json!({"memories": [{"text": format!("repair test memory {round}.{i} about gizmos"), "entity": "gizmos"}]}),
            )
            .await
            .unwrap();
            ids.push(v["ids"][0].as_str().unwrap().to_string());
        }
        assert!(
            memory_segments_reach(&ix.index, |n| n == round).await,
            "flush {round} did not happen"
        );
    }
    // Three logged writes (below the flush size): an update and a delete of flushed
    // memories, and a new one.
    call(
        &c,
        "update_memory",
        json!({"id": ids[0], "text": "repair test memory, updated after its flush"}),
    )
    .await
    .unwrap();
    call(&c, "delete_memories", json!({"ids": [ids[1]]}))
        .await
        .unwrap();
    call(
        &c,
        "add_memories",
        json!({"memories": [{"text": "repair test memory only in the log"}]}),
    )
    .await
    .unwrap();
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    drop(c);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(memory_segments_in(&ix.index), 2);
    let wal = std::fs::metadata(ix.index.join("memory.wal"))
        .unwrap()
        .len();
    assert!(
        format::manifest::memory_wal_holds_records(&ix.index),
        "memory.wal holds no records ({wal} bytes)"
    );
    let before = export_lines(&ix.index);
    let texts = before.join("\n");
    assert!(texts.contains("updated after its flush") && texts.contains("only in the log"));
    assert!(!texts.contains("repair test memory 1.0 "), "{texts}");
    (ix, before)
}

/// A damaged MANIFEST (truncated to half): the build refuses with one clear sentence and a
/// hint; the hinted command (`indexer build --rebuild`) repairs the index, moving the damaged
/// MANIFEST aside, and `queryd export` lists every memory exactly once, before and after
/// queryd replays the log and flushes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuild_after_a_damaged_manifest_keeps_every_memory() {
    let (ix, before) = index_with_segments_and_log().await;
    let (repo, index) = (ix.repo.to_str().unwrap(), ix.index.to_str().unwrap());
    let m = std::fs::read(ix.index.join("MANIFEST")).unwrap();
    std::fs::write(ix.index.join("MANIFEST"), &m[..m.len() / 2]).unwrap();

    let o = indexer(&["build", repo, "--out", index, "--quiet"]);
    assert!(!o.status.success(), "{}", described("build", &o));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(err.matches("is corrupt").count(), 1, "{err}");
    assert!(
        err.contains("MANIFEST is corrupt (it ends early: truncated)"),
        "{err}"
    );
    let hint = err
        .lines()
        .find(|l| l.starts_with("hint:"))
        .unwrap_or_else(|| panic!("no hint in {err}"));
    assert!(
        hint.contains("--rebuild") && hint.contains("keeps every memory"),
        "{hint}"
    );

    let o = indexer(&["build", repo, "--out", index, "--rebuild", "--quiet"]);
    assert!(o.status.success(), "{}", described("build --rebuild", &o));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        err.contains("moved aside") && err.contains("MANIFEST.bak-"),
        "{err}"
    );
    let baks: Vec<_> = std::fs::read_dir(&ix.index)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("MANIFEST.bak-"))
        .collect();
    assert_eq!(baks.len(), 1);
    assert_eq!(std::fs::read(baks[0].path()).unwrap(), &m[..m.len() / 2]);
    assert_eq!(memory_segments_in(&ix.index), 2);
    assert_same_memories(&ix.index, &before, "after --rebuild");

    // queryd replays the whole log over the recovered segments, then flushes on shutdown.
    let (c, _) = start(&ix.index, &[]).await;
    assert_eq!(list_all(&c).await.len(), before.len());
    c.cancel().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_same_memories(&ix.index, &before, "after queryd replayed and flushed");
    // The code is searchable again.
    let o = std::process::Command::new(BIN)
        .args([
            "search",
            "--index",
            index,
            "--mode",
            "lexical",
            "circle_area",
        ])
        .env("CIX_MODEL_DIR", common::model_dir())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", described("search", &o));
}

/// `--rebuild` on a healthy index, and a build into a directory whose MANIFEST is gone, keep
/// the memory segments and the log: every memory exported exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuild_and_a_missing_manifest_keep_every_memory() {
    let (ix, before) = index_with_segments_and_log().await;
    let (repo, index) = (ix.repo.to_str().unwrap(), ix.index.to_str().unwrap());
    let o = indexer(&["build", repo, "--out", index, "--rebuild", "--quiet"]);
    assert!(o.status.success(), "{}", described("build --rebuild", &o));
    assert_eq!(memory_segments_in(&ix.index), 2);
    assert_same_memories(&ix.index, &before, "after --rebuild of a healthy index");

    std::fs::remove_file(ix.index.join("MANIFEST")).unwrap();
    let o = indexer(&["build", repo, "--out", index, "--quiet"]);
    assert!(
        o.status.success(),
        "{}",
        described("build without a MANIFEST", &o)
    );
    assert_eq!(memory_segments_in(&ix.index), 2);
    assert_same_memories(&ix.index, &before, "after a build without a MANIFEST");
}

/// A dump ingested while `memory.wal` holds unflushed writes (an update and a delete) to
/// memories the dump also holds is refused, naming them and `queryd flush`, and changes
/// nothing: those older writes would otherwise shadow the dump's copies at replay, and the
/// next flush would tombstone them. A dump of other ids goes in; after `queryd flush` the
/// refused dump does too, and its copies are the ones served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingest_is_not_undone_by_older_writes_in_the_log() {
    let (ix, _) = index_with_segments_and_log().await;
    let index = ix.index.to_str().unwrap();
    let wal = std::fs::read(ix.index.join("memory.wal")).unwrap();
    let header = match format::walhead::parse(&wal) {
        format::walhead::WalHeader::Complete { len, .. } => len,
        h => panic!("{h:?}"),
    };
    let (mut updated, mut deleted) = (None, None);
    for r in format::walrec::salvage(&wal, header).recs {
        match r.op {
            format::walrec::WalOp::Put { record, .. } if record.text.contains("updated") => {
                updated = Some(record.id)
            }
            format::walrec::WalOp::Delete { id } => deleted = Some(id),
            _ => {}
        }
    }
    let (updated, deleted) = (updated.unwrap(), deleted.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().join("restore.jsonl");
    std::fs::write(
        &dump,
        format!(
            "{{\"id\": \"{updated}\", \"text\": \"restored from a dump: gizmo calibration\"}}\n\
             {{\"id\": \"{deleted}\", \"text\": \"restored from a dump: gizmo storage\"}}\n"
        ),
    )
    .unwrap();
    let manifest = std::fs::read(ix.index.join("MANIFEST")).unwrap();
    let before = export_lines(&ix.index);
    let o = indexer(&[
        "build",
        "--memories",
        dump.to_str().unwrap(),
        "--out",
        index,
    ]);
    assert!(!o.status.success(), "{}", described("ingest", &o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("2 of its memories")
            && err.contains(&updated)
            && err.contains(&deleted)
            && err.contains("queryd flush --index"),
        "{err}"
    );
    assert_eq!(std::fs::read(ix.index.join("MANIFEST")).unwrap(), manifest);
    assert_eq!(std::fs::read(ix.index.join("memory.wal")).unwrap(), wal);
    assert_eq!(export_lines(&ix.index), before);
    // With --rebuild the refusal comes before the rebuild touches anything.
    let repo = ix.repo.to_str().unwrap();
    let o = indexer(&[
        "build",
        repo,
        "--out",
        index,
        "--rebuild",
        "--memories",
        dump.to_str().unwrap(),
    ]);
    assert!(!o.status.success(), "{}", described("rebuild + ingest", &o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("2 of its memories"),
        "{}",
        described("rebuild + ingest", &o)
    );
    assert_eq!(std::fs::read(ix.index.join("MANIFEST")).unwrap(), manifest);

    // Other ids: nothing to refuse.
    let other = dir.path().join("other.jsonl");
    std::fs::write(&other, "{\"text\": \"a memory no log write touches\"}\n").unwrap();
    let o = indexer(&[
        "build",
        "--memories",
        other.to_str().unwrap(),
        "--out",
        index,
    ]);
    assert!(
        o.status.success(),
        "{}",
        described("ingest of other ids", &o)
    );

    let flush = || {
        std::process::Command::new(BIN)
            .args(["flush", "--index", index])
            .env("CIX_MODEL_DIR", common::model_dir())
            .output()
            .unwrap()
    };
    let o = flush();
    assert!(o.status.success(), "{}", described("queryd flush", &o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("flushed 2 memories"),
        "{}",
        described("queryd flush", &o)
    );
    assert!(!format::manifest::memory_wal_holds_records(&ix.index));
    let o = flush();
    assert!(
        o.status.success() && String::from_utf8_lossy(&o.stderr).contains("nothing to flush"),
        "{}",
        described("second queryd flush", &o)
    );

    let o = indexer(&[
        "build",
        "--memories",
        dump.to_str().unwrap(),
        "--out",
        index,
    ]);
    assert!(
        o.status.success(),
        "{}",
        described("ingest after the flush", &o)
    );
    let (c, pid) = start(&ix.index, &[]).await;
    let all = list_all(&c).await;
    for (id, text) in [(&updated, "gizmo calibration"), (&deleted, "gizmo storage")] {
        let m: Vec<&Value> = all.iter().filter(|m| m["id"] == json!(id)).collect();
        assert_eq!(m.len(), 1, "{all:#?}");
        assert_eq!(m[0]["text"], format!("restored from a dump: {text}"));
    }
    drop(c);
    kill9(pid);
}
