//! The real `queryd` binary over MCP: stdio with rmcp's client (list tools, call each one, bad
//! input answered with errors while the server keeps serving), and streamable HTTP with a plain
//! HTTP client (MCP session, tools, Origin/Host rejection, body cap, health, metrics, status).

mod common;

use std::process::{Command, Stdio};

use common::http::*;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::ServiceExt;
use serde_json::{json, Value};

fn args(v: Value) -> serde_json::Map<String, Value> {
    v.as_object().expect("an object").clone()
}

fn structured(r: &CallToolResult) -> Value {
    r.structured_content.clone().expect("structured content")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_lists_and_calls_every_tool_and_survives_bad_input() {
    let ix = common::indexed_fixture();
    let transport = TokioChildProcess::new(tokio::process::Command::new(BIN).configure(|c| {
        c.arg("--index")
            .arg(&ix.index)
            .arg("--model")
            .arg(common::model_dir());
    }))
    .expect("spawn queryd");
    let client = ().serve(transport).await.expect("MCP handshake over stdio");

    let tools = client.list_all_tools().await.expect("tools/list");
    let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "add_memories",
            "check_staleness",
            "delete_memories",
            "explain_code",
            "find_callees",
            "find_callers",
            "find_duplicates",
            "get_memory",
            "get_symbol",
            "graph_aggregate",
            "graph_entity_network",
            "graph_path_between_entities",
            "graph_related_memories",
            "graph_similar_memories",
            "graph_subgraph",
            "graph_tag_cooccurrence",
            "impact_analysis",
            "index_status",
            "job_status",
            "list_memories",
            "memories_for_code",
            "reindex",
            "search_code",
            "search_memory",
            "update_memory"
        ]
    );
    for t in &tools {
        assert!(t.description.as_deref().is_some_and(|d| d.len() > 40));
        assert_eq!(
            t.input_schema.get("type"),
            Some(&json!("object")),
            "{}",
            t.name
        );
    }
    let search = tools.iter().find(|t| t.name == "search_code").unwrap();
    assert!(search.input_schema["properties"]["query"].is_object());

    let call = |name: &'static str, a: Value| {
        let client = &client;
        async move {
            client
                .call_tool(CallToolRequestParams::new(name).with_arguments(args(a)))
                .await
        }
    };

    let r = call(
        "search_code",
        json!({"query": "edit distance between two strings", "limit": 3, "debug": true}),
    )
    .await
    .unwrap();
    let v = structured(&r);
    assert_eq!(v["results"][0]["name"], "levenshtein_distance", "{v:#}");
    assert!(v["debug"]["embed_ms"].as_f64().unwrap() > 0.0);
    // The text content is the same JSON, compact.
    let text = r.content[0].as_text().expect("text content").text.clone();
    assert!(!text.contains('\n') || text.len() < 200 || !text.contains("\n  "));

    let v = structured(
        &call("get_symbol", json!({"symbol": "closest_match"}))
            .await
            .unwrap(),
    );
    assert!(v["code"].as_str().unwrap().contains("fn closest_match"));

    let v = structured(
        &call("find_callers", json!({"symbol": "levenshtein_distance"}))
            .await
            .unwrap(),
    );
    assert_eq!(v["stage"], "graph");
    assert!(
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "closest_match"),
        "{v:#}"
    );

    let v = structured(
        &call("find_callees", json!({"symbol": "closest_match"}))
            .await
            .unwrap(),
    );
    assert_eq!(v["stage"], "graph");
    assert!(v["results"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["name"] == "levenshtein_distance"));

    let v = structured(
        &call(
            "impact_analysis",
            json!({"symbol": "levenshtein_distance", "depth": 2}),
        )
        .await
        .unwrap(),
    );
    assert!(
        v["affected"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["name"] == "suggest" && a["depth"] == 2),
        "{v:#}"
    );

    let v = structured(
        &call("explain_code", json!({"symbol": "Dictionary::suggest"}))
            .await
            .unwrap(),
    );
    assert_eq!(v["name"], "suggest", "{v:#}");
    assert!(v["callees"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["name"] == "closest_match"));

    let v = structured(
        &call(
            "find_duplicates",
            json!({"symbol": "Circle.area", "threshold": 0.3}),
        )
        .await
        .unwrap(),
    );
    assert!(v["duplicates"].is_array());

    let v = structured(&call("index_status", json!({})).await.unwrap());
    assert_eq!(v["health"], "ok");
    assert!(v["live_chunks"].as_u64().unwrap() > 0);

    // Protocol errors: unknown tool, wrong types, unknown arguments, missing arguments.
    let e = call("no_such_tool", json!({}))
        .await
        .expect_err("unknown tool");
    assert!(e.to_string().contains("unknown tool"), "{e}");
    let e = call("search_code", json!({"query": 5}))
        .await
        .expect_err("wrong type");
    assert!(e.to_string().contains("invalid arguments"), "{e}");
    let e = call("search_code", json!({"query": "x", "bogus": 1}))
        .await
        .expect_err("unknown field");
    assert!(e.to_string().contains("bogus"), "{e}");
    let e = call("get_symbol", json!({}))
        .await
        .expect_err("missing field");
    assert!(e.to_string().contains("symbol"), "{e}");
    // Tool errors the agent sees: empty and oversized queries, unknown symbols.
    let r = call("search_code", json!({"query": "  "})).await.unwrap();
    assert_eq!(r.is_error, Some(true));
    assert!(structured(&r)["error"].as_str().unwrap().contains("empty"));
    let r = call("search_code", json!({"query": "y".repeat(9000)}))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    assert!(structured(&r)["error"].as_str().unwrap().contains("8192"));
    let r = call("get_symbol", json!({"symbol": "levenshtein_distanse"}))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    let v = structured(&r);
    assert_eq!(v["suggestions"][0], "levenshtein_distance", "{v:#}");

    // Still serving.
    let v = structured(
        &call(
            "search_code",
            json!({"query": "ServeHTTP", "mode": "lexical"}),
        )
        .await
        .unwrap(),
    );
    assert_eq!(v["results"][0]["name"], "ServeHTTP", "{v:#}");
    client.cancel().await.expect("close the session");
}

#[test]
fn http_serves_mcp_health_metrics_and_rejects_foreign_origins() {
    let ix = common::indexed_fixture();
    let srv = start_http(&ix.index, &[]);
    let port = srv.port;

    let r = request(port, "GET", "/health", &[], "");
    assert_eq!((r.status, r.body.as_str()), (200, "ok\n"));
    let r = request(port, "GET", "/health/ready", &[], "");
    assert_eq!(r.status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&r.body).unwrap()["ready"],
        true
    );
    let r = request(port, "GET", "/status", &[], "");
    let v: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["health"], "ok");

    // MCP session: initialize, initialized, tools/list, tools/call.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "e2e", "version": "0"}}});
    let r = request(port, "POST", "/mcp", &[ACCEPT, JSON], &init.to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    let m = r.message();
    assert_eq!(m["result"]["serverInfo"]["name"], "cix-queryd", "{m:#}");
    let version = m["result"]["protocolVersion"].as_str().unwrap().to_string();
    let session = r.header("mcp-session-id").map(str::to_string);
    let mut hs: Vec<(&str, &str)> = vec![ACCEPT, JSON, ("MCP-Protocol-Version", &version)];
    if let Some(s) = &session {
        hs.push(("Mcp-Session-Id", s));
    }
    let r = request(
        port,
        "POST",
        "/mcp",
        &hs,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
    );
    assert!(
        r.status == 202 || r.status == 200,
        "{} {}",
        r.status,
        r.body
    );
    let r = request(
        port,
        "POST",
        "/mcp",
        &hs,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string(),
    );
    assert_eq!(r.message()["result"]["tools"].as_array().unwrap().len(), 25);
    let call = |id: u64, name: &str, a: Value| {
        request(
            port,
            "POST",
            "/mcp",
            &hs,
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": a}})
            .to_string(),
        )
        .message()
    };
    let m = call(3, "find_callers", json!({"symbol": "levenshtein_distance"}));
    assert_eq!(m["result"]["structuredContent"]["stage"], "graph", "{m:#}");
    let m = call(
        4,
        "search_code",
        json!({"query": "area of a circle", "language": "python", "limit": 2}),
    );
    assert_eq!(
        m["result"]["structuredContent"]["results"][0]["name"], "area",
        "{m:#}"
    );
    let m = call(5, "nope", json!({}));
    assert!(
        m["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool"),
        "{m:#}"
    );
    let m = call(6, "index_status", json!({}));
    assert_eq!(m["result"]["structuredContent"]["health"], "ok");

    // An allowed Origin passes; a foreign Origin or Host is refused with 403, on every endpoint.
    let ok_origin = format!("http://localhost:{port}");
    let r = request(port, "GET", "/health", &[("Origin", &ok_origin)], "");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some(ok_origin.as_str())
    );
    // A browser page of an allowed origin: its preflight is answered, and the reply to its
    // request names the origin and exposes the session id (an MCP client must send it back).
    let r = request(
        port,
        "OPTIONS",
        "/mcp",
        &[
            ("Origin", &ok_origin),
            ("Access-Control-Request-Method", "POST"),
            (
                "Access-Control-Request-Headers",
                "content-type, mcp-session-id, mcp-param-x",
            ),
        ],
        "",
    );
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some(ok_origin.as_str())
    );
    assert!(r
        .header("access-control-allow-methods")
        .unwrap()
        .contains("POST"));
    assert_eq!(r.header("vary"), Some("Origin"));
    // The headers it asks for, open-ended ones of newer MCP versions included.
    assert_eq!(
        r.header("access-control-allow-headers"),
        Some("content-type, mcp-session-id, mcp-param-x")
    );
    let r = request(
        port,
        "POST",
        "/mcp",
        &[ACCEPT, JSON, ("Origin", &ok_origin)],
        &init.to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some(ok_origin.as_str())
    );
    assert!(r
        .header("access-control-expose-headers")
        .unwrap()
        .contains("mcp-session-id"));
    // No CORS headers without an Origin, and a foreign page's preflight is refused.
    let r = request(port, "GET", "/health", &[], "");
    assert_eq!(r.header("access-control-allow-origin"), None);
    let r = request(
        port,
        "OPTIONS",
        "/mcp",
        &[
            ("Origin", "http://evil.example"),
            ("Access-Control-Request-Method", "POST"),
        ],
        "",
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.header("access-control-allow-origin"), None);
    let r = request(
        port,
        "POST",
        "/mcp",
        &[ACCEPT, JSON, ("Origin", "http://evil.example")],
        &init.to_string(),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("Origin"));
    let r = request(
        port,
        "GET",
        "/metrics",
        &[("Origin", "http://evil.example")],
        "",
    );
    assert_eq!(r.status, 403);
    let r = request(
        port,
        "POST",
        "/mcp",
        &[ACCEPT, JSON, ("Host", "evil.example:80")],
        &init.to_string(),
    );
    assert_eq!(r.status, 403, "{}", r.body);

    // Oversized bodies are refused.
    let big = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "search_code",
        "arguments": {"query": "z".repeat(2 * 1024 * 1024)}}});
    let r = request(port, "POST", "/mcp", &hs, &big.to_string());
    assert_eq!(r.status, 413, "{}", r.body);

    // Still serving, and the metrics counted the calls.
    let m = call(
        10,
        "search_code",
        json!({"query": "ServeHTTP", "mode": "lexical", "limit": 1}),
    );
    assert_eq!(
        m["result"]["structuredContent"]["results"][0]["name"],
        "ServeHTTP"
    );
    let r = request(port, "GET", "/metrics", &[], "");
    assert_eq!(r.status, 200);
    assert!(
        r.body
            .contains("queryd_tool_calls_total{tool=\"search_code\",outcome=\"ok\"} 2"),
        "{}",
        r.body
    );
    assert!(
        r.body
            .contains("queryd_tool_calls_total{tool=\"unknown\",outcome=\"invalid_input\"} 1"),
        "{}",
        r.body
    );
    assert!(
        r.body.contains("queryd_tool_latency_seconds_bucket{le="),
        "{}",
        r.body
    );
    assert!(
        r.body
            .contains("queryd_http_requests_total{endpoint=\"/mcp\",status=\"403\"}"),
        "{}",
        r.body
    );
}

#[test]
fn bad_start_exits_with_a_clear_message() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .arg("--index")
        .arg(tmp.path().join("missing"))
        .arg("--model")
        .arg(common::model_dir())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "stdout carries only MCP messages");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no MANIFEST") && err.contains("indexer build"),
        "{err}"
    );

    let out = Command::new(BIN)
        .args(["--index", "x", "--http", "0.0.0.0:1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-remote"));
}

/// The official MCP Inspector's CLI (npm `@modelcontextprotocol/inspector`, installed into
/// `.cache/npm` by `scripts/setup.sh` wherever the machine has Node) against the binary over
/// stdio. On a machine without Node there is nothing to run; with Node, a missing install fails.
#[test]
fn mcp_inspector_cli_lists_and_calls_tools() {
    if Command::new("node").arg("--version").output().is_err() {
        eprintln!("note: no Node.js on PATH; the MCP Inspector check needs it");
        return;
    }
    let cli = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../.cache/npm/node_modules/.bin/mcp-inspector");
    assert!(
        cli.exists(),
        "{} is missing: run scripts/setup.sh (it installs the MCP Inspector where Node exists)",
        cli.display()
    );
    let ix = common::indexed_fixture();
    let inspector = |extra: &[&str]| {
        let out = Command::new(&cli)
            .args(["--cli", BIN, "--index"])
            .arg(&ix.index)
            .arg("--model")
            .arg(common::model_dir())
            .args(extra)
            .output()
            .expect("run the MCP Inspector CLI");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (ok, out, err) = inspector(&["--method", "tools/list"]);
    assert!(ok, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["tools"].as_array().unwrap().len(), 25);
    let (ok, out, err) = inspector(&[
        "--method",
        "tools/call",
        "--tool-name",
        "find_callers",
        "--tool-arg",
        "symbol=levenshtein_distance",
    ]);
    assert!(ok, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["structuredContent"]["stage"], "graph", "{v:#}");
    let (ok, out, err) = inspector(&["--method", "tools/call", "--tool-name", "nope"]);
    assert!(!ok);
    assert!(
        format!("{out}{err}").contains("unknown tool"),
        "{out}\n{err}"
    );
}

/// Several HTTP sessions at once, each writing memories and reading its own writes back while
/// the others write, search code and the delta is flushed (flush size 7) underneath them:
/// every write is acknowledged, visible at once to its writer and to every other session,
/// and present exactly once at the end.
#[test]
fn http_sessions_write_and_search_concurrently() {
    let ix = common::indexed_fixture();
    let srv = start_http(&ix.index, &["--memory-flush-at", "7"]);
    let port = srv.port;
    const CLIENTS: usize = 4;
    const WRITES: usize = 12;
    let words = ["falcon", "harbor", "meadow", "quartz"];
    let written: Vec<Vec<String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..CLIENTS)
            .map(|c| {
                s.spawn(move || {
                    let hs = http_session(port, &format!("client{c}"));
                    let mut ids = Vec::new();
                    for i in 0..WRITES {
                        let text = format!("{} note {i} from client {c}", words[c]);
                        let v = http_call(
                            port,
                            &hs,
                            10 + i as u64 * 3,
                            "add_memories",
                            json!({"memories": [{"text": text, "entity": words[c]}]}),
                        );
                        let id = v["ids"][0].as_str().unwrap().to_string();
                        // Read your write, through search (filters + BM25) and by id.
                        let r = http_call(
                            port,
                            &hs,
                            11 + i as u64 * 3,
                            "search_memory",
                            json!({"query": format!("{} note {i}", words[c]), "mode": "lexical",
                                   "entity": words[c], "limit": 100}),
                        );
                        let found: Vec<&str> = r["results"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|m| m["id"].as_str().unwrap())
                            .collect();
                        assert!(found.contains(&id.as_str()), "client {c} write {i}: {r:#}");
                        assert_eq!(found.len(), i + 1, "client {c} sees its {} writes", i + 1);
                        let code = http_call(
                            port,
                            &hs,
                            12 + i as u64 * 3,
                            "search_code",
                            json!({"query": "edit distance", "limit": 1}),
                        );
                        assert_eq!(code["results"][0]["name"], "levenshtein_distance");
                        ids.push(id);
                    }
                    ids
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // Every session's writes, exactly once, from a new session.
    let hs = http_session(port, "checker");
    let mut all = Vec::new();
    let mut offset = 0;
    loop {
        let v = http_call(
            port,
            &hs,
            1000 + offset as u64,
            "list_memories",
            json!({"limit": 100, "offset": offset}),
        );
        all.extend(
            v["memories"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["id"].as_str().unwrap().to_string()),
        );
        match v["next_offset"].as_u64() {
            Some(n) => offset = n as usize,
            None => break,
        }
    }
    let mut want: Vec<String> = written.into_iter().flatten().collect();
    want.sort();
    all.sort();
    assert_eq!(all, want);
    assert_eq!(all.len(), CLIENTS * WRITES);
    // The delta was flushed into segments meanwhile.
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(ix.index.join("MANIFEST")).unwrap()).unwrap();
    assert!(
        !m["memory_segments"].as_array().unwrap().is_empty(),
        "{m:#}"
    );
}
