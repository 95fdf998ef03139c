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
//! sizes, [`merge_cost`]). Merges copy records and the graph, stream texts and vectors from
//! the parts' maps and merge their postings ([`format::merge`]), never re-embed; the merged segment is
//! written into a staging directory outside the directory lock, then committed like a build:
//! under the lock, only if every merged segment is still in MANIFEST with the same tombstones
//! (else nothing changes and the merge reports [`IndexerError::ConcurrentBuild`]).

use std::path::Path;
use std::time::{Duration, Instant};

use format::manifest::LiveSegment;
use format::manifest::{DirLock, IndexManifest, OpenOptions, SegmentEntry};
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
    /// A merge still due that the memory budget forbade ([`held_back`]).
    pub held_back: Option<HeldBack>,
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

impl SegmentStat {
    /// At least half of its chunks are tombstoned.
    fn mostly_deleted(&self) -> bool {
        self.total > 0 && self.live * 2 <= self.total
    }
}

/// `idx` (indices into `stats`) in the order merges take them: fewest live chunks first.
fn by_size(stats: &[SegmentStat], mut idx: Vec<usize>) -> Vec<usize> {
    idx.sort_by_key(|&i| (stats[i].live, i));
    idx
}

/// The members (indices into `stats`) of each tier holding more than [`SEGMENTS_PER_TIER`]
/// segments, lowest tier first.
fn crowded_tiers(stats: &[SegmentStat]) -> impl Iterator<Item = Vec<usize>> + '_ {
    let top = stats.iter().map(|s| tier(s.live)).max().unwrap_or(0);
    (0..=top).filter_map(move |t| {
        let members: Vec<usize> = (0..stats.len())
            .filter(|&i| tier(stats[i].live) == t)
            .collect();
        (members.len() > SEGMENTS_PER_TIER).then_some(members)
    })
}

/// The next merge for segments `stats` (in MANIFEST order) as (indices into `stats`, sorted,
/// and the reason), or `None`. `cap` bounds the summed [`SegmentStat::cost`] of a merge.
pub fn plan(stats: &[SegmentStat], policy: &MergePolicy) -> Option<(Vec<usize>, &'static str)> {
    let cap = policy.budget / 2;
    // 1. Mostly deleted: rewrite alone.
    let mostly_deleted = |s: &SegmentStat| s.mostly_deleted() && s.cost <= cap;
    if let Some(i) = (0..stats.len()).find(|&i| policy.deletes && mostly_deleted(&stats[i])) {
        return Some((vec![i], "deletes"));
    }
    let old = |s: &SegmentStat| s.lacks_codes && s.cost <= cap;
    if let Some(i) = (0..stats.len()).find(|&i| policy.deletes && old(&stats[i])) {
        return Some((vec![i], "codes"));
    }
    let smallest_first = |idx: Vec<usize>, limit: usize| -> Vec<usize> {
        let mut pick = Vec::new();
        let mut cost = 0u64;
        for i in by_size(stats, idx) {
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
    for members in crowded_tiers(stats) {
        let pick = smallest_first(members, MAX_MERGE_AT_ONCE);
        if pick.len() >= 2 {
            return Some((pick, "tier"));
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

/// Estimated bytes a segment adds to a merge's heap ([`format::merge`]): its chunk records
/// three times (the copied records, the table with its lookups, the archive), its postings
/// and graph twice (merged or built, then archived), a quarter of its vectors (the SQ8 codes
/// the IVF writer holds until it writes the lists, `format::ivf_write`; the rows themselves
/// are read from the parts' maps and the written file, page cache the kernel can reclaim),
/// its texts not at all (streamed from
/// the parts' `texts.bin`). A segment of an older format has its postings built again from
/// its texts (its tokenizer may differ): twice its texts more. On the 1M-chunk latency index
/// (9 segments) this estimates 1,408 MiB; the merge's anonymous memory peaked at 1,327 MiB.
pub fn merge_cost(meta: &format::SegmentMeta) -> u64 {
    let size = |name: &str| {
        meta.files
            .iter()
            .find(|f| f.name == name)
            .map_or(0, |f| f.size)
    };
    let rebuilt = if meta.format_version < format::FORMAT_VERSION {
        2 * (size("texts.bin") + size("chunks.rkyv"))
    } else {
        0
    };
    3 * size("chunks.rkyv")
        + 2 * (size("postings.rkyv") + size("graph.rkyv"))
        + size("vectors.f32") / 4
        + rebuilt
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

/// A merge the policy calls for but the memory budget forbids: every choice of at least two
/// segments (or the one segment to rewrite) costs more than half of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldBack {
    /// The reason the merge is due, as in [`MergeDone::why`].
    pub why: &'static str,
    /// Code segments in the index.
    pub segments: usize,
    /// Estimated bytes ([`merge_cost`]) of the merge the budget forbids now: the segment to
    /// rewrite, or the two smallest (by live chunks) of the tier or of the index.
    pub cost: u64,
    /// The least `--memory-budget` (whole MiB) under which the policy does all it calls for:
    /// every merge of the tier, or down to `--max-segments`, the last of them the largest.
    pub budget: u64,
}

impl HeldBack {
    /// One line for a person: what is due, what it costs, the option that allows it.
    pub fn describe(&self, policy: &MergePolicy) -> String {
        let what = match self.why {
            "deletes" => {
                "a segment with at least half of its chunks deleted is due a rewrite".into()
            }
            "codes" => "a segment without one-bit IVF codes is due a rewrite".into(),
            "tier" => format!(
                "a size tier holds more than {SEGMENTS_PER_TIER} of the {} code segments",
                self.segments
            ),
            _ => format!(
                "{} code segments are more than --max-segments {}",
                self.segments,
                policy.max_segments.unwrap_or(1).max(1)
            ),
        };
        let option = match policy.max_segments {
            Some(max) => format!("--max-segments {} --memory-budget", max.max(1)),
            None => "--memory-budget".into(),
        };
        format!(
            "{what}, and merging needs about {} in memory, more than half of the {} memory \
             budget: `indexer merge {option} {}MiB` does all of it",
            human(self.cost),
            human(policy.budget),
            mib(self.budget)
        )
    }
}

/// Bytes for a person: `1.5 MiB`, `640 KiB`, `3.0 GiB`.
fn human(b: u64) -> String {
    const KIB: f64 = 1024.0;
    let f = b as f64;
    if f >= KIB * KIB * KIB {
        format!("{:.1} GiB", f / (KIB * KIB * KIB))
    } else if f >= KIB * KIB {
        format!("{:.1} MiB", f / (KIB * KIB))
    } else {
        format!("{} KiB", b.div_ceil(1024))
    }
}

/// Bytes in whole MiB, rounded up.
fn mib(b: u64) -> u64 {
    b.div_ceil(1 << 20)
}

/// What [`merge`] would leave of `stats` under `policy`, with each merge's result estimated
/// from its parts (live chunks and costs add up; a rewrite keeps its live share of the cost).
fn simulate(stats: &[SegmentStat], policy: &MergePolicy) -> Vec<SegmentStat> {
    let mut stats = stats.to_vec();
    // Each merge removes a segment or a deleted chunk or a missing code: bounded, but bound
    // the loop anyway.
    for _ in 0..4 * stats.len() + 8 {
        let Some((pick, _)) = plan(&stats, policy) else {
            break;
        };
        let mut merged = SegmentStat {
            live: 0,
            total: 0,
            cost: 0,
            lacks_codes: false,
        };
        for &i in &pick {
            let s = stats[i];
            merged.live += s.live;
            merged.cost += if s.total == 0 {
                s.cost
            } else {
                (u128::from(s.cost) * u128::from(s.live) / u128::from(s.total)) as u64
            };
        }
        merged.total = merged.live;
        for &i in pick.iter().rev() {
            stats.remove(i);
        }
        // Parts with no live chunk left are dropped, not rewritten ([`MergeDone::into`]).
        if merged.live > 0 {
            stats.insert(pick[0].min(stats.len()), merged);
        }
    }
    stats
}

/// The first merge `policy` calls for on `stats` that its cap forbids, as (reason, cost of the
/// cheapest choice), when [`plan`] has nothing it may run: `--max-segments` not reached (asked
/// for, so named first), a rewrite of one segment costing more than the cap, a crowded tier
/// whose two smallest cost more than it together.
fn blocked(stats: &[SegmentStat], policy: &MergePolicy) -> Option<(&'static str, u64)> {
    if plan(stats, policy).is_some() {
        return None;
    }
    // The two smallest by live chunks, as `plan` picks them.
    let two_smallest = |idx: Vec<usize>| -> u64 {
        let idx = by_size(stats, idx);
        idx.iter().take(2).map(|&i| stats[i].cost).sum()
    };
    if policy
        .max_segments
        .is_some_and(|max| stats.len() > max.max(1))
    {
        return Some(("max-segments", two_smallest((0..stats.len()).collect())));
    }
    if policy.deletes {
        let deleted = stats.iter().filter(|s| s.mostly_deleted());
        if let Some(s) = deleted.min_by_key(|s| s.cost) {
            return Some(("deletes", s.cost));
        }
        if let Some(s) = stats
            .iter()
            .filter(|s| s.lacks_codes)
            .min_by_key(|s| s.cost)
        {
            return Some(("codes", s.cost));
        }
    }
    crowded_tiers(stats)
        .next()
        .map(|members| ("tier", two_smallest(members)))
}

/// The first merge `policy` calls for on `stats` that its memory cap forbids ([`blocked`]),
/// with the least budget (whole MiB) under which [`merge`] would leave nothing held back: the
/// merges are simulated from the segments' statistics ([`simulate`]), since the later merges
/// of a crowded tier or of `--max-segments` are larger than the first. `None` when nothing is
/// due or `plan` has a merge.
pub fn held_back(stats: &[SegmentStat], policy: &MergePolicy) -> Option<HeldBack> {
    let (why, cost) = blocked(stats, policy)?;
    let done = |b: u64| {
        let p = MergePolicy {
            budget: b << 20,
            ..*policy
        };
        blocked(&simulate(stats, &p), &p).is_none()
    };
    // Under a cap of every segment's cost together, every merge fits, so `done(hi)` holds,
    // and the search keeps it so. More budget never takes a merge away in practice, which
    // makes `hi` the least such budget.
    let total: u64 = stats.iter().map(|s| s.cost).sum();
    let (mut lo, mut hi) = (1, mib(total).saturating_mul(2).saturating_add(2));
    debug_assert!(done(hi));
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if done(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Some(HeldBack {
        why,
        segments: stats.len(),
        cost,
        budget: hi << 20,
    })
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
/// opened index, without mapping and validating every segment. The merge after a build plans
/// on these: opening the whole index only to find nothing due mapped all of it into the
/// build's memory (the cargo registry at a 256 MiB budget, 35 segments: about 300 MB of
/// resident pages at the very end of the build, its peak).
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
        // Opening validates every segment's records and dictionary; their pages leave the
        // process segment by segment (at 35 segments of the cargo registry they came to
        // about 500 MB mapped after the open, 300 MB at once during it). A merge reads only
        // its parts, and those again as it goes.
        let options = OpenOptions {
            release_pages: true,
            ..OpenOptions::default()
        };
        let ix = Index::open_with(dir, None, options).map_err(|e| IndexerError::ExistingIndex {
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
            report.held_back = held_back(&stats, policy);
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
    let merged = format::merge::merge(&parts).map_err(fmt)?;
    let stats = merged.stats.clone();
    let old: Vec<SegmentEntry> = pick
        .iter()
        .map(|&i| ix.manifest.segments[i].clone())
        .collect();
    let mut staging = None;
    let mut new_entry = None;
    if !merged.is_empty() {
        let mut st = Staging::create(dir).map_err(fmt)?;
        let (id, meta) = st
            .write_with(|d| merged.write(d, &ix.manifest.model_id, ix.manifest.dim as usize))
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

    /// Every held-back merge names a budget that lets `plan` run it, and none below.
    fn assert_budget_allows(stats: &[SegmentStat], policy: MergePolicy, why: &str) {
        let h = held_back(stats, &policy).expect("held back");
        assert_eq!(h.why, why);
        assert_eq!(h.segments, stats.len());
        assert_eq!(h.budget % (1 << 20), 0, "whole MiB");
        let enough = MergePolicy {
            budget: h.budget,
            ..policy
        };
        assert!(plan(stats, &enough).is_some(), "{h:?}");
        // Enough for every merge the policy calls for, and the least such budget in MiB.
        let after = simulate(stats, &enough);
        assert_eq!(blocked(&after, &enough), None, "{h:?} {after:?}");
        if let Some(max) = policy.max_segments {
            assert!(after.len() <= max, "{h:?}");
        }
        if h.budget > 1 << 20 {
            let less = MergePolicy {
                budget: h.budget - (1 << 20),
                ..policy
            };
            assert!(blocked(&simulate(stats, &less), &less).is_some(), "{h:?}");
        }
        let line = h.describe(&policy);
        let mib = h.budget >> 20;
        assert!(
            line.contains(&format!("--memory-budget {mib}MiB` does all of it")),
            "{line}"
        );
        // Just under what it names (less than half the merge's cost) is not enough.
        let short = MergePolicy {
            budget: h.cost * 2 - 1,
            ..policy
        };
        assert!(plan(stats, &short).is_none());
    }

    #[test]
    fn merges_the_budget_forbids_are_named_with_the_budget_that_allows_them() {
        // Nothing due: nothing held back.
        let calm = vec![s(900, 1000), s(600, 1000)];
        assert_eq!(held_back(&calm, &policy(1, None)), None);
        // Due and allowed: not held back either.
        let mut tier: Vec<SegmentStat> = (0..=SEGMENTS_PER_TIER as u64)
            .map(|i| s(100 + i, 100 + i))
            .collect();
        assert!(plan(&tier, &policy(u64::MAX, None)).is_some());
        assert_eq!(held_back(&tier, &policy(u64::MAX, None)), None);
        // A crowded tier whose two smallest (1,000 + 1,010 bytes) exceed the cap.
        let h = held_back(&tier, &policy(1500, None)).unwrap();
        assert_eq!(h.cost, 1000 + 1010);
        assert_budget_allows(&tier, policy(1500, None), "tier");
        // Big costs: the budget is rounded up to whole MiB.
        for t in &mut tier {
            t.cost = t.live << 20;
        }
        assert_budget_allows(&tier, policy(64 << 20, None), "tier");
        // --max-segments: the cheapest merge is its two smallest; the budget named is the one
        // the last merge needs (all three: 21,000 bytes, under the half of 1 MiB).
        let few = vec![s(900, 900), s(500, 500), s(700, 700)];
        let h = held_back(&few, &policy(1000, Some(1))).unwrap();
        assert_eq!(h.cost, 5000 + 7000);
        assert_eq!(h.budget, 1 << 20);
        assert_budget_allows(&few, policy(1000, Some(1)), "max-segments");
        assert!(h
            .describe(&policy(1000, Some(1)))
            .contains("more than --max-segments 1,"));
        // In MiB: 9 segments of 100 MiB each to one; the tier held back (9 in one tier) is
        // not what is named when --max-segments was asked for.
        // `n` segments of about 100,000 chunks and 100 MiB each, in one tier.
        let hundreds = |n: u64| -> Vec<SegmentStat> {
            (0..n)
                .map(|i| SegmentStat {
                    live: 100_000 + i,
                    total: 100_000 + i,
                    cost: 100 << 20,
                    lacks_codes: false,
                })
                .collect()
        };
        let big = hundreds(9);
        assert_eq!(
            held_back(&big, &policy(50 << 20, None)).unwrap().why,
            "tier"
        );
        let h = held_back(&big, &policy(50 << 20, Some(1))).unwrap();
        assert_eq!(h.budget, 1800 << 20, "{h:?}");
        assert_budget_allows(&big, policy(50 << 20, Some(1)), "max-segments");
        assert_budget_allows(&big, policy(50 << 20, Some(5)), "max-segments");
        // A tier of seventeen: under twice the first merge's cost (two, 200 MiB) eight pairs
        // merge and nine segments are left, still crowded; the last merge must be larger,
        // and the budget named says so.
        let seventeen = hundreds(17);
        let h = held_back(&seventeen, &policy(50 << 20, None)).unwrap();
        assert_eq!(h.cost, 200 << 20);
        assert!(h.budget > 2 * h.cost, "{h:?}");
        assert_budget_allows(&seventeen, policy(50 << 20, None), "tier");
        // A rewrite keeps its live share of the cost in the estimate; a segment with nothing
        // live is dropped, as `merge` drops it.
        let est = simulate(&[s(500, 1000)], &policy(u64::MAX, None));
        assert_eq!(est, vec![s(500, 500)]);
        let est = simulate(&[s(0, 1000), s(900, 900)], &policy(u64::MAX, None));
        assert_eq!(est, vec![s(900, 900)]);
        // Sizes in the message are the sizes, not rounded up to MiB.
        assert_eq!(human(1024), "1 KiB");
        assert_eq!(human(3 << 19), "1.5 MiB");
        assert_eq!(human(3 << 29), "1.5 GiB");
        assert!(h
            .describe(&policy(50 << 20, None))
            .contains("more than half of the 100.0 MiB memory budget"));
        // Deletes and missing codes, only where the policy rewrites them.
        let deleted = vec![s(400, 1000), s(900, 900)];
        assert_budget_allows(&deleted, policy(100, None), "deletes");
        assert_eq!(held_back(&deleted, &MergePolicy::after_build(100)), None);
        let mut old = vec![s(900, 900)];
        old[0].lacks_codes = true;
        assert_budget_allows(&old, policy(100, None), "codes");
    }
}
