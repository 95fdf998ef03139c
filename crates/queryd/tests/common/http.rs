//! HTTP helpers for tests against a real `queryd --http`: start it, send raw HTTP/1.1
//! requests, open MCP sessions and call tools.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub const BIN: &str = env!("CARGO_BIN_EXE_queryd");

/// A running `queryd --http` child and its port.
pub struct HttpServer {
    pub child: Child,
    pub port: u16,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start_http(index: &std::path::Path, extra: &[&str]) -> HttpServer {
    let mut child = Command::new(BIN)
        .arg("--index")
        .arg(index)
        .arg("--model")
        .arg(super::model_dir())
        .args(["--http", "127.0.0.1:0"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn queryd --http");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let port = loop {
        line.clear();
        if err.read_line(&mut line).unwrap() == 0 {
            panic!("queryd exited before serving HTTP");
        }
        if let Some(rest) = line.split("http://127.0.0.1:").nth(1) {
            break rest.split('/').next().unwrap().parse::<u16>().unwrap();
        }
    };
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    HttpServer { child, port }
}

pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC message of a JSON or SSE body.
    pub fn message(&self) -> Value {
        if let Ok(v) = serde_json::from_str(&self.body) {
            return v;
        }
        self.body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|v| v.get("id").is_some())
            .unwrap_or_else(|| panic!("no JSON-RPC response in {:?}", self.body))
    }
}

pub fn dechunk(raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        let end = raw[i..].windows(2).position(|w| w == b"\r\n")? + i;
        let size =
            usize::from_str_radix(std::str::from_utf8(&raw[i..end]).ok()?.trim(), 16).ok()?;
        i = end + 2;
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(raw.get(i..i + size)?);
        i += size + 2;
    }
}

/// One HTTP/1.1 request; reads until the response is complete (or, for an event stream, until
/// it holds a JSON-RPC response).
pub fn request(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: 127.0.0.1:{port}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 16384];
    let t = Instant::now();
    loop {
        let n = s.read(&mut buf).unwrap_or(0);
        raw.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&raw);
        let done_sse = text.contains("text/event-stream")
            && text.contains("\"id\":")
            && text.contains("data:");
        if n == 0 || done_sse && text.ends_with("\n\n") || t.elapsed() > Duration::from_secs(30) {
            break;
        }
    }
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let rest = &raw[split + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked {
        // A stream cut short still holds whole chunks up to the cut.
        dechunk(rest).unwrap_or_else(|| {
            let t = String::from_utf8_lossy(rest).to_string();
            t.lines()
                .filter(|l| !l.chars().all(|c| c.is_ascii_hexdigit()))
                .collect::<Vec<_>>()
                .join("\n")
                .into_bytes()
        })
    } else {
        rest.to_vec()
    };
    Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&body).to_string(),
    }
}

pub const ACCEPT: (&str, &str) = ("Accept", "application/json, text/event-stream");
pub const JSON: (&str, &str) = ("Content-Type", "application/json");

/// An MCP session over HTTP: its request headers.
pub fn http_session(port: u16, name: &str) -> Vec<(String, String)> {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": name, "version": "0"}}});
    let r = request(port, "POST", "/mcp", &[ACCEPT, JSON], &init.to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    let version = r.message()["result"]["protocolVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut hs = vec![
        (ACCEPT.0.to_string(), ACCEPT.1.to_string()),
        (JSON.0.to_string(), JSON.1.to_string()),
        ("MCP-Protocol-Version".to_string(), version),
    ];
    if let Some(s) = r.header("mcp-session-id") {
        hs.push(("Mcp-Session-Id".to_string(), s.to_string()));
    }
    let h: Vec<(&str, &str)> = hs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let r = request(
        port,
        "POST",
        "/mcp",
        &h,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
    );
    assert!(r.status == 202 || r.status == 200, "{}", r.status);
    hs
}

pub fn http_call(port: u16, hs: &[(String, String)], id: u64, name: &str, a: Value) -> Value {
    let h: Vec<(&str, &str)> = hs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let m = request(
        port,
        "POST",
        "/mcp",
        &h,
        &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": a}})
        .to_string(),
    )
    .message();
    assert!(m["result"]["isError"] != true, "{name}: {m:#}");
    m["result"]["structuredContent"].clone()
}
