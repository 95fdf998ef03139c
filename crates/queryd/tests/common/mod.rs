//! Shared helpers: the real model, a copy of the polyglot fixture, an index built from it (all
//! from the workspace's `cix-tests` library; each test binary uses some of them).

#![allow(unused_imports, dead_code)]

pub use cix_tests::{encoder, indexed_fixture, model_dir};

pub mod http;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};

/// An MCP client of a `queryd` child process over stdio.
pub type Client = RunningService<RoleClient, ()>;

/// Starts `queryd` on `index` (no watcher) with `extra` flags; returns the client and its pid.
pub async fn spawn_queryd(index: &std::path::Path, extra: &[&str]) -> (Client, u32) {
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    let transport = TokioChildProcess::new(
        tokio::process::Command::new(env!("CARGO_BIN_EXE_queryd")).configure(|c| {
            c.arg("--index")
                .arg(index)
                .arg("--model")
                .arg(model_dir())
                .arg("--no-watch")
                .args(&extra);
        }),
    )
    .expect("spawn queryd");
    let pid = transport.id().expect("child pid");
    let client = ().serve(transport).await.expect("MCP handshake over stdio");
    (client, pid)
}

/// Calls a tool: `Ok(structured answer)`, `Err(tool error body)` or `Err({"protocol": text})`.
pub async fn call_tool(c: &Client, name: &str, a: Value) -> Result<Value, Value> {
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
