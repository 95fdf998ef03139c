//! `indexer gc-remote`: remove what no retained manifest names.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use format::segment::SEGMENT_JSON;

use crate::layout::{manifest_generation, manifest_key, RemoteManifest};
use crate::{Remote, Result, SyncError};

/// How to collect.
#[derive(Debug, Clone)]
pub struct GcOptions {
    /// The newest generations kept (at least 1).
    pub keep: usize,
    /// Unnamed objects younger than this are left alone: a push in progress uploads its
    /// segments before the manifest that names them.
    pub grace: Duration,
    /// Report what would be removed, remove nothing.
    pub dry_run: bool,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            keep: 3,
            grace: Duration::from_secs(3600),
            dry_run: false,
        }
    }
}

/// What a collection removed (or, dry, would remove).
#[derive(Debug, Clone, Default)]
pub struct GcReport {
    pub kept_generations: Vec<u64>,
    pub manifests_removed: usize,
    pub segments_removed: usize,
    pub tombstones_removed: usize,
    pub objects_removed: usize,
    pub bytes_removed: u64,
    /// Unnamed segments left alone because they are younger than the grace period.
    pub segments_too_young: usize,
}

/// Keeps the newest `keep` manifests and what they name; removes older manifests first (so no
/// new pull starts on them), then unnamed segments older than the grace period, each one's
/// seal first (a segment without its seal is never reused by a push), then unnamed tombstone
/// files and stale probe objects. The newest manifest is read again just before segments are
/// removed, so a push that committed meanwhile keeps what it named.
pub fn gc_remote(remote: &Remote, opts: &GcOptions) -> Result<GcReport> {
    remote.require_writable("gc-remote")?;
    if opts.keep == 0 {
        return Err(SyncError::Mismatch(
            "--keep must be at least 1 (the newest generation is always kept)".into(),
        ));
    }
    remote.block_on(collect(remote, opts))
}

async fn collect(remote: &Remote, opts: &GcOptions) -> Result<GcReport> {
    let mut report = GcReport::default();
    let now = chrono_now();
    let old = |m: &object_store::ObjectMeta| {
        now.saturating_sub(m.last_modified.timestamp_millis().max(0) as u64)
            >= opts.grace.as_millis() as u64
    };
    let mut gens: Vec<u64> = remote
        .list("manifests/")
        .await?
        .iter()
        .filter_map(|m| {
            let rel = remote.rel(&m.location)?;
            manifest_generation(rel.strip_prefix("manifests/")?)
        })
        .collect();
    gens.sort_unstable_by(|a, b| b.cmp(a));
    let (kept, dropped) = gens.split_at(opts.keep.min(gens.len()));
    report.kept_generations = kept.to_vec();
    let mut segments: HashSet<String> = HashSet::new();
    let mut tombstones: HashSet<String> = HashSet::new();
    let mut name = |m: &RemoteManifest| {
        for e in m.index.segments.iter().chain(&m.index.memory_segments) {
            segments.insert(e.id.clone());
            if let Some(t) = &e.tombstones {
                tombstones.insert(t.blake3.clone());
            }
        }
    };
    for &g in kept {
        let key = manifest_key(g);
        let bytes = remote
            .get_bytes(&key)
            .await?
            .ok_or_else(|| SyncError::Corrupt {
                key: key.clone(),
                reason: "listed but missing; nothing was removed".into(),
            })?;
        name(&RemoteManifest::parse(&key, &bytes)?);
    }
    // `latest` must not name a manifest about to go: readers probe forward from it.
    if let (Some(&newest), false) = (kept.first(), opts.dry_run) {
        crate::push::advance_latest(remote, newest).await?;
    }
    for &g in dropped {
        if !opts.dry_run {
            remote.delete(&manifest_key(g)).await?;
        }
        report.manifests_removed += 1;
        report.objects_removed += 1;
    }
    // A push that committed since the listing keeps what it named.
    if let Some(head) = remote.head_manifest().await? {
        name(&head);
    }

    // Segments: group objects by segment id.
    let mut by_segment: BTreeMap<String, Vec<object_store::ObjectMeta>> = BTreeMap::new();
    for m in remote.list("segments/").await? {
        let Some(rel) = remote.rel(&m.location) else {
            continue;
        };
        let Some(id) = rel
            .strip_prefix("segments/seg-")
            .and_then(|r| r.split('/').next())
        else {
            continue;
        };
        by_segment.entry(id.to_string()).or_default().push(m);
    }
    for (id, mut objects) in by_segment {
        if segments.contains(&id) {
            continue;
        }
        if !objects.iter().all(old) {
            report.segments_too_young += 1;
            continue;
        }
        // A push that reuses a segment puts its seal again first: look once more.
        let seal = format!("segments/seg-{id}/{SEGMENT_JSON}");
        if let Some(m) = remote.head(&seal).await? {
            if !old(&m) {
                report.segments_too_young += 1;
                continue;
            }
        }
        // The seal first.
        objects.sort_by_key(|m| !m.location.as_ref().ends_with(SEGMENT_JSON));
        for m in &objects {
            if !opts.dry_run {
                let rel = remote.rel(&m.location).unwrap_or_default().to_string();
                remote.delete(&rel).await?;
            }
            report.objects_removed += 1;
            report.bytes_removed += m.size;
        }
        report.segments_removed += 1;
    }
    for m in remote.list("tombstones/").await? {
        let Some(rel) = remote.rel(&m.location).map(str::to_string) else {
            continue;
        };
        let named = rel
            .strip_prefix("tombstones/")
            .and_then(|n| n.strip_suffix(".del"))
            .is_some_and(|h| tombstones.contains(h));
        if named || !old(&m) {
            continue;
        }
        if !opts.dry_run {
            remote.delete(&rel).await?;
        }
        report.tombstones_removed += 1;
        report.objects_removed += 1;
        report.bytes_removed += m.size;
    }
    for m in remote.list("probe/").await? {
        if let (Some(rel), true) = (remote.rel(&m.location).map(str::to_string), old(&m)) {
            if !opts.dry_run {
                remote.delete(&rel).await?;
            }
            report.objects_removed += 1;
        }
    }
    Ok(report)
}

fn chrono_now() -> u64 {
    crate::layout::now_ms()
}
