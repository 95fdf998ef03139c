//! What a build changes against the live index: which parsed files are written
//! ([`plan_changes`]: bytes changed or new, in scope) and which live files are tombstoned
//! (changed, gone), then the unchanged files whose edges resolve differently now
//! ([`relink_stale`], `relink.rs`).

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use format::Index;

use super::parsed::Parsed;
use super::relink;
use super::shed::{chunk_again, Shed};
use super::types::{BuildOptions, BuildReport};
use crate::graph;

/// What changes against the live index.
pub(super) struct ChangePlan {
    /// Per parsed file: whether it is (re-)indexed into the new segment.
    pub(super) changed: Vec<bool>,
    /// Files of the existing index to tombstone, as sorted (segment, file) pairs.
    pub(super) dead_files: Vec<(usize, u32)>,
    /// Per parsed file: where it lives in the existing index (segment, file) when the live
    /// version has the same bytes.
    pub(super) live_at: Vec<Option<(usize, u32)>>,
    /// Live files that stay but that this build neither parses nor deletes: those of
    /// repositories it does not walk, and those gone from disk outside `only`.
    pub(super) unseen: usize,
}

/// Live files of the existing index: (repository, path) → (segment, file, content hash).
/// Files whose chunks are all tombstoned are not live. Files without chunks (empty ones, or
/// none the chunker keeps) are deleted by a bitmap of their own in the tombstone file
/// ([`format::tombstones`]); those not deleted are in the second map, every record of a path
/// in segment order (the newest last): the newest says whether a file on disk with the same
/// bytes is already indexed, the older ones are stale.
type FileAt = HashMap<(String, String), (usize, u32, [u8; 32])>;
type EmptyAt = HashMap<(String, String), Vec<(usize, u32, [u8; 32])>>;

fn live_files(existing: Option<&Index>) -> (FileAt, EmptyAt) {
    let (mut live, mut empty) = (FileAt::new(), EmptyAt::new());
    if let Some(ix) = existing {
        for (si, ls) in ix.segments.iter().enumerate() {
            let table = ls.segment.table();
            for (fi, f) in table.files.iter().enumerate() {
                let fi = fi as u32;
                if !ls.file_is_live(fi) {
                    continue;
                }
                let key = (f.repo.to_string(), f.path.to_string());
                let at = (si, fi, f.content_hash);
                if f.chunk_count.to_native() == 0 {
                    empty.entry(key).or_default().push(at);
                } else {
                    live.insert(key, at);
                }
            }
        }
    }
    (live, empty)
}

/// Changed vs unchanged against the live index. A file changes when it is in scope
/// and its bytes hash differently (or it is new); the live files to tombstone are the changed
/// ones and those of this build's repositories that are gone from disk (counted as deleted).
pub(super) fn plan_changes(
    opts: &BuildOptions,
    files: &[Parsed],
    existing: Option<&Index>,
    report: &mut BuildReport,
) -> ChangePlan {
    let (live, empty) = live_files(existing);
    // Each parsed file's live version (or its record without chunks), looked up once.
    let live_of: Vec<Option<(usize, u32, [u8; 32])>> = files
        .iter()
        .map(|f| {
            let key = (f.cand.repo.clone(), f.cand.rel_path.clone());
            // Of several records without chunks, the one with the file's bytes if any.
            (live.get(&key).copied()).or_else(|| {
                let v = empty.get(&key)?;
                (v.iter().rev().find(|r| r.2 == f.hash))
                    .or(v.last())
                    .copied()
            })
        })
        .collect();
    let changed: Vec<bool> = (files.iter().zip(&live_of))
        .map(|(f, at)| {
            opts.in_scope(&f.cand.repo, &f.cand.rel_path) && at.is_none_or(|(_, _, h)| h != f.hash)
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
    let root_repos: HashSet<String> = opts.root_walks().into_iter().map(|r| r.repo).collect();
    // Files to tombstone: changed ones that were live, and live ones that are gone.
    let mut dead_files: Vec<(usize, u32)> = Vec::new();
    // Live files that stay and that resolution does not read (another repository's, or one
    // gone from disk outside `only`).
    let mut unseen = 0usize;
    for (key, (si, fi, _)) in &live {
        match index_of.get(&(key.0.as_str(), key.1.as_str())) {
            Some(&i) if changed[i] => dead_files.push((*si, *fi)),
            Some(_) => {}
            None if root_repos.contains(&key.0) && opts.in_scope(&key.0, &key.1) => {
                dead_files.push((*si, *fi));
                report.files_deleted += 1;
            }
            None => unseen += 1,
        }
    }
    // Records without chunks that are not the current record of a file on disk are deleted:
    // all of a path a live record with chunks holds; in scope, all of a file gone from disk
    // (counted as deleted) or changed, and of an unchanged file every record but the one with
    // its bytes (several are left only by builds before files without chunks could be
    // deleted; which one is newest is not read from segment order, which merges do not
    // keep). So the node of a deleted empty file goes with the build that sees it gone, and
    // the next build finds nothing to delete. Those of repositories this build does not walk
    // are unseen like live files; those of a walked repository outside `only` stay, neither
    // deleted nor unseen: they would keep relinking off for every build limited by `only` (a
    // fresh build would not hold them either).
    for (key, records) in &empty {
        if !root_repos.contains(&key.0) {
            if !live.contains_key(key) {
                unseen += 1;
            }
            continue;
        }
        let parsed = index_of.get(&(key.0.as_str(), key.1.as_str()));
        let stays = if live.contains_key(key) {
            None
        } else if !opts.in_scope(&key.0, &key.1) {
            continue;
        } else {
            match parsed {
                None => {
                    report.files_deleted += 1;
                    None
                }
                Some(&i) if changed[i] => None,
                Some(&i) => records.iter().rposition(|r| r.2 == files[i].hash),
            }
        };
        let gone = (records.iter().enumerate()).filter(|(j, _)| Some(*j) != stays);
        dead_files.extend(gone.map(|(_, &(si, fi, _))| (si, fi)));
    }
    dead_files.sort_unstable();
    let live_at = (files.iter().zip(&live_of))
        .map(|(f, at)| {
            at.filter(|(_, _, h)| *h == f.hash)
                .map(|(si, fi, _)| (si, fi))
        })
        .collect();
    ChangePlan {
        changed,
        dead_files,
        live_at,
        unseen,
    }
}

/// Unchanged files whose edges resolve differently now (`relink.rs`) are written again:
/// marked changed, their live versions to be tombstoned, their texts to be chunked again
/// (they were dropped). Whatever `only` says: their bytes are the indexed ones, and only
/// their edges move.
pub(super) fn relink_stale(
    files: &mut [Parsed],
    plan: &mut ChangePlan,
    ix: &Index,
    resolved: &[graph::ResolvedEdge],
    report: &mut BuildReport,
) {
    let t = Instant::now();
    if plan.unseen > 0 {
        // Resolution did not read every file the index holds: edges into those would go.
        report.notes.push(format!(
            "edges of unchanged files were not compared: {} live files (of repositories this \
             build does not walk, or gone outside its scope) were not read; a build of every \
             root of the index relinks them",
            plan.unseen
        ));
        return;
    }
    let stale = match relink::stale_files(files, &plan.changed, &plan.live_at, ix, resolved) {
        Ok(stale) => stale,
        Err(unheld) => {
            report.notes.push(format!(
                "edges of unchanged files were not compared: {unheld} files outside this \
                 build's scope changed on disk (or are new) and are not written; a build that \
                 writes them relinks"
            ));
            return;
        }
    };
    for &i in &stale {
        plan.changed[i] = true;
        if let Some(at) = plan.live_at[i] {
            plan.dead_files.push(at);
        }
        // Texts shed at the parse come back as the budget's do (the spill, slices of the
        // bytes); texts dropped for an unchanged file by chunking it again.
        let shed = files[i].shed.take().map_or_else(chunk_again, Shed::relink);
        files[i].shed = Some(shed);
    }
    // The other unchanged files are not written: their way back to their texts goes.
    for (f, _) in files.iter_mut().zip(&plan.changed).filter(|(_, c)| !**c) {
        f.shed = None;
    }
    plan.dead_files.sort_unstable();
    plan.dead_files.dedup();
    report.files_relinked = stale.len();
    report.timings.push(("relink", t.elapsed()));
}
