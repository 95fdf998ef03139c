//! `indexer build`: walk → read + chunk (rayon) → resolve the graph → reuse or embed vectors →
//! write one segment for what changed → tombstone what it replaces → swap the MANIFEST.
//! [`build`] runs these phases in order, one private function each; the vector phases live in
//! `build/vectors.rs`, the write/tombstone/commit phase in `build/commit.rs`. The leaves they
//! share: [`BuildOptions`] and [`BuildReport`] in `build/types.rs`, the [`Embedder`] interface
//! with its implementations in `build/embedder.rs`.
//!
//! Bounded memory (`--memory-budget`, [`BuildOptions::memory_budget`]): parsed chunk text is
//! kept up to a quarter of the budget, the rest dropped after parsing (the graph reads no
//! text: names, calls, imports and what declarations state, [`crate::graph::Declarations`],
//! taken before the text goes) and read again when its segment is written; the changed files are cut, in file order, into
//! segments whose estimated in-memory size stays under half the budget. Each segment is
//! written into a staging directory ([`format::staging`]) and dropped before the next begins;
//! when the encoder runs on a GPU ([`Embedder::on_device`]) the write runs instead on a thread
//! of its own while the next segment is read back, given its records and embedded, so two
//! segments are in memory at once, one writing and one being prepared. (A segment's estimate
//! counts its text three times and its vectors twice, about twice what it holds: the two hold
//! about what the estimate allows one.) One MANIFEST commit publishes them all. Cut points
//! depend only on the input, so the same input gives the same segments. Edges between
//! segments of one build are external edges by symbol id, like edges to unchanged files.
//!
//! Incremental by construction: files whose bytes hash the same as in the live index are left
//! alone; chunks whose embedded text hashes the same as a chunk already in the index reuse its
//! vector; only new text is embedded. Every file is still parsed (cheap) so that the calls and
//! imports of changed files resolve against the whole tree, and an unchanged file whose edges
//! now resolve differently is written again (`build/relink.rs`).

use std::path::Path;
use std::time::Instant;

use format::manifest::RootEntry;
use format::records::{self as rec, ChunkRecord, EdgeInput, ExternalEdge, FileRecord, NO_PARENT};
use format::{Index, SegmentBuilder};
use rayon::prelude::*;

use crate::chunk::{self, FileExtract};
use crate::graph::{self, FileFacts, NodeRef};
use crate::progress::Progress;
use crate::walk::{self, Candidate, SkipReason};
use crate::IndexerError;

mod commit;
mod embedder;
mod facts;
mod parsed;
mod plan;
mod relink;
mod shed;
mod types;
mod vectors;

pub use embedder::{EmbedError, Embedder, HashEmbedder, CPU_EMBED_GROUP, DEVICE_EMBED_GROUP};
pub use types::{
    parse_budget, BuildOptions, BuildReport, RootWalk, DEFAULT_MEMORY_BUDGET, MIN_MEMORY_BUDGET,
};

use commit::write_and_commit;
use facts::Facts;
use parsed::Parsed;
use plan::{plan_changes, relink_stale};
use shed::{drop_texts, restore_texts, shed_texts, Spill};
use vectors::{embed_vectors, gpu_ivf_centroids, known_vectors};

/// How [`BuildOptions::memory_budget`] is spent.
#[derive(Debug, Clone, Copy)]
struct Budget {
    /// Parsed chunk text kept after parsing, all files together.
    text: u64,
    /// Estimated in-memory size at which a segment is cut.
    segment: u64,
    dim: u64,
}

impl Budget {
    fn new(bytes: u64, dim: usize) -> Result<Budget, IndexerError> {
        if bytes < MIN_MEMORY_BUDGET {
            return Err(IndexerError::BudgetTooSmall {
                budget: bytes,
                min: MIN_MEMORY_BUDGET,
            });
        }
        Ok(Budget {
            text: bytes / 4,
            segment: bytes / 2,
            dim: dim as u64,
        })
    }

    /// What a file costs while its segment is built: per chunk its text three times (in the
    /// record and in the embedded text with its header; the third, the parsed copy, now moves
    /// into the record, and stays in the estimate as headroom, which keeps the cut points and
    /// so the segment ids of earlier builds), its names twice, its vector twice
    /// (the rows and the bytes written) and a fixed share for records, postings and the graph.
    fn file_cost(&self, path: &str, ex: &FileExtract) -> u64 {
        let p = path.len() as u64;
        let chunks: u64 = ex
            .chunks
            .iter()
            .map(|c| {
                let names =
                    (c.name.len() + c.qualified.len() + c.symbol_id_len(&ex.id_prefix)) as u64;
                3 * c.text.len() as u64 + p + 2 * names + 8 * self.dim + 512
            })
            .sum();
        256 + 2 * p + chunks
    }
}

/// The text that is embedded for a chunk: a short header (path, kind, qualified name) and the
/// chunk's own text. Its blake3 is the chunk's content hash, the key for vector reuse.
pub fn embed_text(path: &str, kind: &str, qualified: &str, text: &str) -> String {
    if kind == format::records::HEADER_KIND {
        // A header names its path and owner itself.
        return text.to_string();
    }
    if qualified.is_empty() {
        format!("{path} {kind}\n{text}")
    } else {
        format!("{path} {kind} {qualified}\n{text}")
    }
}

/// Runs a build. On error nothing visible changes: the MANIFEST is the last thing written.
///
/// Phases, in order: `open_existing`, `walk_roots`, `parse_files`, `plan_changes`,
/// `resolve_all`, `relink_stale` (then nothing more when nothing changed and nothing was
/// relinked; when nothing changed and the build does not read every file the index keeps,
/// nothing more after `plan_changes`), `plan_cuts`; per segment `reread`,
/// `segment_graph`, `segment_records`, `embed_vectors`, `gpu_ivf_centroids` and a staged
/// write (with a GPU encoder on a writer thread, beside the next segment's phases, so the
/// report's phase times can add up to more than the wall time); then `write_and_commit`.
///
/// Not to be called on a worker of rayon's global pool: an overlapped write's BM25 build runs
/// on that pool while the caller waits for it (`indexer` calls it from its main thread, the
/// engine's `reindex` from a thread of its own).
pub fn build(
    opts: &BuildOptions,
    embedder: &dyn Embedder,
    progress: &Progress,
) -> Result<BuildReport, IndexerError> {
    let (facts, note) = Facts::open(&opts.out, &opts.chunk, opts.reuse_facts);
    let mut report = build_with(opts, embedder, progress, &facts)?;
    report.notes.extend(note);
    report.files_cached = facts.hits.load(std::sync::atomic::Ordering::Relaxed);
    // The build succeeded: its facts become the cache of the next one, with those of the
    // repositories it did not walk that the index still records.
    let t = Instant::now();
    let walked = opts.root_walks().iter().map(|w| w.repo.clone()).collect();
    let recorded = format::IndexManifest::read(&opts.out)
        .ok()
        .map(|m| m.roots.into_iter().map(|r| r.repo).collect());
    match facts.finish(&walked, recorded.as_ref()) {
        Ok(written) => report.facts_written = written,
        Err(e) => report.notes.push(format!(
            "the facts cache in {} was not updated ({e}); the next build parses the files it \
             lacks",
            opts.out.display()
        )),
    }
    report.timings.push(("facts", t.elapsed()));
    Ok(report)
}

/// [`build`], reading and filling `facts` as it parses.
fn build_with(
    opts: &BuildOptions,
    embedder: &dyn Embedder,
    progress: &Progress,
    facts: &Facts,
) -> Result<BuildReport, IndexerError> {
    let budget = Budget::new(opts.memory_budget, embedder.dim())?;
    let mut report = BuildReport::default();
    let existing = open_existing(&opts.out, embedder, &mut report)?;
    walks_as_recorded(opts, existing.as_ref())?;
    let cands = walk_roots(opts, &mut report, progress)?;
    // Created by the first file whose texts are shed; gone (unnamed) when the build ends.
    let spill = std::sync::OnceLock::new();
    let mut files = parse_files(opts, cands, &budget, &spill, facts, &mut report, progress);
    let spill = shed::settled(&spill, &opts.out, progress);
    report.spilled_bytes = spill.map_or(0, Spill::bytes);
    let mut plan = plan_changes(opts, &files, existing.as_ref(), &mut report);
    let roots = manifest_roots(opts);
    // Nothing changed: nothing to write, unless unchanged files' edges moved since they were
    // written (a build that could not compare them, `relink_stale`, left them): resolved and
    // compared first when this build reads every file the index keeps.
    let unchanged = existing.as_ref().is_some_and(|ix| {
        report.files_changed == 0 && plan.dead_files.is_empty() && roots_known(ix, &roots)
    });
    let up_to_date = |report: &mut BuildReport| {
        if let Some(ix) = &existing {
            report.generation = ix.manifest.generation;
            report.live_chunks = ix.live_chunks();
        }
        progress.line("index is up to date; nothing to write");
    };
    if unchanged && plan.unseen > 0 {
        up_to_date(&mut report);
        return Ok(report);
    }
    // Unchanged files are not written (unless relinked, `relink_stale`): from here on only
    // the graph reads them. One shed at the parse keeps its `Shed` until then.
    for (f, _) in files.iter_mut().zip(&plan.changed).filter(|(_, c)| !**c) {
        if f.shed.is_none() {
            drop_texts(&mut f.extract);
        }
    }
    // Each file's calls go to resolution, which frees them file by file.
    let calls = files
        .iter_mut()
        .map(|f| std::mem::take(&mut f.calls))
        .collect();
    let resolved = resolve_all(&files, calls, &mut report);
    if let Some(ix) = &existing {
        relink_stale(&mut files, &mut plan, ix, &resolved, &mut report);
    }
    if unchanged && report.files_relinked == 0 {
        up_to_date(&mut report);
        return Ok(report);
    }
    // Resolved (the calls, 1.6M and 42.6 MB packed on this machine's cargo registry, were
    // freed by it): nothing reads the declarations again, nor the imports of files that are
    // not written (a written file's record lists its imports). Freed before the segments.
    for (f, changed) in files.iter_mut().zip(&plan.changed) {
        f.extract.module_bindings = Vec::new();
        f.extract.member_bindings = Vec::new();
        f.decls = graph::Declarations::default();
        if !*changed {
            f.extract.imports = Vec::new();
        }
    }
    let cuts = plan_cuts(&files, &plan.changed, &budget);
    let mut cut_of = vec![u32::MAX; files.len()];
    for (k, cut) in cuts.iter().enumerate() {
        for &i in cut {
            cut_of[i] = k as u32;
        }
    }
    // Per segment: the resolved edges that start in it.
    let mut edges_of: Vec<Vec<u32>> = vec![Vec::new(); cuts.len()];
    for (n, e) in resolved.iter().enumerate() {
        if let Some(k) = cut_of.get(e.src.file_index()).filter(|k| **k != u32::MAX) {
            edges_of[*k as usize].push(n as u32);
        }
    }
    let known = known_vectors(existing.as_ref());
    let (model_id, dim) = (embedder.model_id(), embedder.dim());
    let overlap = embedder.on_device();
    let mut written = Vec::new();
    // The staging directory holding every segment written, once the last write is joined.
    let staging = std::thread::scope(|scope| -> Result<_, IndexerError> {
        // With a GPU encoder the segment being written stays on its writer thread while this
        // one prepares and embeds the next (the write hides under the next embedding). At most
        // one is in flight: it is joined before the next is handed over, so segments are
        // staged in order and no more than two are in memory at once. On the CPU each segment
        // is written here before the next begins: the two would share the same cores
        // (measured: no faster) and hold two segments in memory instead of one.
        let mut writing: Option<std::thread::ScopedJoinHandle<'_, Written>> = None;
        // The staging directory while no writer holds it.
        let mut idle: Option<format::staging::Staging> = None;
        for (k, cut) in cuts.iter().enumerate() {
            if cuts.len() > 1 {
                progress.line(&format!(
                    "segment {}/{}: {} files",
                    k + 1,
                    cuts.len(),
                    cut.len()
                ));
            }
            let prepared = prepare_segment(
                &mut files,
                cut,
                &resolved,
                &edges_of[k],
                Inputs {
                    opts,
                    embedder,
                    existing: existing.as_ref(),
                    known: &known,
                    spill,
                },
                &mut report,
                progress,
            );
            let builder = match prepared {
                Ok(b) => b,
                Err(e) => {
                    // The write in flight is joined first: when it failed too, its error
                    // (often the cause, such as a full disk) is the one returned. Either way
                    // its staging directory is dropped with the error.
                    if let Some(h) = writing.take() {
                        finish_write(h, &mut report, &mut written)?;
                    }
                    return Err(e);
                }
            };
            report.chunks_written += builder.chunks.len();
            let mut st = match (writing.take(), idle.take()) {
                (Some(h), _) => finish_write(h, &mut report, &mut written)?,
                (None, Some(st)) => st,
                (None, None) => {
                    format::staging::Staging::create(&opts.out).map_err(IndexerError::Format)?
                }
            };
            if overlap {
                let h = std::thread::Builder::new()
                    .name("segment-writer".into())
                    .spawn_scoped(scope, move || {
                        let t = Instant::now();
                        let r = st.write(builder, model_id, dim);
                        (st, r, t.elapsed())
                    })
                    .map_err(|e| IndexerError::Io {
                        path: opts.out.clone(),
                        source: e,
                    })?;
                writing = Some(h);
            } else {
                let t = Instant::now();
                let r = st.write(builder, model_id, dim);
                record_write(r, t.elapsed(), &mut report, &mut written)?;
                idle = Some(st);
            }
        }
        Ok(match writing.take() {
            Some(h) => Some(finish_write(h, &mut report, &mut written)?),
            None => idle,
        })
    })?;
    drop(files);
    crate::alloc::return_freed();
    write_and_commit(
        &opts.out,
        embedder,
        existing.as_ref(),
        staging,
        written,
        &plan.dead_files,
        roots,
        &mut report,
    )?;
    merge_after(opts, &mut report, progress);
    Ok(report)
}

/// What every segment of a build reads besides its files.
#[derive(Clone, Copy)]
struct Inputs<'a> {
    opts: &'a BuildOptions,
    embedder: &'a dyn Embedder,
    existing: Option<&'a Index>,
    known: &'a vectors::Known,
    spill: Option<&'a Spill>,
}

/// One segment's builder, ready to write: its files' texts back ([`reread`]), its graph, its
/// records and its vectors (reused or embedded), and the IVF centroids when the encoder trains
/// them on its GPU.
fn prepare_segment(
    files: &mut [Parsed],
    cut: &[usize],
    resolved: &[graph::ResolvedEdge],
    edges: &[u32],
    inp: Inputs<'_>,
    report: &mut BuildReport,
    progress: &Progress,
) -> Result<SegmentBuilder, IndexerError> {
    reread(files, cut, inp.opts, inp.spill, report)?;
    let graph = segment_graph(files, cut, resolved, edges, report);
    let (mut builder, texts) = segment_records(files, cut, &graph.numbering);
    builder.edges = graph.edges;
    builder.external_edges = graph.external;
    let vectors = embed_vectors(
        inp.opts,
        inp.embedder,
        inp.existing,
        inp.known,
        &builder.chunks,
        &texts,
        report,
        progress,
    )?;
    drop(texts);
    builder.ivf_centroids =
        gpu_ivf_centroids(inp.embedder, &vectors, builder.chunks.len(), report)?;
    builder.vectors = vectors;
    builder.bulk_cache = inp.opts.bulk_cache;
    Ok(builder)
}

/// What a segment's writer thread hands back: the staging directory, the staged segment (or
/// why not) and the time the write took.
type Written = (
    format::staging::Staging,
    format::Result<(String, format::SegmentMeta)>,
    std::time::Duration,
);

/// Waits for the segment being written beside the next one's preparation, records it (the
/// time waited is `write-wait`) and returns the staging directory for the next one.
fn finish_write(
    h: std::thread::ScopedJoinHandle<'_, Written>,
    report: &mut BuildReport,
    written: &mut Vec<format::SegmentEntry>,
) -> Result<format::staging::Staging, IndexerError> {
    let t = Instant::now();
    let (st, r, took) = h.join().map_err(|_| {
        IndexerError::Format(format::FormatError::InvalidInput(
            "the segment writer thread panicked".into(),
        ))
    })?;
    report.timings.push(("write-wait", t.elapsed()));
    record_write(r, took, report, written)?;
    Ok(st)
}

/// Records a staged segment (the write's own time is `write-segment`), or returns why it
/// failed.
fn record_write(
    r: format::Result<(String, format::SegmentMeta)>,
    took: std::time::Duration,
    report: &mut BuildReport,
    written: &mut Vec<format::SegmentEntry>,
) -> Result<(), IndexerError> {
    report.timings.push(("write-segment", took));
    let (id, meta) = r.map_err(IndexerError::Format)?;
    written.push(format::SegmentEntry {
        id,
        chunks: meta.chunk_count,
        tombstones: None,
    });
    Ok(())
}

/// The merges due after a commit (crowded tiers, [`crate::merge::MergePolicy::after_build`]).
/// The build is committed whatever happens here: a failed merge is a note, and the next build
/// or `indexer merge` tries again.
fn merge_after(opts: &BuildOptions, report: &mut BuildReport, progress: &Progress) {
    let t = Instant::now();
    let policy = crate::merge::MergePolicy::after_build(opts.memory_budget);
    // Planned from the metadata first: the index is opened (and mapped) only to merge.
    let planned = crate::merge::planned_stats(&opts.out);
    match planned.and_then(|stats| {
        if crate::merge::plan(&stats, &policy).is_some() {
            crate::merge::merge(&opts.out, &policy, progress)
        } else {
            Ok(crate::merge::MergeReport {
                held_back: crate::merge::held_back(&stats, &policy),
                ..Default::default()
            })
        }
    }) {
        Ok(m) => {
            if let Some(h) = &m.held_back {
                report
                    .notes
                    .push(format!("not merged: {}", h.describe(&policy)));
            }
            if !m.merges.is_empty() {
                report.generation = m.generation;
                report.notes.push(format!(
                    "merged {} code segments into {} ({} before, {} after)",
                    m.merges.iter().map(|d| d.from.len()).sum::<usize>(),
                    m.merges.len(),
                    m.segments_before,
                    m.segments_after
                ));
                report.timings.push(("merge", t.elapsed()));
            }
        }
        Err(e) => report.notes.push(format!(
            "the merge after the build did not run ({e}); the build is committed, `indexer \
             merge` retries"
        )),
    }
}

/// Creates `out` and opens the index already there, if any. That index must be sound:
/// its vectors and records are reused and its chunks tombstoned, so every checksum must hold
/// (timed as `verify`) and it must have been built with `embedder`'s model.
fn open_existing(
    out: &Path,
    embedder: &dyn Embedder,
    report: &mut BuildReport,
) -> Result<Option<Index>, IndexerError> {
    format::fsio::create_dir_all(out).map_err(|e| IndexerError::Io {
        path: out.to_path_buf(),
        source: e,
    })?;
    let existing = match Index::open(out) {
        Ok(i) => Some(i),
        Err(format::FormatError::NotAnIndex { .. }) => None,
        Err(e) => {
            return Err(IndexerError::ExistingIndex {
                path: out.to_path_buf(),
                cause: e,
            })
        }
    };
    if let Some(ix) = &existing {
        // Vectors and records are reused from it: a flipped byte must not be copied into a new
        // segment under fresh checksums. Full checksums cost one read of the index (each
        // segment's files hashed in parallel); matching checksums say the bytes are what our
        // writer wrote, so the structure checks of `indexer verify` (every text's UTF-8, FAISS
        // parsing the IVF, every postings block) are left to it: FAISS's copy of every IVF
        // alone held hundreds of MB through the build.
        let t = Instant::now();
        if let Some(e) = (ix.segments.par_iter())
            .flat_map_iter(|ls| ls.segment.verify_checksums())
            .find_first(|_| true)
        {
            return Err(IndexerError::ExistingIndex {
                path: out.to_path_buf(),
                cause: e,
            });
        }
        report.timings.push(("verify", t.elapsed()));
        if ix.manifest.model_id != embedder.model_id() || ix.manifest.dim as usize != embedder.dim()
        {
            return Err(IndexerError::ModelChanged {
                path: out.to_path_buf(),
                index_model: ix.manifest.model_id.clone(),
                model: embedder.model_id().to_string(),
            });
        }
    }
    Ok(existing)
}

/// `opts.walks` are roots as a MANIFEST recorded them ([`BuildOptions::recorded`]): the index
/// this build opened must record each the same way (path, repository, walk rules), or a build
/// committed since they were read (other rules, a moved checkout) and walking them the old way
/// would undo it ([`IndexerError::ConcurrentBuild`]; the commit refuses the same for roots
/// changed after the open).
fn walks_as_recorded(opts: &BuildOptions, existing: Option<&Index>) -> Result<(), IndexerError> {
    let recorded = existing.map_or(&[][..], |ix| &ix.manifest.roots[..]);
    for w in &opts.walks {
        if !recorded.iter().any(|r| RootWalk::recorded(r) == *w) {
            return Err(IndexerError::ConcurrentBuild(opts.out.clone()));
        }
    }
    Ok(())
}

/// Walks every root; the candidate files, sorted and deduplicated by (repository,
/// path). Skips and walk errors go to `report`.
fn walk_roots(
    opts: &BuildOptions,
    report: &mut BuildReport,
    progress: &Progress,
) -> Result<Vec<Candidate>, IndexerError> {
    let t = Instant::now();
    let mut cands = Vec::new();
    for rw in opts.root_walks() {
        let root = &rw.path;
        if !root.exists() {
            return Err(IndexerError::MissingRoot(root.clone()));
        }
        let w = walk::walk(root, &rw.repo, opts.max_file_bytes, rw.symlinks, rw.rules);
        if w.candidates.is_empty() {
            if let Some(why) = walk::explain_empty(root, opts.max_file_bytes, rw.symlinks, rw.rules)
            {
                report.warnings.push(why);
            }
        }
        for (path, reason) in &w.skipped {
            *report.skipped.entry(reason.name()).or_insert(0) += 1;
            match reason {
                SkipReason::DanglingLink => report.warnings.push(walk::dangling_message(path)),
                // The walk leaves out a file whose path is not UTF-8 (stored paths are).
                SkipReason::InvalidUtf8 => report.warnings.push(format!(
                    "{}: its name is not UTF-8 (paths are stored as UTF-8): left out",
                    path.display()
                )),
                _ => {}
            }
        }
        let excluded = w.excluded_targets.iter();
        (report.warnings).extend(excluded.map(|(l, t)| walk::excluded_target_message(l, t)));
        report.errors.extend(w.errors);
        if !w.outside.is_empty() {
            let canon = std::fs::canonicalize(root).unwrap_or_else(|_| root.clone());
            for (link, target) in &w.outside {
                report
                    .outside_root
                    .push(walk::outside_message(link, target, &canon));
            }
        }
        cands.extend(w.candidates);
    }
    cands.sort();
    cands.dedup_by(|a, b| a.repo == b.repo && a.rel_path == b.rel_path);
    report.files_seen = cands.len();
    report.timings.push(("walk", t.elapsed()));
    progress.line(&format!("walk: {} candidate files", cands.len()));
    Ok(cands)
}

/// Reads and chunks every candidate, in parallel (rayon). Files that cannot be read
/// (or are not UTF-8) are counted as skipped, with an error or a warning. Chunk text is kept
/// while the total kept stays within `budget.text`; past it, files are [`shed_texts`] (which
/// ones depends on thread timing, what is written does not: shed text is read again), what
/// their bytes cannot give back written to `spill`, made when first needed ([`Spill`]).
#[allow(clippy::too_many_arguments)]
fn parse_files(
    opts: &BuildOptions,
    cands: Vec<Candidate>,
    budget: &Budget,
    spill: &std::sync::OnceLock<std::io::Result<Spill>>,
    facts: &Facts,
    report: &mut BuildReport,
    progress: &Progress,
) -> Vec<Parsed> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let t = Instant::now();
    let bar = progress.bar(cands.len() as u64, "parse");
    let kept = AtomicU64::new(0);
    let results: Vec<Result<Parsed, (SkipReason, String)>> = cands
        .into_par_iter()
        // One file per job: rayon otherwise cuts the list into 2 × threads runs up front and
        // never splits a run once it is started, so the last run (a quarter of the files on
        // 2 threads) finished on one core: 3 s of a 10.6 s parse phase on the 62 MB corpus.
        .with_max_len(1)
        .map(|cand| {
            let r = walk::read_source(&cand).map(|(text, hash)| {
                if let Some(hit) = facts.lookup(&cand, &hash) {
                    // Not parsed: its texts come back by chunking it again if it is written.
                    let cost = budget.file_cost(&cand.rel_path, &hit.extract) + 3 * hit.text_bytes;
                    return Parsed {
                        cand,
                        hash,
                        extract: hit.extract,
                        decls: hit.decls,
                        calls: hit.calls,
                        cost,
                        shed: Some(shed::from_cache()),
                    };
                }
                let (mut extract, decls, calls, bytes) = facts::parse(&cand, &text, &opts.chunk);
                let cost = budget.file_cost(&cand.rel_path, &extract);
                facts.put(&cand, &hash, bytes, (&extract, &calls, &decls));
                let mut shed = None;
                if kept.fetch_add(bytes, Ordering::Relaxed) + bytes > budget.text {
                    kept.fetch_sub(bytes, Ordering::Relaxed);
                    let sp = spill.get_or_init(|| Spill::create(&opts.out));
                    shed = Some(shed_texts(&mut extract, &text, sp.as_ref().ok()));
                }
                drop(text);
                Parsed {
                    cand,
                    hash,
                    extract,
                    decls,
                    calls,
                    cost,
                    shed,
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
                    SkipReason::OutsideRoot => report.outside_root.push(msg),
                    _ => {}
                }
            }
        }
    }
    report.parse_error_files = files.iter().filter(|f| f.extract.had_parse_errors).count();
    report.calls_held = files.iter().map(|f| f.calls.len()).sum();
    report.calls_held_bytes = files.iter().map(|f| f.calls.heap_bytes() as u64).sum();
    report.files_indexed = files.len();
    report.source_bytes = files.iter().map(|f| f.cand.size).sum();
    report.timings.push(("parse", t.elapsed()));
    files
}

/// The roots this build records in MANIFEST (absolute, so a server can re-index them).
fn manifest_roots(opts: &BuildOptions) -> Vec<RootEntry> {
    opts.root_walks().iter().map(RootWalk::entry).collect()
}

/// Whether the manifest of `ix` already has a root for every repository of `roots`. A
/// repository the manifest has no root for, or one now walked with other rules (`--no-ignore`,
/// `--hidden`, external symlinks), is worth a commit of its own (a server-side re-index must
/// walk it the same way); a known one whose checkout moved is updated with the next real
/// change.
fn roots_known(ix: &Index, roots: &[RootEntry]) -> bool {
    roots.iter().all(|r| {
        ix.manifest
            .roots
            .iter()
            .any(|x| x.repo == r.repo && x.same_walk(r))
    })
}

/// Local numbering of the new segment: changed files in order, their chunks in order.
struct Numbering {
    /// Per parsed file: its file number in the segment (`u32::MAX` when unchanged).
    local_file: Vec<u32>,
    /// Per parsed file: the segment chunk number of its first chunk (0 when unchanged).
    first_chunk: Vec<u32>,
    /// Chunks in the segment; file `f`'s graph node is `chunks + f`.
    chunks: u32,
}

impl Numbering {
    /// Numbers the files of `cut` (ascending parsed-file indices) and their chunks.
    fn new(files: &[Parsed], cut: &[usize]) -> Numbering {
        let mut local_file = vec![u32::MAX; files.len()];
        let mut first_chunk = vec![0u32; files.len()];
        let (mut nf, mut nc) = (0u32, 0u32);
        for &i in cut {
            local_file[i] = nf;
            first_chunk[i] = nc;
            nf += 1;
            nc += files[i].extract.chunks.len() as u32;
        }
        Numbering {
            local_file,
            first_chunk,
            chunks: nc,
        }
    }
}

/// The graph part of the new segment.
struct SegmentGraph {
    numbering: Numbering,
    /// Edges between nodes of the new segment.
    edges: Vec<EdgeInput>,
    /// Edges from the new segment to symbols or files outside it, by name.
    external: Vec<ExternalEdge>,
}

/// Resolves the graph over all parsed files (so changed files link to unchanged ones).
fn resolve_all(
    files: &[Parsed],
    calls: Vec<chunk::PackedCalls>,
    report: &mut BuildReport,
) -> Vec<graph::ResolvedEdge> {
    let t = Instant::now();
    let facts: Vec<FileFacts> = files
        .iter()
        .map(|f| FileFacts {
            path: &f.cand.rel_path,
            language: f.cand.language,
            extract: &f.extract,
            decls: &f.decls,
        })
        .collect();
    let resolved = graph::resolve_packed_calls(&facts, calls);
    report.timings.push(("graph", t.elapsed()));
    resolved
}

/// Segments of the changed files, in file order: a segment is cut before the file that would
/// take its estimated size past `budget.segment` (a file is never split; one larger than the
/// budget gets a segment of its own).
fn plan_cuts(files: &[Parsed], changed: &[bool], budget: &Budget) -> Vec<Vec<usize>> {
    let mut cuts = Vec::new();
    let mut cur: Vec<usize> = Vec::new();
    let mut size = 0u64;
    for (i, f) in files.iter().enumerate().filter(|(i, _)| changed[*i]) {
        if !cur.is_empty() && size + f.cost > budget.segment {
            cuts.push(std::mem::take(&mut cur));
            size = 0;
        }
        cur.push(i);
        size += f.cost;
    }
    if !cur.is_empty() {
        cuts.push(cur);
    }
    cuts
}

/// Reads the shed files of `cut` again (in parallel) and restores their texts (`shed::Shed`); the
/// same bytes give the same texts. A file whose bytes changed since it was parsed fails the
/// build ([`IndexerError::ChangedDuringBuild`]), as does a spill that cannot be read
/// ([`IndexerError::Io`] on the index directory); nothing is committed.
fn reread(
    files: &mut [Parsed],
    cut: &[usize],
    opts: &BuildOptions,
    spill: Option<&Spill>,
    report: &mut BuildReport,
) -> Result<(), IndexerError> {
    let t = Instant::now();
    // `cut` is ascending ([`plan_cuts`]).
    let mut todo: Vec<&mut Parsed> = files
        .iter_mut()
        .enumerate()
        .filter(|(i, f)| f.shed.is_some() && cut.binary_search(i).is_ok())
        .map(|(_, f)| f)
        .collect();
    if todo.is_empty() {
        return Ok(());
    }
    let need = todo.len();
    let fresh: Vec<Result<(bool, bool), IndexerError>> = todo
        .par_iter_mut()
        .with_max_len(1) // as in `parse_files`
        .map(|f| {
            let changed = || IndexerError::ChangedDuringBuild {
                path: f.cand.abs_path.clone(),
            };
            let (text, hash) = walk::read_source(&f.cand).map_err(|_| changed())?;
            if hash != f.hash {
                return Err(changed());
            }
            let shed = f.shed.take().unwrap_or_default();
            let relinked = shed.relinked() || shed.cached();
            let c = &f.cand;
            let at = (c.language, c.repo.as_str(), c.rel_path.as_str());
            let again = restore_texts(&mut f.extract, shed, &text, spill, at, &opts.chunk)
                .map(|again| (again, relinked))
                .map_err(|e| e.into_error(&f.cand.abs_path, &opts.out));
            // A file chunked again has its calls back; nothing reads them any more.
            f.extract.calls = Vec::new();
            f.extract.module_bindings = Vec::new();
            f.extract.member_bindings = Vec::new();
            again
        })
        .collect();
    // Relinked files (`relink_stale`) are read again here too, but not for the budget: its
    // counters leave them out.
    // So are the changed files whose facts came from the facts cache: never parsed in this
    // build, they are chunked here for the first time.
    let mut left_out = 0;
    for r in fresh {
        let (again, not_budget) = r?;
        left_out += usize::from(not_budget);
        report.files_rechunked += usize::from(again && !not_budget);
    }
    report.files_reread += need - left_out;
    report.timings.push(("reread", t.elapsed()));
    Ok(())
}

/// The graph part of the segment of the files `cut`: of the resolved edges that start in it
/// (`edge_ids`), internal ones by segment node number, the others (to unchanged
/// files or other segments of this build) by the symbol id or `file:<path>` of their target.
fn segment_graph(
    files: &[Parsed],
    cut: &[usize],
    resolved: &[graph::ResolvedEdge],
    edge_ids: &[u32],
    report: &mut BuildReport,
) -> SegmentGraph {
    let t = Instant::now();
    let numbering = Numbering::new(files, cut);
    let (local_file, first_chunk, nc) = (
        &numbering.local_file,
        &numbering.first_chunk,
        numbering.chunks,
    );
    let node = |r: &NodeRef| -> Option<u32> {
        match *r {
            NodeRef::File(f) => {
                let f = f as usize;
                (local_file[f] != u32::MAX).then(|| nc + local_file[f])
            }
            NodeRef::Chunk { file, chunk } => {
                let file = file as usize;
                (local_file[file] != u32::MAX).then(|| first_chunk[file] + chunk)
            }
        }
    };
    let external_name = |r: &NodeRef| -> Option<String> {
        match *r {
            NodeRef::File(f) => Some(format!("file:{}", files[f as usize].cand.rel_path)),
            NodeRef::Chunk { file, chunk } => {
                let fx = &files[file as usize].extract;
                let c = &fx.chunks[chunk as usize];
                c.symbol.is_some().then(|| fx.symbol_id(c))
            }
        }
    };
    let mut edges = Vec::new();
    let mut external = Vec::new();
    for e in edge_ids.iter().map(|&n| &resolved[n as usize]) {
        let kind = e.kind.record();
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
    SegmentGraph {
        numbering,
        edges,
        external,
    }
}

/// The file and chunk records of the changed files, in segment order, and the text
/// to embed for each chunk ([`embed_text`]; its blake3 is the chunk's content hash). Each
/// chunk's text moves from the parsed file into its record: the segment is the last reader of
/// a changed file's texts (the graph was resolved before any segment), and a clone held every
/// text of the segment twice while it was embedded and written.
fn segment_records(
    files: &mut [Parsed],
    cut: &[usize],
    numbering: &Numbering,
) -> (SegmentBuilder, Vec<String>) {
    let (local_file, first_chunk) = (&numbering.local_file, &numbering.first_chunk);
    let mut builder = SegmentBuilder::default();
    let mut texts: Vec<String> = Vec::new();
    for &i in cut {
        let f = &mut files[i];
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
                .map(|im| im.module.to_string())
                .collect(),
        });
        let id_prefix = &f.extract.id_prefix;
        for c in &mut f.extract.chunks {
            let et = embed_text(&f.cand.rel_path, c.kind.name(), &c.qualified, &c.text);
            builder.chunks.push(ChunkRecord {
                file: lf,
                kind: c.kind.name().to_string(),
                name: c.name.to_string(),
                qualified: c.qualified.to_string(),
                symbol_id: c.symbol_id(id_prefix),
                start_line: c.start_line.max(1),
                end_line: c.end_line.max(c.start_line.max(1)),
                start_byte: c.start_byte,
                end_byte: c.end_byte.max(c.start_byte),
                parent: c.parent.map_or(NO_PARENT, |p| first_chunk[i] + p as u32),
                content_hash: *blake3::hash(et.as_bytes()).as_bytes(),
                text: std::mem::take(&mut c.text),
            });
            texts.push(et);
        }
    }
    (builder, texts)
}
