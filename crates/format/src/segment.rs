//! One immutable segment: writer ([`SegmentBuilder`]) and zero-copy reader ([`Segment`]).
//!
//! A segment is a directory `seg-<id>/` holding `chunks.rkyv`, `texts.bin` (format 4,
//! [`crate::texts`]), `postings.rkyv`, `graph.rkyv`, `vectors.f32`, optionally `ivf.faiss` and `ivf.rbq` (its lists' one-bit codes,
//! [`crate::rabitq`]), and `segment.json` (its manifest: format version, model, dimension,
//! counts and the size and blake3 of every other file). The id is the blake3 of
//! `segment.json`, so a segment is content-addressed: same inputs, same bytes, same id.
//!
//! Opening checks, in order: `segment.json` parses, with a version this build reads and our
//! model; every listed file exists with its recorded size; each file's header; rkyv
//! validation (bytecheck) of each archive; `texts.bin`'s header, count and last offset (format 4; a format 3 segment's texts
//! are in the records, whose bounds bytecheck checks); cross-file structure (postings and
//! graph refer to existing chunks, vector count). No chunk text is read: each text's offsets
//! and UTF-8 are checked when it is read ([`Segment::chunk_text`]), all of them by `verify`.
//! After that, reads go straight to the memory maps. Full checksums run in [`Segment::verify`]
//! (and always before FAISS parses `ivf.faiss`, which is not hardened against corrupt input).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use memmap2::Mmap;
use rkyv::rancor;
use serde::{Deserialize, Serialize};

use crate::bm25::{self, ArchivedPostingsArchive, DocFields};
use crate::graph::{self, ArchivedGraphArchive};
use crate::header::{self, Component, HEADER_LEN};
use crate::ivf_map::MappedIvf;
use crate::memory::{self, ArchivedMemoryTable, MemoryRecord, MemoryTable};
use crate::rabitq::MappedRbq;
use crate::records::{
    ArchivedChunkTable, ChunkInput, ChunkTable, EdgeInput, ExternalEdge, FileInput, NO_PARENT,
};
use crate::texts::MappedTexts;
use crate::vectors::{self, Ivf, IVF_FILE};
use crate::{corrupt, io_err, sync_dir, write_synced, FormatError, Result, FORMAT_VERSION};

mod search;

pub const SEGMENT_JSON: &str = "segment.json";

/// A file of a segment, as its manifest records it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileEntry {
    pub name: String,
    pub size: u64,
    pub blake3: String,
}

/// `segment.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SegmentMeta {
    pub format_version: u32,
    pub model_id: String,
    pub dim: u32,
    pub chunk_count: u32,
    pub file_count: u32,
    /// `flat` or `ivf<nlist>,sq8` (plus `,centroids=external` when the coarse centroids were
    /// trained outside FAISS, by the indexer's GPU k-means).
    pub vector_index: String,
    pub files: Vec<FileEntry>,
}

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
    /// floats, for a segment large enough to get an IVF index; `None`: FAISS trains them.
    pub ivf_centroids: Option<Vec<f32>>,
}

impl SegmentBuilder {
    fn validate(&self, dim: usize) -> Result<()> {
        let bad = |m: String| Err(FormatError::InvalidInput(m));
        let n = self.chunks.len();
        if n > (u32::MAX / 2) as usize || self.files.len() > (u32::MAX / 2) as usize {
            return bad("too many chunks or files for one segment".into());
        }
        if dim == 0 || self.vectors.len() != n * dim {
            return bad(format!(
                "{} floats for {n} chunks of dimension {dim}",
                self.vectors.len()
            ));
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
        self.validate(dim)?;
        let tmp = index_dir.join(format!(".tmp-seg-{}-{}", std::process::id(), unique()));
        crate::fsio::create_dir_all(&tmp).map_err(io_err(&tmp))?;
        let result = self.write_into(&tmp, index_dir, model_id, dim);
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        result
    }

    /// [`Self::write`] into the fresh directory `tmp`, renamed into place at the end.
    ///
    /// The IVF index (FAISS's k-means and SQ8 encoding, the largest single cost of a large
    /// segment) is built on a scoped thread while this one writes the other components, each
    /// encoded, written and dropped in turn. The output does not depend on that overlap: every
    /// file is a function of the inputs alone.
    fn write_into(
        self,
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
            chunks,
            vectors,
            edges,
            external_edges,
            memories,
            ivf_centroids,
        } = self;
        let (ivf, rest) = std::thread::scope(|scope| {
            let ivf = (n as usize >= vectors::IVF_THRESHOLD).then(|| {
                let (vectors, centroids) = (&vectors, ivf_centroids.as_deref());
                scope.spawn(move || write_ivf_file(tmp, vectors, dim, centroids, model_id))
            });
            let rest = write_components(
                tmp,
                model_id,
                d,
                file_inputs,
                chunks,
                &vectors,
                edges,
                external_edges,
                memories,
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
                // Who trained the coarse centroids (FAISS's k-means otherwise).
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

/// Writes a framed component file (header, then `payload`, fsynced) without building the
/// framed bytes in memory, and returns its [`FileEntry`] (blake3 of header + payload).
fn put_framed(
    tmp: &Path,
    c: Component,
    dim: u32,
    model_id: &str,
    payload: &[u8],
) -> Result<FileEntry> {
    put_framed_parts(tmp, c, dim, model_id, &[payload])
}

/// [`put_framed`] of the payload `parts` joined, without joining them: the header, then the
/// parts in one vectored write (`fsio::write_all_parts`), fsynced.
fn put_framed_parts(
    tmp: &Path,
    c: Component,
    dim: u32,
    model_id: &str,
    parts: &[&[u8]],
) -> Result<FileEntry> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let head = header::header(c, dim, model_id, len as u64);
    let path = tmp.join(c.file_name());
    let mut f = crate::fsio::create(&path).map_err(io_err(&path))?;
    crate::fsio::write_all(&mut f, &path, &head).map_err(io_err(&path))?;
    crate::fsio::write_all_parts(&mut f, &path, parts).map_err(io_err(&path))?;
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

/// Every component but the IVF index: the vectors on a thread of their own, the others
/// ([`write_records`]) each encoded, written and dropped in turn.
#[allow(clippy::too_many_arguments)]
fn write_components(
    tmp: &Path,
    model_id: &str,
    d: u32,
    file_inputs: Vec<FileInput>,
    chunks: Vec<ChunkInput>,
    vectors: &[f32],
    edges: Vec<EdgeInput>,
    external_edges: Vec<ExternalEdge>,
    memories: Vec<MemoryRecord>,
) -> Result<Vec<FileEntry>> {
    std::thread::scope(|scope| {
        // The vectors are final already: their write, hash and fsync (most of it waiting on
        // the disk) run beside the encoding of the rest.
        let vectors = scope
            .spawn(|| put_framed(tmp, Component::Vectors, d, model_id, &f32_le_bytes(vectors)));
        let mut files = write_records(
            tmp,
            model_id,
            d,
            file_inputs,
            chunks,
            edges,
            external_edges,
            memories,
        )?;
        files.push(vectors.join().unwrap_or_else(|_| {
            Err(FormatError::InvalidInput(
                "the vectors writer thread panicked".into(),
            ))
        })?);
        Ok(files)
    })
}

/// The components but the vectors and the IVF index, each encoded, written and dropped in
/// turn.
#[allow(clippy::too_many_arguments)]
fn write_records(
    tmp: &Path,
    model_id: &str,
    d: u32,
    file_inputs: Vec<FileInput>,
    chunks: Vec<ChunkInput>,
    edges: Vec<EdgeInput>,
    external_edges: Vec<ExternalEdge>,
    memories: Vec<MemoryRecord>,
) -> Result<Vec<FileEntry>> {
    let archived = |what: &str, r: std::result::Result<rkyv::util::AlignedVec, rancor::Error>| {
        r.map_err(|e| FormatError::InvalidInput(format!("cannot archive {what}: {e}")))
    };
    let (n, nf) = (chunks.len() as u32, file_inputs.len() as u32);
    let mut files = Vec::new();
    let fields: Vec<DocFields> = chunks
        .iter()
        .map(|c| DocFields {
            text: &c.text,
            path: &file_inputs[c.file as usize].path,
            name: &c.name,
            qualified: &c.qualified,
        })
        .collect();
    let postings = bm25::build(&fields);
    drop(fields);
    let graph = graph::build(n, n + nf, &edges, external_edges);
    drop(edges);
    // The texts go to `texts.bin`; the records keep none (format 4).
    let mut chunks = chunks;
    let texts: Vec<String> = chunks
        .iter_mut()
        .map(|c| std::mem::take(&mut c.text))
        .collect();
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
    )?);
    drop(parts);
    drop(texts);
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

/// `v` as little-endian bytes: borrowed in place on a little-endian target (the 150 MB of a
/// 100k-chunk segment's vectors are not copied), converted elsewhere.
fn f32_le_bytes(v: &[f32]) -> std::borrow::Cow<'_, [u8]> {
    #[cfg(target_endian = "little")]
    {
        // SAFETY: f32 has no padding and any byte pattern is a valid u8; the slice covers
        // exactly the floats' memory, and u8's alignment (1) divides f32's.
        std::borrow::Cow::Borrowed(unsafe {
            std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v))
        })
    }
    #[cfg(not(target_endian = "little"))]
    {
        std::borrow::Cow::Owned(v.iter().flat_map(|f| f.to_le_bytes()).collect())
    }
}

/// Trains, fills and writes `ivf.faiss`, fsyncs it and hashes it as it is on disk; then
/// encodes its lists' one-bit codes into `ivf.rbq` ([`crate::rabitq`]) when the dimension
/// gets them ([`crate::rabitq::applies`]).
fn write_ivf_file(
    tmp: &Path,
    vectors: &[f32],
    dim: usize,
    centroids: Option<&[f32]>,
    model_id: &str,
) -> Result<Vec<FileEntry>> {
    let p = tmp.join(IVF_FILE);
    vectors::write_ivf_with(&p, vectors, dim, centroids)?;
    let faiss = hash_synced(&p)?;
    if !crate::rabitq::applies(dim) {
        return Ok(vec![faiss]);
    }
    let ivf = MappedIvf::open(&p, dim, vectors.len() / dim)?;
    let codes = crate::rabitq::encode(&ivf, vectors, dim)?;
    drop(ivf);
    let rbq = put_framed(tmp, Component::Rabitq, dim as u32, model_id, &codes)?;
    Ok(vec![faiss, rbq])
}

/// Fsyncs the file FAISS wrote at `p` and hashes it as it is on disk, streamed.
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

/// A number unique within this process (temporary directory names).
pub(crate) fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// The content address of a segment: the first 24 hex digits of blake3(`segment.json`).
pub fn segment_id(segment_json: &[u8]) -> String {
    crate::blake3_hex(segment_json)[..24].to_string()
}

/// How many approximate (SQ8) candidates are re-ranked exactly for a top-`k` vector search.
pub fn rerank_depth(k: usize) -> usize {
    (k * 4).max(64)
}

/// How many one-bit candidates ([`crate::rabitq`]) are re-ranked exactly for a top-`k`
/// vector search: twice [`rerank_depth`]. One-bit estimates are coarser than SQ8 scores; at
/// `rerank_depth` recall@10 on tokio's 14,459 chunks fell from 0.963 to 0.955 (identifier
/// queries, default nprobe), and on 1M synthetic vectors from 1.000 to 0.986.
pub fn rerank_depth_one_bit(k: usize) -> usize {
    2 * rerank_depth(k)
}

pub fn dir_name(id: &str) -> String {
    format!("seg-{id}")
}

/// An open, validated segment. Reads borrow from the memory maps.
pub struct Segment {
    dir: PathBuf,
    id: String,
    meta: SegmentMeta,
    chunks: Mmap,
    postings: Mmap,
    graph: Mmap,
    vectors: Mmap,
    /// `memories.rkyv`, in memory segments only.
    memories: Option<Mmap>,
    /// `texts.bin` (format 4); `None` in a format 3 segment, whose texts are in the records.
    texts: Option<MappedTexts>,
    ivf: OnceLock<std::result::Result<Ivf, String>>,
    ivf_map: OnceLock<std::result::Result<MappedIvf, String>>,
    /// `ivf.rbq`, opened beside `ivf_map` on first use (`None`: the segment has none).
    rbq: OnceLock<std::result::Result<Option<MappedRbq>, String>>,
    /// The dictionary's lookup fences, gathered when the postings are validated at open.
    term_fences: OnceLock<bm25::TermFences>,
    /// Whether [`Segment::populate`] ran.
    populated: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("id", &self.id)
            .field("meta", &self.meta)
            .finish()
    }
}

fn map(path: &Path) -> Result<Mmap> {
    let f = std::fs::File::open(path).map_err(io_err(path))?;
    // SAFETY: segment files are immutable once written (content-addressed directories, never
    // modified in place; the garbage collector only unlinks, which keeps existing maps valid).
    unsafe { Mmap::map(&f) }.map_err(io_err(path))
}

impl Segment {
    /// Opens `index_dir/seg-<id>` and validates it (see the module docs for the order of checks).
    pub fn open(index_dir: &Path, id: &str, model_id: &str, dim: u32) -> Result<Segment> {
        let dir = index_dir.join(dir_name(id));
        let meta_path = dir.join(SEGMENT_JSON);
        let json = std::fs::read(&meta_path).map_err(io_err(&meta_path))?;
        if segment_id(&json) != id {
            return Err(corrupt(&meta_path, "content does not match the segment id"));
        }
        let meta: SegmentMeta = serde_json::from_slice(&json)
            .map_err(|e| corrupt(&meta_path, crate::json_detail(&e)))?;
        if !crate::reads_version(meta.format_version) {
            return Err(FormatError::Version {
                path: meta_path,
                found: meta.format_version,
                expected: FORMAT_VERSION,
            });
        }
        if meta.model_id != model_id || meta.dim != dim {
            return Err(FormatError::Mismatch {
                path: meta_path,
                detail: format!(
                    "segment was built with model `{}` (dim {}), the index uses `{model_id}` (dim {dim})",
                    meta.model_id, meta.dim
                ),
            });
        }
        for f in &meta.files {
            if f.name.contains('/') || f.name.contains("..") {
                return Err(corrupt(&meta_path, format!("bad file name {:?}", f.name)));
            }
            let p = dir.join(&f.name);
            let len = std::fs::metadata(&p).map_err(io_err(&p))?.len();
            if len != f.size {
                return Err(corrupt(
                    &p,
                    format!("{len} bytes, the segment manifest says {}", f.size),
                ));
            }
        }
        // Format 4 keeps the texts in `texts.bin`; format 3 inside the records.
        let texts_file = meta.format_version >= 4;
        for c in [
            Component::Chunks,
            Component::Postings,
            Component::Graph,
            Component::Vectors,
        ]
        .into_iter()
        .chain(texts_file.then_some(Component::Texts))
        {
            if !meta.files.iter().any(|f| f.name == c.file_name()) {
                return Err(corrupt(
                    &meta_path,
                    format!("does not list {}", c.file_name()),
                ));
            }
        }
        let open = |c: Component| -> Result<Mmap> {
            let p = dir.join(c.file_name());
            let m = map(&p)?;
            header::check(&p, &m, c, Some(dim), model_id)?;
            Ok(m)
        };
        let texts = if texts_file {
            let p = dir.join(Component::Texts.file_name());
            Some(MappedTexts::open(
                &p,
                map(&p)?,
                dim,
                model_id,
                meta.chunk_count,
            )?)
        } else {
            None
        };
        let seg = Segment {
            texts,
            chunks: open(Component::Chunks)?,
            postings: open(Component::Postings)?,
            graph: open(Component::Graph)?,
            vectors: open(Component::Vectors)?,
            memories: if meta
                .files
                .iter()
                .any(|f| f.name == Component::Memories.file_name())
            {
                Some(open(Component::Memories)?)
            } else {
                None
            },
            dir,
            id: id.to_string(),
            meta,
            ivf: OnceLock::new(),
            ivf_map: OnceLock::new(),
            rbq: OnceLock::new(),
            term_fences: OnceLock::new(),
            populated: Default::default(),
        };
        seg.validate_structure()?;
        Ok(seg)
    }

    fn path_of(&self, c: Component) -> PathBuf {
        self.dir.join(c.file_name())
    }

    /// The structural checks of every archive: the records, the postings and the graph are
    /// independent (both of the latter take the counts from `segment.json`, which the records
    /// are checked against) and run side by side on rayon's pool; a segment is a few
    /// milliseconds of checks, and an index of a few large segments otherwise opened on fewer
    /// cores than it has segments' worth of work. Errors are reported in the same order as
    /// one after the other: records, postings, graph.
    fn validate_structure(&self) -> Result<()> {
        let (n, nf) = (self.meta.chunk_count, self.meta.file_count);
        let (table, (postings, graph)) = rayon::join(
            || self.validate_records(),
            || rayon::join(|| self.validate_postings(n), || self.validate_graph(n, nf)),
        );
        let table = table?;
        postings?;
        graph?;
        self.validate_memories(table, n)?;
        let vp = self.path_of(Component::Vectors);
        let expect = n as usize * self.meta.dim as usize * 4;
        if self.vectors.len() - HEADER_LEN != expect {
            return Err(corrupt(
                &vp,
                format!(
                    "{} vector bytes, expected {expect}",
                    self.vectors.len() - HEADER_LEN
                ),
            ));
        }
        Ok(())
    }

    /// `chunks.rkyv`: the archive, its counts against `segment.json`, the file ranges, each
    /// record's file and parent, the lookup tables.
    fn validate_records(&self) -> Result<&ArchivedChunkTable> {
        let chunks_path = self.path_of(Component::Chunks);
        let table =
            rkyv::access::<ArchivedChunkTable, rancor::Error>(&self.chunks[HEADER_LEN..])
                .map_err(|_| corrupt(&chunks_path, "its archive structure does not validate"))?;
        let n = table.chunks.len() as u32;
        let nf = table.files.len() as u32;
        if n != self.meta.chunk_count || nf != self.meta.file_count {
            return Err(corrupt(&chunks_path, "counts differ from segment.json"));
        }
        let mut next = 0u32;
        for (fi, f) in table.files.iter().enumerate() {
            if f.first_chunk.to_native() != next {
                return Err(corrupt(
                    &chunks_path,
                    "file chunk ranges are not contiguous",
                ));
            }
            next = next.saturating_add(f.chunk_count.to_native());
            if next > n {
                return Err(corrupt(&chunks_path, "file chunk range past the end"));
            }
            // One pass over the records checks both what a record says about its file and
            // its parent (the ranges cover every chunk: checked below).
            let range = f.first_chunk.to_native() as usize..next as usize;
            for c in table.chunks[range].iter() {
                if c.file.to_native() != fi as u32 {
                    return Err(corrupt(&chunks_path, "chunk and file tables disagree"));
                }
                let parent = c.parent.to_native();
                if parent != NO_PARENT && parent >= n {
                    return Err(corrupt(&chunks_path, "a chunk's parent is past the end"));
                }
            }
        }
        if next != n {
            return Err(corrupt(
                &chunks_path,
                "file chunk ranges do not cover all chunks",
            ));
        }
        table
            .validate_lookups()
            .map_err(|e| corrupt(&chunks_path, e))?;
        Ok(table)
    }

    /// `postings.rkyv` for `n` chunks.
    fn validate_postings(&self, n: u32) -> Result<()> {
        let pp = self.path_of(Component::Postings);
        let postings =
            rkyv::access::<ArchivedPostingsArchive, rancor::Error>(&self.postings[HEADER_LEN..])
                .map_err(|_| corrupt(&pp, "its archive structure does not validate"))?;
        let fences = bm25::validate(&pp, postings, n)?;
        // Set once: `validate_structure` runs once, from `open`.
        let _ = self.term_fences.set(fences);
        Ok(())
    }

    /// `graph.rkyv` for `n` chunks and `nf` files.
    fn validate_graph(&self, n: u32, nf: u32) -> Result<()> {
        let gp = self.path_of(Component::Graph);
        let g = rkyv::access::<ArchivedGraphArchive, rancor::Error>(&self.graph[HEADER_LEN..])
            .map_err(|_| corrupt(&gp, "its archive structure does not validate"))?;
        graph::validate(&gp, g, n, nf)
    }

    /// `memories.rkyv`, when the segment has one, against the records `table` (`n` chunks).
    fn validate_memories(&self, table: &ArchivedChunkTable, n: u32) -> Result<()> {
        if let Some(m) = &self.memories {
            let mp = self.path_of(Component::Memories);
            let mt = rkyv::access::<ArchivedMemoryTable, rancor::Error>(&m[HEADER_LEN..])
                .map_err(|_| corrupt(&mp, "its archive structure does not validate"))?;
            if mt.memories.len() != n as usize {
                return Err(corrupt(&mp, "memory count differs from the chunk count"));
            }
            for (m, c) in mt.memories.iter().zip(table.chunks.iter()) {
                let sym = c.symbol_id.as_str();
                if sym.strip_prefix(memory::MEMORY_SYMBOL_PREFIX) != Some(m.id.as_str()) {
                    return Err(corrupt(&mp, "memory records and chunks disagree"));
                }
            }
            mt.check_similar()
                .map_err(|e| corrupt(&mp, e.to_string()))?;
        }
        Ok(())
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn meta(&self) -> &SegmentMeta {
        &self.meta
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The memory records of a memory segment (`None` for a code segment).
    pub fn memories(&self) -> Option<&ArchivedMemoryTable> {
        // SAFETY: `open` validated these exact bytes with `rkyv::access` (bytecheck) and the map
        // is immutable for the life of `self`.
        self.memories
            .as_ref()
            .map(|m| unsafe { rkyv::access_unchecked::<ArchivedMemoryTable>(&m[HEADER_LEN..]) })
    }

    /// The chunk and file tables.
    pub fn table(&self) -> &ArchivedChunkTable {
        // SAFETY: `open` validated these exact bytes with `rkyv::access` (bytecheck) and the map
        // is immutable for the life of `self`.
        unsafe { rkyv::access_unchecked::<ArchivedChunkTable>(&self.chunks[HEADER_LEN..]) }
    }

    /// Chunk `c`'s text, checked when read: from `texts.bin` ([`crate::texts`]), or from the
    /// records in a format 3 segment ([`crate::lazy_text`]). A damaged text is a corruption
    /// error naming the file and the chunk; a chunk past the end is invalid input. This is the
    /// only way to a text: format 4 records hold none.
    pub fn chunk_text(&self, c: u32) -> Result<&str> {
        if let Some(texts) = &self.texts {
            return texts.get(c);
        }
        let t = self.table();
        let r = t.chunks.get(c as usize).ok_or_else(|| {
            FormatError::InvalidInput(format!(
                "chunk {c} is past the end of segment {} ({} chunks)",
                self.id,
                t.chunks.len()
            ))
        })?;
        r.text
            .as_str()
            .map_err(|e| corrupt(&self.path_of(Component::Chunks), format!("chunk {c}: {e}")))
    }

    /// The byte length of chunk `c`'s text, unchecked (0 past the end or for offsets out of
    /// order): for sizes and statistics, not for reading.
    pub fn chunk_text_len(&self, c: u32) -> usize {
        match &self.texts {
            Some(texts) => texts.len_of(c),
            None => self
                .table()
                .chunks
                .get(c as usize)
                .map_or(0, |r| r.text.as_bytes().len()),
        }
    }

    pub fn postings(&self) -> &ArchivedPostingsArchive {
        // SAFETY: validated in `open`, see `table`.
        unsafe { rkyv::access_unchecked::<ArchivedPostingsArchive>(&self.postings[HEADER_LEN..]) }
    }

    /// `q`'s terms looked up in this segment's dictionary
    /// ([`ArchivedPostingsArchive::resolve`], narrowed by the fences gathered at open).
    pub fn resolve_terms<'a>(&'a self, q: &'a bm25::QueryTerms) -> bm25::TermIds<'a> {
        match self.term_fences.get() {
            Some(f) => self.postings().resolve_fenced(q, f),
            None => self.postings().resolve(q),
        }
    }

    pub fn graph(&self) -> &ArchivedGraphArchive {
        // SAFETY: validated in `open`, see `table`.
        unsafe { rkyv::access_unchecked::<ArchivedGraphArchive>(&self.graph[HEADER_LEN..]) }
    }

    /// All vectors, row-major.
    pub fn vectors(&self) -> &[f32] {
        let bytes = &self.vectors[HEADER_LEN..];
        // SAFETY: the map is page-aligned and the payload starts at byte 64, so it is 4-byte
        // aligned; `open` checked its length is `chunk_count × dim × 4`; any bit pattern is a
        // valid f32; the host is little-endian (compile-time check in lib.rs).
        unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<f32>(), bytes.len() / 4) }
    }

    /// The vector of chunk `i`.
    pub fn vector(&self, i: u32) -> Option<&[f32]> {
        let d = self.meta.dim as usize;
        self.vectors().get(i as usize * d..(i as usize + 1) * d)
    }

    /// The IVF index, loaded (after a checksum) on first use; `None` for flat segments.
    pub fn ivf(&self) -> Result<Option<&Ivf>> {
        if self.meta.vector_index == "flat" {
            return Ok(None);
        }
        let r = self.ivf.get_or_init(|| {
            let p = self.dir.join(IVF_FILE);
            let entry = self
                .meta
                .files
                .iter()
                .find(|f| f.name == IVF_FILE)
                .ok_or_else(|| format!("{}: segment.json does not list it", p.display()))?;
            let bytes = std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            if crate::blake3_hex(&bytes) != entry.blake3 {
                return Err(format!("{} is corrupt (checksum mismatch)", p.display()));
            }
            Ivf::load(&p, self.meta.dim as usize, self.meta.chunk_count as usize)
                .map_err(|e| e.to_string())
        });
        match r {
            Ok(ivf) => Ok(Some(ivf)),
            Err(detail) => Err(FormatError::Faiss {
                path: self.dir.join(IVF_FILE),
                detail: detail.clone(),
            }),
        }
    }

    /// Whether [`Segment::ivf_map`] has been tried already (opened, failed, or flat): its next
    /// call costs nothing.
    pub fn ivf_opened(&self) -> bool {
        self.meta.vector_index == "flat" || self.ivf_map.get().is_some()
    }

    /// The IVF index read in place from its memory map ([`MappedIvf`]: headers parsed and
    /// bounds-checked, centroids quantised for routing, centroids and lists left in the map),
    /// opened on first use; `None` for flat segments. What queries use. Unlike
    /// [`Segment::ivf`] it does not hash the file first (our reader checks every offset;
    /// FAISS's parser is not hardened against damage): the file's checksum is the verifier's
    /// job ([`Segment::verify`]).
    pub fn ivf_map(&self) -> Result<Option<&MappedIvf>> {
        if self.meta.vector_index == "flat" {
            return Ok(None);
        }
        let r = self.ivf_map.get_or_init(|| {
            MappedIvf::open(
                &self.dir.join(IVF_FILE),
                self.meta.dim as usize,
                self.meta.chunk_count as usize,
            )
            .map_err(|e| e.to_string())
        });
        match r {
            Ok(ivf) => Ok(Some(ivf)),
            Err(detail) => Err(FormatError::Faiss {
                path: self.dir.join(IVF_FILE),
                detail: detail.clone(),
            }),
        }
    }

    /// The one-bit codes of the IVF lists ([`MappedRbq`], checked against `ivf.faiss`),
    /// opened on first use; `None` for a flat segment or one written before `ivf.rbq` existed
    /// (its SQ8 codes are scanned instead).
    pub fn rbq(&self) -> Result<Option<&MappedRbq>> {
        let name = Component::Rabitq.file_name();
        if !self.meta.files.iter().any(|f| f.name == name)
            || !crate::rabitq::applies(self.meta.dim as usize)
        {
            return Ok(None);
        }
        let Some(ivf) = self.ivf_map()? else {
            return Ok(None);
        };
        let r = self.rbq.get_or_init(|| {
            MappedRbq::open(
                &self.dir.join(name),
                self.meta.dim as usize,
                &self.meta.model_id,
                ivf,
            )
            .map(Some)
            .map_err(|e| e.to_string())
        });
        match r {
            Ok(r) => Ok(r.as_ref()),
            Err(detail) => Err(FormatError::Faiss {
                path: self.dir.join(name),
                detail: detail.clone(),
            }),
        }
    }

    /// The segment's memory maps: records, postings, graph, vectors, memories, texts, and the
    /// IVF maps once opened.
    fn maps(&self) -> Vec<&Mmap> {
        let mut maps: Vec<&Mmap> = vec![&self.chunks, &self.postings, &self.graph, &self.vectors];
        maps.extend(&self.memories);
        maps.extend(self.texts.as_ref().map(|t| t.map()));
        if let Some(Ok(ivf)) = self.ivf_map.get() {
            maps.push(ivf.map());
        }
        if let Some(Ok(Some(rbq))) = self.rbq.get() {
            maps.push(rbq.map());
        }
        maps
    }

    /// Bytes of the segment's memory maps ([`Self::populate`] covers them).
    pub fn mapped_bytes(&self) -> usize {
        self.maps().iter().map(|m| m.len()).sum()
    }

    /// Enters every page of the segment's memory maps into the page tables
    /// ([`crate::populate`]), once per segment (a segment shared by the next generation is
    /// not done again; open the IVF maps first, or they are left out). Returns the bytes
    /// covered by this call. What a server runs beside its first queries, so that later ones
    /// do not pay a page fault for each row, record or text they touch first (README, "Search
    /// over many segments").
    pub fn populate(&self) -> usize {
        if self
            .populated
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return 0;
        }
        self.maps().into_iter().map(crate::populate).sum()
    }

    /// Recomputes the blake3 of every file and compares with `segment.json`.
    pub fn verify(&self) -> Vec<FormatError> {
        let mut problems = Vec::new();
        for f in &self.meta.files {
            let p = self.dir.join(&f.name);
            match std::fs::read(&p) {
                Ok(b) if crate::blake3_hex(&b) == f.blake3 => {}
                Ok(_) => problems.push(corrupt(&p, "checksum does not match segment.json")),
                Err(e) => problems.push(FormatError::Io { path: p, source: e }),
            }
        }
        // Open checks the texts' bounds; their UTF-8 only when read, and all of it here.
        let texts = match &self.texts {
            Some(texts) => texts.check_all(),
            None => self.table().check_texts(&self.path_of(Component::Chunks)),
        };
        problems.extend(texts.err());
        if problems.is_empty() {
            if let Err(e) = self.ivf() {
                problems.push(e);
            }
            if let Err(e) = self.ivf_map() {
                problems.push(e);
            }
            match (self.rbq(), self.ivf_map()) {
                (Ok(Some(codes)), Ok(Some(ivf))) => {
                    if let Err(e) = codes.check_ids(ivf) {
                        problems.push(e);
                    }
                }
                (Err(e), _) => problems.push(e),
                _ => {}
            }
            // Open checks the postings' structure; every block's content only here.
            let pp = self.path_of(Component::Postings);
            if let Err(e) = bm25::validate_blocks(&pp, self.postings(), self.meta.chunk_count) {
                problems.push(e);
            }
        }
        problems
    }
}
