//! Merging code segments: the live files of several segments, with their chunks, vectors,
//! postings and graph, into one segment without re-embedding or re-tokenizing (the IVF is
//! trained again). The records and the graph are copied into a [`SegmentBuilder`]; the texts
//! and the vectors are not: they are borrowed from the parts' mapped files ([`Carried`]) and
//! streamed into the new segment's, so a merge holds neither in memory. The postings are
//! merged list by list from the parts' ([`crate::bm25::merge`]) when every part is of the
//! current format, and built from the texts otherwise (an older format's tokenizer may differ).
//!
//! What is kept: every file with a live chunk (tombstoned files are dropped, which is how
//! deletes leave the index), and a file without chunks unless it is deleted
//! ([`crate::tombstones`]) or a later segment of the merge has the same (repo, path). Files are re-sorted by (repo, path) and chunks renumbered.
//! Edges between kept nodes stay internal; an edge from a kept node to a dropped one (an
//! older, tombstoned version of a symbol or file) becomes an external edge by the target's
//! symbol id or `file:<path>`, which is how the query side already follows such edges to the
//! current version; external edges are copied. So a merged segment answers graph queries as
//! its parts did.

use crate::manifest::LiveSegment;
use crate::records::{
    ChunkRecord, EdgeInput, EdgeKind, ExternalEdge, FileRecord, EDGE_RESOLVED, NO_PARENT,
};
use crate::segment::{Carried, SegmentBuilder, SegmentMeta};
use crate::{FormatError, Result};
use std::path::Path;

/// What a merge dropped.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MergeStats {
    pub files: u32,
    pub chunks: u32,
    pub dropped_files: u32,
    pub dropped_chunks: u32,
}

/// The live content of merged parts, ready to write: records and graph owned, texts and
/// vectors borrowed from the parts.
#[derive(Debug)]
pub struct Merged<'a> {
    /// Files, chunk records (their texts empty) and edges.
    pub builder: SegmentBuilder,
    /// One text per chunk and the vectors, from the parts' maps.
    pub content: Carried<'a>,
    pub stats: MergeStats,
}

impl Merged<'_> {
    /// Whether nothing is left (every file of the parts was deleted or superseded).
    pub fn is_empty(&self) -> bool {
        self.builder.files.is_empty()
    }

    /// Writes the merged segment into `index_dir` ([`SegmentBuilder::write_carried`]).
    pub fn write(
        self,
        index_dir: &Path,
        model_id: &str,
        dim: usize,
    ) -> Result<(String, SegmentMeta)> {
        self.builder
            .write_carried(self.content, index_dir, model_id, dim)
    }
}

/// The live content of `parts` (code segments, in MANIFEST order: a later part's file wins
/// over an earlier one's of the same path), merged.
pub fn merge<'a>(parts: &[&'a LiveSegment]) -> Result<Merged<'a>> {
    if let Some(p) = parts.iter().find(|p| p.segment.memories().is_some()) {
        return Err(FormatError::InvalidInput(format!(
            "segment {} is a memory segment; only code segments are merged",
            p.segment.id()
        )));
    }
    let mut stats = MergeStats::default();
    // Live files as (repo, path, part, file ordinal); the last part of each path wins.
    let mut picks: Vec<(&str, &str, usize, u32)> = Vec::new();
    for (p, ls) in parts.iter().enumerate() {
        let t = ls.segment.table();
        for (fi, f) in t.files.iter().enumerate() {
            // Every chunk tombstoned, or deleted without chunks.
            if !ls.file_is_live(fi as u32) {
                stats.dropped_files += 1;
                stats.dropped_chunks += f.chunk_count.to_native();
                continue;
            }
            picks.push((f.repo.as_str(), f.path.as_str(), p, fi as u32));
        }
    }
    picks.sort_unstable();
    let mut kept: Vec<(usize, u32)> = Vec::with_capacity(picks.len());
    for (i, &(repo, path, p, fi)) in picks.iter().enumerate() {
        let superseded = picks.get(i + 1).is_some_and(|n| (n.0, n.1) == (repo, path));
        if superseded {
            let f = &parts[p].segment.table().files[fi as usize];
            stats.dropped_files += 1;
            stats.dropped_chunks += f.chunk_count.to_native();
            continue;
        }
        kept.push((p, fi));
    }

    // New numbering: old (part, chunk) and (part, file) → new ordinal.
    let mut chunk_map: Vec<Vec<u32>> = parts
        .iter()
        .map(|ls| vec![u32::MAX; ls.segment.table().chunks.len()])
        .collect();
    let mut file_map: Vec<Vec<u32>> = parts
        .iter()
        .map(|ls| vec![u32::MAX; ls.segment.table().files.len()])
        .collect();
    let dim = parts.first().map_or(0, |p| p.segment.meta().dim as usize);
    let mut b = SegmentBuilder::default();
    let mut content = Carried {
        sources: parts.iter().map(|p| &*p.segment).collect(),
        ..Carried::default()
    };
    // Vector rows to copy, as (part, first chunk, end chunk).
    let mut runs: Vec<(usize, u32, u32)> = Vec::new();
    for (nf, &(p, fi)) in kept.iter().enumerate() {
        let seg: &'a crate::segment::Segment = &parts[p].segment;
        let t = seg.table();
        let f = &t.files[fi as usize];
        let (first, n) = (f.first_chunk.to_native(), f.chunk_count.to_native());
        let new_first = b.chunks.len() as u32;
        file_map[p][fi as usize] = nf as u32;
        for c in first..first + n {
            chunk_map[p][c as usize] = new_first + (c - first);
        }
        b.files.push(FileRecord {
            repo: f.repo.to_string(),
            path: f.path.to_string(),
            language: f.language.to_string(),
            content_hash: f.content_hash,
            size: f.size.to_native(),
            first_chunk: new_first,
            chunk_count: n,
            imports: f.imports.iter().map(|s| s.to_string()).collect(),
        });
        for c in first..first + n {
            let r = &t.chunks[c as usize];
            let parent = r.parent.to_native();
            b.chunks.push(ChunkRecord {
                file: nf as u32,
                kind: r.kind.to_string(),
                name: r.name.to_string(),
                qualified: r.qualified.to_string(),
                symbol_id: r.symbol_id.to_string(),
                start_line: r.start_line.to_native(),
                end_line: r.end_line.to_native(),
                start_byte: r.start_byte.to_native(),
                end_byte: r.end_byte.to_native(),
                // A parent is a chunk of the same file, so it was kept with it.
                parent: if parent == NO_PARENT || parent < first || parent >= first + n {
                    NO_PARENT
                } else {
                    new_first + (parent - first)
                },
                content_hash: r.content_hash,
                text: String::new(),
            });
            content.texts.push(seg.chunk_text(c)?);
        }
        // A part's consecutive kept files make one run of rows.
        match runs.last_mut() {
            Some((q, _, end)) if *q == p && *end == first => *end += n,
            _ if n > 0 => runs.push((p, first, first + n)),
            _ => {}
        }
    }
    if parts
        .iter()
        .all(|p| p.segment.meta().format_version == crate::FORMAT_VERSION)
    {
        let paths: Vec<std::path::PathBuf> = parts
            .iter()
            .map(|p| p.segment.path_of(crate::header::Component::Postings))
            .collect();
        let postings: Vec<crate::bm25::MergePart> = parts
            .iter()
            .zip(&chunk_map)
            .zip(&paths)
            .map(|((p, map), path)| crate::bm25::MergePart {
                postings: p.segment.postings(),
                map,
                path,
            })
            .collect();
        content.postings = Some(crate::bm25::merge(&postings, b.chunks.len() as u32)?);
    }
    for (p, first, end) in runs {
        let seg: &'a crate::segment::Segment = &parts[p].segment;
        let rows = seg
            .vectors()
            .get(first as usize * dim..end as usize * dim)
            .ok_or_else(|| {
                FormatError::InvalidInput(format!(
                    "segment {} lacks the vectors of chunks {first}..{end}",
                    seg.id()
                ))
            })?;
        content.vectors.push(rows);
    }
    stats.files = b.files.len() as u32;
    stats.chunks = b.chunks.len() as u32;

    let new_chunks = b.chunks.len() as u32;
    for (p, ls) in parts.iter().enumerate() {
        let t = ls.segment.table();
        let g = ls.segment.graph();
        let old_chunks = t.chunks.len() as u32;
        let old_nodes = old_chunks + t.files.len() as u32;
        let node = |old: u32| -> Option<u32> {
            let n = if old < old_chunks {
                chunk_map[p][old as usize]
            } else {
                file_map[p][(old - old_chunks) as usize].checked_add(new_chunks)?
            };
            (n != u32::MAX).then_some(n)
        };
        let name = |old: u32| -> Option<String> {
            if old < old_chunks {
                let id = t.chunks[old as usize].symbol_id.as_str();
                (!id.is_empty()).then(|| id.to_string())
            } else {
                Some(format!(
                    "file:{}",
                    t.files[(old - old_chunks) as usize].path
                ))
            }
        };
        for kind in EdgeKind::ALL {
            for src in 0..old_nodes {
                let Some(s) = node(src) else { continue };
                for (dst, flags) in g.neighbors(src, kind, crate::graph::Direction::Out) {
                    match node(dst) {
                        Some(d) => b.edges.push(EdgeInput {
                            kind,
                            src: s,
                            dst: d,
                            resolved: flags & EDGE_RESOLVED != 0,
                        }),
                        None => {
                            if let Some(dst) = name(dst) {
                                b.external_edges.push(ExternalEdge {
                                    kind: kind as u8,
                                    src: s,
                                    dst,
                                    flags,
                                });
                            }
                        }
                    }
                }
            }
        }
        for e in g.external.iter() {
            if let Some(s) = node(e.src.to_native()) {
                b.external_edges.push(ExternalEdge {
                    kind: e.kind,
                    src: s,
                    dst: e.dst.to_string(),
                    flags: e.flags,
                });
            }
        }
    }
    Ok(Merged {
        builder: b,
        content,
        stats,
    })
}
