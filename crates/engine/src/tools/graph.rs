//! The memory graph tools on [`Engine`]: `graph_related_memories`, `graph_similar_memories`,
//! `graph_subgraph`, `graph_aggregate`, `graph_tag_cooccurrence`, `graph_entity_network`,
//! `graph_path_between_entities`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Instant;

use code::levenshtein;
use memory::graph::{entity_key, MemGraph, PathStep};
use memory::search::{MemFilter, MemKey};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::engine::Engine;
use crate::snapshot::Snapshot;
use crate::tools::common::{limit_arg, ms, Debug, ToolError, ToolResult, MAX_LIMIT};
use crate::tools::memory::input::{check_id, with_memory_filters, MemoryFilterArgs};
use crate::tools::memory::output::{not_found, MemoryOut};
use crate::tools::relations::{related_out, similar_of, CountOut};

fn short(e: &Engine, snap: &Snapshot, key: &MemKey, max_chars: usize) -> MemoryOut {
    let mut o = e.annotated(snap, &snap.memory.record_of(key));
    if o.text.chars().count() > max_chars {
        o.text = o.text.chars().take(max_chars).collect::<String>() + "…";
    }
    o
}

fn dbg(on: bool, t0: Instant, generation: u64) -> Option<Debug> {
    on.then(|| Debug {
        total_ms: ms(t0.elapsed()),
        generation,
        ..Debug::default()
    })
}

/// The graph node of an active memory, or why there is none.
fn memory_node(snap: &Snapshot, g: &MemGraph, id: &str) -> ToolResult<u32> {
    let id = id.trim();
    check_id(id)?;
    match g.node(id) {
        Some(n) => Ok(n),
        None if snap.memory.key_of(id).is_some() => Err(ToolError::InvalidInput(format!(
            "memory `{id}` is archived or deleted; the memory graph spans active memories \
             (update_memory with state=active brings it back)"
        ))),
        None => Err(not_found(id)),
    }
}

fn entity_node(g: &MemGraph, name: &str) -> ToolResult<u32> {
    if name.len() > format::memory::MAX_FIELD_BYTES {
        // No entity is longer (they are memories' `entity` fields); the suggestions below
        // would cost a Levenshtein row per character of `name` for every entity.
        return Err(ToolError::InvalidInput(format!(
            "entity `{}` is longer than any entity can be ({} bytes)",
            format::memory::clip(name),
            format::memory::MAX_FIELD_BYTES
        )));
    }
    g.entity(name).ok_or_else(|| {
        let key = entity_key(name);
        let mut close: Vec<(usize, &str)> = g
            .entities
            .iter()
            .map(|e| (levenshtein(&entity_key(&e.name), &key), e.name.as_str()))
            .collect();
        close.sort();
        ToolError::NotFound {
            message: format!(
                "no active memory is about the entity `{}`",
                name.chars().take(80).collect::<String>()
            ),
            suggestions: close
                .into_iter()
                .take(5)
                .map(|(_, n)| n.to_string())
                .collect(),
        }
    })
}

fn limit(l: Option<usize>, default: usize) -> ToolResult<usize> {
    limit_arg(l, default, MAX_LIMIT)
}

/// Memories connected to a memory through shared entities (about or mentioned in the text) and
/// shared tags, with what they share; rare tags weigh more.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GraphRelatedArgs {
    /// Memory id.
    pub id: String,
    /// Results (default 10, at most 100).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Longest text per memory, in characters (default 300).
    #[serde(default)]
    pub max_chars: Option<usize>,
    #[serde(default)]
    pub debug: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RelatedMemory {
    pub memory: MemoryOut,
    /// 1 per shared entity, plus per shared tag ln(1 + N/n_tag) / ln(1 + N).
    pub score: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shared_entities: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shared_tags: Vec<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct GraphRelatedAnswer {
    pub id: String,
    pub related: Vec<RelatedMemory>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

/// Memories semantically similar to a memory: its SIMILAR links (the 5 nearest memories with
/// cosine >= 0.55 when it was written, and memories that found it), with scores.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GraphSimilarArgs {
    /// Memory id.
    pub id: String,
    /// Results (default 10, at most 100).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Least cosine similarity (edges exist from 0.55).
    #[serde(default)]
    pub min_score: Option<f32>,
    /// Longest text per memory, in characters (default 300).
    #[serde(default)]
    pub max_chars: Option<usize>,
    #[serde(default)]
    pub debug: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SimilarMemory {
    pub memory: MemoryOut,
    pub score: f32,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct GraphSimilarAnswer {
    pub id: String,
    pub similar: Vec<SimilarMemory>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

/// The neighbourhood of a node (a memory id, `entity:<name>` or `tag:<tag>`) to a depth of 1-3:
/// nodes (memories, entities, tags) and edges ABOUT, MENTIONS, TAGGED, SIMILAR.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GraphSubgraphArgs {
    /// Start node: a memory id, `entity:<name>` or `tag:<tag>`.
    pub node: String,
    /// Hops from the start node (default 1, at most 3).
    #[serde(default)]
    pub depth: Option<usize>,
    /// Most nodes (default 50, at most 500).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Edge types to follow: ABOUT, MENTIONS, TAGGED, SIMILAR (default all).
    #[serde(default)]
    pub edge_types: Option<Vec<String>>,
    #[serde(default)]
    pub debug: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct GraphNodeOut {
    /// `memory:<id>`, `entity:<name>` or `tag:<tag>`.
    pub id: String,
    /// `memory`, `entity` or `tag`.
    pub kind: String,
    /// The memory text (first 120 characters), entity name or tag.
    pub label: String,
    /// Hops from the start node.
    pub depth: usize,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct GraphEdgeOut {
    pub from: String,
    pub to: String,
    /// `ABOUT`, `MENTIONS`, `TAGGED` or `SIMILAR`.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct GraphSubgraphAnswer {
    pub nodes: Vec<GraphNodeOut>,
    pub edges: Vec<GraphEdgeOut>,
    /// True when `limit` stopped the walk.
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

with_memory_filters! {
/// Count memories by category, scope, entity, tag, source or month, with the same filters as
/// search_memory.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GraphAggregateArgs {
    /// `category`, `scope`, `entity`, `tag`, `source` or `month` (of creation, UTC).
    pub group_by: String,
    /// Groups (default 20, at most 100).
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub debug: bool,
}
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct GraphAggregateAnswer {
    pub group_by: String,
    /// Memories matching the filters.
    pub total: usize,
    /// Largest first (`month`: the newest `limit` months, oldest first). Memories without an
    /// entity count under `(none)`.
    pub groups: Vec<CountOut>,
    /// Groups in all, when more than `limit` (the rest are not listed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups_total: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

with_memory_filters! {
/// Tag pairs that occur together on memories more than chance, ranked by pointwise mutual
/// information (PMI), with counts.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GraphTagCooccurrenceArgs {
    /// Only pairs with this tag.
    #[serde(default)]
    pub with_tag: Option<String>,
    /// Least number of memories carrying both tags (default 2).
    #[serde(default)]
    pub min_count: Option<u32>,
    /// Pairs (default 20, at most 100).
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub debug: bool,
}
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TagPairOut {
    pub a: String,
    pub b: String,
    /// Memories with both tags.
    pub count: u32,
    pub count_a: u32,
    pub count_b: u32,
    /// ln(count · N / (count_a · count_b)).
    pub pmi: f64,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct GraphTagCooccurrenceAnswer {
    /// Memories matching the filters (N).
    pub memories: usize,
    pub pairs: Vec<TagPairOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

with_memory_filters! {
/// Entities mentioned together: around a centre entity, or the strongest pairs overall, with
/// the number of memories linking each pair.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GraphEntityNetworkArgs {
    /// Centre entity: its co-mentioned entities. Without it: the strongest pairs overall.
    #[serde(default)]
    pub center: Option<String>,
    /// Least number of memories linking a pair (default 1).
    #[serde(default)]
    pub min_count: Option<u32>,
    /// Edges (default 20, at most 100).
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub debug: bool,
}
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct EntityOut {
    pub name: String,
    /// Memories about it.
    pub about: usize,
    /// Memories whose text mentions it.
    pub mentioned_by: usize,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct EntityEdgeOut {
    pub a: String,
    pub b: String,
    /// Memories linked to both (about or mentioning).
    pub count: u32,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct GraphEntityNetworkAnswer {
    pub entities: Vec<EntityOut>,
    pub edges: Vec<EntityEdgeOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

/// The shortest chain of memories connecting two entities (entity - memory - entity ...), or
/// found: false.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GraphPathArgs {
    pub from: String,
    pub to: String,
    /// Most entity-to-entity hops (default 4, at most 8).
    #[serde(default)]
    pub max_hops: Option<usize>,
    #[serde(default)]
    pub debug: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PathStepOut {
    /// `entity` or `memory`.
    pub kind: String,
    /// Entity name or memory id.
    pub id: String,
    /// Memory text (first 120 characters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct GraphPathAnswer {
    pub from: String,
    pub to: String,
    pub found: bool,
    /// Entity-to-entity hops.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hops: Option<usize>,
    /// Alternating entities and the memories linking them.
    pub path: Vec<PathStepOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

fn label(snap: &Snapshot, g: &MemGraph, n: u32) -> String {
    let t = snap.memory.record_of(&g.nodes[n as usize].key).text;
    let mut s: String = t.chars().take(120).collect();
    if s.len() < t.len() {
        s.push('…');
    }
    s
}

/// A node of the subgraph walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum GNode {
    Mem(u32),
    Ent(u32),
    Tag(u32),
}

impl Engine {
    pub fn graph_related_memories(&self, a: &GraphRelatedArgs) -> ToolResult<GraphRelatedAnswer> {
        let t0 = Instant::now();
        let snap = self.snapshot();
        let g = snap.memory.mem_graph(&MemFilter::default());
        let n = memory_node(&snap, &g, &a.id)?;
        let mc = a.max_chars.unwrap_or(300).max(1);
        let related = g
            .related(n)
            .iter()
            .take(limit(a.limit, 10)?)
            .map(|r| {
                let o = related_out(&g, r, true);
                RelatedMemory {
                    memory: short(self, &snap, &g.nodes[r.0 as usize].key, mc),
                    score: o.score,
                    shared_entities: o.shared_entities,
                    shared_tags: o.shared_tags,
                }
            })
            .collect();
        Ok(GraphRelatedAnswer {
            id: a.id.trim().to_string(),
            related,
            debug: dbg(a.debug, t0, snap.generation()),
        })
    }

    pub fn graph_similar_memories(&self, a: &GraphSimilarArgs) -> ToolResult<GraphSimilarAnswer> {
        let t0 = Instant::now();
        let id = a.id.trim();
        check_id(id)?;
        let snap = self.snapshot();
        if snap.memory.key_of(id).is_none() {
            return Err(not_found(id));
        }
        let min = a.min_score.unwrap_or(f32::MIN);
        let mc = a.max_chars.unwrap_or(300).max(1);
        let similar = similar_of(&snap.memory, id)
            .into_iter()
            .filter(|(_, s)| *s >= min)
            .take(limit(a.limit, 10)?)
            .filter_map(|(o, score)| {
                Some(SimilarMemory {
                    memory: short(self, &snap, &snap.memory.key_of(&o)?, mc),
                    score,
                })
            })
            .collect();
        Ok(GraphSimilarAnswer {
            id: id.to_string(),
            similar,
            debug: dbg(a.debug, t0, snap.generation()),
        })
    }

    pub fn graph_subgraph(&self, a: &GraphSubgraphArgs) -> ToolResult<GraphSubgraphAnswer> {
        let t0 = Instant::now();
        let depth = a.depth.unwrap_or(1);
        if !(1..=3).contains(&depth) {
            return Err(ToolError::InvalidInput("`depth` must be 1, 2 or 3".into()));
        }
        let max_nodes = limit_arg(a.limit, 50, 500)?;
        const TYPES: [&str; 4] = ["ABOUT", "MENTIONS", "TAGGED", "SIMILAR"];
        let types: HashSet<String> = match &a.edge_types {
            None => TYPES.iter().map(|s| s.to_string()).collect(),
            Some(v) => {
                let mut out = HashSet::new();
                for t in v {
                    let u = t.trim().to_ascii_uppercase();
                    if !TYPES.contains(&u.as_str()) {
                        return Err(ToolError::InvalidInput(format!(
                            "unknown edge type `{t}`; expected ABOUT, MENTIONS, TAGGED or SIMILAR"
                        )));
                    }
                    out.insert(u);
                }
                out
            }
        };
        let snap = self.snapshot();
        let g = snap.memory.mem_graph(&MemFilter::default());
        let node = a.node.trim();
        let start = if let Some(e) = node.strip_prefix("entity:") {
            GNode::Ent(entity_node(&g, e)?)
        } else if let Some(t) = node.strip_prefix("tag:") {
            let t = format::memory::normalize_tag(t)
                .map_err(|e| ToolError::InvalidInput(e.to_string()))?;
            GNode::Tag(g.tag(&t).ok_or_else(|| ToolError::NotFound {
                message: format!("no active memory has the tag `{t}`"),
                suggestions: vec!["graph_aggregate with group_by=tag".into()],
            })?)
        } else if format::memory::is_uuid(node) {
            GNode::Mem(memory_node(&snap, &g, node)?)
        } else {
            return Err(ToolError::InvalidInput(format!(
                "`node` must be a memory id, `entity:<name>` or `tag:<tag>`, not `{}`",
                node.chars().take(80).collect::<String>()
            )));
        };
        let name = |n: GNode| match n {
            GNode::Mem(m) => format!("memory:{}", g.nodes[m as usize].id),
            GNode::Ent(e) => format!("entity:{}", g.entities[e as usize].name),
            GNode::Tag(t) => format!("tag:{}", g.tags[t as usize].tag),
        };
        // (neighbour, edge type, score); memory-side edges point memory → entity/tag.
        let neighbours = |n: GNode| -> Vec<(GNode, &'static str, Option<f32>)> {
            let mut v = Vec::new();
            match n {
                GNode::Mem(m) => {
                    let node = &g.nodes[m as usize];
                    if let Some(e) = node.about {
                        v.push((GNode::Ent(e), "ABOUT", None));
                    }
                    v.extend(
                        node.mentions
                            .iter()
                            .map(|&e| (GNode::Ent(e), "MENTIONS", None)),
                    );
                    v.extend(node.tags.iter().map(|&t| (GNode::Tag(t), "TAGGED", None)));
                    v.extend(
                        node.similar
                            .iter()
                            .map(|&(o, s)| (GNode::Mem(o), "SIMILAR", Some(s))),
                    );
                }
                GNode::Ent(e) => {
                    let en = &g.entities[e as usize];
                    // Newest memories first, so a limit keeps the most recent context.
                    let mut ms: Vec<(u32, &'static str)> = en
                        .about
                        .iter()
                        .map(|&m| (m, "ABOUT"))
                        .chain(en.mentioned_by.iter().map(|&m| (m, "MENTIONS")))
                        .collect();
                    ms.sort_by_key(|&(m, _)| std::cmp::Reverse(g.nodes[m as usize].created_at));
                    v.extend(ms.into_iter().map(|(m, k)| (GNode::Mem(m), k, None)));
                }
                GNode::Tag(t) => {
                    let mut ms = g.tags[t as usize].memories.clone();
                    ms.sort_by_key(|&m| std::cmp::Reverse(g.nodes[m as usize].created_at));
                    v.extend(ms.into_iter().map(|m| (GNode::Mem(m), "TAGGED", None)));
                }
            }
            v.retain(|(_, k, _)| types.contains(*k));
            v
        };
        let mut depth_of: HashMap<GNode, usize> = HashMap::from([(start, 0)]);
        let mut order = vec![start];
        let mut q = VecDeque::from([start]);
        let mut truncated = false;
        'walk: while let Some(n) = q.pop_front() {
            let d = depth_of[&n];
            if d >= depth {
                continue;
            }
            for (o, _, _) in neighbours(n) {
                if depth_of.contains_key(&o) {
                    continue;
                }
                if order.len() >= max_nodes {
                    truncated = true;
                    break 'walk;
                }
                depth_of.insert(o, d + 1);
                order.push(o);
                q.push_back(o);
            }
        }
        let mut edges = Vec::new();
        let mut seen_sim: HashSet<(u32, u32)> = HashSet::new();
        for &n in &order {
            if let GNode::Mem(m) = n {
                for (o, k, s) in neighbours(n) {
                    if !depth_of.contains_key(&o) {
                        continue;
                    }
                    if let GNode::Mem(x) = o {
                        if !seen_sim.insert((m.min(x), m.max(x))) {
                            continue;
                        }
                    }
                    edges.push(GraphEdgeOut {
                        from: name(n),
                        to: name(o),
                        kind: k.to_string(),
                        score: s,
                    });
                }
            }
        }
        let nodes = order
            .iter()
            .map(|&n| GraphNodeOut {
                id: name(n),
                kind: match n {
                    GNode::Mem(_) => "memory",
                    GNode::Ent(_) => "entity",
                    GNode::Tag(_) => "tag",
                }
                .into(),
                label: match n {
                    GNode::Mem(m) => label(&snap, &g, m),
                    GNode::Ent(e) => g.entities[e as usize].name.clone(),
                    GNode::Tag(t) => g.tags[t as usize].tag.clone(),
                },
                depth: depth_of[&n],
            })
            .collect();
        Ok(GraphSubgraphAnswer {
            nodes,
            edges,
            truncated,
            debug: dbg(a.debug, t0, snap.generation()),
        })
    }

    pub fn graph_aggregate(&self, a: &GraphAggregateArgs) -> ToolResult<GraphAggregateAnswer> {
        let t0 = Instant::now();
        let f = a.filter_args().filter()?;
        let by = a.group_by.trim();
        const GROUPS: [&str; 6] = ["category", "scope", "entity", "tag", "source", "month"];
        if !GROUPS.contains(&by) {
            // Refused up front: with no memory to group, the loop below never checked it.
            return Err(ToolError::InvalidInput(format!(
                "unknown group_by `{}`; expected category, scope, entity, tag, source or month",
                format::memory::clip(by)
            )));
        }
        let snap = self.snapshot();
        let g = snap.memory.mem_graph(&f);
        let mut c: HashMap<String, u32> = HashMap::new();
        for node in &g.nodes {
            let mut add = |k: &str| *c.entry(k.to_string()).or_default() += 1;
            match by {
                "category" => add(&node.category),
                "scope" => add(&node.scope),
                "source" => add(&node.source),
                "entity" => match node.about {
                    Some(e) => add(&g.entities[e as usize].name),
                    None => add("(none)"),
                },
                "tag" => {
                    for &t in &node.tags {
                        add(&g.tags[t as usize].tag);
                    }
                }
                "month" => add(&memory::time::rfc3339(node.created_at)[..7]),
                _ => {} // checked above
            }
        }
        let mut groups: Vec<CountOut> = c
            .into_iter()
            .map(|(name, count)| CountOut { name, count })
            .collect();
        let n_groups = groups.len();
        let keep = limit(a.limit, 20)?;
        if by == "month" {
            // The newest months are kept, listed oldest first.
            groups.sort_by(|x, y| y.name.cmp(&x.name));
            groups.truncate(keep);
            groups.reverse();
        } else {
            groups.sort_by(|x, y| y.count.cmp(&x.count).then(x.name.cmp(&y.name)));
            groups.truncate(keep);
        }
        Ok(GraphAggregateAnswer {
            group_by: by.to_string(),
            total: g.nodes.len(),
            groups_total: (n_groups > keep).then_some(n_groups),
            groups,
            debug: dbg(a.debug, t0, snap.generation()),
        })
    }

    pub fn graph_tag_cooccurrence(
        &self,
        a: &GraphTagCooccurrenceArgs,
    ) -> ToolResult<GraphTagCooccurrenceAnswer> {
        let t0 = Instant::now();
        let f = a.filter_args().filter()?;
        let snap = self.snapshot();
        let g = snap.memory.mem_graph(&f);
        let tag = match a
            .with_tag
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            None => None,
            Some(t) => {
                let t = format::memory::normalize_tag(t)
                    .map_err(|e| ToolError::InvalidInput(e.to_string()))?;
                match g.tag(&t) {
                    Some(i) => Some(i),
                    None => {
                        return Ok(GraphTagCooccurrenceAnswer {
                            memories: g.nodes.len(),
                            pairs: Vec::new(),
                            debug: dbg(a.debug, t0, snap.generation()),
                        })
                    }
                }
            }
        };
        let count = |t: u32| g.tags[t as usize].memories.len() as u32;
        let pairs = g
            .tag_pmi(tag, a.min_count.unwrap_or(2).max(1))
            .into_iter()
            .take(limit(a.limit, 20)?)
            .map(|(x, y, k, pmi)| TagPairOut {
                a: g.tags[x as usize].tag.clone(),
                b: g.tags[y as usize].tag.clone(),
                count: k,
                count_a: count(x),
                count_b: count(y),
                pmi: (pmi * 1e4).round() / 1e4,
            })
            .collect();
        Ok(GraphTagCooccurrenceAnswer {
            memories: g.nodes.len(),
            pairs,
            debug: dbg(a.debug, t0, snap.generation()),
        })
    }

    pub fn graph_entity_network(
        &self,
        a: &GraphEntityNetworkArgs,
    ) -> ToolResult<GraphEntityNetworkAnswer> {
        let t0 = Instant::now();
        let f = a.filter_args().filter()?;
        let snap = self.snapshot();
        let g = snap.memory.mem_graph(&f);
        let min = a.min_count.unwrap_or(1).max(1);
        let lim = limit(a.limit, 20)?;
        let mut edges: Vec<(u32, u32, u32)> =
            match a.center.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
                Some(c) => {
                    let e = entity_node(&g, c)?;
                    g.co_mentioned(e)
                        .into_iter()
                        .map(|(o, k)| (e, o, k))
                        .collect()
                }
                None => g
                    .co_mention_pairs()
                    .into_iter()
                    .map(|((x, y), k)| (x, y, k))
                    .collect(),
            };
        let nm = |e: u32| g.entities[e as usize].name.as_str();
        edges.retain(|e| e.2 >= min);
        edges.sort_by(|x, y| {
            y.2.cmp(&x.2)
                .then_with(|| nm(x.0).cmp(nm(y.0)))
                .then_with(|| nm(x.1).cmp(nm(y.1)))
        });
        edges.truncate(lim);
        let mut ents: Vec<u32> = edges.iter().flat_map(|e| [e.0, e.1]).collect();
        if let Some(c) = a.center.as_deref().and_then(|c| g.entity(c)) {
            ents.insert(0, c);
        }
        let mut seen = HashSet::new();
        ents.retain(|e| seen.insert(*e));
        Ok(GraphEntityNetworkAnswer {
            entities: ents
                .iter()
                .map(|&e| EntityOut {
                    name: nm(e).to_string(),
                    about: g.entities[e as usize].about.len(),
                    mentioned_by: g.entities[e as usize].mentioned_by.len(),
                })
                .collect(),
            edges: edges
                .into_iter()
                .map(|(x, y, k)| EntityEdgeOut {
                    a: nm(x).to_string(),
                    b: nm(y).to_string(),
                    count: k,
                })
                .collect(),
            debug: dbg(a.debug, t0, snap.generation()),
        })
    }

    pub fn graph_path_between_entities(&self, a: &GraphPathArgs) -> ToolResult<GraphPathAnswer> {
        let t0 = Instant::now();
        let max_hops = a.max_hops.unwrap_or(4);
        if !(1..=8).contains(&max_hops) {
            return Err(ToolError::InvalidInput("`max_hops` must be 1 to 8".into()));
        }
        let snap = self.snapshot();
        let g = snap.memory.mem_graph(&MemFilter::default());
        let from = entity_node(&g, &a.from)?;
        let to = entity_node(&g, &a.to)?;
        let path = g.entity_path(from, to, max_hops);
        let steps = path
            .iter()
            .flatten()
            .map(|s| match *s {
                PathStep::Entity(e) => PathStepOut {
                    kind: "entity".into(),
                    id: g.entities[e as usize].name.clone(),
                    text: None,
                },
                PathStep::Memory(m) => PathStepOut {
                    kind: "memory".into(),
                    id: g.nodes[m as usize].id.clone(),
                    text: Some(label(&snap, &g, m)),
                },
            })
            .collect();
        Ok(GraphPathAnswer {
            from: g.entities[from as usize].name.clone(),
            to: g.entities[to as usize].name.clone(),
            found: path.is_some(),
            hops: path.as_ref().map(|p| p.len() / 2),
            path: steps,
            debug: dbg(a.debug, t0, snap.generation()),
        })
    }
}
