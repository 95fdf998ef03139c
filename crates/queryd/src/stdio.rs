//! MCP over stdio, hardened: a bounded line reader in front of rmcp. Every line from stdin is
//! checked by [`check_line`] (a pure function, fuzzed in the tests below); good lines go on to
//! rmcp through an in-process pipe, bad ones are answered here with a JSON-RPC error
//! (`-32700` parse error, `-32600` invalid request, `-32602` invalid params) carrying the
//! request's id when one can be recovered (`null` otherwise), and logged on stderr. A line
//! longer than the limit is discarded up to its newline without being buffered whole and
//! answered `-32600`. Every line written to stdout (rmcp's answers and ours) goes through one
//! writer task, so answers never interleave. The server keeps serving after every bad line.

use std::io;

use rmcp::model::{CallToolRequestParams, ClientJsonRpcMessage, InitializeRequestParams};
use rmcp::ServiceExt;
use serde_json::{Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::mcp::Server;

/// Default cap on one stdin line (one JSON-RPC message), in bytes.
pub const DEFAULT_MAX_LINE_BYTES: usize = 8 * 1024 * 1024;
/// Deepest accepted nesting of arrays and objects in one message (MCP messages are shallow).
pub const MAX_DEPTH: usize = 64;

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const INVALID_PARAMS: i64 = -32602;

/// Why a line is not passed on: the JSON-RPC error to answer it with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    /// The request's id when it could be recovered (a string or an integer), else `null`.
    pub id: Value,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>, id: Value) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            id,
        }
    }

    /// The JSON-RPC error response, one line (with its newline).
    pub fn to_line(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec(&serde_json::json!({
            "jsonrpc": "2.0",
            "id": self.id,
            "error": {"code": self.code, "message": self.message},
        }))
        .unwrap_or_default();
        v.push(b'\n');
        v
    }
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Checks one line (without or with its `\n`) before it reaches rmcp: valid UTF-8, JSON nested
/// at most [`MAX_DEPTH`] deep, one object with `"jsonrpc": "2.0"`, an id that is a string or an
/// integer, a string `method` (or a `result`/`error`: a response), object `params`, and for
/// `initialize` / `tools/call` params of the right shape (`arguments` an object). `Ok` for a
/// blank line too (rmcp skips those). Never panics, whatever the bytes.
pub fn check_line(line: &[u8]) -> Result<(), RpcError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(BOM).unwrap_or(line);
    let text = std::str::from_utf8(line).map_err(|e| {
        RpcError::new(
            PARSE_ERROR,
            format!(
                "parse error: the message is not valid UTF-8 (bad byte at offset {}); send UTF-8 JSON",
                e.valid_up_to()
            ),
            recover_id(line),
        )
    })?;
    if text.trim().is_empty() {
        return Ok(());
    }
    if let Some(at) = too_deep(line, MAX_DEPTH) {
        return Err(RpcError::new(
            INVALID_REQUEST,
            format!("invalid request: nested deeper than {MAX_DEPTH} levels (at byte {at})"),
            recover_id(line),
        ));
    }
    let v: Value = serde_json::from_str(text).map_err(|e| {
        RpcError::new(
            PARSE_ERROR,
            format!("parse error: {e}; send one JSON-RPC message per line"),
            recover_id(line),
        )
    })?;
    let obj = match &v {
        Value::Object(o) => o,
        Value::Array(_) => {
            return Err(RpcError::new(
                INVALID_REQUEST,
                "invalid request: batches (JSON arrays) are not supported; send one JSON-RPC \
                 object per line",
                Value::Null,
            ))
        }
        _ => {
            return Err(RpcError::new(
                INVALID_REQUEST,
                "invalid request: expected a JSON-RPC object",
                Value::Null,
            ))
        }
    };
    let id = match obj.get("id") {
        None => None,
        Some(v @ Value::String(_)) => Some(v.clone()),
        Some(Value::Number(n)) if n.is_i64() => Some(Value::Number(n.clone())),
        Some(_) => {
            return Err(RpcError::new(
                INVALID_REQUEST,
                "invalid request: `id` must be a string or an integer",
                Value::Null,
            ))
        }
    };
    let idv = id.clone().unwrap_or(Value::Null);
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(RpcError::new(
            INVALID_REQUEST,
            "invalid request: `jsonrpc` must be \"2.0\"",
            idv,
        ));
    }
    match obj.get("method") {
        Some(Value::String(method)) => {
            if id.is_none() {
                // A notification: never answered; rmcp decides what to do with it.
                return Ok(());
            }
            check_params(method, obj).map_err(|m| RpcError::new(INVALID_PARAMS, m, idv.clone()))?;
            serde_json::from_str::<ClientJsonRpcMessage>(text)
                .map(|_| ())
                .map_err(|e| RpcError::new(INVALID_REQUEST, format!("invalid request: {e}"), idv))
        }
        Some(_) => Err(RpcError::new(
            INVALID_REQUEST,
            "invalid request: `method` must be a string",
            idv,
        )),
        None if obj.contains_key("result") || obj.contains_key("error") => Ok(()),
        None => Err(RpcError::new(
            INVALID_REQUEST,
            "invalid request: a message needs a `method` (request, notification) or a \
             `result`/`error` (response)",
            idv,
        )),
    }
}

/// Params of a request: an object (or absent); for the methods whose shape rmcp would otherwise
/// misread (a wrong `tools/call` would fall through to "method not found"), the exact shape.
fn check_params(method: &str, obj: &Map<String, Value>) -> Result<(), String> {
    let params = obj.get("params").filter(|p| !p.is_null());
    if let Some(p) = params {
        if !p.is_object() {
            return Err(format!(
                "invalid params: `params` of `{method}` must be an object"
            ));
        }
    }
    let fit = |r: Result<(), serde_json::Error>| {
        r.map_err(|e| format!("invalid params for `{method}`: {e}"))
    };
    match (method, params) {
        ("tools/call", None) => Err(
            "invalid params for `tools/call`: missing `params` ({\"name\", \"arguments\"})".into(),
        ),
        ("tools/call", Some(p)) => {
            if let Some(a) = p.get("arguments").filter(|a| !a.is_null()) {
                if !a.is_object() {
                    return Err(
                        "invalid params for `tools/call`: `arguments` must be an object (the \
                         tool's named arguments)"
                            .into(),
                    );
                }
            }
            fit(serde_json::from_value::<CallToolRequestParams>(p.clone()).map(|_| ()))
        }
        ("initialize", None) => Err("invalid params for `initialize`: missing `params`".into()),
        ("initialize", Some(p)) => {
            fit(serde_json::from_value::<InitializeRequestParams>(p.clone()).map(|_| ()))
        }
        _ => Ok(()),
    }
}

/// The byte offset where nesting first exceeds `limit`, if it does (strings are skipped).
fn too_deep(b: &[u8], limit: usize) -> Option<usize> {
    let (mut depth, mut in_str, mut esc) = (0usize, false, false);
    for (i, &c) in b.iter().enumerate() {
        if in_str {
            match (esc, c) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            b'"' => in_str = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return Some(i);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// The top-level `"id"` of a message that may be broken elsewhere (invalid UTF-8 in a string,
/// a lone surrogate, cut short): a string or integer id read by a tolerant scan, else `null`.
pub fn recover_id(b: &[u8]) -> Value {
    let mut s = Scan { b, i: 0 };
    s.ws();
    if !s.eat(b'{') {
        return Value::Null;
    }
    loop {
        s.ws();
        let Some(key) = s.string() else {
            return Value::Null;
        };
        s.ws();
        if !s.eat(b':') {
            return Value::Null;
        }
        s.ws();
        if key == b"id" {
            return s.id_value().unwrap_or(Value::Null);
        }
        if !s.skip_value() {
            return Value::Null;
        }
        s.ws();
        if !s.eat(b',') {
            return Value::Null;
        }
    }
}

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scan<'a> {
    fn ws(&mut self) {
        while self.b.get(self.i).is_some_and(|c| c.is_ascii_whitespace()) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    /// A string's raw bytes (between the quotes, escapes left as they are).
    fn string(&mut self) -> Option<&'a [u8]> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.i;
        let mut esc = false;
        while let Some(&c) = self.b.get(self.i) {
            self.i += 1;
            match (esc, c) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => return Some(&self.b[start..self.i - 1]),
                _ => {}
            }
        }
        None
    }

    fn id_value(&mut self) -> Option<Value> {
        match self.b.get(self.i)? {
            b'"' => {
                let start = self.i;
                self.string()?;
                let raw = std::str::from_utf8(&self.b[start..self.i]).ok()?;
                serde_json::from_str::<Value>(raw).ok()
            }
            b'-' | b'0'..=b'9' => {
                let start = self.i;
                while self
                    .b
                    .get(self.i)
                    .is_some_and(|c| c.is_ascii_digit() || b"-+.eE".contains(c))
                {
                    self.i += 1;
                }
                let n: i64 = std::str::from_utf8(&self.b[start..self.i])
                    .ok()?
                    .parse()
                    .ok()?;
                Some(Value::from(n))
            }
            _ => None,
        }
    }

    /// Skips one value (of any kind, however broken inside its strings); false at the end.
    fn skip_value(&mut self) -> bool {
        let mut depth = 0usize;
        loop {
            let Some(&c) = self.b.get(self.i) else {
                return false;
            };
            match c {
                b'"' => {
                    if self.string().is_none() {
                        return false;
                    }
                    if depth == 0 {
                        return true;
                    }
                    continue;
                }
                b'[' | b'{' => depth += 1,
                b']' | b'}' if depth == 0 => return true,
                b']' | b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        self.i += 1;
                        return true;
                    }
                }
                b',' if depth == 0 => return true,
                _ => {}
            }
            self.i += 1;
        }
    }
}

/// Serves MCP on `input`/`output` (stdin/stdout) until `input` ends: each line checked, good
/// ones handed to rmcp, bad ones answered here; lines over `max_line` bytes discarded.
pub async fn serve<R, W>(server: Server, input: R, output: W, max_line: usize) -> io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    const PIPE: usize = 256 * 1024;
    let (to_rmcp, rmcp_in) = tokio::io::duplex(PIPE);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(PIPE);
    let (tx, rx) = mpsc::channel::<Vec<u8>>(64);
    let writer = tokio::spawn(write_lines(rx, output));
    let forward = tokio::spawn(forward_lines(from_rmcp, tx.clone()));
    let reader = tokio::spawn(read_lines(input, to_rmcp, tx, max_line));
    let served = match server.serve((rmcp_in, rmcp_out)).await {
        Ok(running) => running
            .waiting()
            .await
            .map(|_| ())
            .map_err(|e| io::Error::other(format!("serving MCP on stdio: {e}"))),
        Err(e) => Err(io::Error::other(format!("starting MCP on stdio: {e}"))),
    };
    reader.abort();
    // Every answer queued so far reaches stdout before we return (bounded: a client that
    // stopped reading stdout does not hold the shutdown).
    let grace = std::time::Duration::from_secs(5);
    let _ = tokio::time::timeout(grace, forward).await;
    let _ = tokio::time::timeout(grace, writer).await;
    served
}

async fn write_lines<W: AsyncWrite + Unpin>(mut rx: mpsc::Receiver<Vec<u8>>, mut out: W) {
    while let Some(line) = rx.recv().await {
        if out.write_all(&line).await.is_err() || out.flush().await.is_err() {
            return;
        }
    }
}

/// rmcp's output, whole lines at a time, into the writer's queue.
async fn forward_lines<R: AsyncRead + Unpin>(from_rmcp: R, tx: mpsc::Sender<Vec<u8>>) {
    let mut r = BufReader::new(from_rmcp);
    loop {
        let mut line = Vec::new();
        match r.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if !line.ends_with(b"\n") {
                    line.push(b'\n');
                }
                if tx.send(line).await.is_err() {
                    return;
                }
            }
        }
    }
}

fn log_rejected(len: usize, e: &RpcError) {
    let msg: String = e.message.chars().take(300).collect();
    eprintln!(
        "queryd: stdio: answered a bad line ({len} bytes, id {}) with {}: {msg}",
        e.id, e.code
    );
}

async fn read_lines<R, W>(input: R, mut to_rmcp: W, tx: mpsc::Sender<Vec<u8>>, max_line: usize)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut r = BufReader::with_capacity(64 * 1024, input);
    let mut line: Vec<u8> = Vec::new();
    // Set while the rest of an oversized line is skipped: its length so far and its id.
    let mut discarding: Option<(usize, Value)> = None;
    loop {
        let (consumed, ended, eof) = {
            let buf = match r.fill_buf().await {
                Ok(b) => b,
                Err(e) => {
                    eprintln!("queryd: stdio: reading stdin failed: {e}");
                    return;
                }
            };
            if buf.is_empty() {
                (0, true, true)
            } else {
                let nl = buf.iter().position(|&c| c == b'\n');
                let take = nl.map_or(buf.len(), |i| i + 1);
                let body = nl.map_or(take, |i| i);
                match &mut discarding {
                    Some((n, _)) => *n += body,
                    None if line.len() + body > max_line => {
                        line.extend_from_slice(&buf[..body.min(max_line - line.len())]);
                        discarding = Some((line.len() + body, recover_id(&line)));
                        line = Vec::new();
                    }
                    None => line.extend_from_slice(&buf[..body]),
                }
                (take, nl.is_some(), false)
            }
        };
        r.consume(consumed);
        if !ended {
            continue;
        }
        if let Some((n, id)) = discarding.take() {
            let e = RpcError::new(
                INVALID_REQUEST,
                format!(
                    "invalid request: the message is longer than {max_line} bytes (the \
                     --max-line-bytes limit) and was discarded"
                ),
                id,
            );
            log_rejected(n, &e);
            if tx.send(e.to_line()).await.is_err() {
                return;
            }
        } else if !line.iter().all(|c| c.is_ascii_whitespace()) {
            match check_line(&line) {
                Ok(()) => {
                    line.push(b'\n');
                    if to_rmcp.write_all(&line).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    log_rejected(line.len(), &e);
                    if tx.send(e.to_line()).await.is_err() {
                        return;
                    }
                }
            }
        }
        line.clear();
        if eof {
            let _ = to_rmcp.shutdown().await;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(line: &str) -> RpcError {
        check_line(line.as_bytes()).expect_err(line)
    }

    const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    const CALL: &str = r#"{"jsonrpc":"2.0","id":"c-7","method":"tools/call","params":{"name":"search_code","arguments":{"query":"parse"}}}"#;

    #[test]
    fn good_lines_pass() {
        for l in [
            INIT,
            CALL,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"ping","params":null}"#,
            r#"{"jsonrpc":"2.0","id":4,"result":{}}"#,
            "",
            "   \r\n",
        ] {
            assert_eq!(check_line(l.as_bytes()), Ok(()), "{l}");
        }
    }

    #[test]
    fn bad_lines_get_the_right_code_and_id() {
        let e = err("garbage");
        assert_eq!((e.code, e.id.clone()), (PARSE_ERROR, Value::Null));
        let e =
            err(r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"x\ud800"}}"#);
        assert_eq!((e.code, e.id.clone()), (PARSE_ERROR, json!(9)), "{e}");
        let mut raw = br#"{"jsonrpc":"2.0","id":"a\"b","method":"x","params":{"q":""#.to_vec();
        raw.extend_from_slice(b"\xFF\xFE\"}}");
        let e = check_line(&raw).unwrap_err();
        assert_eq!((e.code, e.id.clone()), (PARSE_ERROR, json!("a\"b")));
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":5,"method":"x","params":{{"a":{}{}}}}}"#,
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        let e = err(&deep);
        assert_eq!((e.code, e.id.clone()), (INVALID_REQUEST, json!(5)));
        assert_eq!(err("[1,2]").code, INVALID_REQUEST);
        assert_eq!(err("42").code, INVALID_REQUEST);
        let e = err(r#"{"jsonrpc":"1.0","id":2,"method":"ping"}"#);
        assert_eq!((e.code, e.id.clone()), (INVALID_REQUEST, json!(2)));
        let e = err(r#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#);
        assert_eq!((e.code, e.id.clone()), (INVALID_REQUEST, Value::Null));
        let e = err(r#"{"jsonrpc":"2.0","id":2,"method":7}"#);
        assert_eq!(e.code, INVALID_REQUEST);
        let e = err(r#"{"jsonrpc":"2.0","id":2}"#);
        assert_eq!(e.code, INVALID_REQUEST);
        for a in ["5", "\"text\"", "[1]", "true"] {
            let l = format!(
                r#"{{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{{"name":"search_code","arguments":{a}}}}}"#
            );
            let e = err(&l);
            assert_eq!((e.code, e.id.clone()), (INVALID_PARAMS, json!(11)), "{l}");
            assert!(e.message.contains("`arguments` must be an object"), "{e}");
        }
        let e = err(r#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"arguments":{}}}"#);
        assert_eq!((e.code, e.id.clone()), (INVALID_PARAMS, json!(12)));
        let e = err(r#"{"jsonrpc":"2.0","id":13,"method":"tools/call","params":[1]}"#);
        assert_eq!(e.code, INVALID_PARAMS);
        let e = err(r#"{"jsonrpc":"2.0","id":14,"method":"initialize","params":{}}"#);
        assert_eq!((e.code, e.id.clone()), (INVALID_PARAMS, json!(14)));
        // Each answer is one JSON line a client can parse.
        let line = e.to_line();
        assert_eq!(line.iter().filter(|&&c| c == b'\n').count(), 1);
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["error"]["code"], INVALID_PARAMS);
        assert_eq!(v["id"], 14);
    }

    #[test]
    fn ids_are_recovered_from_broken_messages() {
        assert_eq!(recover_id(br#"{"id": 12, "x"#), json!(12));
        assert_eq!(recover_id(br#"{"a":{"id":3},"id":"k"}"#), json!("k"));
        assert_eq!(recover_id(br#"{"a":"}\"","id":-4}"#), json!(-4));
        assert_eq!(recover_id(br#"{"a":[1,{"b":2}],"id":7"#), json!(7));
        assert_eq!(recover_id(b"{\"method\":\"\xFF\",\"id\":8}"), json!(8));
        assert_eq!(recover_id(br#"{"id":1.5}"#), Value::Null);
        assert_eq!(recover_id(br#"{"id":{"a":1}}"#), Value::Null);
        assert_eq!(recover_id(b"garbage"), Value::Null);
        assert_eq!(recover_id(br#"{"x":[[[["#), Value::Null);
    }

    /// A seeded mutation loop (no proptest): byte flips, inserts, deletes, truncations and
    /// splices of valid and invalid seeds. `check_line` must never panic, every error must
    /// carry a JSON-RPC code and a string/integer/null id, and what passes must be JSON.
    #[test]
    fn check_line_never_panics_on_mutations() {
        let seeds: Vec<Vec<u8>> = [
            INIT,
            CALL,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"cursor":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"s","arguments":[1]}}"#,
            r#"{"jsonrpc":"2.0","id":4,"result":{"x":[1,2,{"y":"\u00e9"}]}}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
            "\"\\ud800\"",
            "{{{{[[[[",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        let alphabet =
            b"{}[]\":,\\ud800\xFF\xC3\x00 \n\r0123456789-eE.tnfaluridjsonrpcmethodparams";
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut passed, mut failed) = (0, 0);
        for _ in 0..20_000 {
            let mut b = seeds[next() as usize % seeds.len()].clone();
            for _ in 0..=(next() % 4) {
                let pos = if b.is_empty() {
                    0
                } else {
                    next() as usize % (b.len() + 1)
                };
                let c = alphabet[next() as usize % alphabet.len()];
                match next() % 6 {
                    0 if pos < b.len() => b[pos] = c,
                    1 => b.insert(pos, c),
                    2 if pos < b.len() => {
                        b.remove(pos);
                    }
                    3 => b.truncate(pos),
                    4 => {
                        let other = &seeds[next() as usize % seeds.len()];
                        let at = next() as usize % (other.len() + 1);
                        b.splice(pos..pos, other[at..].iter().copied());
                    }
                    _ => b.insert(pos, b'['),
                }
            }
            match check_line(&b) {
                Ok(()) => {
                    passed += 1;
                    let t = std::str::from_utf8(&b).expect("passed lines are UTF-8");
                    let t = t.trim_start_matches('\u{feff}');
                    assert!(
                        t.trim().is_empty() || serde_json::from_str::<Value>(t).is_ok(),
                        "{t:?}"
                    );
                }
                Err(e) => {
                    failed += 1;
                    assert!(
                        [PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS].contains(&e.code),
                        "{e:?}"
                    );
                    assert!(e.id.is_null() || e.id.is_string() || e.id.is_i64(), "{e:?}");
                    serde_json::from_slice::<Value>(&e.to_line()).expect("answer is JSON");
                }
            }
        }
        assert!(
            passed > 100 && failed > 1000,
            "{passed} passed, {failed} failed"
        );
    }
}
