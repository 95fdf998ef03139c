//! Unchanged files whose edges resolve differently now.
//!
//! A build writes only the files whose bytes changed, yet it resolves the calls and imports
//! of every file against the whole tree. A change elsewhere can move where an unchanged
//! file's call or import leads: a definition added, removed or renamed in another file, an
//! import that now finds its module, a second candidate that makes an `exact` edge ambiguous.
//! The edges the live index stores for such a file were resolved against the old tree, and
//! nothing at read time can tell (readers map an edge to a tombstoned symbol onto its live
//! version by symbol id, which keeps edges to changed symbols, not edges that should now lead
//! elsewhere or exist at all). [`stale_files`] compares, for each unchanged file, its edges
//! as resolved now with those stored, and names the files whose edges differ: the build
//! writes them again (their vectors are reused by content hash, so nothing is embedded) and
//! tombstones their old versions, so an incremental build stores the graph a build from
//! scratch would.
//!
//! Edges are compared by meaning, not by node numbers: per source (the file node, or a chunk
//! by its place in the file: the same bytes give the same chunks), the edge kind, the target
//! (a symbol id, a file path, or a chunk of the same file without a symbol id by its place)
//! and whether the edge is resolved. CALLS and IMPORTS only: CONTAINS edges stay within the
//! file and follow from its bytes alone. Edges to a chunk of another file that has no symbol
//! id are left out on both sides: a build stores them only when both ends share a segment.
//!
//! Nothing is relinked while resolution did not read every file the index keeps (a build of
//! some of the index's repositories, such as `indexer build` of one root of a multi-root index:
//! edges into the others would be lost), nor while it read a file that the index does not hold as read
//! (changed or new on disk outside the build's `only` scope, so not written): edges resolved
//! against it could name symbols the index does not have, or drop edges to symbols it still
//! holds (a call that the unwritten file made ambiguous). They move with the first build
//! that relinks again: every build compares every unchanged file.
//!
//! What it costs: resolution already ran over the whole tree; this reads the stored edges of
//! every unchanged file once (the segments' maps) and rewrites only the files that differ. A
//! change to a name that many files call by name alone (a definition that makes a name
//! unique, or no longer unique, in its language) rewrites all of those callers; their vectors
//! are reused, so nothing is embedded. An index built by a version that resolved differently
//! is relinked where it differs by the first build that changes anything.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use format::graph::Direction;
use format::records::{self as rec};
use format::Index;
use rayon::prelude::*;

use super::parsed::Parsed;
use crate::graph::{EdgeKind, NodeRef, ResolvedEdge};

/// The source of an edge within its file: the file node, or a chunk by its place.
const FILE_NODE: u32 = u32::MAX;

/// Where an edge leads, by meaning.
#[derive(Hash)]
enum Target<'a> {
    Symbol(&'a str),
    File(&'a str),
    /// A chunk without a symbol id in the source's own file, by its place.
    Local(u32),
}

fn key(src: u32, kind: u8, target: Target<'_>, resolved: bool) -> u64 {
    let mut h = DefaultHasher::new();
    (src, kind, target, resolved).hash(&mut h);
    h.finish()
}

/// Parsed-file indices (ascending) of the files that are not changed but live in `ix` at
/// `live_at` (segment, file), byte for byte as parsed, whose edges as resolved now
/// (`resolved`, every file's) differ from the edges the live index stores for them.
/// `Err(n)` when nothing was compared: `n` files resolution read are not held by the index as
/// read (changed or new outside the build's `only` scope).
pub(super) fn stale_files(
    files: &[Parsed],
    changed: &[bool],
    live_at: &[Option<(usize, u32)>],
    ix: &Index,
    resolved: &[ResolvedEdge],
) -> Result<Vec<usize>, usize> {
    // A file resolution read that the index does not hold as read: neither written by this
    // build nor live with these bytes.
    let unheld = (0..files.len())
        .filter(|&j| !changed[j] && live_at[j].is_none())
        .count();
    if unheld > 0 {
        return Err(unheld);
    }
    // Resolved edges by source file (counting sort of their indices).
    let mut start = vec![0u32; files.len() + 1];
    for e in resolved {
        start[e.src.file_index() + 1] += 1;
    }
    for i in 0..files.len() {
        start[i + 1] += start[i];
    }
    let mut fill = start.clone();
    let mut by_file = vec![0u32; resolved.len()];
    for (n, e) in resolved.iter().enumerate() {
        let f = e.src.file_index();
        by_file[fill[f] as usize] = n as u32;
        fill[f] += 1;
    }
    let stale = (0..files.len())
        .into_par_iter()
        .with_min_len(64)
        .filter(|&i| {
            let Some((si, fi)) = live_at[i].filter(|_| !changed[i]) else {
                return false;
            };
            let edges = (by_file[start[i] as usize..start[i + 1] as usize].iter())
                .map(|&n| &resolved[n as usize])
                .filter(|e| e.kind != EdgeKind::Contains);
            let mut now: Vec<u64> = edges.filter_map(|e| resolved_key(files, i, e)).collect();
            let Some(mut stored) = stored_keys(ix, si, fi) else {
                return true;
            };
            now.sort_unstable();
            now.dedup();
            stored.sort_unstable();
            stored.dedup();
            now != stored
        })
        .collect();
    Ok(stale)
}

/// The key of a resolved edge of file `i`; `None` for an edge a build does not store
/// (to a chunk of another file without a symbol id).
fn resolved_key(files: &[Parsed], i: usize, e: &ResolvedEdge) -> Option<u64> {
    let src = match e.src {
        NodeRef::File(_) => FILE_NODE,
        NodeRef::Chunk { chunk, .. } => chunk,
    };
    let id;
    let target = match e.dst {
        NodeRef::File(f) => Target::File(&files[f as usize].cand.rel_path),
        NodeRef::Chunk { file, chunk } => {
            let fx = &files[file as usize].extract;
            let c = &fx.chunks[chunk as usize];
            if c.symbol.is_some() {
                id = fx.symbol_id(c);
                Target::Symbol(&id)
            } else if file as usize == i {
                Target::Local(chunk)
            } else {
                return None;
            }
        }
    };
    Some(key(src, e.kind.record() as u8, target, e.resolved))
}

/// The keys of the edges segment `si` stores from file `fi` (its file node and its chunks),
/// internal and external alike; `None` when the segment's records do not hold that file
/// (a file changed under the map: the file is written again).
fn stored_keys(ix: &Index, si: usize, fi: u32) -> Option<Vec<u64>> {
    let seg = &ix.segments.get(si)?.segment;
    let (table, graph) = (seg.table(), seg.graph());
    let n_chunks = u32::try_from(table.chunks.len()).ok()?;
    let f = table.files.get(fi as usize)?;
    let (first, count) = (f.first_chunk.to_native(), f.chunk_count.to_native());
    // A count past the table (a damaged record) reads no further than the table.
    let end = first.checked_add(count)?.min(n_chunks);
    let sources = std::iter::once((n_chunks.checked_add(fi)?, FILE_NODE))
        .chain((first..end).map(|c| (c, c - first)));
    let kinds = [rec::EdgeKind::Imports, rec::EdgeKind::Calls];
    let mut out = Vec::new();
    for (node, src) in sources {
        for kind in kinds {
            for (t, fl) in graph.neighbors(node, kind, Direction::Out) {
                let resolved = fl & rec::EDGE_RESOLVED != 0;
                let target = if t < n_chunks {
                    let c = table.chunks.get(t as usize)?;
                    if !c.symbol_id.is_empty() {
                        Target::Symbol(c.symbol_id.as_str())
                    } else if c.file.to_native() == fi {
                        Target::Local(t.checked_sub(first)?)
                    } else {
                        continue;
                    }
                } else {
                    let p = table.files.get((t - n_chunks) as usize)?;
                    Target::File(p.path.as_str())
                };
                out.push(key(src, kind as u8, target, resolved));
            }
            for e in graph.external_from(node, kind) {
                let dst = e.dst.as_str();
                let target = match dst.strip_prefix("file:") {
                    Some(p) => Target::File(p),
                    None => Target::Symbol(dst),
                };
                let resolved = e.flags & rec::EDGE_RESOLVED != 0;
                out.push(key(src, kind as u8, target, resolved));
            }
        }
    }
    Some(out)
}
