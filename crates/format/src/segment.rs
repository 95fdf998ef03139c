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

use crate::bm25::{self, ArchivedPostingsArchive};
use crate::graph::{self, ArchivedGraphArchive};
use crate::header::{self, Component, HEADER_LEN};
use crate::ivf_map::MappedIvf;
use crate::memory::{self, ArchivedMemoryTable};
use crate::rabitq::MappedRbq;
use crate::records::{ArchivedChunkTable, NO_PARENT};
use crate::texts::MappedTexts;
use crate::vectors::{Ivf, IVF_FILE};
use crate::{corrupt, io_err, FormatError, Result, FORMAT_VERSION};

mod search;
mod write;

pub use write::{Carried, SegmentBuilder};

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
    /// trained by the indexer's GPU k-means rather than by the writer: [`crate::ivf_write`],
    /// or FAISS in segments written before it).
    pub vector_index: String,
    pub files: Vec<FileEntry>,
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

/// The identity of a directory on disk: device, inode and birth time. A segment directory
/// replaced under the same name (a pull fetching a copy again after the damaged one was moved
/// aside, a rebuild writing it again after garbage collection removed it) has another; the
/// birth time tells a new directory from the old one where the filesystem hands the freed
/// inode number straight to the next directory made (ext4 does). Where the filesystem records
/// no birth time, the change time stands in (which `chmod` or `touch` also moves).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirIdentity {
    dev: u64,
    ino: u64,
    born: (i64, i64),
}

/// [`DirIdentity`] of `p`, `None` where it cannot be read.
pub fn dir_identity(p: &Path) -> Option<DirIdentity> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(p).ok()?;
        let born = match m
            .created()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        {
            Some(d) => (d.as_secs() as i64, i64::from(d.subsec_nanos())),
            None => (m.ctime(), m.ctime_nsec()),
        };
        Some(DirIdentity {
            dev: m.dev(),
            ino: m.ino(),
            born,
        })
    }
    #[cfg(not(unix))]
    {
        let _ = p;
        None
    }
}

/// Whether the directory at `p` is another than `was` (`None`s and a directory that is gone
/// count as the same: nothing says it was replaced).
pub fn dir_replaced(p: &Path, was: Option<DirIdentity>) -> bool {
    matches!((was, dir_identity(p)), (Some(a), Some(b)) if a != b)
}

/// An open, validated segment. Reads borrow from the memory maps.
pub struct Segment {
    dir: PathBuf,
    /// [`dir_identity`] of `dir` when the segment was opened (read before its files).
    dir_identity: Option<DirIdentity>,
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
    /// The record table's name-key fences, gathered by [`Segment::populate`] (lookups before
    /// then search the keys alone, with the same results).
    name_fences: OnceLock<bm25::TermFences>,
    /// Whether [`Segment::populate`] ran (set as it starts: it runs once).
    populated: std::sync::atomic::AtomicBool,
    /// Whether [`Segment::populate`] has finished: every row is mapped, so a re-rank need
    /// not ask for any ([`Segment::will_need_rows`]).
    rows_mapped: std::sync::atomic::AtomicBool,
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
    /// Reads `index_dir/seg-<id>/segment.json` alone: the first checks of [`Segment::open`]
    /// (its content is the id, it parses, its format version is one this build reads), without
    /// mapping or validating any component. For plans that need only the counts and file
    /// sizes (the merge after a build), so that they do not map a whole index.
    pub fn read_meta(index_dir: &Path, id: &str) -> Result<SegmentMeta> {
        let meta_path = index_dir.join(dir_name(id)).join(SEGMENT_JSON);
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
        Ok(meta)
    }

    /// Opens `index_dir/seg-<id>` and validates it (see the module docs for the order of checks).
    pub fn open(index_dir: &Path, id: &str, model_id: &str, dim: u32) -> Result<Segment> {
        let dir = index_dir.join(dir_name(id));
        let dir_identity = dir_identity(&dir);
        let meta_path = dir.join(SEGMENT_JSON);
        let meta = Segment::read_meta(index_dir, id)?;
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
            // The archives are read whole by the validation below, the records and postings
            // at every query; the vectors a row at a time until they are populated.
            if c != Component::Vectors {
                crate::advise_huge_pages(&m);
            }
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
            dir_identity,
            id: id.to_string(),
            meta,
            ivf: OnceLock::new(),
            ivf_map: OnceLock::new(),
            rbq: OnceLock::new(),
            term_fences: OnceLock::new(),
            name_fences: OnceLock::new(),
            populated: Default::default(),
            rows_mapped: Default::default(),
        };
        seg.validate_structure()?;
        Ok(seg)
    }

    pub(crate) fn path_of(&self, c: Component) -> PathBuf {
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

    /// Whether the directory at [`Segment::dir`] is no longer the one this segment was opened
    /// from ([`dir_replaced`]; one that is gone is not taken for replaced). The maps stay valid, but they hold the old files: an index
    /// opened again must map the new ones ([`crate::Index::open_reusing`]).
    pub fn replaced_on_disk(&self) -> bool {
        dir_replaced(&self.dir, self.dir_identity)
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
        // `open` checked the length: the header and `chunk_count × dim × 4` bytes.
        mapped_floats(&self.vectors)
    }

    /// The vector of chunk `i`.
    pub fn vector(&self, i: u32) -> Option<&[f32]> {
        let d = self.meta.dim as usize;
        self.vectors().get(i as usize * d..(i as usize + 1) * d)
    }

    /// Until [`Segment::populate`] has finished, when the rows of `candidates` look cold (the
    /// pages of a few, spread over the list, are not all in the page cache: `mincore`), asks
    /// the kernel to read every candidate's page at once (`MADV_WILLNEED`: the reads are
    /// queued, not waited for), so that a query on a cold index waits for the disk about once
    /// rather than once per row. Returns whether it asked. Warm rows cost the few residency
    /// checks; once populated, nothing is checked.
    pub fn will_need_rows(&self, candidates: &[(u32, f32)]) -> bool {
        /// Rows whose residency is checked before all are asked for.
        const SAMPLE: usize = 4;
        if self.rows_mapped.load(std::sync::atomic::Ordering::Acquire) {
            return false;
        }
        let row = self.meta.dim as usize * 4;
        let at = |i: u32| HEADER_LEN + i as usize * row;
        // Spread over the list: `code::search` hands the candidates over in row order, and the
        // first rows share pages with the header, which opening read.
        let n = candidates.len();
        let m = SAMPLE.min(n);
        if (1..=m).all(|s| crate::resident(&self.vectors, at(candidates[n * s / m - 1].0))) {
            return false;
        }
        for c in candidates {
            crate::will_need(&self.vectors, at(c.0)..at(c.0) + row);
        }
        true
    }

    /// The IVF index as FAISS loads it (after the checksum and our own reader, [`Self::ivf_map`]),
    /// on first use; `None` for flat segments. Only `indexer verify` and tests load it.
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
            let hash = crate::blake3_file_hex(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            if hash != entry.blake3 {
                return Err(format!("{} is corrupt (checksum mismatch)", p.display()));
            }
            // Our reader first: it checks every count and size against the file's length, so
            // FAISS, whose reader is not hardened against crafted input (a pulled file passes
            // the checksum its writer computed), only parses a file whose counts agree.
            self.ivf_map().map_err(|e| e.to_string())?;
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
    /// do not pay a page fault for each row, record or text they touch first (docs/measurements.md,
    /// "Search over many segments").
    pub fn populate(&self) -> usize {
        if self
            .populated
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return 0;
        }
        let bytes = self.maps().into_iter().map(crate::populate).sum();
        self.rows_mapped
            .store(true, std::sync::atomic::Ordering::Release);
        let _ = self.name_fences.set(self.table().name_fences());
        bytes
    }

    /// Asks for every map of the segment to be mapped in 2 MiB pages
    /// ([`crate::advise_huge_pages`]); what [`Self::populate`] does first (nothing once it
    /// has run).
    pub fn advise_huge_pages(&self) {
        if !self.populated.load(std::sync::atomic::Ordering::Acquire) {
            self.maps().into_iter().for_each(crate::advise_huge_pages);
        }
    }

    /// Drops every page of the segment's memory maps from the process's page tables
    /// ([`crate::release`]): they stay in the page cache and are faulted in again when next
    /// read. What a merge does with its parts once it has read what it needs of them, so
    /// that the pages it has read do not all stay resident at once. Returns the bytes
    /// released; a later [`Self::populate`] enters them again.
    pub fn release_pages(&self) -> usize {
        let bytes = self
            .maps()
            .into_iter()
            .map(|m| crate::release(m, 0..m.len()))
            .sum();
        self.rows_mapped
            .store(false, std::sync::atomic::Ordering::Release);
        self.populated
            .store(false, std::sync::atomic::Ordering::Release);
        bytes
    }

    /// Chunks named `key` ([`crate::records::ArchivedChunkTable::name_chunks`]), through the
    /// name-key fences once [`Segment::populate`] has gathered them.
    pub fn name_chunks(&self, key: &str) -> impl Iterator<Item = u32> + '_ {
        self.table().name_chunks_fenced(key, self.name_fences.get())
    }

    /// Recomputes the blake3 of every file and compares with `segment.json`: its bytes are
    /// those the writer wrote. Each file is read in pieces (no copy of it is held) and the
    /// files are hashed in parallel (rayon). What an incremental build checks before it
    /// reuses vectors and records from the segment; [`Segment::verify`] checks the
    /// structure too.
    pub fn verify_checksums(&self) -> Vec<FormatError> {
        use rayon::prelude::*;
        self.meta
            .files
            .par_iter()
            .filter_map(|f| {
                let p = self.dir.join(&f.name);
                match crate::blake3_file_hex(&p) {
                    Ok(h) if h == f.blake3 => None,
                    Ok(_) => Some(corrupt(&p, "checksum does not match segment.json")),
                    Err(e) => Some(FormatError::Io { path: p, source: e }),
                }
            })
            .collect()
    }

    /// Recomputes the blake3 of every file and compares with `segment.json`
    /// ([`Segment::verify_checksums`]), then checks what opening does not: every text's
    /// UTF-8, the IVF as FAISS and our reader parse it, the one-bit codes' ids, every
    /// postings block.
    pub fn verify(&self) -> Vec<FormatError> {
        let mut problems = self.verify_checksums();
        // Open checks the texts' bounds; their UTF-8 only when read, and all of it here.
        let texts = match &self.texts {
            Some(texts) => texts.check_all(),
            None => self.table().check_texts(&self.path_of(Component::Chunks)),
        };
        problems.extend(texts.err());
        if problems.is_empty() {
            // FAISS parses the file only once our reader has accepted it (`Segment::ivf`).
            if let Err(e) = self.ivf_map() {
                problems.push(e);
            } else if let Err(e) = self.ivf() {
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

/// The floats of a mapped `vectors.f32` after its header (none if the map is shorter than
/// the header); a trailing partial float is left out. Callers check the length first.
pub(crate) fn mapped_floats(map: &memmap2::Mmap) -> &[f32] {
    // Not an empty `&[u8]` cast below: its dangling pointer need not be 4-byte aligned.
    let Some(bytes) = map.get(HEADER_LEN..) else {
        return &[];
    };
    // SAFETY: a non-empty map (at least the header) is page-aligned and the payload starts at
    // byte 64, so it is 4-byte aligned; the slice covers whole floats inside it; any bit
    // pattern is a valid f32 and the host is little-endian (compile-time check in lib.rs).
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<f32>(), bytes.len() / 4) }
}
