//! `indexer merge` and the merges after a build: a tiered merge policy over the code segments
//! of an index, so that search cost stays flat as incremental builds and budget-cut segments
//! accumulate.
//!
//! Policy ([`plan`]), in order:
//! 1. with [`MergePolicy::deletes`] (`indexer merge`; not after a build), a segment with at
//!    least half of its chunks tombstoned is rewritten (its deletes leave);
//!    and so is a segment written before one-bit IVF codes existed (no `ivf.rbq`,
//!    [`format::rabitq`]): its vectors are copied, so the rewrite costs no embedding;
//! 2. segments fall in size tiers by live chunks (below [`FLOOR_CHUNKS`]: tier 0; then one
//!    tier per factor [`TIER_FACTOR`]); the lowest tier holding more than
//!    [`SEGMENTS_PER_TIER`] segments merges its smallest ones (at most [`MAX_MERGE_AT_ONCE`]);
//! 3. with `--max-segments N`, the smallest segments merge until at most N are left.
//!
//! A merge never holds more than half the memory budget (estimated from the parts' file
//! sizes, [`merge_cost`]): segments cut by `--memory-budget` stay as they are. Merges copy
//! records, vectors and the graph ([`format::merge`]), never re-embed; the merged segment is
//! written into a staging directory outside the directory lock, then committed like a build:
//! under the lock, only if every merged segment is still in MANIFEST with the same tombstones
//! (else nothing changes and the merge reports [`IndexerError::ConcurrentBuild`]).

use std::path::Path;
use std::time::{Duration, Instant};

use format::manifest::LiveSegment;
use format::manifest::{DirLock, IndexManifest, SegmentEntry};
use format::staging::Staging;
use format::Index;

use crate::progress::Progress;
use crate::IndexerError;

/// Segments with fewer live chunks than this share the lowest tier.
pub const FLOOR_CHUNKS: u64 = 4096;
/// Each tier above the floor holds segments up to this factor larger than the one below.
pub const TIER_FACTOR: u64 = 8;
/// A tier with more segments than this is merged.
pub const SEGMENTS_PER_TIER: usize = 8;
/// Segments merged at once, at most.
pub const MAX_MERGE_AT_ONCE: usize = 10;

/// What [`merge`] may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergePolicy {
    /// The memory budget: a merge holds at most half of it.
    pub budget: u64,
    /// Merge the smallest segments until at most this many code segments are left.
    pub max_segments: Option<usize>,
    /// Rewrite segments with at least half of their chunks tombstoned, and segments that
    /// lack the one-bit IVF codes.
    pub deletes: bool,
}

impl MergePolicy {
    /// The merges that run after every build: crowded tiers only.
    pub fn after_build(budget: u64) -> MergePolicy {
        MergePolicy {
            budget,
            max_segments: None,
            deletes: false,
        }
    }
}

/// A code segment as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentStat {
    pub live: u64,
    pub total: u64,
    /// Estimated bytes it adds to a merge in memory ([`merge_cost`]).
    pub cost: u64,
    /// An IVF segment written without `ivf.rbq` that a rewrite would give one to.
    pub lacks_codes: bool,
}

/// What one merge did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeDone {
    pub from: Vec<String>,
    /// `None` when every chunk of the parts was tombstoned (they are simply dropped).
    pub into: Option<String>,
    pub chunks: u32,
    pub dropped_chunks: u32,
    pub why: &'static str,
}

/// What [`merge`] did.
#[derive(Debug, Default, Clone)]
pub struct MergeReport {
    pub segments_before: usize,
    pub segments_after: usize,
    pub merges: Vec<MergeDone>,
    pub generation: u64,
    pub elapsed: Duration,
}

/// The tier of a segment with `live` chunks.
pub fn tier(live: u64) -> u32 {
    let (mut t, mut cap) = (0u32, FLOOR_CHUNKS);
    while live >= cap {
        t += 1;
        cap = cap.saturating_mul(TIER_FACTOR);
    }
    t
}

/// The next merge for segments `stats` (in MANIFEST order) as (indices into `stats`, sorted,
/// and the reason), or `None`. `cap` bounds the summed [`SegmentStat::cost`] of a merge.
pub fn plan(stats: &[SegmentStat], policy: &MergePolicy) -> Option<(Vec<usize>, &'static str)> {
    let cap = policy.budget / 2;
    // 1. Mostly deleted: rewrite alone.
    let mostly_deleted = |s: &SegmentStat| s.total > 0 && s.live * 2 <= s.total && s.cost <= cap;
    if let Some(i) = (0..stats.len()).find(|&i| policy.deletes && mostly_deleted(&stats[i])) {
        return Some((vec![i], "deletes"));
    }
    let old = |s: &SegmentStat| s.lacks_codes && s.cost <= cap;
    if let Some(i) = (0..stats.len()).find(|&i| policy.deletes && old(&stats[i])) {
        return Some((vec![i], "codes"));
    }
    let smallest_first = |mut idx: Vec<usize>, limit: usize| -> Vec<usize> {
        idx.sort_by_key(|&i| (stats[i].live, i));
        let mut pick = Vec::new();
        let mut cost = 0u64;
        for i in idx {
            if pick.len() == limit || cost + stats[i].cost > cap {
                break;
            }
            cost += stats[i].cost;
            pick.push(i);
        }
        pick.sort_unstable();
        pick
    };
    // 2. A crowded tier.
    let top = stats.iter().map(|s| tier(s.live)).max().unwrap_or(0);
    for t in 0..=top {
        let members: Vec<usize> = (0..stats.len())
            .filter(|&i| tier(stats[i].live) == t)
            .collect();
        if members.len() > SEGMENTS_PER_TIER {
            let pick = smallest_first(members, MAX_MERGE_AT_ONCE);
            if pick.len() >= 2 {
                return Some((pick, "tier"));
            }
        }
    }
    // 3. Too many segments for --max-segments.
    if let Some(max) = policy.max_segments {
        if stats.len() > max.max(1) {
            let want = (stats.len() - max.max(1) + 1).min(MAX_MERGE_AT_ONCE);
            let pick = smallest_first((0..stats.len()).collect(), want);
            if pick.len() >= 2 {
                return Some((pick, "max-segments"));
            }
        }
    }
    None
}

/// Estimated bytes a segment adds to a merge while it is in memory: its chunk records and
/// texts three times (the copied records, their texts in the postings build, the archive and
/// `texts.bin` written; format 3 kept the texts inside `chunks.rkyv`), its vectors twice (rows
/// and the bytes written), its graph once.
pub fn merge_cost(meta: &format::SegmentMeta) -> u64 {
    let size = |name: &str| {
        meta.files
            .iter()
            .find(|f| f.name == name)
            .map_or(0, |f| f.size)
    };
    3 * (size("chunks.rkyv") + size("texts.bin"))
        + 2 * size("vectors.f32")
        + size("graph.rkyv")
        + size("postings.rkyv")
}

/// Whether a rewrite would give the segment one-bit IVF codes it lacks: it has an IVF index
/// at a dimension that gets them, and no `ivf.rbq`.
pub fn lacks_codes(meta: &format::SegmentMeta) -> bool {
    meta.vector_index != "flat"
        && format::rabitq::applies(meta.dim as usize)
        && !meta
            .files
            .iter()
            .any(|f| f.name == format::header::Component::Rabitq.file_name())
}

/// The [`SegmentStat`]s of the opened index's code segments, in MANIFEST order.
pub fn stats_of(ix: &Index) -> Vec<SegmentStat> {
    ix.segments
        .iter()
        .map(|ls| {
            let total = u64::from(ls.segment.meta().chunk_count);
            SegmentStat {
                live: total - ls.tombstones.len().min(total),
                total,
                cost: merge_cost(ls.segment.meta()),
                lacks_codes: lacks_codes(ls.segment.meta()),
            }
        })
        .collect()
}

/// The [`SegmentStat`]s of the code segments of the index at `dir`, in MANIFEST order, from
/// what the MANIFEST and each segment's `segment.json` say (live chunks from the tombstone
/// counts the MANIFEST records, costs from the file sizes): what [`stats_of`] takes from the
/// opened index, without mapping and validating every segment.
pub fn planned_stats(dir: &Path) -> Result<Vec<SegmentStat>, IndexerError> {
    let fmt = |cause| IndexerError::ExistingIndex {
        path: dir.to_path_buf(),
        cause,
    };
    let manifest = IndexManifest::read(dir).map_err(fmt)?;
    let mut stats = Vec::with_capacity(manifest.segments.len());
    for e in &manifest.segments {
        let meta = format::Segment::read_meta(dir, &e.id).map_err(fmt)?;
        let total = u64::from(meta.chunk_count);
        let dead = e.tombstones.as_ref().map_or(0, |t| t.count);
        stats.push(SegmentStat {
            live: total - dead.min(total),
            total,
            cost: merge_cost(&meta),
            lacks_codes: lacks_codes(&meta),
        });
    }
    Ok(stats)
}

/// Whether `policy` has a merge due on the index at `dir`, planned from [`planned_stats`].
/// The merge after a build asks this first: opening the whole index only to find nothing due
/// mapped all of it into the build's memory (the cargo registry at a 256 MiB budget, 35
/// segments: about 300 MB of resident pages at the very end of the build, its peak).
pub fn merge_due(dir: &Path, policy: &MergePolicy) -> Result<bool, IndexerError> {
    Ok(plan(&planned_stats(dir)?, policy).is_some())
}

/// Runs `policy` on the index at `dir` until no merge is due: each merge is written and
/// committed before the next is planned.
pub fn merge(
    dir: &Path,
    policy: &MergePolicy,
    progress: &Progress,
) -> Result<MergeReport, IndexerError> {
    let t = Instant::now();
    let mut report = MergeReport::default();
    let mut first = true;
    loop {
        let ix = Index::open(dir).map_err(|e| IndexerError::ExistingIndex {
            path: dir.to_path_buf(),
            cause: e,
        })?;
        let stats = stats_of(&ix);
        if first {
            report.segments_before = stats.len();
            first = false;
        }
        report.generation = ix.manifest.generation;
        report.segments_after = stats.len();
        let Some((pick, why)) = plan(&stats, policy) else {
            break;
        };
        progress.line(&format!(
            "merge ({why}): {} segments, {} live chunks",
            pick.len(),
            pick.iter().map(|&i| stats[i].live).sum::<u64>()
        ));
        let done = merge_once(dir, &ix, &pick, why)?;
        report.merges.push(done);
    }
    report.elapsed = t.elapsed();
    Ok(report)
}

/// Merges the code segments `pick` of `ix` and commits the result.
fn merge_once(
    dir: &Path,
    ix: &Index,
    pick: &[usize],
    why: &'static str,
) -> Result<MergeDone, IndexerError> {
    let fmt = IndexerError::Format;
    let parts: Vec<&LiveSegment> = pick.iter().map(|&i| &ix.segments[i]).collect();
    let (builder, stats) = format::merge::merge(&parts).map_err(fmt)?;
    let old: Vec<SegmentEntry> = pick
        .iter()
        .map(|&i| ix.manifest.segments[i].clone())
        .collect();
    let mut staging = None;
    let mut new_entry = None;
    if !builder.files.is_empty() {
        let mut st = Staging::create(dir).map_err(fmt)?;
        let (id, meta) = st
            .write(builder, &ix.manifest.model_id, ix.manifest.dim as usize)
            .map_err(fmt)?;
        new_entry = Some(SegmentEntry {
            id,
            chunks: meta.chunk_count,
            tombstones: None,
        });
        staging = Some(st);
    }
    let _lock = DirLock::acquire(dir).map_err(fmt)?;
    let mut m = IndexManifest::read(dir).map_err(fmt)?;
    if !old.iter().all(|e| m.segments.contains(e)) {
        return Err(IndexerError::ConcurrentBuild(dir.to_path_buf()));
    }
    if let Some(st) = staging {
        st.publish(dir).map_err(fmt)?;
    }
    let pos = m
        .segments
        .iter()
        .position(|e| old.contains(e))
        .unwrap_or(m.segments.len());
    m.segments.retain(|e| !old.contains(e));
    if let Some(e) = &new_entry {
        if !m.segments.iter().any(|x| x.id == e.id) {
            m.segments.insert(pos.min(m.segments.len()), e.clone());
        }
    }
    m.generation += 1;
    m.commit(dir).map_err(fmt)?;
    // Old generations are no longer named; readers that still map them keep working. A
    // failed collection only leaves files behind for the next one.
    let _ = Index::collect_garbage(dir);
    Ok(MergeDone {
        from: old.into_iter().map(|e| e.id).collect(),
        into: new_entry.map(|e| e.id),
        chunks: stats.chunks,
        dropped_chunks: stats.dropped_chunks,
        why,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(cap: u64, max_segments: Option<usize>) -> MergePolicy {
        MergePolicy {
            budget: cap.saturating_mul(2),
            max_segments,
            deletes: true,
        }
    }

    fn s(live: u64, total: u64) -> SegmentStat {
        SegmentStat {
            live,
            total,
            cost: total * 10,
            lacks_codes: false,
        }
    }

    #[test]
    fn tiers_grow_by_the_factor() {
        assert_eq!(tier(0), 0);
        assert_eq!(tier(FLOOR_CHUNKS - 1), 0);
        assert_eq!(tier(FLOOR_CHUNKS), 1);
        assert_eq!(tier(FLOOR_CHUNKS * TIER_FACTOR - 1), 1);
        assert_eq!(tier(FLOOR_CHUNKS * TIER_FACTOR), 2);
    }

    #[test]
    fn a_crowded_tier_merges_its_smallest_within_the_cap() {
        let mut stats: Vec<SegmentStat> = (0..SEGMENTS_PER_TIER as u64)
            .map(|i| s(100 + i, 100 + i))
            .collect();
        assert_eq!(
            plan(&stats, &policy(u64::MAX, None)),
            None,
            "a full tier is not crowded"
        );
        stats.push(s(50, 50));
        stats.push(s(100_000, 100_000)); // another tier
        let (pick, why) = plan(&stats, &policy(u64::MAX, None)).unwrap();
        assert_eq!(why, "tier");
        assert_eq!(pick, (0..=SEGMENTS_PER_TIER).collect::<Vec<_>>());
        // The cap keeps only the smallest two (50 and 100 chunks: 500 + 1000 bytes).
        let (pick, _) = plan(&stats, &policy(1500, None)).unwrap();
        assert_eq!(pick, vec![0, SEGMENTS_PER_TIER]);
        // No merge of one.
        assert_eq!(plan(&stats, &policy(600, None)), None);
    }

    #[test]
    fn mostly_deleted_segments_are_rewritten_and_max_segments_forces_merges() {
        let stats = vec![s(900, 1000), s(400, 1000), s(10, 10)];
        assert_eq!(
            plan(&stats, &policy(u64::MAX, None)),
            Some((vec![1], "deletes"))
        );
        let after_build = MergePolicy::after_build(u64::MAX);
        assert_eq!(
            plan(&stats, &after_build),
            None,
            "builds do not rewrite deletes"
        );
        let stats = vec![s(900, 1000), s(600, 1000), s(10, 10)];
        assert_eq!(plan(&stats, &policy(u64::MAX, None)), None);
        // A segment without one-bit codes is rewritten by `indexer merge`, not after builds.
        let mut old = stats.clone();
        old[0].lacks_codes = true;
        assert_eq!(
            plan(&old, &policy(u64::MAX, None)),
            Some((vec![0], "codes"))
        );
        assert_eq!(plan(&old, &after_build), None);
        assert_eq!(plan(&old, &policy(100, None)), None, "over the cap");
        assert_eq!(
            plan(&stats, &policy(u64::MAX, Some(2))),
            Some((vec![1, 2], "max-segments"))
        );
        assert_eq!(
            plan(&stats, &policy(u64::MAX, Some(1))),
            Some((vec![0, 1, 2], "max-segments"))
        );
        // Over the cap: nothing to do.
        assert_eq!(plan(&stats, &policy(50, Some(1))), None);
    }
}
