//! Arguments and answers of the six memory tools (`add_memories`, `get_memory`,
//! `list_memories`, `update_memory`, `delete_memories`, `search_memory`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::input::{with_memory_filters, CodeRefInput, MemoryFilterArgs, MemoryInput};
use super::output::{CodeRefOut, MemoryOut};
use crate::tools::common::Debug;

/// Save one or more memories (facts, decisions, conventions, lessons) so later sessions can
/// find them. Each has text and optional category, scope (user|session|project|team|org),
/// entity, tags (`key` or `key=value`), source (user|agent|inferred), evidence and code_refs.
/// Durable when this returns (write-ahead log, fsynced) and searchable at once. Returns the new
/// ids.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddMemoriesArgs {
    /// One or more memories (at most 256).
    pub memories: Vec<MemoryInput>,
    /// Attach the suggested code links (identifiers in the text found in the code index) as
    /// code references, with confidence and reason `inferred_from_code_index`. Without it
    /// they are only returned as `suggested_links`.
    #[serde(default)]
    pub auto_link: bool,
    #[serde(default)]
    pub debug: bool,
}

/// A code link suggested for a new memory.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SuggestedLink {
    /// Index of the memory in the call.
    pub memory: usize,
    /// The identifier of the text that matched.
    pub matched: String,
    pub confidence: f32,
    pub reason: String,
    pub code_ref: CodeRefOut,
    /// Whether it was attached (`auto_link: true`).
    pub attached: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AddMemoriesAnswer {
    /// Ids of the new memories, in input order.
    pub ids: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub suggested_links: Vec<SuggestedLink>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

/// One memory by id (as returned by add_memories or search_memory), with all its fields.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetMemoryArgs {
    pub id: String,
    /// Graph context: `none`, `minimal` (default: SIMILAR ids), `standard` (+ scores,
    /// mentioned entities, 3 related memories) or `full` (+ what they share, co-mentioned
    /// entities).
    #[serde(default)]
    pub relation_detail: Option<String>,
    #[serde(default)]
    pub debug: bool,
}

with_memory_filters! {
/// Memories matching filters, newest first, a page at a time (limit, then `after` with the
/// previous answer's next_cursor: stable while memories are written; or offset /
/// next_offset, which skip or repeat memories when some are added, changed or deleted
/// between pages).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListMemoriesArgs {
    /// Page size (default 20, at most 100).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Memories to skip (from `next_offset` of the previous page). Writes between pages
    /// shift the list: use `after` to walk it without skipping or repeating.
    #[serde(default)]
    pub offset: Option<usize>,
    /// Continue after this memory (`next_cursor` of the previous page): the memories older
    /// than it in the list's order, whatever was written meanwhile. Not with `offset`.
    #[serde(default)]
    pub after: Option<String>,
    #[serde(default)]
    pub debug: bool,
}
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ListMemoriesAnswer {
    /// Newest first.
    pub memories: Vec<MemoryOut>,
    /// Memories matching the filters.
    pub total: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<usize>,
    /// Pass as `after` for the next page (when there is one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

/// Change a memory: new text (re-embedded), category, scope, entity, tags (replace, add_tags,
/// remove_tags), source, evidence (replace or add_evidence), code_refs, state (archived or
/// deleted keeps it but hides it from default searches). Unspecified fields stay.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateMemoryArgs {
    pub id: String,
    /// New text (re-embedded).
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub category: Option<String>,
    #[serde(default)]
    pub scope: Option<String>,
    #[serde(default)]
    pub entity: Option<String>,
    /// Replaces all tags.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    #[serde(default)]
    pub add_tags: Option<Vec<String>>,
    /// Tags to remove: `key` removes every tag with that key, `key=value` that tag.
    #[serde(default)]
    pub remove_tags: Option<Vec<String>>,
    #[serde(default)]
    pub source: Option<String>,
    /// Replaces the evidence list.
    #[serde(default)]
    pub evidence: Option<Vec<String>>,
    #[serde(default)]
    pub add_evidence: Option<Vec<String>>,
    /// Replaces the code references.
    #[serde(default)]
    pub code_refs: Option<Vec<CodeRefInput>>,
    /// `active`, `archived` or `deleted` (kept, hidden from default searches).
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub debug: bool,
}

/// Delete memories by id for good (all ids must exist, else nothing is deleted).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteMemoriesArgs {
    /// Ids to delete (at most 256). All must exist, or nothing is deleted.
    pub ids: Vec<String>,
    #[serde(default)]
    pub debug: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct DeleteMemoriesAnswer {
    pub deleted: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct MemoryAnswer {
    pub memory: MemoryOut,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

with_memory_filters! {
/// Hybrid search (embeddings + BM25) over saved memories. Filters (exact, applied before
/// ranking): category, scope, entity, source, tags (all|any), created_after/before, state
/// (default active). Boosts: boost_entity, boost_category, boost_tags, recency (half_life_days,
/// default 30). relation_detail none|minimal|standard|full sets how much graph context (SIMILAR
/// memories, mentioned entities, related memories) each result carries.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchMemoryArgs {
    /// What to look for: a sentence or keywords.
    pub query: String,
    /// Results (default 10, at most 100).
    #[serde(default)]
    pub limit: Option<usize>,
    /// `hybrid` (default), `vector` or `lexical`.
    #[serde(default)]
    pub mode: Option<String>,
    /// [vector, lexical] weights for hybrid fusion (default: equal, leaning vector when the
    /// vector ranking's best result stands out more than the lexical one's).
    #[serde(default)]
    pub weights: Option<[f32; 2]>,
    /// Rank memories about this entity higher.
    #[serde(default)]
    pub boost_entity: Option<String>,
    /// Rank memories of this category higher.
    #[serde(default)]
    pub boost_category: Option<String>,
    /// Rank memories with these tags higher.
    #[serde(default)]
    pub boost_tags: Option<Vec<String>>,
    /// Recency half-life in days (default 30; 0 turns the recency boost off).
    #[serde(default)]
    pub half_life_days: Option<f64>,
    /// The date the question is asked (YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ, UTC; default now):
    /// recency and relative dates in the query ("last May", "two weeks ago", "yesterday",
    /// which boost memories of that time) are read from it.
    #[serde(default)]
    pub as_of: Option<String>,
    /// Score each memory together with the other memories of its session (`session` on
    /// `add_memories`): its session's best matches and its neighbours in time. For sessions
    /// about one subject (a ticket, a work session); off by default.
    #[serde(default)]
    pub session_context: bool,
    /// Longest text per result, in characters (default 1000).
    #[serde(default)]
    pub max_chars: Option<usize>,
    /// Leave out memories whose code references are stale.
    #[serde(default)]
    pub exclude_stale: bool,
    /// Leave out memories with a lower confidence (0-1).
    #[serde(default)]
    pub min_confidence: Option<f32>,
    /// Graph context per result: `none`, `minimal` (default: SIMILAR ids), `standard`
    /// (+ scores, mentioned entities, 3 related memories) or `full` (+ what they share,
    /// co-mentioned entities).
    #[serde(default)]
    pub relation_detail: Option<String>,
    #[serde(default)]
    pub debug: bool,
}
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SearchMemoryAnswer {
    pub query: String,
    pub results: Vec<MemoryOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}
