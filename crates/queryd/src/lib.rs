//! The query side: hybrid search over the memory-mapped segments of an index.
//!
//! Today this is the library behind `queryd search`; the MCP server, snapshots that swap on a
//! new MANIFEST, and the live delta segment build on it.

pub mod search;

pub use search::{search, Hit, Mode, SearchOptions};
