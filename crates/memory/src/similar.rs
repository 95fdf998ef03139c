//! SIMILAR links: computed for new vectors at write time ([`similar_for`]) and stored on the
//! records; read in reverse ([`similar_to`]) from the delta's map and the segments' tables.

use std::collections::HashSet;

use format::memory::{Similar, SIMILAR_K, SIMILAR_MIN};

use crate::view::MemoryView;

/// SIMILAR edges for new vectors (`vectors.len() / dim` of them, written together): each
/// one's [`SIMILAR_K`] nearest active memories of `snap` and of the earlier vectors of the
/// batch, with cosine ≥ [`SIMILAR_MIN`]. `ids[i]` is the memory of vector `i`; a memory is
/// never similar to itself (an update re-computes its edges against everything else).
pub fn similar_for(
    snap: &MemoryView,
    ids: &[String],
    vectors: &[f32],
    dim: usize,
    nprobe: usize,
) -> Vec<Vec<Similar>> {
    let n = ids.len();
    let own: HashSet<&str> = ids.iter().map(String::as_str).collect();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let q = &vectors[i * dim..(i + 1) * dim];
        let mut cands: Vec<(String, f32)> = Vec::new();
        // Segments: deny tombstoned, shadowed and inactive records; ask for a few more than
        // K in case some of them are this batch's own (updated) ids.
        let want = SIMILAR_K + own.len().min(SIMILAR_K);
        for (si, ls) in snap.index.memory.iter().enumerate() {
            let Some(t) = ls.segment.memories() else {
                continue;
            };
            let hits = ls
                .segment
                .search_vectors(q, want, nprobe, None, Some(&snap.mem[si].hidden))
                .unwrap_or_default();
            for (c, s) in hits {
                if let Some(m) = t.memories.get(c as usize) {
                    if !own.contains(m.id.as_str()) {
                        cands.push((m.id.to_string(), s));
                    }
                }
            }
        }
        for e in snap.delta.entries.values() {
            if e.record.state == "active" && !own.contains(e.record.id.as_str()) {
                let s = format::vectors::dot(&e.vector, q);
                if s >= SIMILAR_MIN {
                    cands.push((e.record.id.clone(), s));
                }
            }
        }
        for j in 0..i {
            let s = format::vectors::dot(&vectors[j * dim..(j + 1) * dim], q);
            if ids[j] != ids[i] {
                cands.push((ids[j].clone(), s));
            }
        }
        out.push(format::memory::pick_similar(cands));
    }
    out
}

/// Ids of the live memories with a SIMILAR edge to `id` (the reverse direction of the
/// records' edges), with the edge's score, from the delta and the memory segments.
pub fn similar_to(snap: &MemoryView, id: &str) -> Vec<(String, f32)> {
    let mut out = Vec::new();
    if let Some(srcs) = snap.delta.similar_in.get(id) {
        for &slot in srcs {
            if let Some(e) = snap.delta.slot(slot) {
                if let Some(s) = e.record.similar.iter().find(|s| s.id == id) {
                    out.push((e.record.id.clone(), s.score));
                }
            }
        }
    }
    for (si, ls) in snap.index.memory.iter().enumerate() {
        let Some(t) = ls.segment.memories() else {
            continue;
        };
        for c in t.similar_to(id) {
            if snap.mem[si].dead.contains(c) {
                continue;
            }
            let m = &t.memories[c as usize];
            if let Some(s) = m.similar.iter().find(|s| s.id.as_str() == id) {
                out.push((m.id.to_string(), s.score.to_native()));
            }
        }
    }
    out
}
