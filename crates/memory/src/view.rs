//! The memory half of a snapshot: the memory segments of one index generation, the delta of
//! live writes on top, and per segment what the delta shadows. Immutable once built; a write
//! builds the next view ([`MemoryView::with_applied`]) and the engine publishes it.

use std::sync::{Arc, OnceLock};

use format::memory::MemoryRecord;
use format::Index;

use crate::delta::{find_in_segments, mem_states, shadow, Delta, MemSegState};
use crate::filter::{MemFilter, MemKey};
use crate::graph::MemGraph;
use crate::wal::WalOp;

pub struct MemoryView {
    /// The index generation whose memory segments this view reads (shared with the code view).
    pub index: Arc<Index>,
    /// Memories written since the last flush.
    pub delta: Delta,
    /// Per memory segment: tombstoned or shadowed records, and inactive ones.
    pub mem: Arc<Vec<MemSegState>>,
    /// The graph of the active memories, built on first use (see [`MemoryView::mem_graph`]).
    pub graph: OnceLock<Arc<MemGraph>>,
}

impl std::fmt::Debug for MemoryView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryView")
            .field("generation", &self.index.manifest.generation)
            .field("delta", &self.delta.entries.len())
            .finish()
    }
}

impl MemoryView {
    /// `index`'s memory segments with `delta` on top.
    pub fn new(index: Arc<Index>, delta: Delta) -> MemoryView {
        let mem = Arc::new(mem_states(&index, &delta.shadowed));
        MemoryView {
            index,
            delta,
            mem,
            graph: OnceLock::new(),
        }
    }

    /// This view with logged operations (lsn, op) applied: the write path's next view.
    pub fn with_applied<'a>(&self, ops: impl IntoIterator<Item = (u64, &'a WalOp)>) -> MemoryView {
        let mut delta = self.delta.clone();
        let mut mem = None;
        for (lsn, op) in ops {
            if let Some(id) = delta.apply(lsn, op, |id| find_in_segments(&self.index, id).is_some())
            {
                let m = mem.get_or_insert_with(|| (*self.mem).clone());
                shadow(&self.index, m, &id);
            }
        }
        MemoryView {
            index: Arc::clone(&self.index),
            delta,
            mem: mem.map(Arc::new).unwrap_or_else(|| Arc::clone(&self.mem)),
            graph: OnceLock::new(),
        }
    }

    /// The memory graph of the memories passing `f`: cached for the default filter (active
    /// memories), built for this call otherwise.
    pub fn mem_graph(&self, f: &MemFilter) -> Arc<MemGraph> {
        if f.is_default() {
            Arc::clone(
                self.graph.get_or_init(|| {
                    Arc::new(MemGraph::build(&self.index, &self.mem, &self.delta, f))
                }),
            )
        } else {
            Arc::new(MemGraph::build(&self.index, &self.mem, &self.delta, f))
        }
    }

    /// Where the current version of memory `id` is: the delta, else the segments.
    pub fn key_of(&self, id: &str) -> Option<MemKey> {
        if let Some(e) = self.delta.entries.get(id) {
            return Some(MemKey::Delta(Arc::clone(e)));
        }
        if self.delta.shadowed.contains(id) {
            return None;
        }
        find_in_segments(&self.index, id).map(|(si, c)| MemKey::Segment(si, c))
    }

    /// The record at `key` (a key of this view).
    pub fn record_of(&self, key: &MemKey) -> MemoryRecord {
        match key {
            MemKey::Delta(e) => e.record.clone(),
            MemKey::Segment(si, c) => self.index.memory[*si]
                .segment
                .memories()
                .expect("a memory key names a memory segment")
                .memories[*c as usize]
                .to_record(),
        }
    }

    /// The current version of memory `id`, with its vector: from the delta, else the segments.
    pub fn lookup(&self, id: &str) -> Option<(MemoryRecord, Vec<f32>)> {
        if let Some(e) = self.delta.entries.get(id) {
            return Some((e.record.clone(), e.vector.clone()));
        }
        if self.delta.shadowed.contains(id) {
            return None; // deleted since the last flush
        }
        let (si, c) = find_in_segments(&self.index, id)?;
        let seg = &self.index.memory[si].segment;
        let m = seg.memories()?.memories.get(c as usize)?;
        let rec: MemoryRecord = m.to_record();
        Some((rec, seg.vector(c)?.to_vec()))
    }

    /// Every live memory matching `f`: segments in order, then the delta.
    pub fn all_memories(&self, f: &MemFilter) -> Vec<MemoryRecord> {
        let mut out = Vec::new();
        for (si, ls) in self.index.memory.iter().enumerate() {
            let Some(t) = ls.segment.memories() else {
                continue;
            };
            for (i, m) in t.memories.iter().enumerate() {
                if self.mem[si].dead.contains(i as u32) || !f.matches(m) {
                    continue;
                }
                out.push(m.to_record());
            }
        }
        for e in self.delta.entries.values() {
            if f.matches(&e.record) {
                out.push(e.record.clone());
            }
        }
        out
    }
}
