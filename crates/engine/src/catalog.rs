//! The tool catalog: the only list of tools. `tools/list`, dispatch, the metrics labels and the
//! README's tool list all come from [`CATALOG`]; a tool's description is its argument type's
//! doc comment (through its JSON schema), so the text an agent reads sits on the code it
//! describes (and tests below hold it to the behaviour it names).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::engine::Engine;
use crate::tools::calls::{FindCalleesArgs, FindCallersArgs, ImpactArgs};
use crate::tools::code_links::{CheckStalenessArgs, MemoriesForCodeArgs};
use crate::tools::common::{ToolError, ToolResult};
use crate::tools::duplicates::DuplicatesArgs;
use crate::tools::graph::{
    GraphAggregateArgs, GraphEntityNetworkArgs, GraphPathArgs, GraphRelatedArgs, GraphSimilarArgs,
    GraphSubgraphArgs, GraphTagCooccurrenceArgs,
};
use crate::tools::memory::args::{
    AddMemoriesArgs, DeleteMemoriesArgs, GetMemoryArgs, ListMemoriesArgs, SearchMemoryArgs,
    UpdateMemoryArgs,
};
use crate::tools::reindex::{JobStatusArgs, ReindexArgs};
use crate::tools::search::SearchCodeArgs;
use crate::tools::status::StatusArgs;
use crate::tools::symbols::{ExplainCodeArgs, GetSymbolArgs};

/// What the server tells a client about itself and how to start.
pub const INSTRUCTIONS: &str = "Code search over a pre-built index of one or more repositories, \
and a memory of what you learned. Start with search_code (natural language or identifiers); \
results carry symbol ids that get_symbol, find_callers, find_callees, impact_analysis, \
explain_code and find_duplicates accept (names work too). Save durable facts, decisions and \
lessons with add_memories and find them again with search_memory; the graph_* tools walk the \
memory graph (entities, tags, SIMILAR links). Results are compact: raise `limit` or \
`snippet_lines` when needed. Pass debug: true for a per-phase timing breakdown.";

/// The family a tool belongs to (its file under `tools/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    CodeSearch,
    Symbols,
    Calls,
    Index,
    Memory,
    CodeLinks,
    MemoryGraph,
}

/// One tool: its name, family, argument schema (with the description) and handler.
pub struct ToolSpec {
    pub name: &'static str,
    pub family: Family,
    schema: fn() -> Map<String, Value>,
    run: fn(&Arc<Engine>, Value) -> Result<Value, CallError>,
}

/// Why a call produced no answer. The first two are the caller's protocol mistakes (JSON-RPC
/// "invalid params"); [`CallError::Tool`] is an answer the agent reads (`isError: true`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    #[error("unknown tool `{name}`; the tools are: {tools}")]
    UnknownTool { name: String, tools: String },
    #[error("invalid arguments for `{tool}`: {reason}; see the tool's input schema (tools/list)")]
    InvalidArguments { tool: String, reason: String },
    #[error("{0}")]
    Tool(ToolError),
}

fn schema_of<T: JsonSchema>() -> Map<String, Value> {
    // JSON Schema 2020-12, as MCP asks (the settings rmcp's own helper uses).
    let schema = SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<T>();
    match serde_json::to_value(schema) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

fn run<A: DeserializeOwned, R: Serialize>(
    tool: &str,
    args: Value,
    f: impl FnOnce(&A) -> ToolResult<R>,
) -> Result<Value, CallError> {
    let a: A = serde_json::from_value(args).map_err(|e| CallError::InvalidArguments {
        tool: tool.to_string(),
        // Serde quotes the offending value (an unknown variant, a string where a number
        // goes): cut like a tool error, so a megabyte argument is not echoed back whole.
        reason: crate::tools::common::bounded(&e.to_string()).into_owned(),
    })?;
    f(&a)
        .and_then(|v| serde_json::to_value(v).map_err(|e| ToolError::Internal(e.to_string())))
        .map_err(CallError::Tool)
}

macro_rules! tool {
    ($name:literal, $family:ident, $args:ty, $method:ident) => {
        ToolSpec {
            name: $name,
            family: Family::$family,
            schema: schema_of::<$args>,
            run: |e, v| run::<$args, _>($name, v, |a| e.$method(a)),
        }
    };
}

/// Every tool, in the order `tools/list` gives them.
pub static CATALOG: [ToolSpec; 25] = [
    tool!("search_code", CodeSearch, SearchCodeArgs, search_code),
    tool!("get_symbol", Symbols, GetSymbolArgs, get_symbol),
    tool!("find_callers", Calls, FindCallersArgs, find_callers),
    tool!("find_callees", Calls, FindCalleesArgs, find_callees),
    tool!("impact_analysis", Calls, ImpactArgs, impact_analysis),
    tool!("explain_code", Symbols, ExplainCodeArgs, explain_code),
    tool!(
        "find_duplicates",
        CodeSearch,
        DuplicatesArgs,
        find_duplicates
    ),
    tool!("add_memories", Memory, AddMemoriesArgs, add_memories),
    tool!("search_memory", Memory, SearchMemoryArgs, search_memory),
    tool!("get_memory", Memory, GetMemoryArgs, get_memory),
    tool!("list_memories", Memory, ListMemoriesArgs, list_memories),
    tool!("update_memory", Memory, UpdateMemoryArgs, update_memory),
    tool!(
        "delete_memories",
        Memory,
        DeleteMemoriesArgs,
        delete_memories
    ),
    tool!(
        "memories_for_code",
        CodeLinks,
        MemoriesForCodeArgs,
        memories_for_code
    ),
    tool!(
        "check_staleness",
        CodeLinks,
        CheckStalenessArgs,
        check_staleness
    ),
    tool!(
        "graph_related_memories",
        MemoryGraph,
        GraphRelatedArgs,
        graph_related_memories
    ),
    tool!(
        "graph_similar_memories",
        MemoryGraph,
        GraphSimilarArgs,
        graph_similar_memories
    ),
    tool!(
        "graph_subgraph",
        MemoryGraph,
        GraphSubgraphArgs,
        graph_subgraph
    ),
    tool!(
        "graph_aggregate",
        MemoryGraph,
        GraphAggregateArgs,
        graph_aggregate
    ),
    tool!(
        "graph_tag_cooccurrence",
        MemoryGraph,
        GraphTagCooccurrenceArgs,
        graph_tag_cooccurrence
    ),
    tool!(
        "graph_entity_network",
        MemoryGraph,
        GraphEntityNetworkArgs,
        graph_entity_network
    ),
    tool!(
        "graph_path_between_entities",
        MemoryGraph,
        GraphPathArgs,
        graph_path_between_entities
    ),
    tool!("index_status", Index, StatusArgs, index_status),
    tool!("reindex", Index, ReindexArgs, reindex),
    tool!("job_status", Index, JobStatusArgs, job_status),
];

/// A tool's input schema and its description (the schema's doc comment, unwrapped).
struct Described {
    schema: Arc<Map<String, Value>>,
    description: String,
}

/// Per tool, built once.
fn schemas() -> &'static HashMap<&'static str, Described> {
    static S: OnceLock<HashMap<&'static str, Described>> = OnceLock::new();
    S.get_or_init(|| {
        CATALOG
            .iter()
            .map(|t| {
                let mut schema = (t.schema)();
                // The doc comment is the tool's description; the schema does not repeat it
                // (it would cost every client the same text twice in `tools/list`).
                let doc = schema.remove("description");
                let description =
                    unwrap_doc(doc.as_ref().and_then(Value::as_str).unwrap_or_default());
                (
                    t.name,
                    Described {
                        schema: Arc::new(schema),
                        description,
                    },
                )
            })
            .collect()
    })
}

/// A doc comment's text as one paragraph per blank-line-separated block (rustdoc wraps lines;
/// agents read paragraphs).
fn unwrap_doc(doc: &str) -> String {
    doc.split("\n\n")
        .map(|p| p.split('\n').map(str::trim).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n\n")
}

impl ToolSpec {
    /// The JSON schema of the arguments (JSON Schema 2020-12).
    pub fn input_schema(&self) -> Arc<Map<String, Value>> {
        Arc::clone(&schemas()[self.name].schema)
    }

    /// What the tool does, for agents: its argument type's doc comment.
    pub fn description(&self) -> &'static str {
        schemas()[self.name].description.as_str()
    }
}

/// The catalog entry of `name`.
pub fn find(name: &str) -> Option<&'static ToolSpec> {
    CATALOG.iter().find(|t| t.name == name)
}

/// Every tool name, in catalog order.
pub fn names() -> impl Iterator<Item = &'static str> {
    CATALOG.iter().map(|t| t.name)
}

/// Runs tool `name` on JSON arguments (an object). Runs on the calling thread and may block
/// (embedding, file reads, fsync): async callers run it on a blocking thread.
///
/// A panic inside the tool (damaged index bytes the checks did not cover) becomes a tool error
/// and makes the engine re-verify its segments; text that is not valid UTF-8 is replaced before
/// it reaches JSON (see [`crate::integrity`]).
pub fn call(engine: &Arc<Engine>, name: &str, args: Value) -> Result<Value, CallError> {
    let Some(t) = find(name) else {
        return Err(CallError::UnknownTool {
            name: name.to_string(),
            tools: names().collect::<Vec<_>>().join(", "),
        });
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (t.run)(engine, args))) {
        Ok(Ok(mut v)) => {
            engine.sanitize_text(name, &mut v);
            Ok(v)
        }
        Ok(Err(CallError::Tool(e))) => Err(CallError::Tool(engine.sanitize_error(name, e))),
        Ok(Err(e)) => Err(e),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            engine.record_panic(name, &msg);
            Err(CallError::Tool(ToolError::Internal(format!(
                "`{name}` hit an internal error ({msg}); the index may be damaged: the server is \
                 re-verifying its segments and leaves out any that fail (see index_status); \
                 retry the call"
            ))))
        }
    }
}
