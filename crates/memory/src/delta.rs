//! The delta: memories written since the last flush, in persistent maps (a copy per write
//! shares almost everything), with the BM25 terms and reverse SIMILAR links search needs; and,
//! per memory segment, which records the delta shadows or that are tombstoned.

use std::sync::Arc;

use format::bm25::{document_terms, DocFields};
use format::manifest::Index;
use format::memory::{MemoryRecord, MEMORY_PATH, MEMORY_SYMBOL_PREFIX};
use roaring::RoaringBitmap;

use crate::wal::WalOp;

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
    /// Ids deleted since the flush, with when the delete was applied (Unix ms): when it was
    /// made, or for a delete replayed after a restart, when it was replayed (the log does not
    /// record the time). A flush records them in `MANIFEST`'s `deleted_memories`.
    pub deleted_at: imbl::HashMap<String, i64>,
    /// Sequence number of the last applied log record.
    pub last_lsn: u64,
}

impl Delta {
    /// Live entries holding `term` (already tokenized).
    pub fn df(&self, term: &str) -> u32 {
        self.postings.get(term).map_or(0, |pl| pl.len() as u32)
    }

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
                self.deleted_at.remove(&record.id);
                &record.id
            }
            WalOp::Delete { id } => {
                if let Some(old) = self.entries.remove(id) {
                    self.unlink(&old);
                }
                self.deleted_at.insert(id.clone(), format::memory::now_ms());
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
