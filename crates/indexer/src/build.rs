//! `indexer build`: walk → read + chunk (rayon) → resolve the graph → reuse or embed vectors →
//! write one segment for what changed → tombstone what it replaces → swap the MANIFEST.
//!
//! Incremental by construction: files whose bytes hash the same as in the live index are left
//! alone; chunks whose embedded text hashes the same as a chunk already in the index reuse its
//! vector; only new text is embedded. Every file is still parsed (cheap) so that the calls and
//! imports of changed files resolve against the whole tree.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use format::manifest::{IndexManifest, RootEntry, SegmentEntry, TombstoneRef};
use format::records::{self as rec, ChunkRecord, EdgeInput, ExternalEdge, FileRecord, NO_PARENT};
use format::{tombstones, Index, SegmentBuilder};
use rayon::prelude::*;
use roaring::RoaringBitmap;

use crate::chunk::{self, ChunkOptions, FileExtract};
use crate::graph::{self, EdgeKind, FileFacts, NodeRef};
use crate::progress::Progress;
use crate::walk::{self, Candidate, SkipReason};
use crate::IndexerError;

/// Something that turns texts into L2-normalised vectors (the burn encoder in production).
pub trait Embedder: Sync {
    fn model_id(&self) -> &str;
    fn dim(&self) -> usize;
    /// Row-major `texts.len() × dim` in input order, and the number of (unpadded) tokens.
    fn embed(&self, texts: &[&str]) -> Result<(Vec<f32>, usize), String>;

    /// Embeds `groups` in order, handing each group's vectors and token count to `sink` as they
    /// come. The burn encoder overlaps the CPU half (tokenising, batching) of the next groups
    /// with the device work of the current one, through a bounded queue.
    fn embed_groups(
        &self,
        groups: Vec<Vec<&str>>,
        sink: &mut dyn FnMut(Vec<f32>, usize) -> Result<(), String>,
    ) -> Result<(), String> {
        for g in groups {
            let (v, tokens) = self.embed(&g)?;
            sink(v, tokens)?;
        }
        Ok(())
    }

    /// `k` IVF coarse centroids for `sample` trained on the embedder's GPU, when it runs on
    /// one (`None`: FAISS trains them on the CPU).
    fn ivf_centroids(
        &self,
        _sample: &[f32],
        _dim: usize,
        _k: usize,
    ) -> Option<Result<Vec<f32>, String>> {
        None
    }
}

/// Deterministic pseudo-random unit vectors from blake3 of the text: a stand-in [`Embedder`]
/// for tests and benchmarks that exercise everything but the model (reports 0 tokens).
pub struct HashEmbedder {
    pub dim: usize,
}

impl Embedder for HashEmbedder {
    fn model_id(&self) -> &str {
        "hash-embedder"
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn embed(&self, texts: &[&str]) -> Result<(Vec<f32>, usize), String> {
        let mut out = Vec::with_capacity(texts.len() * self.dim);
        for t in texts {
            let mut xof = blake3::Hasher::new().update(t.as_bytes()).finalize_xof();
            let mut bytes = vec![0u8; self.dim];
            xof.fill(&mut bytes);
            let v: Vec<f32> = bytes.iter().map(|b| *b as f32 - 127.5).collect();
            let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
            out.extend(v.iter().map(|x| x / n));
        }
        Ok((out, 0))
    }
}

/// Prepared groups waiting for the device in [`Embedder::embed_groups`].
const PIPELINE_DEPTH: usize = 2;

impl Embedder for kernels::Encoder {
    fn model_id(&self) -> &str {
        kernels::Encoder::model_id(self)
    }
    fn dim(&self) -> usize {
        kernels::Encoder::dim(self)
    }
    fn embed(&self, texts: &[&str]) -> Result<(Vec<f32>, usize), String> {
        kernels::Encoder::embed(self, texts)
            .map(|(v, s)| (v, s.tokens))
            .map_err(|e| e.to_string())
    }
    fn embed_groups(
        &self,
        groups: Vec<Vec<&str>>,
        sink: &mut dyn FnMut(Vec<f32>, usize) -> Result<(), String>,
    ) -> Result<(), String> {
        struct Failed(String);
        impl From<kernels::ModelError> for Failed {
            fn from(e: kernels::ModelError) -> Self {
                Failed(e.to_string())
            }
        }
        self.embed_pipelined(groups, PIPELINE_DEPTH, |v, stats| {
            sink(v, stats.tokens).map_err(Failed)
        })
        .map_err(|Failed(e)| e)
    }
    fn ivf_centroids(
        &self,
        sample: &[f32],
        dim: usize,
        k: usize,
    ) -> Option<Result<Vec<f32>, String>> {
        self.train_ivf_centroids(sample, dim, k)
            .map(|r| r.map_err(|e| e.to_string()))
    }
}

/// Options of a build.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub roots: Vec<PathBuf>,
    pub out: PathBuf,
    /// Overrides the repository name (default: each root's directory name).
    pub repo: Option<String>,
    pub max_file_bytes: u64,
    pub chunk: ChunkOptions,
    /// Texts per embedding call (progress granularity; the encoder batches inside).
    pub embed_group: usize,
    /// Restricts what may change: (repository, repo-relative path prefix) pairs. Files
    /// outside every prefix keep their indexed version (neither re-indexed nor deleted), even
    /// if they changed on disk; all files are still parsed, for cross-file graph edges. `None`
    /// (the default) re-indexes every changed file of the roots.
    pub only: Option<Vec<(String, String)>>,
}

impl BuildOptions {
    /// Whether `only` lets file `rel` of `repo` change.
    pub fn in_scope(&self, repo: &str, rel: &str) -> bool {
        self.only.as_ref().is_none_or(|o| {
            o.iter().any(|(r, p)| {
                r == repo
                    && (p.is_empty()
                        || rel == p
                        || rel
                            .strip_prefix(p.as_str())
                            .is_some_and(|rest| rest.starts_with('/')))
            })
        })
    }
}

impl BuildOptions {
    pub fn new(roots: Vec<PathBuf>, out: PathBuf) -> BuildOptions {
        BuildOptions {
            roots,
            out,
            repo: None,
            max_file_bytes: walk::DEFAULT_MAX_FILE_BYTES,
            chunk: ChunkOptions::default(),
            embed_group: 256,
            only: None,
        }
    }
}

/// What a build did; printed as the summary and used by tests.
#[derive(Debug, Default, Clone)]
pub struct BuildReport {
    pub files_seen: usize,
    pub files_indexed: usize,
    pub files_changed: usize,
    pub files_unchanged: usize,
    pub files_deleted: usize,
    pub source_bytes: u64,
    pub skipped: BTreeMap<&'static str, usize>,
    /// Problems that stop a file from being indexed (unreadable files, walk errors).
    pub errors: Vec<String>,
    /// Files left out for a reason worth telling (invalid UTF-8).
    pub warnings: Vec<String>,
    pub parse_error_files: usize,
    pub chunks_written: usize,
    pub chunks_embedded: usize,
    pub chunks_reused: usize,
    pub tokens_embedded: usize,
    pub chunks_tombstoned: u64,
    pub edges: BTreeMap<&'static str, usize>,
    pub segment_id: Option<String>,
    pub generation: u64,
    pub live_chunks: u64,
    pub timings: Vec<(&'static str, Duration)>,
}

impl BuildReport {
    pub fn time_of(&self, phase: &str) -> Duration {
        self.timings
            .iter()
            .filter(|t| t.0 == phase)
            .map(|t| t.1)
            .sum()
    }
}

/// A file after reading and chunking.
struct Parsed {
    cand: Candidate,
    hash: [u8; 32],
    extract: FileExtract,
}

/// The text that is embedded for a chunk: a short header (path, kind, qualified name) and the
/// chunk's own text. Its blake3 is the chunk's content hash, the key for vector reuse.
pub fn embed_text(path: &str, kind: &str, qualified: &str, text: &str) -> String {
    if qualified.is_empty() {
        format!("{path} {kind}\n{text}")
    } else {
        format!("{path} {kind} {qualified}\n{text}")
    }
}

/// Runs a build. On error nothing visible changes: the MANIFEST is the last thing written.
pub fn build(
    opts: &BuildOptions,
    embedder: &dyn Embedder,
    progress: &Progress,
) -> Result<BuildReport, IndexerError> {
    let mut report = BuildReport::default();
    let out = &opts.out;
    std::fs::create_dir_all(out).map_err(|e| IndexerError::Io {
        path: out.clone(),
        source: e,
    })?;

    // The existing index, if any, must be sound: we reuse its vectors and tombstone its chunks.
    let existing = match Index::open(out) {
        Ok(i) => Some(i),
        Err(format::FormatError::NotAnIndex { .. }) => None,
        Err(e) => {
            return Err(IndexerError::ExistingIndex {
                path: out.clone(),
                source: e,
            })
        }
    };
    if let Some(ix) = &existing {
        // Vectors and records are reused from it: a flipped byte must not be copied into a new
        // segment under fresh checksums. Full checksums cost one sequential read of the index.
        let t = Instant::now();
        if let Some(e) = ix.segments.iter().flat_map(|ls| ls.segment.verify()).next() {
            return Err(IndexerError::ExistingIndex {
                path: out.clone(),
                source: e,
            });
        }
        report.timings.push(("verify", t.elapsed()));
        if ix.manifest.model_id != embedder.model_id() || ix.manifest.dim as usize != embedder.dim()
        {
            return Err(IndexerError::ModelChanged {
                path: out.clone(),
                index_model: ix.manifest.model_id.clone(),
                model: embedder.model_id().to_string(),
            });
        }
    }

    // 1. Walk.
    let t = Instant::now();
    let mut cands = Vec::new();
    for root in &opts.roots {
        if !root.exists() {
            return Err(IndexerError::MissingRoot(root.clone()));
        }
        let repo = opts.repo.clone().unwrap_or_else(|| walk::repo_name(root));
        let w = walk::walk(root, &repo, opts.max_file_bytes);
        for (_, reason) in &w.skipped {
            *report.skipped.entry(reason.name()).or_insert(0) += 1;
        }
        report.errors.extend(w.errors);
        cands.extend(w.candidates);
    }
    cands.sort();
    cands.dedup_by(|a, b| a.repo == b.repo && a.rel_path == b.rel_path);
    report.files_seen = cands.len();
    report.timings.push(("walk", t.elapsed()));
    progress.line(&format!("walk: {} candidate files", cands.len()));

    // 2. Read and chunk, in parallel.
    let t = Instant::now();
    let bar = progress.bar(cands.len() as u64, "parse");
    let results: Vec<Result<Parsed, (SkipReason, String)>> = cands
        .into_par_iter()
        .map(|cand| {
            let r = walk::read_source(&cand).map(|(text, hash)| {
                let extract = chunk::extract(
                    cand.language,
                    &cand.repo,
                    &cand.rel_path,
                    &text,
                    &opts.chunk,
                );
                Parsed {
                    cand,
                    hash,
                    extract,
                }
            });
            bar.inc(1);
            r
        })
        .collect();
    bar.finish_and_clear();
    let mut files: Vec<Parsed> = Vec::with_capacity(results.len());
    for r in results {
        match r {
            Ok(p) => files.push(p),
            Err((reason, msg)) => {
                *report.skipped.entry(reason.name()).or_insert(0) += 1;
                match reason {
                    SkipReason::Unreadable => report.errors.push(msg),
                    SkipReason::InvalidUtf8 => report.warnings.push(msg),
                    _ => {}
                }
            }
        }
    }
    report.parse_error_files = files.iter().filter(|f| f.extract.had_parse_errors).count();
    report.files_indexed = files.len();
    report.source_bytes = files.iter().map(|f| f.cand.size).sum();
    report.timings.push(("parse", t.elapsed()));

    // 3. Changed vs unchanged against the live index.
    let mut live: HashMap<(String, String), (usize, u32, [u8; 32])> = HashMap::new();
    if let Some(ix) = &existing {
        for (si, ls) in ix.segments.iter().enumerate() {
            let table = ls.segment.table();
            for (fi, f) in table.files.iter().enumerate() {
                let first = f.first_chunk.to_native();
                let all_dead =
                    (first..first + f.chunk_count.to_native()).all(|c| ls.tombstones.contains(c));
                if f.chunk_count.to_native() > 0 && all_dead {
                    continue;
                }
                live.insert(
                    (f.repo.to_string(), f.path.to_string()),
                    (si, fi as u32, f.content_hash),
                );
            }
        }
    }
    let changed: Vec<bool> = files
        .iter()
        .map(|f| {
            opts.in_scope(&f.cand.repo, &f.cand.rel_path)
                && live
                    .get(&(f.cand.repo.clone(), f.cand.rel_path.clone()))
                    .is_none_or(|(_, _, h)| *h != f.hash)
        })
        .collect();
    report.files_changed = changed.iter().filter(|c| **c).count();
    report.files_unchanged = files.len() - report.files_changed;
    let index_of: HashMap<(&str, &str), usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| ((f.cand.repo.as_str(), f.cand.rel_path.as_str()), i))
        .collect();
    // Repositories of this build's roots: only their files can count as deleted (others may
    // live in another repository indexed into the same directory).
    let root_repos: std::collections::HashSet<String> = opts
        .roots
        .iter()
        .map(|r| opts.repo.clone().unwrap_or_else(|| walk::repo_name(r)))
        .collect();
    // Files to tombstone: changed ones that were live, and live ones that are gone.
    let mut dead_files: Vec<(usize, u32)> = Vec::new();
    for (key, (si, fi, _)) in &live {
        match index_of.get(&(key.0.as_str(), key.1.as_str())) {
            Some(&i) if changed[i] => dead_files.push((*si, *fi)),
            Some(_) => {}
            None if root_repos.contains(&key.0) && opts.in_scope(&key.0, &key.1) => {
                dead_files.push((*si, *fi));
                report.files_deleted += 1;
            }
            None => {}
        }
    }
    dead_files.sort_unstable();

    // The roots this build records in MANIFEST (absolute, so a server can re-index them).
    let roots: Vec<RootEntry> = opts
        .roots
        .iter()
        .map(|r| RootEntry {
            repo: opts.repo.clone().unwrap_or_else(|| walk::repo_name(r)),
            path: std::fs::canonicalize(r)
                .unwrap_or_else(|_| r.clone())
                .to_string_lossy()
                .into_owned(),
        })
        .collect();
    // A repository the manifest has no root for is worth a commit of its own; a known one
    // whose checkout moved is updated with the next real change.
    let roots_known = existing.as_ref().is_some_and(|ix| {
        roots
            .iter()
            .all(|r| ix.manifest.roots.iter().any(|x| x.repo == r.repo))
    });
    if let (0, true, Some(ix), true) = (
        report.files_changed,
        dead_files.is_empty(),
        &existing,
        roots_known,
    ) {
        report.generation = ix.manifest.generation;
        report.live_chunks = ix.live_chunks();
        progress.line("index is up to date; nothing to write");
        return Ok(report);
    }

    // 4. Graph over all parsed files; keep what starts in a changed file.
    let t = Instant::now();
    let facts: Vec<FileFacts> = files
        .iter()
        .map(|f| FileFacts {
            path: &f.cand.rel_path,
            language: f.cand.language,
            extract: &f.extract,
        })
        .collect();
    let resolved = graph::resolve(&facts);
    // Local numbering of the new segment: changed files in order, their chunks in order.
    let mut local_file = vec![u32::MAX; files.len()];
    let mut first_chunk = vec![0u32; files.len()];
    let (mut nf, mut nc) = (0u32, 0u32);
    for (i, f) in files.iter().enumerate() {
        if changed[i] {
            local_file[i] = nf;
            first_chunk[i] = nc;
            nf += 1;
            nc += f.extract.chunks.len() as u32;
        }
    }
    let node = |r: &NodeRef| -> Option<u32> {
        match *r {
            NodeRef::File(f) => (local_file[f] != u32::MAX).then(|| nc + local_file[f]),
            NodeRef::Chunk { file, chunk } => {
                (local_file[file] != u32::MAX).then(|| first_chunk[file] + chunk as u32)
            }
        }
    };
    let external_name = |r: &NodeRef| -> Option<String> {
        match *r {
            NodeRef::File(f) => Some(format!("file:{}", files[f].cand.rel_path)),
            NodeRef::Chunk { file, chunk } => {
                let id = &files[file].extract.chunks[chunk].symbol_id;
                (!id.is_empty()).then(|| id.clone())
            }
        }
    };
    let mut edges = Vec::new();
    let mut external = Vec::new();
    for e in &resolved {
        let kind = match e.kind {
            EdgeKind::Contains => rec::EdgeKind::Contains,
            EdgeKind::Imports => rec::EdgeKind::Imports,
            EdgeKind::Calls => rec::EdgeKind::Calls,
        };
        let Some(src) = node(&e.src) else { continue };
        *report.edges.entry(kind.name()).or_insert(0) += 1;
        match node(&e.dst) {
            Some(dst) => edges.push(EdgeInput {
                kind,
                src,
                dst,
                resolved: e.resolved,
            }),
            None => {
                if let Some(dst) = external_name(&e.dst) {
                    let flags = if e.resolved { rec::EDGE_RESOLVED } else { 0 };
                    external.push(ExternalEdge {
                        kind: kind as u8,
                        src,
                        dst,
                        flags,
                    });
                }
            }
        }
    }
    report.timings.push(("graph", t.elapsed()));

    // 5. Records and embedding texts of the changed files.
    let mut builder = SegmentBuilder::default();
    let mut texts: Vec<String> = Vec::new();
    for (i, f) in files.iter().enumerate() {
        if !changed[i] {
            continue;
        }
        let lf = local_file[i];
        builder.files.push(FileRecord {
            repo: f.cand.repo.clone(),
            path: f.cand.rel_path.clone(),
            language: f.cand.language.name().to_string(),
            content_hash: f.hash,
            size: f.cand.size,
            first_chunk: first_chunk[i],
            chunk_count: f.extract.chunks.len() as u32,
            imports: f
                .extract
                .imports
                .iter()
                .map(|im| im.module.clone())
                .collect(),
        });
        for c in &f.extract.chunks {
            let et = embed_text(&f.cand.rel_path, c.kind.name(), &c.qualified, &c.text);
            builder.chunks.push(ChunkRecord {
                file: lf,
                kind: c.kind.name().to_string(),
                name: c.name.clone(),
                qualified: c.qualified.clone(),
                symbol_id: c.symbol_id.clone(),
                start_line: c.start_line.max(1),
                end_line: c.end_line.max(c.start_line.max(1)),
                start_byte: c.start_byte,
                end_byte: c.end_byte.max(c.start_byte),
                parent: c.parent.map_or(NO_PARENT, |p| first_chunk[i] + p as u32),
                content_hash: *blake3::hash(et.as_bytes()).as_bytes(),
                text: c.text.clone(),
            });
            texts.push(et);
        }
    }
    builder.edges = edges;
    builder.external_edges = external;

    // 6. Vectors: reuse by content hash, embed the rest (each distinct text once).
    let t = Instant::now();
    let dim = embedder.dim();
    let mut known: HashMap<[u8; 32], (usize, u32)> = HashMap::new();
    if let Some(ix) = &existing {
        for (si, ls) in ix.segments.iter().enumerate() {
            for (ci, c) in ls.segment.table().chunks.iter().enumerate() {
                known.entry(c.content_hash).or_insert((si, ci as u32));
            }
        }
    }
    let mut vectors = vec![0f32; builder.chunks.len() * dim];
    let mut todo: Vec<usize> = Vec::new();
    let mut first_of: HashMap<[u8; 32], usize> = HashMap::new();
    let mut copies: Vec<(usize, usize)> = Vec::new();
    for (i, c) in builder.chunks.iter().enumerate() {
        if let Some((si, ci)) = known.get(&c.content_hash) {
            let ix = existing.as_ref().expect("known implies existing");
            if let Some(v) = ix.segments[*si].segment.vector(*ci) {
                vectors[i * dim..(i + 1) * dim].copy_from_slice(v);
                report.chunks_reused += 1;
                continue;
            }
        }
        match first_of.get(&c.content_hash) {
            Some(&j) => copies.push((j, i)),
            None => {
                first_of.insert(c.content_hash, i);
                todo.push(i);
            }
        }
    }
    // Longest-first order keeps length buckets full across groups.
    let bar = progress.bar(todo.len() as u64, "embed");
    let index_groups: Vec<&[usize]> = todo.chunks(opts.embed_group.max(1)).collect();
    let text_groups: Vec<Vec<&str>> = index_groups
        .iter()
        .map(|g| g.iter().map(|&i| texts[i].as_str()).collect())
        .collect();
    let mut next = 0usize;
    embedder
        .embed_groups(text_groups, &mut |v, tokens| {
            let group = index_groups
                .get(next)
                .ok_or("encoder returned more groups than it was given")?;
            next += 1;
            report.tokens_embedded += tokens;
            if v.len() != group.len() * dim {
                return Err(format!(
                    "encoder returned {} floats for {} texts",
                    v.len(),
                    group.len()
                ));
            }
            for (k, &i) in group.iter().enumerate() {
                vectors[i * dim..(i + 1) * dim].copy_from_slice(&v[k * dim..(k + 1) * dim]);
            }
            bar.inc(group.len() as u64);
            progress.tick_line(&format!("embed: {}/{} chunks", bar.position(), todo.len()));
            Ok(())
        })
        .map_err(IndexerError::Embed)?;
    if next != index_groups.len() {
        return Err(IndexerError::Embed(format!(
            "encoder returned {next} of {} groups",
            index_groups.len()
        )));
    }
    bar.finish_and_clear();
    for (j, i) in copies {
        let (a, b) = (j * dim, i * dim);
        vectors.copy_within(a..a + dim, b);
    }
    report.chunks_embedded = todo.len();
    report.chunks_reused = builder.chunks.len() - todo.len();
    report.timings.push(("embed", t.elapsed()));
    // IVF coarse centroids on the encoder's GPU, outside the directory lock (FAISS trains
    // them on the CPU, inside `write`, when the encoder has no GPU).
    if builder.chunks.len() >= format::vectors::IVF_THRESHOLD {
        let t = Instant::now();
        let sample = format::vectors::ivf_training_sample(&vectors, dim);
        let k = format::vectors::nlist_for(builder.chunks.len());
        if let Some(r) = embedder.ivf_centroids(&sample, dim, k) {
            builder.ivf_centroids = Some(r.map_err(IndexerError::Embed)?);
            report.timings.push(("ivf-centroids-gpu", t.elapsed()));
        }
    }
    builder.vectors = vectors;
    report.chunks_written = builder.chunks.len();

    // 7. Write the segment, the tombstones, then commit the manifest.
    let t = Instant::now();
    let model_id = embedder.model_id().to_string();
    // Segment write, tombstones, commit and garbage collection happen under the directory lock:
    // queryd flushes memory segments into the same MANIFEST, and garbage collection must never
    // see a segment that is written but not yet committed.
    std::fs::create_dir_all(out).map_err(|e| IndexerError::Io {
        path: out.to_path_buf(),
        source: e,
    })?;
    let _lock = format::manifest::DirLock::acquire(out).map_err(IndexerError::Format)?;
    let mut manifest = match &existing {
        Some(ix) => {
            // Memory segments may have changed since the build started; code segments must not.
            let current = IndexManifest::read(out).map_err(IndexerError::Format)?;
            if current.segments != ix.manifest.segments {
                return Err(IndexerError::ConcurrentBuild(out.to_path_buf()));
            }
            current
        }
        None => match IndexManifest::read(out) {
            // An index appeared meanwhile (or holds only memories): keep its memories.
            Ok(current) if current.segments.is_empty() => current,
            Ok(_) => return Err(IndexerError::ConcurrentBuild(out.to_path_buf())),
            Err(_) => IndexManifest::empty(&model_id, dim as u32),
        },
    };
    let generation = manifest.generation + 1;
    let write_segment = !builder.chunks.is_empty() || !builder.files.is_empty();
    let new_seg = if write_segment {
        let (id, meta) = builder
            .write(out, &model_id, dim)
            .map_err(IndexerError::Format)?;
        Some(SegmentEntry {
            id,
            chunks: meta.chunk_count,
            tombstones: None,
        })
    } else {
        None
    };
    if let Some(ix) = &existing {
        let mut per_seg: BTreeMap<usize, RoaringBitmap> = BTreeMap::new();
        for (si, fi) in &dead_files {
            let f = &ix.segments[*si].segment.table().files[*fi as usize];
            let first = f.first_chunk.to_native();
            per_seg
                .entry(*si)
                .or_default()
                .insert_range(first..first + f.chunk_count.to_native());
        }
        let dead_set: std::collections::HashSet<(usize, u32)> =
            dead_files.iter().copied().collect();
        let mut entries = Vec::new();
        for (si, ls) in ix.segments.iter().enumerate() {
            let mut entry = manifest.segments[si].clone();
            if let Some(newly) = per_seg.get(&si) {
                let mut bits = ls.tombstones.clone();
                let before = bits.len();
                bits |= newly;
                report.chunks_tombstoned += bits.len() - before;
                if bits.len() >= u64::from(entry.chunks) && all_files_dead(ls, &dead_set, si) {
                    continue; // fully dead: drop the segment
                }
                let name = tombstones::file_name(&entry.id, generation);
                let bytes = tombstones::write(&out.join(&name), &model_id, &bits)
                    .map_err(IndexerError::Format)?;
                entry.tombstones = Some(TombstoneRef {
                    file: name,
                    blake3: format::blake3_hex(&bytes),
                    count: bits.len(),
                });
            }
            entries.push(entry);
        }
        manifest.segments = entries;
    }
    if let Some(s) = &new_seg {
        report.segment_id = Some(s.id.clone());
        if !manifest.segments.iter().any(|e| e.id == s.id) {
            manifest.segments.push(s.clone());
        }
    }
    for r in roots {
        manifest.roots.retain(|x| x.repo != r.repo);
        manifest.roots.push(r);
    }
    manifest.roots.sort();
    manifest.generation = generation;
    manifest.commit(out).map_err(IndexerError::Format)?;
    // Old generations are no longer named; readers that still map them keep working.
    if let Err(e) = Index::collect_garbage(out) {
        report.errors.push(format!("garbage collection: {e}"));
    }
    report.generation = generation;
    report.live_chunks = manifest
        .segments
        .iter()
        .map(|s| u64::from(s.chunks) - s.tombstones.as_ref().map_or(0, |t| t.count))
        .sum();
    report.timings.push(("write", t.elapsed()));
    Ok(report)
}

fn all_files_dead(
    ls: &format::manifest::LiveSegment,
    dead: &std::collections::HashSet<(usize, u32)>,
    si: usize,
) -> bool {
    let n = ls.segment.table().files.len() as u32;
    (0..n).all(|fi| {
        let f = &ls.segment.table().files[fi as usize];
        let first = f.first_chunk.to_native();
        let dead_now = dead.contains(&(si, fi));
        let dead_before = f.chunk_count.to_native() > 0
            && (first..first + f.chunk_count.to_native()).all(|c| ls.tombstones.contains(c));
        dead_now || dead_before
    })
}
