//! What the memory tools return: memories and their code references as agents see them.

use format::memory::{CodeRef, MemoryRecord};
use memory::coderefs;
use memory::time::rfc3339;
use schemars::JsonSchema;
use serde::Serialize;

use crate::tools::common::ToolError;
use crate::tools::relations::RelationsOut;

/// A memory as tools return it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct MemoryOut {
    pub id: String,
    pub text: String,
    pub category: String,
    pub scope: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub entity: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    pub source: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub code_refs: Vec<CodeRefOut>,
    /// True when a code reference is stale (its code changed or was deleted).
    pub is_stale: bool,
    /// 0-1: verification recency, evidence, code freshness and source (see the README).
    pub confidence: f32,
    pub state: String,
    /// RFC 3339, UTC.
    pub created_at: String,
    pub updated_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vector_rank: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lexical_rank: Option<usize>,
    /// Graph context, as much as `relation_detail` asks for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relations: Option<RelationsOut>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CodeRefOut {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub repo: String,
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
    /// `file:<path>#L<start>-L<end>`.
    pub code_link: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub symbol_id: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub git_commit: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub code_hash: String,
    /// `fresh`, `relocated` (the same code moved: lines above are where it is now), `stale`
    /// or `unverified`, as checked against the current file when this answer was made.
    pub status: String,
    pub is_stale: bool,
    /// Why it is stale (`deleted`, `changed: …`) or unverified, or where it moved from.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// When a recorded check (`check_staleness`, a `reindex` job, `queryd staleness`) first
    /// found it stale; absent when only this answer's check did (since when is unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale_since: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_verified_at: Option<String>,
}

pub(crate) fn code_ref_out(r: &CodeRef) -> CodeRefOut {
    CodeRefOut {
        repo: r.repo.clone(),
        path: r.path.clone(),
        start_line: r.start_line,
        end_line: r.end_line,
        code_link: coderefs::uri(&r.path, r.start_line, r.end_line),
        symbol_id: r.symbol_id.clone(),
        git_commit: r.git_commit.clone(),
        code_hash: r.code_hash.clone(),
        status: "unverified".into(),
        is_stale: r.stale_since.is_some(),
        reason: r.reason.clone(),
        stale_since: r.stale_since.map(rfc3339),
        last_verified_at: r.last_verified_at.map(rfc3339),
    }
}

pub(crate) fn out(m: &MemoryRecord) -> MemoryOut {
    MemoryOut {
        id: m.id.clone(),
        text: m.text.clone(),
        category: m.category.clone(),
        scope: m.scope.clone(),
        entity: m.entity.clone(),
        tags: m.tags.clone(),
        source: m.source.clone(),
        evidence: m.evidence.clone(),
        code_refs: m.code_refs.iter().map(code_ref_out).collect(),
        is_stale: m.code_refs.iter().any(|r| r.stale_since.is_some()),
        confidence: 0.0,
        state: m.state.clone(),
        created_at: rfc3339(m.created_at),
        updated_at: rfc3339(m.updated_at),
        score: None,
        vector_rank: None,
        lexical_rank: None,
        relations: None,
    }
}

pub(crate) fn not_found(id: &str) -> ToolError {
    ToolError::NotFound {
        message: format!("no memory with id `{id}` (it may have been deleted)"),
        suggestions: vec!["list_memories".into(), "search_memory".into()],
    }
}
