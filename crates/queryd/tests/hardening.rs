//! The real `queryd` binary under hostile or overloaded clients (issue 13): bad stdio lines
//! each get a JSON-RPC answer and the server keeps serving; over HTTP the session cap, idle
//! expiry, header and body timeouts, the tool-call cap and bearer-token authentication.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::http::*;
use serde_json::{json, Value};

/// `queryd` on stdio, with a thread turning its stdout lines into JSON values.
struct StdioServer {
    child: Child,
    stdin: Option<ChildStdin>,
    out: mpsc::Receiver<Value>,
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl StdioServer {
    fn start(index: &std::path::Path, extra: &[&str]) -> StdioServer {
        let mut child = Command::new(BIN)
            .arg("--index")
            .arg(index)
            .arg("--model")
            .arg(common::model_dir())
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn queryd");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, out) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.split(b'\n') {
                let Ok(line) = line else { return };
                let v = serde_json::from_slice::<Value>(&line)
                    .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line:?}"));
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        let mut s = StdioServer {
            child,
            stdin: Some(stdin),
            out,
        };
        s.send(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "hardening", "version": "0"}}})
            .to_string()
            .as_bytes(),
        );
        let init = s.next();
        assert_eq!(init["id"], 0, "{init}");
        assert!(init["result"]["serverInfo"].is_object(), "{init}");
        s.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        s
    }

    fn send(&mut self, line: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn next(&self) -> Value {
        self.out
            .recv_timeout(Duration::from_secs(60))
            .expect("an answer within 60 s")
    }
}

fn call_line(id: Value, name: &str, arguments: Value) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}})
    .to_string()
    .into_bytes()
}

#[test]
fn stdio_answers_every_bad_line_and_keeps_serving() {
    let ix = common::indexed_fixture();
    let mut s = StdioServer::start(&ix.index, &["--max-line-bytes", "65536"]);
    let mut expect: Vec<(Value, i64)> = Vec::new();

    s.send(b"garbage {");
    expect.push((Value::Null, -32700));
    s.send(
        br#"{"jsonrpc":"2.0","id":21,"method":"tools/call","params":{"name":"search_code","arguments":{"query":"\ud800"}}}"#,
    );
    expect.push((json!(21), -32700));
    let mut raw = br#"{"jsonrpc":"2.0","id":"r-22","method":"tools/call","params":{"name":"search_code","arguments":{"query":""#.to_vec();
    raw.extend_from_slice(b"\xFF\xFE\xFF\"}}}");
    s.send(&raw);
    expect.push((json!("r-22"), -32700));
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":23,"method":"tools/call","params":{{"name":"search_code","arguments":{{"query":{}1{}}}}}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    s.send(deep.as_bytes());
    expect.push((json!(23), -32600));
    // 1 MiB over a 64 KiB limit (the default is 8 MiB): discarded, answered with its id.
    let big = call_line(
        json!(24),
        "search_code",
        json!({"query": "x".repeat(1 << 20)}),
    );
    s.send(&big);
    expect.push((json!(24), -32600));
    for (id, a) in [(25, json!(5)), (26, json!("text")), (27, json!([1, 2]))] {
        s.send(&call_line(json!(id), "search_code", a));
        expect.push((json!(id), -32602));
    }
    s.send(br#"[{"jsonrpc":"2.0","id":28,"method":"ping"}]"#);
    expect.push((Value::Null, -32600));
    s.send(br#"{"jsonrpc":"1.0","id":29,"method":"ping"}"#);
    expect.push((json!(29), -32600));

    let mut got: Vec<(Value, i64)> = (0..expect.len())
        .map(|_| {
            let v = s.next();
            let code = v["error"]["code"].as_i64().unwrap_or_else(|| panic!("{v}"));
            assert!(
                v["error"]["message"].as_str().is_some_and(|m| m.len() > 10),
                "{v}"
            );
            (v["id"].clone(), code)
        })
        .collect();
    let key = |p: &(Value, i64)| (p.0.to_string(), p.1);
    got.sort_by_key(key);
    expect.sort_by_key(key);
    assert_eq!(got, expect);

    // Still serving: a good call after all of that.
    s.send(&call_line(
        json!(30),
        "search_code",
        json!({"query": "levenshtein distance"}),
    ));
    let v = s.next();
    assert_eq!(v["id"], 30, "{v}");
    assert_eq!(v["result"]["isError"], Value::Bool(false), "{v}");
    assert!(!v["result"]["structuredContent"]["results"]
        .as_array()
        .unwrap()
        .is_empty());
    drop(s.stdin.take());
    let t = Instant::now();
    loop {
        if let Some(status) = s.child.try_wait().unwrap() {
            assert!(status.success(), "{status:?}");
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "no exit after EOF");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// 24 calls at once with a cap of 1: each is answered, the ones over the cap at once with a
/// retryable "server busy" tool error; over HTTP with 503 + Retry-After or that tool error.
#[test]
fn calls_over_the_cap_are_answered_busy() {
    let ix = common::indexed_fixture();
    let mut s = StdioServer::start(&ix.index, &["--max-inflight-calls", "1"]);
    let query = "how is the edit distance between two strings computed ".repeat(20);
    for id in 100..124 {
        s.send(&call_line(
            json!(id),
            "search_code",
            json!({"query": query}),
        ));
    }
    let (mut ok, mut busy) = (0, 0);
    for _ in 0..24 {
        let v = s.next();
        let r = &v["result"];
        if r["isError"] == true {
            let body = &r["structuredContent"];
            assert_eq!(body["retryable"], true, "{v}");
            assert!(
                body["error"].as_str().unwrap().contains("server busy"),
                "{v}"
            );
            busy += 1;
        } else {
            assert!(r["structuredContent"]["results"].is_array(), "{v}");
            ok += 1;
        }
    }
    assert!(ok >= 1 && busy >= 1, "{ok} ok, {busy} busy");
    s.send(&call_line(json!(200), "index_status", json!({})));
    assert_eq!(s.next()["result"]["isError"], false);

    let srv = start_http(&ix.index, &["--max-inflight-calls", "1"]);
    let port = srv.port;
    let hs = http_session(port, "busy");
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(12));
    let outcomes: Vec<String> = (0..12)
        .map(|i| {
            let hs = hs.clone();
            let barrier = barrier.clone();
            let query = query.clone();
            std::thread::spawn(move || {
                let h: Vec<(&str, &str)> =
                    hs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                let body =
                    String::from_utf8(call_line(json!(i), "search_code", json!({"query": query})))
                        .unwrap();
                barrier.wait();
                let r = request(port, "POST", "/mcp", &h, &body);
                if r.status == 503 {
                    assert_eq!(r.header("retry-after"), Some("1"));
                    assert!(r.body.contains("server busy"), "{}", r.body);
                    return "503".to_string();
                }
                assert_eq!(r.status, 200, "{}", r.body);
                let m = r.message();
                if m["result"]["isError"] == true {
                    assert_eq!(m["result"]["structuredContent"]["retryable"], true, "{m}");
                    "busy".to_string()
                } else {
                    "ok".to_string()
                }
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    assert!(outcomes.iter().any(|o| o == "ok"), "{outcomes:?}");
    assert!(outcomes.iter().any(|o| o != "ok"), "{outcomes:?}");
}

fn init_body(name: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": name, "version": "0"}}})
    .to_string()
}

#[test]
fn http_caps_sessions_and_closes_idle_ones() {
    let ix = common::indexed_fixture();
    let srv = start_http(
        &ix.index,
        &["--max-sessions", "3", "--session-idle-secs", "1.5"],
    );
    let port = srv.port;
    let sessions: Vec<_> = (0..3)
        .map(|i| http_session(port, &format!("s{i}")))
        .collect();
    let r = request(port, "POST", "/mcp", &[ACCEPT, JSON], &init_body("s3"));
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.header("retry-after").is_some());
    assert!(r.body.contains("--max-sessions"), "{}", r.body);
    // Open sessions keep working at the cap.
    let v = http_call(port, &sessions[0], 2, "index_status", json!({}));
    assert!(v.is_object());
    // Idle sessions are closed: their ids are unknown afterwards, and new sessions fit again.
    std::thread::sleep(Duration::from_millis(3000));
    let h: Vec<(&str, &str)> = sessions[1]
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let r = request(
        port,
        "POST",
        "/mcp",
        &h,
        &String::from_utf8(call_line(json!(3), "index_status", json!({}))).unwrap(),
    );
    assert_eq!(r.status, 404, "{}", r.body);
    for i in 0..3 {
        http_session(port, &format!("again{i}"));
    }
}

/// Reads until the peer closes; the time that took (None if still open after `limit`).
fn closed_within(s: &mut TcpStream, limit: Duration) -> (Option<Duration>, String) {
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let t = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while t.elapsed() < limit {
        match s.read(&mut buf) {
            Ok(0) => return (Some(t.elapsed()), String::from_utf8_lossy(&got).into()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return (Some(t.elapsed()), String::from_utf8_lossy(&got).into()),
        }
    }
    (None, String::from_utf8_lossy(&got).into())
}

#[test]
fn http_cuts_stalled_headers_and_lying_bodies() {
    let ix = common::indexed_fixture();
    let srv = start_http(
        &ix.index,
        &["--header-timeout-secs", "1", "--body-timeout-secs", "1"],
    );
    let port = srv.port;
    // Headers that never end.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: "
    )
    .unwrap();
    let (took, _) = closed_within(&mut s, Duration::from_secs(10));
    let took = took.expect("the server closes a connection with stalled headers");
    assert!(took < Duration::from_secs(4), "{took:?}");
    // A silent connection (no request at all) is closed too.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (took, _) = closed_within(&mut s, Duration::from_secs(10));
    assert!(took.expect("an idle connection is closed") < Duration::from_secs(4));
    // A body shorter than its Content-Length: 408, connection closed.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: {}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{\"jsonrpc\"",
        ACCEPT.1
    )
    .unwrap();
    let (took, reply) = closed_within(&mut s, Duration::from_secs(10));
    let took = took.expect("the server gives up on a lying Content-Length");
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(reply.contains("Content-Length: 100000"), "{reply}");
    // The server still serves.
    let r = request(port, "GET", "/health", &[], "");
    assert_eq!(r.status, 200);
}

#[test]
fn http_token_authentication() {
    let ix = common::indexed_fixture();
    let dir = tempfile::tempdir().unwrap();
    let token = "0123456789abcdef0123456789abcdef";
    let path = dir.path().join("token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let srv = start_http(&ix.index, &["--token-file", path.to_str().unwrap()]);
    let port = srv.port;
    let r = request(port, "GET", "/status", &[], "");
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(
        r.header("www-authenticate"),
        Some(r#"Bearer realm="queryd""#)
    );
    let r = request(
        port,
        "GET",
        "/status",
        &[("Authorization", "Bearer 0123456789abcdef0123456789abcdeX")],
        "",
    );
    assert_eq!(r.status, 401);
    assert!(r
        .header("www-authenticate")
        .unwrap()
        .contains("invalid_token"));
    let bearer = format!("Bearer {token}");
    let auth = ("Authorization", bearer.as_str());
    let r = request(port, "GET", "/status", &[auth], "");
    assert_eq!(r.status, 200, "{}", r.body);
    let r = request(
        port,
        "POST",
        "/mcp",
        &[ACCEPT, JSON],
        &init_body("no-token"),
    );
    assert_eq!(r.status, 401);
    let r = request(port, "POST", "/mcp", &[ACCEPT, JSON, auth], &init_body("t"));
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.message()["result"]["serverInfo"].is_object());
    // Liveness needs no token.
    assert_eq!(request(port, "GET", "/health", &[], "").status, 200);
    // Nor does a browser's CORS preflight from an allowed origin (it never carries one); the
    // request after it does.
    let origin = format!("http://localhost:{port}");
    let preflight = [
        ("Origin", origin.as_str()),
        ("Access-Control-Request-Method", "POST"),
    ];
    let r = request(port, "OPTIONS", "/mcp", &preflight, "");
    assert_eq!(r.status, 204, "{}", r.body);
    let r = request(
        port,
        "POST",
        "/mcp",
        &[ACCEPT, JSON, ("Origin", origin.as_str())],
        &init_body("page"),
    );
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some(origin.as_str())
    );
    // An OPTIONS that is not a preflight still needs the token.
    let r = request(port, "OPTIONS", "/mcp", &[("Origin", origin.as_str())], "");
    assert_eq!(r.status, 401);
    drop(srv);

    // Refused starts: remote without a token, a token file others can read, a short token.
    let start = |extra: &[&str]| {
        let out = Command::new(BIN)
            .arg("--index")
            .arg(&ix.index)
            .arg("--model")
            .arg(common::model_dir())
            .args(extra)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let err = start(&["--http", "0.0.0.0:0", "--allow-remote"]);
    assert!(err.contains("--allow-remote needs --token-file"), "{err}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let p = path.to_str().unwrap();
        let err = start(&["--http", "0", "--token-file", p]);
        assert!(err.contains("chmod 600"), "{err}");
        std::fs::write(&path, "short").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let err = start(&["--http", "0", "--token-file", p]);
        assert!(err.contains("at least 16"), "{err}");
    }
}
