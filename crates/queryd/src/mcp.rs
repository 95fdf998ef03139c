//! The MCP server (`rmcp`): `tools/list` and `call_tool`, both straight from the engine's tool
//! catalog ([`engine::catalog`]). A call parses nothing itself: it runs the catalog entry on a
//! blocking thread against the current snapshot and returns compact JSON (as text content and
//! as structured content).
//!
//! Errors: an unknown tool or arguments that do not fit the schema (wrong types, unknown or
//! missing fields) are protocol errors (`-32602 invalid params`); input the tool can judge (an
//! empty or oversized query, an unknown symbol) is a tool error (`isError: true`) whose text the
//! agent sees, with suggestions. Neither stops the server.
//!
//! Backpressure: at most `max_calls` tool calls run at once (stdio and every HTTP session
//! share the cap). A call beyond it is not queued: it gets a tool error at once
//! (`isError: true`, "server busy ... retry", `"retryable": true`), and over HTTP a 503 with
//! `Retry-After` when the cap is already full as the request arrives.

use std::sync::Arc;
use std::time::Instant;

use engine::catalog::{self, CallError, CATALOG, INSTRUCTIONS};
use engine::{Engine, ToolError};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::metrics::Metrics;

/// The tool list with descriptions and input schemas, in catalog order.
pub fn tools() -> Vec<Tool> {
    CATALOG
        .iter()
        .map(|t| Tool::new(t.name, t.description(), t.input_schema()))
        .collect()
}

/// rmcp's `CallToolResult::structured` (or `structured_error`): `v` as structured content and,
/// for clients that read only text, as one text block. rmcp writes that text with `Value`'s
/// `Display`, which feeds serde_json's output through `fmt` a token at a time; the same bytes
/// from `serde_json::to_string` took 22-31 µs instead of 40-48 µs for a 10-hit `search_code`
/// answer (19.5 KB on the wire) over tokio's index.
fn structured(v: Value, is_error: bool) -> CallToolResult {
    let text = serde_json::to_string(&v).unwrap_or_else(|_| v.to_string());
    let mut r = if is_error {
        CallToolResult::structured_error(Value::Null)
    } else {
        CallToolResult::structured(Value::Null)
    };
    r.content = vec![ContentBlock::text(text)];
    r.structured_content = Some(v);
    r
}

/// Default cap on tool calls running at once.
pub const DEFAULT_MAX_CALLS: usize = 16;

/// The MCP service: cheap to clone (one per HTTP session).
#[derive(Clone)]
pub struct Server {
    pub engine: Arc<Engine>,
    pub metrics: Arc<Metrics>,
    calls: Arc<Semaphore>,
    max_calls: usize,
}

impl Server {
    pub fn new(engine: Arc<Engine>, metrics: Arc<Metrics>) -> Server {
        Server::with_max_calls(engine, metrics, DEFAULT_MAX_CALLS)
    }

    /// A server that runs at most `max_calls` (at least 1) tool calls at once.
    pub fn with_max_calls(engine: Arc<Engine>, metrics: Arc<Metrics>, max_calls: usize) -> Server {
        let max_calls = max_calls.max(1);
        Server {
            engine,
            metrics,
            calls: Arc::new(Semaphore::new(max_calls)),
            max_calls,
        }
    }

    /// Whether every tool-call slot is taken right now.
    pub fn busy(&self) -> bool {
        self.calls.available_permits() == 0
    }

    /// The answer to a call over the cap: a retryable tool error.
    pub fn busy_message(&self) -> String {
        format!(
            "server busy: {} tool calls are already running (the --max-inflight-calls cap); \
             retry in a moment",
            self.max_calls
        )
    }

    /// Runs a tool by name on already-parsed JSON arguments. `Err` is a protocol error (unknown
    /// tool, arguments that do not fit the schema); `Ok(Err)` a tool error.
    pub fn dispatch(&self, name: &str, args: Value) -> Result<Result<Value, ToolError>, ErrorData> {
        match catalog::call(&self.engine, name, args) {
            Ok(v) => Ok(Ok(v)),
            Err(CallError::Tool(e)) => Ok(Err(e)),
            Err(e) => Err(ErrorData::invalid_params(e.to_string(), None)),
        }
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("cix-queryd", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let t = Instant::now();
        let name = request.name.to_string();
        let Ok(permit) = self.calls.clone().try_acquire_owned() else {
            self.metrics.record_call(&name, "busy", t.elapsed());
            return Ok(CallToolResponse::from(structured(
                serde_json::json!({"error": self.busy_message(), "retryable": true}),
                true,
            )));
        };
        let args = Value::Object(request.arguments.unwrap_or_default());
        let this = self.clone();
        let n = name.clone();
        let r = tokio::task::spawn_blocking(move || {
            // The slot is held until the work is done, even when the client has gone.
            let _permit = permit;
            this.dispatch(&n, args)
        })
        .await
        .map_err(|e| ErrorData::internal_error(format!("the tool `{name}` failed: {e}"), None))?;
        let (outcome, out) = match r {
            Err(e) => ("invalid_input", Err(e)),
            Ok(Ok(v)) => ("ok", Ok(structured(v, false))),
            Ok(Err(e)) => (e.outcome(), Ok(structured(e.body(), true))),
        };
        self.metrics.record_call(&name, outcome, t.elapsed());
        out.map(CallToolResponse::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text block holds the same bytes rmcp's own constructors write, for answers with
    /// escapes, non-ASCII text, numbers of every kind and nesting; only the writer differs.
    #[test]
    fn structured_results_equal_rmcps() {
        let answers = [
            serde_json::json!({"results": [{"snippet": "fn f() {\n    \"q\\\" \u{7}\t é 😀\n}", "score": 0.1234, "line": 17, "neg": -3, "big": 1e300, "tiny": 5e-324}], "debug": {"total_ms": 0.5, "ok": true, "none": null}}),
            serde_json::json!([]),
            serde_json::json!("just a string \u{0}"),
            serde_json::json!({"error": "server busy", "retryable": true}),
        ];
        for v in answers {
            for is_error in [false, true] {
                let ours = structured(v.clone(), is_error);
                let theirs = if is_error {
                    CallToolResult::structured_error(v.clone())
                } else {
                    CallToolResult::structured(v.clone())
                };
                assert_eq!(ours, theirs);
                assert_eq!(
                    serde_json::to_string(&ours).unwrap(),
                    serde_json::to_string(&theirs).unwrap()
                );
            }
        }
    }
}
