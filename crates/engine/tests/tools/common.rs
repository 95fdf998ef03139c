//! Shared helpers: the real model, a copy of the polyglot fixture, an index built from it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use indexer::build::{build, BuildOptions};
use indexer::progress::Progress;

pub use cix_tests::{copy_dir, encoder, model_dir, workspace_root};

pub fn fixture_copy(parent: &Path) -> PathBuf {
    let repo = parent.join("polyglot");
    copy_dir(&workspace_root().join("tests/fixtures/polyglot"), &repo);
    repo
}

/// Builds (or incrementally rebuilds) the index of `repo` into `out`.
pub fn build_index(repo: &Path, out: &Path) {
    let opts = BuildOptions::new(vec![repo.to_path_buf()], out.to_path_buf());
    build(&opts, encoder(), &Progress::silent())
        .unwrap_or_else(|e| panic!("indexing {} failed: {e}", repo.display()));
}

/// A temporary directory holding a fixture copy and its index.
pub struct Indexed {
    pub tmp: tempfile::TempDir,
    pub repo: PathBuf,
    pub index: PathBuf,
}

pub fn indexed_fixture() -> Indexed {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture_copy(tmp.path());
    let index = tmp.path().join("index");
    build_index(&repo, &index);
    Indexed { tmp, repo, index }
}

/// An engine over `index` as `queryd` runs it: the model, a flush size, the background
/// flusher (no MANIFEST watcher: tests reload explicitly).
pub fn start(index: &Path, flush_at: Option<usize>) -> std::sync::Arc<engine::Engine> {
    let e = std::sync::Arc::new(
        engine::Engine::open(index, &model_dir())
            .unwrap_or_else(|e| panic!("open the engine: {e}")),
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
