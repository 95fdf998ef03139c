//! The code side of the query engine, below the tools: a [`CodeView`] of one index generation
//! (lookups by symbol id, name and path; one code graph across segments), hybrid [`search`]
//! (vector + BM25, filters as bitmaps before ranking, fusion; the name tier and the collapse of
//! duplicate results in [`rank`]) and the query-vector
//! [`EmbedCache`].
//!
//! It reads what `format` wrote and knows nothing of memories, tools, MCP or threads.

pub mod cache;
pub mod rank;
pub mod search;
pub mod view;

pub use cache::{EmbedCache, EMBED_CACHE_ENTRIES};
pub use search::{search, Hit, Mode, SearchOptions};
pub use view::{levenshtein, CodeView, NodeRef};
