//! Every tool as a plain typed function on [`crate::Engine`], grouped by family: arguments in
//! (serde + JSON schema), serialisable answers out. The catalog ([`crate::catalog`]) lists them;
//! the protocol layer only routes and converts.
//!
//! Every tool takes `debug`; then the answer carries [`common::Debug`], the time per phase.

pub mod calls;
pub mod code_links;
pub mod common;
pub mod duplicates;
pub mod graph;
pub mod memory;
pub mod reindex;
pub mod relations;
pub mod search;
pub mod status;
pub mod symbols;
