//! The memory graph: memories, entities and tags as nodes.
//!
//! Edges:
//! - `ABOUT` memory → entity: the memory's `entity` field;
//! - `MENTIONS` memory → entity: the entity's words appear, in order, in the memory's text
//!   (case-insensitive, whole words), for every entity some memory is about;
//! - `TAGGED` memory → tag;
//! - `SIMILAR` memory ↔ memory: stored on the record when its text was written (its
//!   [`format::memory::SIMILAR_K`] nearest live memories with cosine ≥ [`format::memory::SIMILAR_MIN`]; see [`crate::similar::similar_for`]);
//!   both directions are edges;
//! - entity co-mention: two entities linked (about or mentioned) by the same memory, weighted
//!   by the number of such memories; tag co-occurrence: two tags on the same memory.
//!
//! SIMILAR edges are data (logged, flushed, exported). Everything else is derived from the
//! records: [`MemGraph::build`] scans the live memories of a snapshot once (O(memories)) and
//! the unfiltered graph is cached on the snapshot, so the graph tools pay it once per
//! snapshot generation; filtered graphs (scope, category, …) are built per call.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use format::Index;

use crate::delta::{Delta, MemSegState};
use crate::filter::{MemFields, MemFilter, MemKey};

/// Lower-case words of `s` (letters, digits, `_`), the unit of entity mention matching.
fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// The key of an entity: its words, lower-case, joined by one space.
pub fn entity_key(e: &str) -> String {
    words(e).join(" ")
}

/// Per node while building: its text, its entity, its outgoing SIMILAR edges.
type Pending = (String, String, Vec<(String, f32)>);

/// A memory node.
#[derive(Debug, Clone)]
pub struct MemNode {
    pub key: MemKey,
    pub id: String,
    pub created_at: i64,
    pub category: String,
    pub scope: String,
    pub source: String,
    /// Entity it is about.
    pub about: Option<u32>,
    /// Entities its text mentions (the `about` entity excluded).
    pub mentions: Vec<u32>,
    pub tags: Vec<u32>,
    /// SIMILAR neighbours (both directions), best first.
    pub similar: Vec<(u32, f32)>,
}

impl MemNode {
    /// Every entity linked to the memory (about first).
    pub fn entities(&self) -> impl Iterator<Item = u32> + '_ {
        self.about.into_iter().chain(self.mentions.iter().copied())
    }
}

#[derive(Debug, Clone)]
pub struct EntityNode {
    /// As first written.
    pub name: String,
    /// Memories about it and memories mentioning it, ascending.
    pub about: Vec<u32>,
    pub mentioned_by: Vec<u32>,
}

impl EntityNode {
    /// Every memory linked to the entity, ascending, without repeats.
    pub fn memories(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .about
            .iter()
            .chain(&self.mentioned_by)
            .copied()
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

#[derive(Debug, Clone)]
pub struct TagNode {
    pub tag: String,
    pub memories: Vec<u32>,
}

/// The graph of a set of memories (see the module doc).
#[derive(Debug, Default)]
pub struct MemGraph {
    pub nodes: Vec<MemNode>,
    pub entities: Vec<EntityNode>,
    pub tags: Vec<TagNode>,
    by_id: HashMap<String, u32>,
    entity_by_key: HashMap<String, u32>,
    tag_by_name: HashMap<String, u32>,
}

impl MemGraph {
    /// The graph of the live memories that pass `f`: those of `index`'s memory segments not
    /// marked in `mem` (a view's per-segment states) and those of `delta`.
    pub fn build(index: &Index, mem: &[MemSegState], delta: &Delta, f: &MemFilter) -> MemGraph {
        let mut g = MemGraph::default();
        let mut pending: Vec<Pending> = Vec::new();
        let only_active = f.states == ["active"];
        let default = f.is_default();
        for (si, ls) in index.memory.iter().enumerate() {
            let Some(t) = ls.segment.memories() else {
                continue;
            };
            let skip = if only_active {
                &mem[si].hidden
            } else {
                &mem[si].dead
            };
            for (i, m) in t.memories.iter().enumerate() {
                if skip.contains(i as u32) || (!default && !f.matches(m)) {
                    continue;
                }
                g.add_node(
                    MemKey::Segment(si, i as u32),
                    m.id.as_str(),
                    m,
                    m.tags.iter().map(|t| t.as_str()),
                );
                pending.push((
                    m.text.to_string(),
                    m.entity.to_string(),
                    m.similar
                        .iter()
                        .map(|s| (s.id.to_string(), s.score.to_native()))
                        .collect(),
                ));
            }
        }
        for e in delta.entries.values() {
            let r = &e.record;
            if !f.matches(r) {
                continue;
            }
            g.add_node(
                MemKey::Delta(Arc::clone(e)),
                &r.id,
                r,
                r.tags.iter().map(String::as_str),
            );
            pending.push((
                r.text.clone(),
                r.entity.clone(),
                r.similar.iter().map(|s| (s.id.clone(), s.score)).collect(),
            ));
        }
        // Entities: every non-empty `entity` value, keyed case-insensitively.
        for (n, (_, entity, _)) in pending.iter().enumerate() {
            let key = entity_key(entity);
            if key.is_empty() {
                continue;
            }
            let next = g.entities.len() as u32;
            let ei = *g.entity_by_key.entry(key).or_insert(next);
            if ei == next {
                g.entities.push(EntityNode {
                    name: entity.trim().to_string(),
                    about: Vec::new(),
                    mentioned_by: Vec::new(),
                });
            }
            g.entities[ei as usize].about.push(n as u32);
            g.nodes[n].about = Some(ei);
        }
        // Mentions: entity word sequences found in the text, indexed by first word.
        let mut by_first: HashMap<String, Vec<(u32, Vec<String>)>> = HashMap::new();
        for (k, &ei) in &g.entity_by_key {
            let w: Vec<String> = k.split(' ').map(str::to_string).collect();
            by_first.entry(w[0].clone()).or_default().push((ei, w));
        }
        for (n, (text, _, _)) in pending.iter().enumerate() {
            let tw = words(text);
            let mut found: Vec<u32> = Vec::new();
            for (i, w) in tw.iter().enumerate() {
                for (ei, ew) in by_first.get(w).into_iter().flatten() {
                    if tw.len() - i >= ew.len() && tw[i..i + ew.len()] == ew[..] {
                        found.push(*ei);
                    }
                }
            }
            found.sort_unstable();
            found.dedup();
            found.retain(|e| Some(*e) != g.nodes[n].about);
            for &ei in &found {
                g.entities[ei as usize].mentioned_by.push(n as u32);
            }
            g.nodes[n].mentions = found;
        }
        // SIMILAR, both directions, among the graph's nodes.
        for (n, (_, _, sims)) in pending.iter().enumerate() {
            for (id, score) in sims {
                if let Some(&m) = g.by_id.get(id) {
                    if m != n as u32 {
                        g.nodes[n].similar.push((m, *score));
                        g.nodes[m as usize].similar.push((n as u32, *score));
                    }
                }
            }
        }
        for node in &mut g.nodes {
            node.similar
                .sort_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)));
            node.similar.dedup_by_key(|x| x.0);
            node.similar
                .sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        }
        g
    }

    fn add_node<'a>(
        &mut self,
        key: MemKey,
        id: &str,
        m: &impl MemFields,
        tags: impl Iterator<Item = &'a str>,
    ) {
        let n = self.nodes.len() as u32;
        let mut tis = Vec::new();
        for t in tags {
            let next = self.tags.len() as u32;
            let ti = *self.tag_by_name.entry(t.to_string()).or_insert(next);
            if ti == next {
                self.tags.push(TagNode {
                    tag: t.to_string(),
                    memories: Vec::new(),
                });
            }
            self.tags[ti as usize].memories.push(n);
            tis.push(ti);
        }
        self.by_id.insert(id.to_string(), n);
        self.nodes.push(MemNode {
            key,
            id: id.to_string(),
            created_at: m.created_at(),
            category: m.category().to_string(),
            scope: m.scope().to_string(),
            source: m.source().to_string(),
            about: None,
            mentions: Vec::new(),
            tags: tis,
            similar: Vec::new(),
        });
    }

    pub fn node(&self, id: &str) -> Option<u32> {
        self.by_id.get(id).copied()
    }

    pub fn entity(&self, name: &str) -> Option<u32> {
        self.entity_by_key.get(&entity_key(name)).copied()
    }

    pub fn tag(&self, tag: &str) -> Option<u32> {
        self.tag_by_name.get(tag).copied()
    }

    /// Entities co-mentioned with entity `e`: (entity, memories linking both), most first.
    pub fn co_mentioned(&self, e: u32) -> Vec<(u32, u32)> {
        let mut c: HashMap<u32, u32> = HashMap::new();
        for n in self.entities[e as usize].memories() {
            for o in self.nodes[n as usize].entities() {
                if o != e {
                    *c.entry(o).or_default() += 1;
                }
            }
        }
        let mut v: Vec<(u32, u32)> = c.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }

    /// Every co-mentioned entity pair (a < b) with its count.
    pub fn co_mention_pairs(&self) -> HashMap<(u32, u32), u32> {
        let mut c: HashMap<(u32, u32), u32> = HashMap::new();
        for node in &self.nodes {
            let mut es: Vec<u32> = node.entities().collect();
            es.sort_unstable();
            es.dedup();
            for i in 0..es.len() {
                for j in i + 1..es.len() {
                    *c.entry((es[i], es[j])).or_default() += 1;
                }
            }
        }
        c
    }

    /// Tag pairs (a < b by name order of index) on at least `min_count` memories, with
    /// count and PMI = ln(n_ab · N / (n_a · n_b)), best PMI first (then count, then names).
    /// With `tag`, only pairs containing it.
    pub fn tag_pmi(&self, tag: Option<u32>, min_count: u32) -> Vec<(u32, u32, u32, f64)> {
        let mut c: HashMap<(u32, u32), u32> = HashMap::new();
        for node in &self.nodes {
            let ts = &node.tags;
            for i in 0..ts.len() {
                for j in i + 1..ts.len() {
                    let (a, b) = (ts[i].min(ts[j]), ts[i].max(ts[j]));
                    if tag.is_none_or(|t| t == a || t == b) {
                        *c.entry((a, b)).or_default() += 1;
                    }
                }
            }
        }
        let n = self.nodes.len() as f64;
        let mut v: Vec<(u32, u32, u32, f64)> = c
            .into_iter()
            .filter(|&(_, k)| k >= min_count)
            .map(|((a, b), k)| {
                let na = self.tags[a as usize].memories.len() as f64;
                let nb = self.tags[b as usize].memories.len() as f64;
                (a, b, k, (f64::from(k) * n / (na * nb)).ln())
            })
            .collect();
        v.sort_by(|x, y| {
            y.3.total_cmp(&x.3)
                .then(y.2.cmp(&x.2))
                .then_with(|| {
                    self.tags[x.0 as usize]
                        .tag
                        .cmp(&self.tags[y.0 as usize].tag)
                })
                .then_with(|| {
                    self.tags[x.1 as usize]
                        .tag
                        .cmp(&self.tags[y.1 as usize].tag)
                })
        });
        v
    }

    /// Memories sharing entities or tags with memory `n`: (memory, shared entities, shared
    /// tags, score). Score: 1 per shared entity plus, per shared tag, ln(1 + N / n_tag) /
    /// ln(1 + N) (rare tags count more, a tag on every memory ~0.1 at N=1000).
    pub fn related(&self, n: u32) -> Vec<(u32, Vec<u32>, Vec<u32>, f64)> {
        let me = &self.nodes[n as usize];
        let total = self.nodes.len() as f64;
        let mut acc: HashMap<u32, (Vec<u32>, Vec<u32>, f64)> = HashMap::new();
        let mut es: Vec<u32> = me.entities().collect();
        es.sort_unstable();
        es.dedup();
        for e in es {
            for o in self.entities[e as usize].memories() {
                if o != n {
                    let a = acc.entry(o).or_default();
                    a.0.push(e);
                    a.2 += 1.0;
                }
            }
        }
        for &t in &me.tags {
            let mems = &self.tags[t as usize].memories;
            let w = (1.0 + total / mems.len() as f64).ln() / (1.0 + total).ln();
            for &o in mems {
                if o != n {
                    let a = acc.entry(o).or_default();
                    a.1.push(t);
                    a.2 += w;
                }
            }
        }
        let mut v: Vec<(u32, Vec<u32>, Vec<u32>, f64)> =
            acc.into_iter().map(|(o, (e, t, s))| (o, e, t, s)).collect();
        v.sort_by(|a, b| {
            b.3.total_cmp(&a.3).then(
                self.nodes[b.0 as usize]
                    .created_at
                    .cmp(&self.nodes[a.0 as usize].created_at),
            )
        });
        v
    }

    /// Shortest path between two entities over co-mention (entity – memory – entity), as
    /// alternating entity and memory nodes: [e0, m0, e1, m1, …, ek]. Breadth first; among
    /// equal-length paths the one through the newest memories at each hop is kept. At most
    /// `max_hops` entity-to-entity hops.
    pub fn entity_path(&self, from: u32, to: u32, max_hops: usize) -> Option<Vec<PathStep>> {
        if from == to {
            return Some(vec![PathStep::Entity(from)]);
        }
        let mut prev: HashMap<u32, (u32, u32)> = HashMap::new(); // entity → (prev entity, via memory)
        let mut seen: HashSet<u32> = HashSet::from([from]);
        let mut q = VecDeque::from([(from, 0usize)]);
        while let Some((e, d)) = q.pop_front() {
            if d >= max_hops {
                continue;
            }
            let mut mems = self.entities[e as usize].memories();
            mems.sort_by_key(|&m| std::cmp::Reverse(self.nodes[m as usize].created_at));
            for m in mems {
                for o in self.nodes[m as usize].entities() {
                    if seen.insert(o) {
                        prev.insert(o, (e, m));
                        if o == to {
                            let mut path = vec![PathStep::Entity(to)];
                            let mut cur = to;
                            while cur != from {
                                let (p, via) = prev[&cur];
                                path.push(PathStep::Memory(via));
                                path.push(PathStep::Entity(p));
                                cur = p;
                            }
                            path.reverse();
                            return Some(path);
                        }
                        q.push_back((o, d + 1));
                    }
                }
            }
        }
        None
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathStep {
    Entity(u32),
    Memory(u32),
}
