//! Memories: live writes through a write-ahead log into an in-memory delta, flushed into
//! immutable memory segments.
//!
//! Write path (`Engine::write_memories`): validate → embed (outside any lock) → under the
//! writer lock: append to `memory.wal` and fsync ([`wal`]) → apply to a copy of the delta
//! (persistent maps: the copy shares almost everything) → publish a new snapshot. The write is
//! acknowledged after the publish, so it is durable *and* visible. Readers load the snapshot
//! with one atomic pointer read and never wait for a writer.
//!
//! Flush (`Engine::flush_memories`, when the delta holds `flush_at` memories, and on clean
//! shutdown): under the writer lock and the index directory lock, the delta becomes a memory
//! segment; superseded or deleted records of older memory segments get tombstones; `MANIFEST`
//! records the segment and `memory_lsn`; the snapshot is swapped to the new index with an empty
//! delta; then the log is truncated. A crash anywhere in between replays the log on start and
//! skips what `memory_lsn` says is already in a segment.

pub mod code_tools;
pub mod coderefs;
pub mod graph;
pub mod graph_tools;
pub mod search;
pub mod tools;
pub mod wal;

use std::sync::Arc;

use format::bm25::{document_terms, DocFields};
use format::manifest::Index;
use format::memory::{MemoryRecord, MEMORY_PATH, MEMORY_SYMBOL_PREFIX};
use roaring::RoaringBitmap;

use wal::WalOp;

/// Delta size (memories) that triggers a flush into a segment. The delta is searched by exact
/// scan over individually allocated entries (memory-latency bound, ~0.55 µs per memory on the
/// 2-core dev machine: 5.7 ms at 10,000), so it is kept small; a flush of 2,000 takes ~0.1 s.
pub const DEFAULT_FLUSH_AT: usize = 2_000;

/// A memory in the delta with what search needs: its vector and its BM25 terms.
#[derive(Debug)]
pub struct Entry {
    pub record: MemoryRecord,
    pub vector: Vec<f32>,
    /// Sorted (term, tf), as the segment writer would index the record.
    pub terms: Vec<(String, u32)>,
    pub len: u32,
    /// Position in [`Delta::slots`].
    pub slot: u32,
}

impl Entry {
    pub fn new(record: MemoryRecord, vector: Vec<f32>) -> Entry {
        let tags = record.tags.join(" ");
        let (terms, len) = document_terms(&DocFields {
            text: &record.text,
            path: MEMORY_PATH,
            name: &record.entity,
            qualified: &tags,
        });
        Entry {
            record,
            vector,
            terms,
            len,
            slot: 0,
        }
    }

    pub fn tf(&self, term: &str) -> u32 {
        self.terms
            .binary_search_by(|(t, _)| t.as_str().cmp(term))
            .map_or(0, |i| self.terms[i].1)
    }
}

/// The memories written since the last flush. Cloning is O(1) and an update O(log n) per
/// touched key (persistent maps), so every write publishes a new version cheaply.
#[derive(Debug, Clone, Default)]
pub struct Delta {
    /// By id; ids are time-ordered UUIDs, so this is creation order.
    pub entries: imbl::OrdMap<String, Arc<Entry>>,
    /// Every entry ever added since the flush, by slot; `None` once replaced or deleted.
    pub slots: imbl::Vector<Option<Arc<Entry>>>,
    /// BM25 postings of the live entries: term → slot → tf.
    pub postings: imbl::HashMap<String, imbl::OrdMap<u32, u32>>,
    /// Sum of the entries' BM25 document lengths.
    pub total_len: u64,
    /// Reverse SIMILAR edges of the live entries: target id → slots whose record has an edge
    /// to it.
    pub similar_in: imbl::HashMap<String, imbl::OrdSet<u32>>,
    /// Ids whose copy in a memory segment is superseded (updated) or deleted.
    pub shadowed: imbl::OrdSet<String>,
    /// Sequence number of the last applied log record.
    pub last_lsn: u64,
}

impl Delta {
    fn unlink(&mut self, old: &Entry) {
        self.total_len -= u64::from(old.len);
        self.slots.set(old.slot as usize, None);
        for (t, _) in &old.terms {
            if let Some(pl) = self.postings.get_mut(t) {
                pl.remove(&old.slot);
                if pl.is_empty() {
                    self.postings.remove(t);
                }
            }
        }
        for s in &old.record.similar {
            if let Some(set) = self.similar_in.get_mut(&s.id) {
                set.remove(&old.slot);
                if set.is_empty() {
                    self.similar_in.remove(&s.id);
                }
            }
        }
    }

    /// Applies one logged operation. `in_segments` says whether an id has a live copy in a
    /// memory segment (which the operation then shadows). Returns the shadowed id, if any.
    pub fn apply(
        &mut self,
        lsn: u64,
        op: &WalOp,
        in_segments: impl Fn(&str) -> bool,
    ) -> Option<String> {
        self.last_lsn = self.last_lsn.max(lsn);
        let id = match op {
            WalOp::Put { record, vector } => {
                if let Some(old) = self.entries.remove(&record.id) {
                    self.unlink(&old);
                }
                let mut e = Entry::new((**record).clone(), vector.clone());
                e.slot = self.slots.len() as u32;
                for (t, tf) in &e.terms {
                    self.postings
                        .entry(t.clone())
                        .or_default()
                        .insert(e.slot, *tf);
                }
                self.total_len += u64::from(e.len);
                for s in &e.record.similar {
                    self.similar_in
                        .entry(s.id.clone())
                        .or_default()
                        .insert(e.slot);
                }
                let e = Arc::new(e);
                self.slots.push_back(Some(Arc::clone(&e)));
                self.entries.insert(record.id.clone(), e);
                &record.id
            }
            WalOp::Delete { id } => {
                if let Some(old) = self.entries.remove(id) {
                    self.unlink(&old);
                }
                id
            }
        };
        if !self.shadowed.contains(id) && in_segments(id) {
            self.shadowed.insert(id.clone());
            return Some(id.clone());
        }
        None
    }

    /// The live entry in `slot`.
    pub fn slot(&self, slot: u32) -> Option<&Arc<Entry>> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }
}

/// Per memory segment: what search must not return.
#[derive(Debug, Clone, Default)]
pub struct MemSegState {
    /// Tombstoned or shadowed by the delta.
    pub dead: RoaringBitmap,
    /// `dead` plus records whose state is not `active` (the default search filter).
    pub hidden: RoaringBitmap,
}

/// The live copy of memory `id` in the memory segments: (segment, chunk), newest segment
/// first.
pub fn find_in_segments(index: &Index, id: &str) -> Option<(usize, u32)> {
    let sym = format!("{MEMORY_SYMBOL_PREFIX}{id}");
    index.memory.iter().enumerate().rev().find_map(|(si, ls)| {
        ls.segment
            .table()
            .symbol_chunks(&sym)
            .find(|c| !ls.tombstones.contains(*c))
            .map(|c| (si, c))
    })
}

/// Computes every memory segment's [`MemSegState`] for `shadowed` ids.
pub fn mem_states(index: &Index, shadowed: &imbl::OrdSet<String>) -> Vec<MemSegState> {
    let mut out: Vec<MemSegState> = index
        .memory
        .iter()
        .map(|ls| {
            let mut inactive = RoaringBitmap::new();
            if let Some(t) = ls.segment.memories() {
                for (i, m) in t.memories.iter().enumerate() {
                    if m.state.as_str() != "active" {
                        inactive.insert(i as u32);
                    }
                }
            }
            MemSegState {
                dead: ls.tombstones.clone(),
                hidden: &ls.tombstones | &inactive,
            }
        })
        .collect();
    for id in shadowed {
        shadow(index, &mut out, id);
    }
    out
}

/// Marks the segment copies of `id` dead.
pub fn shadow(index: &Index, states: &mut [MemSegState], id: &str) {
    let sym = format!("{MEMORY_SYMBOL_PREFIX}{id}");
    for (si, ls) in index.memory.iter().enumerate() {
        for c in ls.segment.table().symbol_chunks(&sym) {
            states[si].dead.insert(c);
            states[si].hidden.insert(c);
        }
    }
}

/// fsyncs the directory holding `path` (after creating a file in it). Best effort.
pub fn sync_parent(path: &std::path::Path) {
    if let Some(d) = path.parent() {
        if let Ok(f) = std::fs::File::open(d) {
            let _ = f.sync_all();
        }
    }
}

pub use format::memory::now_ms;

/// A new time-ordered memory id.
pub fn new_id() -> String {
    uuid::Uuid::now_v7().hyphenated().to_string()
}
