//! The `relation_detail` of memory results: a memory's graph context (SIMILAR neighbours,
//! mentioned entities, related memories, co-mentioned entities) at the level asked for.

use memory::graph::MemGraph;
use memory::search::{MemFilter, MemKey};
use memory::similar::similar_to;
use memory::MemoryView;
use schemars::JsonSchema;
use serde::Serialize;

use crate::tools::common::{ToolError, ToolResult};

/// How much graph context a memory result carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RelationDetail {
    None,
    Minimal,
    Standard,
    Full,
}

impl RelationDetail {
    pub fn parse(s: Option<&str>) -> ToolResult<RelationDetail> {
        match s.map(str::trim) {
            Some("none") => Ok(RelationDetail::None),
            None | Some("") | Some("minimal") => Ok(RelationDetail::Minimal),
            Some("standard") => Ok(RelationDetail::Standard),
            Some("full") => Ok(RelationDetail::Full),
            Some(x) => Err(ToolError::InvalidInput(format!(
                "unknown relation_detail `{x}`; expected none, minimal (default), standard or full"
            ))),
        }
    }
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SimilarOut {
    pub id: String,
    /// Cosine similarity of the two memories' vectors.
    pub score: f32,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RelatedOut {
    pub id: String,
    pub score: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shared_entities: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shared_tags: Vec<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CountOut {
    pub name: String,
    pub count: u32,
}

/// Graph context of one memory (`relation_detail`): `minimal` gives `similar` ids;
/// `standard` adds scores, the entities the text mentions and the 3 most related memories;
/// `full` adds what they share, up to 10 related memories and the entities co-mentioned with
/// this memory's entity.
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct RelationsOut {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub similar_ids: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub similar: Vec<SimilarOut>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mentions: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub related: Vec<RelatedOut>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub co_mentioned: Vec<CountOut>,
}

/// SIMILAR neighbours of memory `id` (its own edges and edges to it) that are live and
/// active, best first, one per id.
pub fn similar_of(snap: &MemoryView, id: &str) -> Vec<(String, f32)> {
    let mut v = similar_to(snap, id);
    if let Some(k) = snap.key_of(id) {
        match &k {
            MemKey::Delta(e) => v.extend(e.record.similar.iter().map(|s| (s.id.clone(), s.score))),
            MemKey::Segment(si, c) => {
                if let Some(m) = snap.index.memory[*si]
                    .segment
                    .memories()
                    .and_then(|t| t.memories.get(*c as usize))
                {
                    v.extend(
                        m.similar
                            .iter()
                            .map(|s| (s.id.to_string(), s.score.to_native())),
                    );
                }
            }
        }
    }
    v.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)));
    v.dedup_by(|a, b| a.0 == b.0);
    v.retain(|(o, _)| {
        o != id
            && snap.key_of(o).is_some_and(|k| match &k {
                MemKey::Delta(e) => e.record.state == "active",
                MemKey::Segment(si, c) => !snap.mem[*si].hidden.contains(*c),
            })
    });
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

pub(crate) fn related_out(
    g: &MemGraph,
    r: &(u32, Vec<u32>, Vec<u32>, f64),
    detail: bool,
) -> RelatedOut {
    RelatedOut {
        id: g.nodes[r.0 as usize].id.clone(),
        score: (r.3 * 1e4).round() / 1e4,
        shared_entities: if detail {
            r.1.iter()
                .map(|&e| g.entities[e as usize].name.clone())
                .collect()
        } else {
            Vec::new()
        },
        shared_tags: if detail {
            r.2.iter()
                .map(|&t| g.tags[t as usize].tag.clone())
                .collect()
        } else {
            Vec::new()
        },
    }
}

/// The relations of memory `id` at `level` (`None` for [`RelationDetail::None`]).
pub fn relations(snap: &MemoryView, id: &str, level: RelationDetail) -> Option<RelationsOut> {
    if level == RelationDetail::None {
        return None;
    }
    let sims = similar_of(snap, id);
    let mut r = RelationsOut::default();
    if level == RelationDetail::Minimal {
        r.similar_ids = sims.into_iter().map(|(i, _)| i).collect();
        return Some(r);
    }
    r.similar = sims
        .into_iter()
        .map(|(id, score)| SimilarOut { id, score })
        .collect();
    let g = snap.mem_graph(&MemFilter::default());
    if let Some(n) = g.node(id) {
        let node = &g.nodes[n as usize];
        r.mentions = node
            .mentions
            .iter()
            .map(|&e| g.entities[e as usize].name.clone())
            .collect();
        let full = level == RelationDetail::Full;
        r.related = g
            .related(n)
            .iter()
            .take(if full { 10 } else { 3 })
            .map(|x| related_out(&g, x, full))
            .collect();
        if let (true, Some(e)) = (full, node.about) {
            r.co_mentioned = g
                .co_mentioned(e)
                .into_iter()
                .take(5)
                .map(|(o, c)| CountOut {
                    name: g.entities[o as usize].name.clone(),
                    count: c,
                })
                .collect();
        }
    }
    Some(r)
}
