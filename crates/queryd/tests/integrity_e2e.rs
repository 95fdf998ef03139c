//! Damage and bad input through the `queryd` binary (the protocol's own hardening is in
//! `hardening.rs`): a damaged code segment does not stop the server (it
//! serves memories and says what it left out), bytes changed under a served segment never
//! reach the client as invalid UTF-8 or hang it, and bad memory input is refused with short,
//! clear errors.

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use common::{call_tool, spawn_queryd};
use serde_json::{json, Value};

fn err_text(e: Value) -> String {
    e["error"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| e.to_string())
}

fn first_code_segment(index: &Path) -> PathBuf {
    let m = format::IndexManifest::read(index).unwrap();
    index.join(format!("seg-{}", m.segments[0].id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_segment_on_disk_server_starts_and_serves_memories() {
    let ix = common::indexed_fixture();
    let (c, _) = spawn_queryd(&ix.index, &[]).await;
    call_tool(
        &c,
        "add_memories",
        json!({"memories": [{"text": "Words are normalised before lookup."}]}),
    )
    .await
    .unwrap();
    c.cancel().await.unwrap();
    // Flip bytes in the middle of graph.rkyv (as a disk error would).
    let graph = first_code_segment(&ix.index).join("graph.rkyv");
    let mut bytes = std::fs::read(&graph).unwrap();
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + 16] {
        *b ^= 0x5A;
    }
    std::fs::write(&graph, &bytes).unwrap();

    let (c, _) = spawn_queryd(&ix.index, &[]).await;
    let st = call_tool(&c, "index_status", json!({})).await.unwrap();
    assert_eq!(st["health"], "degraded", "{st}");
    assert_eq!(st["left_out"].as_array().unwrap().len(), 1, "{st}");
    let hits = call_tool(&c, "search_memory", json!({"query": "normalised words"}))
        .await
        .unwrap();
    assert_eq!(hits["results"].as_array().unwrap().len(), 1, "{hits}");
    // Code tools answer (nothing is served from the damaged segment) instead of failing.
    let r = call_tool(&c, "search_code", json!({"query": "normalize word"}))
        .await
        .unwrap();
    assert!(r["results"].as_array().unwrap().is_empty(), "{r}");
    c.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_changed_under_a_served_segment_never_breaks_the_client() {
    let ix = common::indexed_fixture();
    let (c, _) = spawn_queryd(&ix.index, &[]).await;
    let hits = call_tool(&c, "search_code", json!({"query": "normalize a word"}))
        .await
        .unwrap();
    let id = hits["results"][0]["symbol_id"]
        .as_str()
        .unwrap()
        .to_string();
    let chunks = first_code_segment(&ix.index).join("texts.bin");
    let at = std::fs::read(&chunks)
        .unwrap()
        .windows(30)
        .position(|w| w == b"strips surrounding punctuation")
        .expect("the doc comment is in texts.bin");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(&chunks)
        .unwrap();
    f.seek(SeekFrom::Start(at as u64)).unwrap();
    f.write_all(&[0xFF]).unwrap();
    f.sync_all().unwrap();
    drop(f);
    // The answer arrives as valid JSON (the client would stop reading otherwise): an error
    // that names the damaged file and chunk (chunk texts are checked when read) ...
    let r = call_tool(&c, "get_symbol", json!({"symbol": id})).await;
    let e = err_text(r.expect_err("a damaged text is an error, not altered code"));
    assert!(
        e.contains("texts.bin is corrupt") && e.contains("not valid UTF-8"),
        "{e}"
    );
    // ... the next call still works, and the server says something is wrong.
    let st = call_tool(&c, "index_status", json!({})).await.unwrap();
    assert_eq!(st["health"], "degraded", "{st}");
    c.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_memory_input_is_refused_briefly_and_limit_zero_is_an_error() {
    let ix = common::indexed_fixture();
    let (c, _) = spawn_queryd(&ix.index, &[]).await;
    let add = |m: Value| json!({ "memories": [m] });
    let e = call_tool(&c, "add_memories", add(json!({"text": "a\u{0}b"})))
        .await
        .unwrap_err();
    assert!(err_text(e).contains("U+0000"));
    let e = call_tool(
        &c,
        "add_memories",
        add(json!({"text": "ok", "entity": "svc\u{1b}[31m"})),
    )
    .await
    .unwrap_err();
    assert!(err_text(e.clone()).contains("entity"), "{e}");
    // Newlines and tabs are fine in text.
    call_tool(
        &c,
        "add_memories",
        add(json!({"text": "line one\n\tline two"})),
    )
    .await
    .unwrap();
    // A 100 KB bad tag is not echoed back whole.
    let tag = format!("bad tag {}", "x".repeat(100_000));
    let e = call_tool(&c, "add_memories", add(json!({"text": "t", "tags": [tag]})))
        .await
        .unwrap_err();
    let text = err_text(e);
    assert!(text.contains("malformed tag"), "{text}");
    assert!(text.len() < 1024, "{} bytes", text.len());
    let e = call_tool(
        &c,
        "search_memory",
        json!({"query": "x", "state": "y".repeat(50_000)}),
    )
    .await
    .unwrap_err();
    assert!(err_text(e).len() < 1024);
    // limit: 0 is an error, not 1.
    for (tool, args) in [
        ("search_code", json!({"query": "word", "limit": 0})),
        ("search_memory", json!({"query": "line", "limit": 0})),
        ("list_memories", json!({"limit": 0})),
    ] {
        let e = call_tool(&c, tool, args).await.unwrap_err();
        assert!(
            err_text(e.clone()).contains("`limit` must be at least 1"),
            "{tool}: {e}"
        );
    }
    c.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_vectors_are_caught_after_start_and_left_out() {
    let ix = common::indexed_fixture();
    let vectors = first_code_segment(&ix.index).join("vectors.f32");
    let mut bytes = std::fs::read(&vectors).unwrap();
    let n = bytes.len();
    for b in &mut bytes[64..n.min(64 + 4096)] {
        *b = 0xFF; // NaN rows: sizes and headers still check out at open
    }
    std::fs::write(&vectors, &bytes).unwrap();
    let (c, _) = spawn_queryd(&ix.index, &[]).await;
    // The background verifier's first pass runs right after start.
    let mut st = Value::Null;
    for _ in 0..100 {
        st = call_tool(&c, "index_status", json!({})).await.unwrap();
        if st["health"] == "degraded" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(st["health"], "degraded", "{st}");
    let left = &st["left_out"][0];
    assert!(
        left["path"].as_str().unwrap().ends_with("vectors.f32"),
        "{st}"
    );
    assert!(left["error"].as_str().unwrap().contains("checksum"), "{st}");
    // Vector search no longer returns rows of the damaged segment.
    let r = call_tool(
        &c,
        "search_code",
        json!({"query": "normalize a word", "mode": "vector"}),
    )
    .await
    .unwrap();
    assert!(r["results"].as_array().unwrap().is_empty(), "{r}");
    c.cancel().await.unwrap();
}
