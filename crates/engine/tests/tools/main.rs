//! The engine's tools in-process, one module per tool family, in one test binary (one link of
//! burn and FAISS instead of one per file): code search and symbols, snapshots, the memory
//! graph, code links, re-index jobs, concurrency, and the tool catalog. Everything runs on
//! indexes of the polyglot fixture built with the real model.

mod common;

mod callers_cases;
mod catalog;
mod code_links;
mod code_tools;
mod integrity;
mod jobs;
mod memory_concurrency;
mod memory_context;
mod memory_graph;
mod snapshots;
