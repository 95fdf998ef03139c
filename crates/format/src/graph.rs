//! The code graph: `graph.rkyv`, compressed sparse rows per edge type, forward and reverse.
//!
//! Nodes are the segment's chunks (`0..chunk_count`) followed by its files
//! (`chunk_count + file ordinal`). For each [`EdgeKind`] there is a forward CSR (src → dsts) and
//! a reverse one (dst → srcs), each with one flag byte per edge ([`EDGE_RESOLVED`]). Edges to
//! nodes of other segments are kept by symbol id in `external`.
//! Useful for: callers/callees, containment, impact analysis in O(degree). Not useful for:
//! edges added after the segment was written (those live in later segments).

use std::path::Path;

use rkyv::{Archive, Deserialize, Serialize};

use crate::records::{ArchivedExternalEdge, EdgeInput, EdgeKind, ExternalEdge, EDGE_RESOLVED};
use crate::{corrupt, Result};

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct Csr {
    pub offsets: Vec<u32>,
    pub targets: Vec<u32>,
    pub flags: Vec<u8>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct CsrPair {
    pub forward: Csr,
    pub reverse: Csr,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct GraphArchive {
    pub node_count: u32,
    pub chunk_count: u32,
    /// Indexed by `EdgeKind as usize`.
    pub kinds: Vec<CsrPair>,
    /// Sorted by (kind, src, dst, flags).
    pub external: Vec<ExternalEdge>,
    /// Indices into `external` sorted by (dst, kind, index).
    pub external_by_dst: Vec<u32>,
}

fn csr(node_count: u32, mut edges: Vec<(u32, u32, u8)>) -> Csr {
    edges.sort_unstable();
    edges.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
    let mut offsets = vec![0u32; node_count as usize + 1];
    for &(s, _, _) in &edges {
        offsets[s as usize + 1] += 1;
    }
    for i in 0..node_count as usize {
        offsets[i + 1] += offsets[i];
    }
    Csr {
        offsets,
        targets: edges.iter().map(|e| e.1).collect(),
        flags: edges.iter().map(|e| e.2).collect(),
    }
}

/// Builds the graph; edges must reference nodes `< node_count` (checked by the caller).
pub fn build(
    chunk_count: u32,
    node_count: u32,
    edges: &[EdgeInput],
    mut external: Vec<ExternalEdge>,
) -> GraphArchive {
    let kinds = EdgeKind::ALL
        .iter()
        .map(|&k| {
            let fl = |e: &EdgeInput| if e.resolved { EDGE_RESOLVED } else { 0 };
            let fwd = edges
                .iter()
                .filter(|e| e.kind == k)
                .map(|e| (e.src, e.dst, fl(e)))
                .collect();
            let rev = edges
                .iter()
                .filter(|e| e.kind == k)
                .map(|e| (e.dst, e.src, fl(e)))
                .collect();
            CsrPair {
                forward: csr(node_count, fwd),
                reverse: csr(node_count, rev),
            }
        })
        .collect();
    external.sort();
    external.dedup();
    let mut external_by_dst: Vec<u32> = (0..external.len() as u32).collect();
    external_by_dst.sort_by(|&a, &b| {
        let (x, y) = (&external[a as usize], &external[b as usize]);
        x.dst.cmp(&y.dst).then(x.kind.cmp(&y.kind)).then(a.cmp(&b))
    });
    GraphArchive {
        node_count,
        chunk_count,
        kinds,
        external,
        external_by_dst,
    }
}

impl ArchivedGraphArchive {
    /// External edges of `kind` leaving node `src`.
    pub fn external_from(&self, src: u32, kind: EdgeKind) -> &[ArchivedExternalEdge] {
        let k = kind as u8;
        let key = |e: &ArchivedExternalEdge| (e.kind, e.src.to_native());
        let lo = self.external.partition_point(|e| key(e) < (k, src));
        let hi = lo + self.external[lo..].partition_point(|e| key(e) == (k, src));
        &self.external[lo..hi]
    }

    /// External edges of `kind` naming `dst` (a symbol id or `file:<path>`).
    pub fn external_to(
        &self,
        dst: &str,
        kind: EdgeKind,
    ) -> impl Iterator<Item = &ArchivedExternalEdge> {
        let k = kind as u8;
        let e = |i: &rkyv::rend::u32_le| &self.external[i.to_native() as usize];
        let lo = self
            .external_by_dst
            .partition_point(|i| (e(i).dst.as_str(), e(i).kind) < (dst, k));
        let hi = lo
            + self.external_by_dst[lo..]
                .partition_point(|i| (e(i).dst.as_str(), e(i).kind) == (dst, k));
        self.external_by_dst[lo..hi].iter().map(e)
    }
}

fn validate_csr(path: &Path, c: &ArchivedCsr, nodes: u32) -> Result<()> {
    if c.offsets.len() != nodes as usize + 1 || c.targets.len() != c.flags.len() {
        return Err(corrupt(
            path,
            "graph adjacency arrays have inconsistent lengths",
        ));
    }
    let mut prev = 0;
    for o in c.offsets.iter() {
        let o = o.to_native();
        if o < prev {
            return Err(corrupt(path, "graph offsets are not monotone"));
        }
        prev = o;
    }
    if c.offsets.first().map(|o| o.to_native()) != Some(0) || prev as usize != c.targets.len() {
        return Err(corrupt(path, "graph offsets do not cover the edges"));
    }
    if c.targets.iter().any(|t| t.to_native() >= nodes) {
        return Err(corrupt(path, "a graph edge points past the last node"));
    }
    Ok(())
}

/// Structural checks beyond rkyv's: run once at open.
pub fn validate(path: &Path, g: &ArchivedGraphArchive, chunks: u32, files: u32) -> Result<()> {
    let nodes = g.node_count.to_native();
    if g.chunk_count.to_native() != chunks || nodes != chunks + files {
        return Err(corrupt(
            path,
            "graph node count does not match the chunk table",
        ));
    }
    if g.kinds.len() != EdgeKind::ALL.len() {
        return Err(corrupt(
            path,
            "graph has an unexpected number of edge types",
        ));
    }
    for k in g.kinds.iter() {
        validate_csr(path, &k.forward, nodes)?;
        validate_csr(path, &k.reverse, nodes)?;
    }
    if g.external.iter().any(|e| e.src.to_native() >= nodes) {
        return Err(corrupt(path, "an external edge starts past the last node"));
    }
    if g.external_by_dst.len() != g.external.len()
        || g.external_by_dst
            .iter()
            .any(|i| i.to_native() as usize >= g.external.len())
    {
        return Err(corrupt(path, "external edge lookup table is inconsistent"));
    }
    Ok(())
}

/// Direction of a neighbour lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// src → dst (callees, contained symbols, imported files).
    Out,
    /// dst → src (callers, containers, importers).
    In,
}

impl ArchivedGraphArchive {
    /// Neighbours of `node` along `kind` as (node, flags). Empty for unknown nodes. Every
    /// access is bounds-checked: the open-time validation covers the bytes as they were then,
    /// and a file changed under the live map afterwards must give wrong answers (caught by the
    /// background verify), never a panic.
    pub fn neighbors(
        &self,
        node: u32,
        kind: EdgeKind,
        dir: Direction,
    ) -> impl Iterator<Item = (u32, u8)> + '_ {
        let c = self.kinds.get(kind as usize).map(|pair| match dir {
            Direction::Out => &pair.forward,
            Direction::In => &pair.reverse,
        });
        let range = c.and_then(|c| {
            let a = c.offsets.get(node as usize)?.to_native() as usize;
            let b = c.offsets.get(node as usize + 1)?.to_native() as usize;
            let t = c.targets.get(a..b)?;
            let f = c.flags.get(a..b)?;
            Some((t, f))
        });
        let (t, f) = range.unwrap_or((&[], &[]));
        t.iter().zip(f).map(|(t, f)| (t.to_native(), *f))
    }

    /// Number of edges of `kind`.
    pub fn edge_count(&self, kind: EdgeKind) -> usize {
        self.kinds
            .get(kind as usize)
            .map_or(0, |k| k.forward.targets.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_and_reverse_agree() {
        let e = |kind, src, dst, resolved| EdgeInput {
            kind,
            src,
            dst,
            resolved,
        };
        let edges = vec![
            e(EdgeKind::Calls, 0, 1, true),
            e(EdgeKind::Calls, 0, 2, false),
            e(EdgeKind::Calls, 2, 1, true),
            e(EdgeKind::Contains, 3, 0, true),
            e(EdgeKind::Calls, 0, 1, true),
        ];
        let g = build(3, 4, &edges, vec![]);
        let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&g).unwrap();
        let a = rkyv::access::<ArchivedGraphArchive, rkyv::rancor::Error>(&bytes).unwrap();
        validate(Path::new("g"), a, 3, 1).unwrap();
        let out: Vec<_> = a.neighbors(0, EdgeKind::Calls, Direction::Out).collect();
        assert_eq!(out, [(1, EDGE_RESOLVED), (2, 0)]);
        let callers: Vec<_> = a
            .neighbors(1, EdgeKind::Calls, Direction::In)
            .map(|x| x.0)
            .collect();
        assert_eq!(callers, [0, 2]);
        assert_eq!(a.neighbors(0, EdgeKind::Contains, Direction::In).count(), 1);
        assert_eq!(a.neighbors(99, EdgeKind::Calls, Direction::Out).count(), 0);
        assert_eq!(a.edge_count(EdgeKind::Calls), 3);
        assert!(validate(Path::new("g"), a, 4, 1).is_err());
    }
}
