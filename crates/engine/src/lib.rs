//! The engine: the API boundary of the query side. It owns the [`Engine`] (the current
//! [`Snapshot`] of code and memories behind one `ArcSwap`, reload and the MANIFEST watcher, the
//! writer lock and the background flusher, re-index jobs) and every tool as a plain typed
//! function on it, grouped by family under [`tools`], listed once in the [`catalog`].
//!
//! It knows nothing of MCP, JSON-RPC, HTTP, tokio or Prometheus: `queryd` speaks those and
//! calls [`catalog::call`]. Below it, `code` (the code view and hybrid search) and `memory`
//! (the log, the delta, memory search and graph, code references) return typed errors;
//! [`tools::common::ToolError`] exists only here.

pub mod catalog;
pub mod engine;
pub mod integrity;
pub mod jobs;
pub mod snapshot;
pub mod tools;
pub mod verify;
pub mod watch;

pub use catalog::{CallError, ToolSpec, CATALOG};
pub use engine::{Engine, OpenError, ReloadFailure, WATCH_INTERVAL};
pub use snapshot::Snapshot;
pub use tools::common::{Debug, ToolError, ToolResult};
