//! The query side: hybrid search over the memory-mapped segments of an index, the long-running
//! engine (snapshots swapped on a new MANIFEST, query-embedding cache), the tools, and the MCP
//! server over stdio and streamable HTTP.

pub mod engine;
pub mod http;
pub mod mcp;
pub mod memory;
pub mod metrics;
pub mod reindex;
pub mod search;
pub mod tools;

pub use engine::{Engine, Snapshot};
pub use search::{search, Hit, Mode, SearchOptions};
