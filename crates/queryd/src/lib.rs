//! The protocol side of the query engine: the MCP server (stdio and streamable HTTP) over the
//! engine's tool catalog, the HTTP endpoints (health, metrics, status) with Host/Origin checks,
//! Prometheus metrics, and the hardened stdio line reader in front of rmcp. Everything the tools do lives in the `engine` crate and below.

pub mod http;
pub mod mcp;
pub mod metrics;
pub mod stdio;
