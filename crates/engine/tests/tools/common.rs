//! Shared helpers: the real model, a copy of the polyglot fixture, an index built from it.

#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use engine::tools::calls::{FindCalleesArgs, FindCallersArgs};
use engine::tools::common::SymbolRef;
use engine::tools::search::SearchCodeArgs;
use engine::Engine;

pub use cix_tests::{build_index, indexed_fixture, model_dir};

/// An engine over `index`, no background threads.
pub fn engine(index: &Path) -> Arc<Engine> {
    Arc::new(Engine::open(index, &model_dir()).expect("open the engine"))
}

pub fn search(q: &str) -> SearchCodeArgs {
    SearchCodeArgs {
        query: q.into(),
        ..Default::default()
    }
}

pub fn callers(s: &str) -> FindCallersArgs {
    FindCallersArgs {
        symbol: s.into(),
        ..Default::default()
    }
}

pub fn callees(s: &str) -> FindCalleesArgs {
    FindCalleesArgs {
        symbol: s.into(),
        ..Default::default()
    }
}

pub fn names<'a>(it: impl Iterator<Item = &'a SymbolRef>) -> Vec<String> {
    it.map(|s| s.name.clone()).collect()
}

/// An engine over `index` as `queryd` runs it: the model, a flush size, the background
/// flusher (no MANIFEST watcher: tests reload explicitly).
pub fn start(index: &Path, flush_at: Option<usize>) -> Arc<Engine> {
    let e = Arc::new(
        Engine::open(index, &model_dir()).unwrap_or_else(|e| panic!("open the engine: {e}")),
    );
    if let Some(n) = flush_at {
        e.set_flush_at(n);
    }
    e.spawn_flusher();
    e
}

/// Calls a tool through the catalog: `Ok(answer)`, or `Err` with what the agent would read
/// (`{"error", "suggestions"}` for a tool error, `{"protocol": text}` for a protocol error).
pub fn call(
    e: &std::sync::Arc<engine::Engine>,
    name: &str,
    a: serde_json::Value,
) -> Result<serde_json::Value, serde_json::Value> {
    match engine::catalog::call(e, name, a) {
        Ok(v) => Ok(v),
        Err(engine::CallError::Tool(t)) => Err(t.body()),
        Err(other) => Err(serde_json::json!({ "protocol": other.to_string() })),
    }
}

/// The text of a tool error.
pub fn err_text(e: serde_json::Value) -> String {
    e["error"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| e.to_string())
}

/// Every memory, all states, paging through list_memories.
pub fn list_all(c: &std::sync::Arc<engine::Engine>) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let v = call(
            c,
            "list_memories",
            serde_json::json!({"state": "all", "limit": 100, "offset": offset}),
        )
        .unwrap();
        out.extend(v["memories"].as_array().unwrap().iter().cloned());
        match v["next_offset"].as_u64() {
            Some(n) => offset = n,
            None => return out,
        }
    }
}
