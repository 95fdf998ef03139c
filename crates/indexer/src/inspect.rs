//! `indexer inspect` (what is in an index) and `indexer verify` (is every byte as written).

use std::collections::BTreeMap;
use std::path::Path;

use format::graph::Direction;
use format::records::EdgeKind;
use format::Index;
use serde::Serialize;

#[derive(Debug, Default, Serialize)]
pub struct SegmentSummary {
    pub id: String,
    pub chunks: u32,
    pub tombstoned: u64,
    pub files: u32,
    pub vector_index: String,
    pub bytes: BTreeMap<String, u64>,
}

#[derive(Debug, Default, Serialize)]
pub struct InspectReport {
    pub generation: u64,
    pub model_id: String,
    pub dim: u32,
    pub segments: Vec<SegmentSummary>,
    pub live_chunks: u64,
    pub live_files: u64,
    pub chunks_by_language: BTreeMap<String, u64>,
    pub chunks_by_kind: BTreeMap<String, u64>,
    pub edges_by_type: BTreeMap<String, u64>,
    pub resolved_calls: u64,
    pub external_edges: u64,
    pub total_bytes: u64,
    /// Raw f32 vectors plus stored chunk text, the yardstick for segment size.
    pub raw_vector_and_text_bytes: u64,
}

/// Counts what the live index holds (tombstoned chunks excluded from the per-field counts).
pub fn inspect(dir: &Path) -> Result<InspectReport, format::FormatError> {
    let ix = Index::open(dir)?;
    let mut r = InspectReport {
        generation: ix.manifest.generation,
        model_id: ix.manifest.model_id.clone(),
        dim: ix.manifest.dim,
        ..Default::default()
    };
    for ls in &ix.segments {
        let seg = &ls.segment;
        let t = seg.table();
        let meta = seg.meta();
        let mut s = SegmentSummary {
            id: seg.id().to_string(),
            chunks: meta.chunk_count,
            tombstoned: ls.tombstones.len(),
            files: meta.file_count,
            vector_index: meta.vector_index.clone(),
            ..Default::default()
        };
        for f in &meta.files {
            s.bytes.insert(f.name.clone(), f.size);
            r.total_bytes += f.size;
        }
        r.live_files += (0..t.files.len() as u32)
            .filter(|&fi| ls.file_is_live(fi))
            .count() as u64;
        for (i, c) in t.chunks.iter().enumerate() {
            if ls.tombstones.contains(i as u32) {
                continue;
            }
            r.live_chunks += 1;
            let lang = t.files[c.file.to_native() as usize].language.to_string();
            *r.chunks_by_language.entry(lang).or_insert(0) += 1;
            *r.chunks_by_kind.entry(c.kind.to_string()).or_insert(0) += 1;
            r.raw_vector_and_text_bytes +=
                u64::from(meta.dim) * 4 + seg.chunk_text_len(i as u32) as u64;
        }
        let g = seg.graph();
        for k in EdgeKind::ALL {
            *r.edges_by_type.entry(k.name().to_string()).or_insert(0) += g.edge_count(k) as u64;
        }
        for node in 0..g.node_count.to_native() {
            r.resolved_calls += g
                .neighbors(node, EdgeKind::Calls, Direction::Out)
                .filter(|(_, f)| f & format::records::EDGE_RESOLVED != 0)
                .count() as u64;
        }
        r.external_edges += g.external.len() as u64;
        r.segments.push(s);
    }
    Ok(r)
}

impl std::fmt::Display for InspectReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "generation {}  model {} (dim {})",
            self.generation, self.model_id, self.dim
        )?;
        writeln!(
            f,
            "live: {} chunks in {} files",
            self.live_chunks, self.live_files
        )?;
        for s in &self.segments {
            writeln!(
                f,
                "segment {}: {} chunks ({} tombstoned), {} files, vectors {}",
                s.id, s.chunks, s.tombstoned, s.files, s.vector_index
            )?;
            for (name, size) in &s.bytes {
                writeln!(f, "  {name:<14} {size:>12} bytes")?;
            }
        }
        writeln!(f, "chunks by language:")?;
        for (k, v) in &self.chunks_by_language {
            writeln!(f, "  {k:<12} {v:>8}")?;
        }
        writeln!(f, "chunks by kind:")?;
        for (k, v) in &self.chunks_by_kind {
            writeln!(f, "  {k:<12} {v:>8}")?;
        }
        writeln!(f, "edges by type (all segments, incl. tombstoned sources):")?;
        for (k, v) in &self.edges_by_type {
            writeln!(f, "  {k:<12} {v:>8}")?;
        }
        writeln!(
            f,
            "  calls resolved through own symbols/imports: {}",
            self.resolved_calls
        )?;
        writeln!(
            f,
            "  cross-segment edges (by symbol id): {}",
            self.external_edges
        )?;
        let ratio = self.total_bytes as f64 / self.raw_vector_and_text_bytes.max(1) as f64;
        write!(
            f,
            "size: {} bytes on disk; raw vectors + text {} bytes; ratio {:.3}",
            self.total_bytes, self.raw_vector_and_text_bytes, ratio
        )
    }
}

/// Opens the index (all structural checks) and recomputes every checksum, of code and memory
/// segments alike, and reads the memory ledger (`format::manifest::LEDGER_FILE`, which only a
/// MANIFEST recovery would otherwise read). Returns the problems found, each naming its file;
/// empty means the index is sound. (A ledger that is missing, or one commit behind MANIFEST,
/// is not a problem: the next commit writes it.)
pub fn verify(dir: &Path) -> Vec<String> {
    let mut problems: Vec<String> = match Index::open(dir) {
        Err(e) => vec![e.to_string()],
        Ok(ix) => ix
            .segments
            .iter()
            .chain(&ix.memory)
            .flat_map(|ls| ls.segment.verify())
            .map(|e| e.to_string())
            .collect(),
    };
    if let Err(e) = format::manifest::read_ledger(dir) {
        problems.push(format!(
            "{e} (a MANIFEST recovery would move it aside and forget which memories were \
             deleted or pulled here; the next commit rewrites it)"
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A memory segment's bytes that opening does not read (its vector payload) are checked
    /// by their checksum, as a code segment's are; a damaged memory ledger is reported.
    #[test]
    fn memory_segments_and_the_ledger_are_verified() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        let rec = format::memory::record_for_tests(1, 1);
        let (id, meta) = format::SegmentBuilder::for_memories(vec![rec], vec![1.0, 0.0, 0.0, 0.0])
            .write(dir, "m", 4)
            .unwrap();
        let mut m = format::IndexManifest::empty("m", 4);
        m.memory_segments.push(format::SegmentEntry {
            id: id.clone(),
            chunks: meta.chunk_count,
            tombstones: None,
        });
        m.deleted_memories
            .insert("0190f3c4-8f7a-7b2e-9c1d-2a3b4c5d6e02".into(), 5);
        m.commit(dir).unwrap();
        assert_eq!(verify(dir), Vec::<String>::new());

        let vectors = dir.join(format::segment::dir_name(&id)).join("vectors.f32");
        let mut bytes = std::fs::read(&vectors).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        std::fs::write(&vectors, &bytes).unwrap();
        let problems = verify(dir);
        assert!(
            problems.len() == 1 && problems[0].contains("vectors.f32"),
            "{problems:?}"
        );
        bytes[last] ^= 0x40;
        std::fs::write(&vectors, &bytes).unwrap();

        std::fs::write(dir.join(format::manifest::LEDGER_FILE), b"{ damaged").unwrap();
        let problems = verify(dir);
        assert!(
            problems.len() == 1 && problems[0].contains("memory-ledger.json"),
            "{problems:?}"
        );
    }
}
