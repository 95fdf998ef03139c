//! A minimal MCP client over a child process's stdio (newline-delimited JSON-RPC spoken by
//! hand: no client library), shared by the crash harness and the corpus benchmark. Only `std`
//! and `serde_json`.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{json, Value};

pub struct StdioClient {
    pub child: Child,
    stdin: ChildStdin,
    out: BufReader<ChildStdout>,
    next: u64,
}

impl StdioClient {
    /// Spawns `cmd` (stdin and stdout piped, stderr dropped) and completes the MCP handshake
    /// as client `name`.
    pub fn start(cmd: &mut Command, name: &str) -> Result<StdioClient, String> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawn {:?}: {e}", cmd.get_program()))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let out = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut s = StdioClient {
            child,
            stdin,
            out,
            next: 1,
        };
        s.request(
            "initialize",
            json!({"protocolVersion": "2025-03-26", "capabilities": {},
                   "clientInfo": {"name": name, "version": "0"}}),
        )?;
        s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(s)
    }

    pub fn send(&mut self, v: &Value) -> Result<(), String> {
        let mut line = serde_json::to_vec(v).expect("json");
        line.push(b'\n');
        self.stdin
            .write_all(&line)
            .and_then(|_| self.stdin.flush())
            .map_err(|e| format!("send: {e}"))
    }

    /// Sends a request and waits for its response (`Err` when the server died first).
    pub fn request(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next;
        self.next += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        let mut line = String::new();
        loop {
            line.clear();
            match self.out.read_line(&mut line) {
                Ok(0) => return Err("server closed its output".into()),
                Ok(_) => {}
                Err(e) => return Err(format!("read: {e}")),
            }
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if v["id"] != json!(id) {
                continue; // a notification or a request from the server
            }
            if let Some(e) = v.get("error") {
                return Err(format!("protocol error: {e}"));
            }
            return Ok(v["result"].clone());
        }
    }

    /// A tool call: `Ok(structured content)`, `Err` for a tool error or a dead server.
    pub fn call(&mut self, tool: &str, args: Value) -> Result<Value, String> {
        let r = self.request("tools/call", json!({"name": tool, "arguments": args}))?;
        if r["isError"] == json!(true) {
            return Err(format!("tool error: {}", r["structuredContent"]));
        }
        Ok(r["structuredContent"].clone())
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill(); // SIGKILL on Unix
        let _ = self.child.wait();
    }
}
