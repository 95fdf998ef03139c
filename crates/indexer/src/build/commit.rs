//! The last phase of a build: publish the staged segments, tombstone what they replace, commit
//! the MANIFEST and collect garbage, all under the directory lock.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::Instant;

use format::manifest::{IndexManifest, RootEntry, SegmentEntry, TombstoneRef};
use format::staging::Staging;
use format::{tombstones, Index};
use roaring::RoaringBitmap;

use super::{BuildReport, Embedder};
use crate::IndexerError;

/// Publishes the staged segments ([`Staging::publish`]), writes the tombstones of what they
/// replace, then commits the MANIFEST and collects garbage (timed as `write`). All of it
/// happens under the directory lock: queryd flushes memory segments into the same MANIFEST,
/// and garbage collection must never see a published segment that is not yet committed.
#[allow(clippy::too_many_arguments)]
pub(super) fn write_and_commit(
    out: &Path,
    embedder: &dyn Embedder,
    existing: Option<&Index>,
    staging: Option<Staging>,
    written: Vec<SegmentEntry>,
    dead_files: &[(usize, u32)],
    roots: Vec<RootEntry>,
    report: &mut BuildReport,
) -> Result<(), IndexerError> {
    let t = Instant::now();
    let model_id = embedder.model_id().to_string();
    let dim = embedder.dim();
    format::fsio::create_dir_all(out).map_err(|e| IndexerError::Io {
        path: out.to_path_buf(),
        source: e,
    })?;
    let _lock = format::manifest::DirLock::acquire(out).map_err(IndexerError::Format)?;
    let mut manifest = current_manifest(out, existing, &model_id, dim, report)?;
    let generation = manifest.generation + 1;
    if let Some(st) = staging {
        st.publish(out).map_err(IndexerError::Format)?;
    }
    if let Some(ix) = existing {
        manifest.segments = tombstone_segments(
            out, ix, &manifest, dead_files, generation, &model_id, report,
        )?;
    }
    report.segment_id = written.first().map(|s| s.id.clone());
    for s in written {
        report.segment_ids.push(s.id.clone());
        if !manifest.segments.iter().any(|e| e.id == s.id) {
            manifest.segments.push(s);
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
    Ok(())
}

/// The MANIFEST to build on, read under the directory lock. Memory segments may have changed
/// since the build started; code segments and recorded roots must not (else
/// [`IndexerError::ConcurrentBuild`]).
fn current_manifest(
    out: &Path,
    existing: Option<&Index>,
    model_id: &str,
    dim: usize,
    report: &mut BuildReport,
) -> Result<IndexManifest, IndexerError> {
    Ok(match existing {
        Some(ix) => {
            let current = IndexManifest::read(out).map_err(IndexerError::Format)?;
            // Roots too: a build that changed only how a root is walked commits no segment,
            // and this one would write the old entry back (a re-index walks the roots it read).
            if current.segments != ix.manifest.segments || current.roots != ix.manifest.roots {
                return Err(IndexerError::ConcurrentBuild(out.to_path_buf()));
            }
            current
        }
        None => match IndexManifest::read(out) {
            // An index appeared meanwhile (or holds only memories): keep its memories.
            Ok(current) if current.segments.is_empty() => current,
            Ok(_) => return Err(IndexerError::ConcurrentBuild(out.to_path_buf())),
            // No MANIFEST: memory segments or a memory log left in the directory are adopted,
            // not garbage collected.
            Err(format::FormatError::NotAnIndex { .. }) => {
                let mut r = crate::rebuild::RebuildReport::default();
                match crate::rebuild::recovered_manifest(out, model_id, dim as u32, &mut r)? {
                    Some(m) => {
                        report.notes.push(r.to_string());
                        m
                    }
                    None => IndexManifest::empty(model_id, dim as u32),
                }
            }
            Err(e) => {
                return Err(IndexerError::ExistingIndex {
                    path: out.to_path_buf(),
                    cause: e,
                })
            }
        },
    })
}

/// The segment entries of `manifest` (the existing index's code segments) after tombstoning
/// the chunks of `dead_files`: each segment that lost chunks gets a tombstone file for
/// `generation`; a segment left without a live file is dropped.
fn tombstone_segments(
    out: &Path,
    ix: &Index,
    manifest: &IndexManifest,
    dead_files: &[(usize, u32)],
    generation: u64,
    model_id: &str,
    report: &mut BuildReport,
) -> Result<Vec<SegmentEntry>, IndexerError> {
    // Per segment: the chunks to tombstone, and the files without chunks to delete.
    let mut per_seg: BTreeMap<usize, (RoaringBitmap, RoaringBitmap)> = BTreeMap::new();
    for (si, fi) in dead_files {
        let f = &ix.segments[*si].segment.table().files[*fi as usize];
        let first = f.first_chunk.to_native();
        let n = f.chunk_count.to_native();
        let (chunks, files) = per_seg.entry(*si).or_default();
        if n == 0 {
            files.insert(*fi);
        } else {
            chunks.insert_range(first..first + n);
        }
    }
    let dead_set: HashSet<(usize, u32)> = dead_files.iter().copied().collect();
    let mut entries = Vec::new();
    for (si, ls) in ix.segments.iter().enumerate() {
        let mut entry = manifest.segments[si].clone();
        if let Some((newly, newly_files)) = per_seg.get(&si) {
            let mut bits = ls.tombstones.clone();
            let before = bits.len();
            bits |= newly;
            report.chunks_tombstoned += bits.len() - before;
            if bits.len() >= u64::from(entry.chunks) && all_files_dead(ls, &dead_set, si) {
                continue; // fully dead: drop the segment
            }
            let files = &ls.dead_files | newly_files;
            let name = tombstones::file_name(&entry.id, generation);
            let bytes = tombstones::write_with_files(&out.join(&name), model_id, &bits, &files)
                .map_err(IndexerError::Format)?;
            entry.tombstones = Some(TombstoneRef {
                file: name,
                blake3: format::blake3_hex(&bytes),
                count: bits.len(),
            });
        }
        entries.push(entry);
    }
    Ok(entries)
}

/// Whether every file of segment `si` (`ls`) is dead: in `dead`, or not live already (all its
/// chunks tombstoned, or deleted without chunks).
fn all_files_dead(
    ls: &format::manifest::LiveSegment,
    dead: &HashSet<(usize, u32)>,
    si: usize,
) -> bool {
    let n = ls.segment.table().files.len() as u32;
    (0..n).all(|fi| dead.contains(&(si, fi)) || !ls.file_is_live(fi))
}
