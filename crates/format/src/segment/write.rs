//! The writer of a segment ([`SegmentBuilder`]): records, texts, postings, graph, vectors and
//! the IVF written into a temporary directory, fsynced, hashed into `segment.json` and renamed
//! into place under its content address (see the parent module for the layout).

use std::borrow::Cow;
use std::path::Path;

use rkyv::rancor;

use super::{dir_name, segment_id, unique, FileEntry, SegmentMeta, SEGMENT_JSON};
use crate::bm25::{self, DocFields};
use crate::fsio::PageCache;
use crate::graph;
use crate::header::{self, Component, HEADER_LEN};
use crate::ivf_map::MappedIvf;
use crate::memory::{self, MemoryRecord, MemoryTable};
use crate::records::{ChunkInput, ChunkTable, EdgeInput, ExternalEdge, FileInput, NO_PARENT};
use crate::vectors::{self, IVF_FILE};
use crate::{io_err, sync_dir, write_synced, FormatError, Result, FORMAT_VERSION};

/// Collects one segment's records in memory and writes them.
#[derive(Debug, Default)]
pub struct SegmentBuilder {
    pub files: Vec<FileInput>,
    pub chunks: Vec<ChunkInput>,
    /// `chunks.len() × dim` floats, row `i` for chunk `i`.
    pub vectors: Vec<f32>,
    pub edges: Vec<EdgeInput>,
    pub external_edges: Vec<ExternalEdge>,
    /// For a memory segment: one record per chunk, in chunk order (see [`crate::memory`]);
    /// empty for a code segment.
    pub memories: Vec<MemoryRecord>,
    /// IVF coarse centroids trained elsewhere (the indexer's GPU k-means), `nlist_for(n) × dim`
    /// floats, for a segment large enough to get an IVF index; `None`: the writer trains them
    /// ([`crate::ivf_write::train_centroids`]).
    pub ivf_centroids: Option<Vec<f32>>,
    /// How `texts.bin` and `vectors.f32`, most of a segment's bytes, are written: through the
    /// page cache (the default) or around it ([`crate::fsio::StreamOut`]; `indexer build
    /// --direct-io`). The other components are always written through it: opening reads the
    /// archives whole (the records, postings, graph and memories are validated), and the
    /// first query scans the one-bit codes of the lists it probes; the texts and rows are read
    /// a few at a time by queries (and populated by `queryd` on a background thread). On the
    /// 2-core VM the bypass took the pipeline bench's segment writes from 3.6-4.2 to 2.9-3.1 s
    /// and a 1M-chunk build's from 45.7-55.8 to 39.2-42.3 s, and a fresh build's open + first
    /// query from 72 to 161 ms (the texts and rows come from disk): the choice of a build whose
    /// output is shipped elsewhere (CI) or larger than memory, not the default (README,
    /// "Bounded builds").
    pub bulk_cache: PageCache,
}

/// What a segment is written from that was not built for it: a merge's texts and vectors,
/// borrowed from its parts' mapped `texts.bin` and `vectors.f32` so that neither is copied
/// into memory, and its postings, merged from theirs ([`crate::merge`]). The builder written
/// with them has empty chunk texts and no vectors.
#[derive(Debug, Default)]
pub struct Carried<'a> {
    /// One text per chunk, in chunk order.
    pub texts: Vec<&'a str>,
    /// The chunks' vectors in chunk order, as runs of whole rows.
    pub vectors: Vec<&'a [f32]>,
    /// The chunks' postings (`None`: built from the texts, names and paths).
    pub postings: Option<bm25::PostingsArchive>,
    /// The segments the texts and vectors are borrowed from. The writer drops their pages
    /// from the process ([`super::Segment::release_pages`]) once it has read what it needs of
    /// them: before it writes (the records and postings were read into the builder), after
    /// the vectors and after the texts.
    pub sources: Vec<&'a super::Segment>,
}

impl SegmentBuilder {
    fn validate(&self, dim: usize, from: Option<&Carried<'_>>) -> Result<()> {
        let bad = |m: String| Err(FormatError::InvalidInput(m));
        let n = self.chunks.len();
        if n > (u32::MAX / 2) as usize || self.files.len() > (u32::MAX / 2) as usize {
            return bad("too many chunks or files for one segment".into());
        }
        let floats = match from {
            None => self.vectors.len(),
            Some(b) => {
                if !self.vectors.is_empty() || self.chunks.iter().any(|c| !c.text.is_empty()) {
                    return bad("carried texts and vectors given beside owned ones".into());
                }
                if b.texts.len() != n {
                    return bad(format!("{} carried texts for {n} chunks", b.texts.len()));
                }
                if b.vectors
                    .iter()
                    .any(|r| !r.len().is_multiple_of(dim.max(1)))
                {
                    return bad(format!("carried vectors are not whole rows of {dim}"));
                }
                if b.postings.as_ref().is_some_and(|p| p.doc_lens.len() != n) {
                    return bad(format!("carried postings are not of {n} documents"));
                }
                b.vectors.iter().map(|r| r.len()).sum()
            }
        };
        if dim == 0 || floats != n * dim {
            return bad(format!("{floats} floats for {n} chunks of dimension {dim}"));
        }
        // A vector that is not finite scores NaN against every query. Rows an IVF index is
        // built over are checked as it reads them (`ivf_write`); a merge's below it here.
        let rows: Vec<&[f32]> = match from {
            None => vec![&self.vectors],
            Some(b) if n < vectors::IVF_THRESHOLD => b.vectors.clone(),
            Some(_) => Vec::new(),
        };
        let mut before = 0;
        for run in rows {
            if let Some(at) = first_non_finite(run) {
                return bad(format!(
                    "vector {} holds a value that is not a finite number",
                    (before + at) / dim
                ));
            }
            before += run.len();
        }
        if self
            .files
            .windows(2)
            .any(|w| (&w[0].repo, &w[0].path) >= (&w[1].repo, &w[1].path))
        {
            return bad("files must be sorted by (repo, path) and unique".into());
        }
        let mut next = 0u32;
        for (fi, f) in self.files.iter().enumerate() {
            if f.first_chunk != next {
                return bad(format!("file {} does not start at chunk {next}", f.path));
            }
            next += f.chunk_count;
            for c in &self.chunks[f.first_chunk as usize..next.min(n as u32) as usize] {
                if c.file != fi as u32 {
                    return bad(format!("a chunk of {} names file {}", f.path, c.file));
                }
            }
        }
        if next as usize != n {
            return bad(format!("files cover {next} chunks, {n} were given"));
        }
        for (i, c) in self.chunks.iter().enumerate() {
            if c.parent != NO_PARENT && c.parent as usize >= n {
                return bad(format!("chunk {i} has parent {} past the end", c.parent));
            }
            if c.start_line == 0 || c.end_line < c.start_line || c.end_byte < c.start_byte {
                return bad(format!("chunk {i} has an invalid line or byte range"));
            }
        }
        if !self.memories.is_empty() && self.memories.len() != n {
            return bad(format!(
                "{} memory records for {n} chunks",
                self.memories.len()
            ));
        }
        let nodes = (n + self.files.len()) as u32;
        if let Some(e) = self.edges.iter().find(|e| e.src >= nodes || e.dst >= nodes) {
            return bad(format!("edge {e:?} points past the last node"));
        }
        Ok(())
    }

    /// A memory segment of `memories` with their vectors (`memories.len() × dim` floats).
    pub fn for_memories(memories: Vec<MemoryRecord>, vectors: Vec<f32>) -> SegmentBuilder {
        SegmentBuilder {
            files: vec![memory::memory_file(memories.len() as u32)],
            chunks: memories.iter().map(memory::memory_chunk).collect(),
            vectors,
            memories,
            ..SegmentBuilder::default()
        }
    }

    /// Writes the segment into `index_dir/seg-<id>/` and returns its id and manifest. Writing
    /// the same content twice yields the same id and leaves the existing directory untouched.
    ///
    /// Each component is encoded, written (header and payload framed once, no further copy),
    /// synced, hashed and dropped before the next is encoded, so the writer's peak memory is
    /// the builder plus its largest component, not the sum of all of them.
    pub fn write(
        self,
        index_dir: &Path,
        model_id: &str,
        dim: usize,
    ) -> Result<(String, SegmentMeta)> {
        self.write_from(None, index_dir, model_id, dim)
    }

    /// [`Self::write`] of a builder whose chunk texts and vectors (and postings, if given)
    /// are `from`'s: the same files as if they had been owned and the postings built, without
    /// holding a copy of the texts or the vectors. Vectors in several runs are written first
    /// and mapped back for the IVF index, so they take page cache (reclaimable), not heap.
    pub fn write_carried(
        self,
        from: Carried<'_>,
        index_dir: &Path,
        model_id: &str,
        dim: usize,
    ) -> Result<(String, SegmentMeta)> {
        self.write_from(Some(from), index_dir, model_id, dim)
    }

    fn write_from(
        self,
        from: Option<Carried<'_>>,
        index_dir: &Path,
        model_id: &str,
        dim: usize,
    ) -> Result<(String, SegmentMeta)> {
        self.validate(dim, from.as_ref())?;
        let tmp = index_dir.join(format!(".tmp-seg-{}-{}", std::process::id(), unique()));
        crate::fsio::create_dir_all(&tmp).map_err(io_err(&tmp))?;
        let result = self.write_into(from, &tmp, index_dir, model_id, dim);
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        result
    }

    /// [`Self::write`] into the fresh directory `tmp`, renamed into place at the end.
    ///
    /// The IVF index (k-means, lists and SQ8 codes: [`crate::ivf_write`], the largest single
    /// cost of a large segment) is built on a scoped thread while this one writes the other
    /// components, each
    /// encoded, written and dropped in turn. The output does not depend on that overlap: every
    /// file is a function of the inputs alone.
    fn write_into(
        self,
        from: Option<Carried<'_>>,
        tmp: &Path,
        index_dir: &Path,
        model_id: &str,
        dim: usize,
    ) -> Result<(String, SegmentMeta)> {
        let n = self.chunks.len() as u32;
        let nf = self.files.len() as u32;
        let d = dim as u32;
        let SegmentBuilder {
            files: file_inputs,
            mut chunks,
            vectors,
            edges,
            external_edges,
            memories,
            ivf_centroids,
            bulk_cache: bulk,
        } = self;
        // The texts leave the records (format 4 keeps them in `texts.bin` only).
        let (texts, runs, postings, sources): (Vec<Cow<'_, str>>, Vec<&[f32]>, _, _) = match from {
            None => (
                chunks
                    .iter_mut()
                    .map(|c| Cow::Owned(std::mem::take(&mut c.text)))
                    .collect(),
                vec![&vectors[..]],
                None,
                Vec::new(),
            ),
            Some(b) => (
                b.texts.into_iter().map(Cow::Borrowed).collect(),
                b.vectors,
                b.postings,
                b.sources,
            ),
        };
        let release_sources = || {
            for s in &sources {
                s.release_pages();
            }
        };
        release_sources();
        // Rows in several runs are written now and mapped back: the IVF writer wants them in
        // one slice.
        let mut written = None;
        let mut mapped = None;
        if runs.len() > 1 {
            let (entry, map) = put_vectors(tmp, d, model_id, &runs)?;
            written = Some(entry);
            mapped = Some(map);
            release_sources();
        }
        // Rows the IVF writer and the one-bit encoder have read, dropped from the process where they
        // are mapped back from disk (they are read in order, so this holds a batch at a time).
        let consumed = |r: std::ops::Range<usize>| {
            if let Some(m) = &mapped {
                crate::release(
                    m,
                    HEADER_LEN + r.start * dim * 4..HEADER_LEN + r.end * dim * 4,
                );
            }
        };
        let rows: &[f32] = match &mapped {
            Some(m) => super::mapped_floats(m),
            None => runs.first().copied().unwrap_or(&[]),
        };
        let (ivf, rest) = std::thread::scope(|scope| {
            let ivf = (n as usize >= vectors::IVF_THRESHOLD).then(|| {
                let centroids = ivf_centroids.as_deref();
                let consumed = &consumed;
                scope.spawn(move || write_ivf_file(tmp, rows, dim, centroids, model_id, consumed))
            });
            let rest = write_components(
                tmp,
                model_id,
                d,
                file_inputs,
                chunks,
                texts,
                postings,
                match written {
                    Some(entry) => VectorsFile::Written(entry),
                    None => VectorsFile::Rows(rows),
                },
                edges,
                external_edges,
                memories,
                &release_sources,
                bulk,
            );
            let ivf = ivf.map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(FormatError::InvalidInput(
                        "the IVF writer thread panicked".into(),
                    ))
                })
            });
            (ivf, rest)
        });
        let mut files = rest?;
        let mut vector_index = "flat".to_string();
        if let Some(entries) = ivf.transpose()? {
            files.extend(entries);
            vector_index = format!("ivf{},sq8", vectors::nlist_for(n as usize));
            if ivf_centroids.is_some() {
                // Who trained the coarse centroids (`ivf_write`'s k-means otherwise).
                vector_index.push_str(",centroids=external");
            }
        }
        files.sort_by(|a, b| a.name.cmp(&b.name));
        let meta = SegmentMeta {
            format_version: FORMAT_VERSION,
            model_id: model_id.to_string(),
            dim: d,
            chunk_count: n,
            file_count: nf,
            vector_index,
            files,
        };
        let json = serde_json::to_vec_pretty(&meta)
            .map_err(|e| FormatError::InvalidInput(e.to_string()))?;
        write_synced(&tmp.join(SEGMENT_JSON), &json)?;
        sync_dir(tmp)?;
        let id = segment_id(&json);
        let dest = index_dir.join(dir_name(&id));
        if dest.exists() {
            std::fs::remove_dir_all(tmp).map_err(io_err(tmp))?;
        } else {
            crate::fsio::rename(tmp, &dest).map_err(io_err(&dest))?;
            sync_dir(index_dir)?;
        }
        Ok((id, meta))
    }
}

/// Writes a framed component file (header, then `payload`, fsynced, through the page cache)
/// without building the framed bytes in memory, and returns its [`FileEntry`] (blake3 of
/// header + payload).
fn put_framed(
    tmp: &Path,
    c: Component,
    dim: u32,
    model_id: &str,
    payload: &[u8],
) -> Result<FileEntry> {
    put_framed_parts(tmp, c, dim, model_id, &[payload], PageCache::Keep)
}

/// [`put_framed`] of the payload `parts` joined, without joining them: the header, then the
/// parts (`fsio::StreamOut`: direct I/O where the filesystem takes it), fsynced.
fn put_framed_parts(
    tmp: &Path,
    c: Component,
    dim: u32,
    model_id: &str,
    parts: &[&[u8]],
    cache: PageCache,
) -> Result<FileEntry> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let head = header::header(c, dim, model_id, len as u64);
    let path = tmp.join(c.file_name());
    let mut out = crate::fsio::StreamOut::create(&path, cache).map_err(io_err(&path))?;
    out.write_parts(&[&head]).map_err(io_err(&path))?;
    out.write_parts(parts).map_err(io_err(&path))?;
    let f = out.finish().map_err(io_err(&path))?;
    crate::fsio::sync_all(&f, &path).map_err(io_err(&path))?;
    let mut h = blake3::Hasher::new();
    h.update(&head);
    for p in parts {
        h.update(p);
    }
    Ok(FileEntry {
        name: c.file_name().to_string(),
        size: (HEADER_LEN + len) as u64,
        blake3: h.finalize().to_hex().to_string(),
    })
}

/// `vectors.f32`: still to write from rows in memory, or written already.
enum VectorsFile<'a> {
    Rows(&'a [f32]),
    Written(FileEntry),
}

/// Writes `vectors.f32` from `runs` (rows in chunk order, not joined) and maps it back.
fn put_vectors(
    tmp: &Path,
    d: u32,
    model_id: &str,
    runs: &[&[f32]],
) -> Result<(FileEntry, memmap2::Mmap)> {
    let bytes: Vec<Cow<'_, [u8]>> = runs.iter().map(|r| f32_le_bytes(r)).collect();
    let parts: Vec<&[u8]> = bytes.iter().map(|b| b.as_ref()).collect();
    // Mapped back at once: written through the page cache, not around it.
    let entry = put_framed_parts(
        tmp,
        Component::Vectors,
        d,
        model_id,
        &parts,
        PageCache::Keep,
    )?;
    let p = tmp.join(Component::Vectors.file_name());
    let f = std::fs::File::open(&p).map_err(io_err(&p))?;
    // SAFETY: the file was just written, synced and closed in a directory only this writer
    // uses (a fresh temporary one); nothing truncates it while the map lives.
    let map = unsafe { memmap2::Mmap::map(&f) }.map_err(io_err(&p))?;
    if map.len() < HEADER_LEN || !(map.len() - HEADER_LEN).is_multiple_of(4) {
        return Err(FormatError::InvalidInput(format!(
            "{} is {} bytes after writing",
            p.display(),
            map.len()
        )));
    }
    Ok((entry, map))
}

/// Every component but the IVF index: the vectors (unless written already) on a thread of
/// their own, the others ([`write_records`]) each encoded, written and dropped in turn.
#[allow(clippy::too_many_arguments)]
fn write_components(
    tmp: &Path,
    model_id: &str,
    d: u32,
    file_inputs: Vec<FileInput>,
    chunks: Vec<ChunkInput>,
    texts: Vec<Cow<'_, str>>,
    postings: Option<bm25::PostingsArchive>,
    vectors: VectorsFile<'_>,
    edges: Vec<EdgeInput>,
    external_edges: Vec<ExternalEdge>,
    memories: Vec<MemoryRecord>,
    after_texts: &dyn Fn(),
    bulk: PageCache,
) -> Result<Vec<FileEntry>> {
    std::thread::scope(|scope| {
        // The vectors are final already: their write, hash and fsync (most of it waiting on
        // the disk) run beside the encoding of the rest.
        let vectors = match vectors {
            VectorsFile::Rows(rows) => Err(scope.spawn(move || {
                put_framed_parts(
                    tmp,
                    Component::Vectors,
                    d,
                    model_id,
                    &[f32_le_bytes(rows).as_ref()],
                    bulk,
                )
            })),
            VectorsFile::Written(entry) => Ok(entry),
        };
        let mut files = write_records(
            tmp,
            model_id,
            d,
            file_inputs,
            chunks,
            texts,
            postings,
            edges,
            external_edges,
            memories,
            after_texts,
            bulk,
        )?;
        files.push(vectors.or_else(|h| {
            h.join().unwrap_or_else(|_| {
                Err(FormatError::InvalidInput(
                    "the vectors writer thread panicked".into(),
                ))
            })
        })?);
        Ok(files)
    })
}

/// The components but the vectors and the IVF index, each encoded, written and dropped in
/// turn; `after_texts` runs once `texts.bin` is written.
#[allow(clippy::too_many_arguments)]
fn write_records(
    tmp: &Path,
    model_id: &str,
    d: u32,
    file_inputs: Vec<FileInput>,
    chunks: Vec<ChunkInput>,
    texts: Vec<Cow<'_, str>>,
    postings: Option<bm25::PostingsArchive>,
    edges: Vec<EdgeInput>,
    external_edges: Vec<ExternalEdge>,
    memories: Vec<MemoryRecord>,
    after_texts: &dyn Fn(),
    bulk: PageCache,
) -> Result<Vec<FileEntry>> {
    let archived = |what: &str, r: std::result::Result<rkyv::util::AlignedVec, rancor::Error>| {
        r.map_err(|e| FormatError::InvalidInput(format!("cannot archive {what}: {e}")))
    };
    let (n, nf) = (chunks.len() as u32, file_inputs.len() as u32);
    let mut files = Vec::new();
    let postings = postings.unwrap_or_else(|| {
        let fields: Vec<DocFields> = chunks
            .iter()
            .zip(&texts)
            .map(|(c, text)| DocFields {
                text,
                path: &file_inputs[c.file as usize].path,
                name: &c.name,
                qualified: &c.qualified,
            })
            .collect();
        bm25::build(&fields)
    });
    let graph = graph::build(n, n + nf, &edges, external_edges);
    drop(edges);
    // `texts::encode`'s bytes, written from the texts where they are: joining them first
    // held every text of the segment twice at the writer's peak.
    let table = crate::texts::table(&texts);
    let mut parts: Vec<&[u8]> = Vec::with_capacity(texts.len() + 1);
    parts.push(&table);
    parts.extend(texts.iter().map(|t| t.as_bytes()));
    files.push(put_framed_parts(
        tmp,
        Component::Texts,
        d,
        model_id,
        &parts,
        bulk,
    )?);
    drop(parts);
    drop(texts);
    after_texts();
    {
        let table = ChunkTable::with_lookups(file_inputs, chunks);
        let bytes = archived("chunks", rkyv::to_bytes(&table))?;
        drop(table);
        files.push(put_framed(tmp, Component::Chunks, d, model_id, &bytes)?);
    }
    let bytes = archived("postings", rkyv::to_bytes(&postings))?;
    drop(postings);
    files.push(put_framed(tmp, Component::Postings, d, model_id, &bytes)?);
    drop(bytes);
    let bytes = archived("graph", rkyv::to_bytes(&graph))?;
    drop(graph);
    files.push(put_framed(tmp, Component::Graph, d, model_id, &bytes)?);
    drop(bytes);
    if !memories.is_empty() {
        let m = MemoryTable::new(memories);
        let bytes = archived("memories", rkyv::to_bytes(&m))?;
        files.push(put_framed(tmp, Component::Memories, d, model_id, &bytes)?);
    }
    Ok(files)
}

/// Where the first value of `v` that is not a finite number lies (parts scanned in parallel).
fn first_non_finite(v: &[f32]) -> Option<usize> {
    use rayon::prelude::*;
    const PART: usize = 1 << 16;
    v.par_chunks(PART)
        .enumerate()
        .find_map_first(|(i, c)| c.iter().position(|x| !x.is_finite()).map(|p| i * PART + p))
}

/// `v` as little-endian bytes: borrowed in place on a little-endian target (the 150 MB of a
/// 100k-chunk segment's vectors are not copied), converted elsewhere.
fn f32_le_bytes(v: &[f32]) -> Cow<'_, [u8]> {
    #[cfg(target_endian = "little")]
    {
        // SAFETY: f32 has no padding and any byte pattern is a valid u8; the slice covers
        // exactly the floats' memory, and u8's alignment (1) divides f32's.
        Cow::Borrowed(unsafe {
            std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v))
        })
    }
    #[cfg(not(target_endian = "little"))]
    {
        Cow::Owned(v.iter().flat_map(|f| f.to_le_bytes()).collect())
    }
}

/// Trains, fills and writes `ivf.faiss` ([`crate::ivf_write`]), fsyncs it and hashes it as it
/// is on disk; then
/// encodes its lists' one-bit codes into `ivf.rbq` ([`crate::rabitq`]) when the dimension
/// gets them ([`crate::rabitq::applies`]). Both read the rows in order and tell `consumed`
/// of each range once read.
fn write_ivf_file(
    tmp: &Path,
    vectors: &[f32],
    dim: usize,
    centroids: Option<&[f32]>,
    model_id: &str,
    consumed: &(dyn Fn(std::ops::Range<usize>) + Sync),
) -> Result<Vec<FileEntry>> {
    let p = tmp.join(IVF_FILE);
    crate::ivf_write::write_ivf_sq8(&p, vectors, dim, centroids, consumed)?;
    let faiss = hash_synced(&p)?;
    if !crate::rabitq::applies(dim) {
        return Ok(vec![faiss]);
    }
    let ivf = MappedIvf::open(&p, dim, vectors.len() / dim)?;
    let codes = crate::rabitq::encode(&ivf, vectors, dim, consumed)?;
    drop(ivf);
    let rbq = put_framed(tmp, Component::Rabitq, dim as u32, model_id, &codes)?;
    Ok(vec![faiss, rbq])
}

/// Fsyncs the file written at `p` and hashes it as it is on disk, streamed.
fn hash_synced(p: &Path) -> Result<FileEntry> {
    let f = std::fs::File::open(p).map_err(io_err(p))?;
    crate::fsio::sync_all(&f, p).map_err(io_err(p))?;
    let mut h = blake3::Hasher::new();
    h.update_reader(&f).map_err(io_err(p))?;
    let size = f.metadata().map_err(io_err(p))?.len();
    Ok(FileEntry {
        name: IVF_FILE.to_string(),
        size,
        blake3: h.finalize().to_hex().to_string(),
    })
}
