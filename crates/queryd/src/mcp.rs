//! The MCP server (`rmcp`): the tool list with JSON schemas, and `call_tool`, which parses the
//! arguments, runs the tool on a blocking thread against the current snapshot and returns
//! compact JSON (as text content and as structured content).
//!
//! Errors: an unknown tool or arguments that do not fit the schema (wrong types, unknown or
//! missing fields) are protocol errors (`-32602 invalid params`); input the tool can judge (an
//! empty or oversized query, an unknown symbol) is a tool error (`isError: true`) whose text the
//! agent sees, with suggestions. Neither stops the server.

use std::sync::Arc;
use std::time::Instant;

use rmcp::handler::server::common::schema_for_type;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::engine::Engine;
use crate::memory::code_tools::{CheckStalenessArgs, MemoriesForCodeArgs};
use crate::memory::graph_tools::{
    GraphAggregateArgs, GraphEntityNetworkArgs, GraphPathArgs, GraphRelatedArgs, GraphSimilarArgs,
    GraphSubgraphArgs, GraphTagCooccurrenceArgs,
};
use crate::memory::tools::{
    AddMemoriesArgs, DeleteMemoriesArgs, GetMemoryArgs, ListMemoriesArgs, SearchMemoryArgs,
    UpdateMemoryArgs,
};
use crate::metrics::Metrics;
use crate::reindex::{JobStatusArgs, ReindexArgs};
use crate::tools::{
    CallArgs, DuplicatesArgs, ImpactArgs, SearchCodeArgs, StatusArgs, SymbolArgs, ToolError,
};

/// Every tool, in the order `tools/list` gives them.
pub const TOOL_NAMES: [&str; 25] = [
    "search_code",
    "get_symbol",
    "find_callers",
    "find_callees",
    "impact_analysis",
    "explain_code",
    "find_duplicates",
    "index_status",
    "reindex",
    "job_status",
    "add_memories",
    "search_memory",
    "get_memory",
    "list_memories",
    "update_memory",
    "delete_memories",
    "memories_for_code",
    "check_staleness",
    "graph_related_memories",
    "graph_similar_memories",
    "graph_subgraph",
    "graph_aggregate",
    "graph_tag_cooccurrence",
    "graph_entity_network",
    "graph_path_between_entities",
];

const INSTRUCTIONS: &str = "Code search over a pre-built index of one or more repositories, and \
a memory of what you learned. Start with search_code (natural language or identifiers); results \
carry symbol ids that get_symbol, find_callers, find_callees, impact_analysis, explain_code and \
find_duplicates accept (names work too). Save durable facts, decisions and lessons with \
add_memories and find them again with search_memory; the graph_* tools walk the memory graph \
(entities, tags, SIMILAR links). Results are compact: raise `limit` or \
`snippet_lines` when needed. Pass debug: true for a per-phase timing breakdown.";

/// The tool list with descriptions and input schemas.
pub fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "search_code",
            "Hybrid code search (embeddings + BM25, fused with weighted reciprocal rank fusion) over \
             the indexed repositories. Use a sentence for behaviour (\"where are retries configured\") \
             or an identifier for exact names (`parse_config`). Filters: language, kind, path glob, \
             repo. Top results are expanded along the code graph (callees, callers, members), marked \
             source=graph. Returns ranked chunks with path, lines, symbol id and a snippet.",
            schema_for_type::<SearchCodeArgs>(),
        ),
        Tool::new(
            "get_symbol",
            "The code and location of a symbol (by symbol id, qualified name like `Server::run` / \
             `Circle.area`, or simple name), with its enclosing symbols and its members.",
            schema_for_type::<SymbolArgs>(),
        ),
        Tool::new(
            "find_callers",
            "Who calls a function or method. Cascade: code-graph CALLS edges; else whole-word text \
             matches in indexed code; else semantic search on the name's words; else not found with \
             suggested names. `stage` says which answered (graph results are exact, the others are \
             leads).",
            schema_for_type::<CallArgs>(),
        ),
        Tool::new(
            "find_callees",
            "What a function or method calls. Cascade: code-graph CALLS edges; else indexed symbols \
             called by name in its code; else semantic search; else not found with suggested names. \
             `stage` says which answered.",
            schema_for_type::<CallArgs>(),
        ),
        Tool::new(
            "impact_analysis",
            "What may break if a symbol changes: its transitive callers up to `depth` levels, each \
             with the call path from the symbol, and the files involved.",
            schema_for_type::<ImpactArgs>(),
        ),
        Tool::new(
            "explain_code",
            "Context to understand a symbol in one call: its code, doc comment, location, parents, \
             members, direct callers and callees, and its file's imports.",
            schema_for_type::<SymbolArgs>(),
        ),
        Tool::new(
            "find_duplicates",
            "Code that is near-identical in meaning to a given code fragment or symbol (cosine \
             similarity of embeddings above `threshold`): copy-paste, parallel implementations.",
            schema_for_type::<DuplicatesArgs>(),
        ),
        Tool::new(
            "add_memories",
            "Save one or more memories (facts, decisions, conventions, lessons) so later sessions \
             can find them. Each has text and optional category, scope (user|session|project|team|\
             org), entity, tags (`key` or `key=value`), source (user|agent|inferred), evidence and \
             code_refs. Durable when this returns (write-ahead log, fsynced) and searchable at \
             once. Returns the new ids.",
            schema_for_type::<AddMemoriesArgs>(),
        ),
        Tool::new(
            "search_memory",
            "Hybrid search (embeddings + BM25) over saved memories. Filters (exact, applied before \
             ranking): category, scope, entity, source, tags (all|any), created_after/before, state \
             (default active). Boosts: boost_entity, boost_category, boost_tags, recency \
             (half_life_days, default 30). relation_detail none|minimal|standard|full sets how \
             much graph context (SIMILAR memories, mentioned entities, related memories) each \
             result carries.",
            schema_for_type::<SearchMemoryArgs>(),
        ),
        Tool::new(
            "get_memory",
            "One memory by id (as returned by add_memories or search_memory), with all its fields.",
            schema_for_type::<GetMemoryArgs>(),
        ),
        Tool::new(
            "list_memories",
            "Memories matching filters, newest first, a page at a time (limit, offset; the answer \
             has total and next_offset).",
            schema_for_type::<ListMemoriesArgs>(),
        ),
        Tool::new(
            "update_memory",
            "Change a memory: new text (re-embedded), category, scope, entity, tags (replace, \
             add_tags, remove_tags), source, evidence (replace or add_evidence), code_refs, state \
             (archived or deleted keeps it but hides it from default searches). Unspecified \
             fields stay.",
            schema_for_type::<UpdateMemoryArgs>(),
        ),
        Tool::new(
            "delete_memories",
            "Delete memories by id for good (all ids must exist, else nothing is deleted).",
            schema_for_type::<DeleteMemoriesArgs>(),
        ),
        Tool::new(
            "memories_for_code",
            "Memories linked to code: those whose code references cover a line of a file \
             (`direct`), or point at the same file or the symbol at that line (`related`), \
             each with its references checked against the current file (fresh, relocated, \
             stale) and its confidence.",
            schema_for_type::<MemoriesForCodeArgs>(),
        ),
        Tool::new(
            "check_staleness",
            "Re-check the code references of some memories (ids), of memories referencing \
             changed files (changed_files, e.g. from a commit), or of all, and record the \
             result: stale since when and why (changed, deleted), or relocated lines when the \
             same code moved. Returns counts (checked, fresh, relocated, stale, unverified, \
             updated).",
            schema_for_type::<CheckStalenessArgs>(),
        ),
        Tool::new(
            "graph_related_memories",
            "Memories connected to a memory through shared entities (about or mentioned in the \
             text) and shared tags, with what they share; rare tags weigh more.",
            schema_for_type::<GraphRelatedArgs>(),
        ),
        Tool::new(
            "graph_similar_memories",
            "Memories semantically similar to a memory: its SIMILAR links (the 5 nearest \
             memories with cosine >= 0.55 when it was written, and memories that found it), \
             with scores.",
            schema_for_type::<GraphSimilarArgs>(),
        ),
        Tool::new(
            "graph_subgraph",
            "The neighbourhood of a node (a memory id, `entity:<name>` or `tag:<tag>`) to a \
             depth of 1-3: nodes (memories, entities, tags) and edges ABOUT, MENTIONS, TAGGED, \
             SIMILAR.",
            schema_for_type::<GraphSubgraphArgs>(),
        ),
        Tool::new(
            "graph_aggregate",
            "Count memories by category, scope, entity, tag, source or month, with the same \
             filters as search_memory.",
            schema_for_type::<GraphAggregateArgs>(),
        ),
        Tool::new(
            "graph_tag_cooccurrence",
            "Tag pairs that occur together on memories more than chance, ranked by pointwise \
             mutual information (PMI), with counts.",
            schema_for_type::<GraphTagCooccurrenceArgs>(),
        ),
        Tool::new(
            "graph_entity_network",
            "Entities mentioned together: around a centre entity, or the strongest pairs \
             overall, with the number of memories linking each pair.",
            schema_for_type::<GraphEntityNetworkArgs>(),
        ),
        Tool::new(
            "graph_path_between_entities",
            "The shortest chain of memories connecting two entities (entity - memory - entity \
             ...), or found: false.",
            schema_for_type::<GraphPathArgs>(),
        ),
        Tool::new(
            "index_status",
            "The served index: health, generation, segments, live chunks and files, languages, \
             model, index age, reload errors and embedding-cache statistics.",
            schema_for_type::<StatusArgs>(),
        ),
        Tool::new(
            "reindex",
            "Re-index code after edits, inside the server: the indexed roots whole, or some files \
             or directories (`paths`). Only files whose content changed are re-chunked and \
             re-embedded; replaced and deleted files' chunks are tombstoned; queries keep \
             working and see the new code when the job commits. Runs as a background job: \
             returns its id (poll job_status), or its result with wait: true.",
            schema_for_type::<ReindexArgs>(),
        ),
        Tool::new(
            "job_status",
            "State and counts of a reindex job (queued, running, done, failed), or of the \
             recent jobs.",
            schema_for_type::<JobStatusArgs>(),
        ),
    ]
}

/// The MCP service: cheap to clone (one per HTTP session).
#[derive(Clone)]
pub struct Server {
    pub engine: Arc<Engine>,
    pub metrics: Arc<Metrics>,
}

fn parse<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ErrorData> {
    serde_json::from_value(args).map_err(|e| {
        ErrorData::invalid_params(
            format!(
                "invalid arguments for `{tool}`: {e}; see the tool's input schema (tools/list)"
            ),
            None,
        )
    })
}

fn to_json<T: Serialize>(r: Result<T, ToolError>) -> Result<Value, ToolError> {
    r.and_then(|v| serde_json::to_value(v).map_err(|e| ToolError::Internal(e.to_string())))
}

impl Server {
    pub fn new(engine: Arc<Engine>, metrics: Arc<Metrics>) -> Server {
        Server { engine, metrics }
    }

    /// Runs a tool by name on already-parsed JSON arguments. `Err` is a protocol error (unknown
    /// tool, arguments that do not fit the schema); `Ok(Err)` a tool error.
    pub fn dispatch(&self, name: &str, args: Value) -> Result<Result<Value, ToolError>, ErrorData> {
        let e = &self.engine;
        Ok(match name {
            "search_code" => to_json(e.search_code(&parse::<SearchCodeArgs>(name, args)?)),
            "get_symbol" => to_json(e.get_symbol(&parse::<SymbolArgs>(name, args)?)),
            "find_callers" => to_json(e.find_callers(&parse::<CallArgs>(name, args)?)),
            "find_callees" => to_json(e.find_callees(&parse::<CallArgs>(name, args)?)),
            "impact_analysis" => to_json(e.impact_analysis(&parse::<ImpactArgs>(name, args)?)),
            "explain_code" => to_json(e.explain_code(&parse::<SymbolArgs>(name, args)?)),
            "find_duplicates" => to_json(e.find_duplicates(&parse::<DuplicatesArgs>(name, args)?)),
            "index_status" => to_json(e.index_status(&parse::<StatusArgs>(name, args)?)),
            "reindex" => to_json(e.reindex(&parse::<ReindexArgs>(name, args)?)),
            "job_status" => to_json(e.job_status(&parse::<JobStatusArgs>(name, args)?)),
            "add_memories" => to_json(e.add_memories(&parse::<AddMemoriesArgs>(name, args)?)),
            "search_memory" => to_json(e.search_memory(&parse::<SearchMemoryArgs>(name, args)?)),
            "get_memory" => to_json(e.get_memory(&parse::<GetMemoryArgs>(name, args)?)),
            "list_memories" => to_json(e.list_memories(&parse::<ListMemoriesArgs>(name, args)?)),
            "update_memory" => to_json(e.update_memory(&parse::<UpdateMemoryArgs>(name, args)?)),
            "delete_memories" => {
                to_json(e.delete_memories(&parse::<DeleteMemoriesArgs>(name, args)?))
            }
            "memories_for_code" => {
                to_json(e.memories_for_code(&parse::<MemoriesForCodeArgs>(name, args)?))
            }
            "check_staleness" => {
                to_json(e.check_staleness(&parse::<CheckStalenessArgs>(name, args)?))
            }
            "graph_related_memories" => {
                to_json(e.graph_related_memories(&parse::<GraphRelatedArgs>(name, args)?))
            }
            "graph_similar_memories" => {
                to_json(e.graph_similar_memories(&parse::<GraphSimilarArgs>(name, args)?))
            }
            "graph_subgraph" => to_json(e.graph_subgraph(&parse::<GraphSubgraphArgs>(name, args)?)),
            "graph_aggregate" => {
                to_json(e.graph_aggregate(&parse::<GraphAggregateArgs>(name, args)?))
            }
            "graph_tag_cooccurrence" => {
                to_json(e.graph_tag_cooccurrence(&parse::<GraphTagCooccurrenceArgs>(name, args)?))
            }
            "graph_entity_network" => {
                to_json(e.graph_entity_network(&parse::<GraphEntityNetworkArgs>(name, args)?))
            }
            "graph_path_between_entities" => {
                to_json(e.graph_path_between_entities(&parse::<GraphPathArgs>(name, args)?))
            }
            _ => {
                return Err(ErrorData::invalid_params(
                    format!(
                        "unknown tool `{name}`; the tools are: {}",
                        TOOL_NAMES.join(", ")
                    ),
                    None,
                ))
            }
        })
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
        let args = Value::Object(request.arguments.unwrap_or_default());
        let this = self.clone();
        let n = name.clone();
        let r = tokio::task::spawn_blocking(move || this.dispatch(&n, args))
            .await
            .map_err(|e| {
                ErrorData::internal_error(format!("the tool `{name}` failed: {e}"), None)
            })?;
        let (outcome, out) = match r {
            Err(e) => ("invalid_input", Err(e)),
            Ok(Ok(v)) => ("ok", Ok(CallToolResult::structured(v))),
            Ok(Err(e)) => {
                let (outcome, extra) = match &e {
                    ToolError::InvalidInput(_) => ("invalid_input", Value::Null),
                    ToolError::NotFound { suggestions, .. } => {
                        ("not_found", serde_json::json!(suggestions))
                    }
                    ToolError::Internal(_) => ("error", Value::Null),
                };
                let mut body = serde_json::json!({ "error": e.to_string() });
                if !extra.is_null() {
                    body["suggestions"] = extra;
                }
                (outcome, Ok(CallToolResult::structured_error(body)))
            }
        };
        self.metrics.record_call(&name, outcome, t.elapsed());
        out.map(CallToolResponse::from)
    }
}
