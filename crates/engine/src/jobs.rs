//! The re-index job table of an engine: queued, running and finished jobs (the last
//! [`KEEP_JOBS`]), with a condition variable for callers that wait, and the lock that runs one
//! build at a time. The `reindex` and `job_status` tools live in `tools/reindex.rs`.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Serialize;

/// Finished jobs kept for `job_status` (queued and running ones are always kept).
pub const KEEP_JOBS: usize = 64;

/// Jobs that may be queued or running at once: a `reindex` beyond them is refused (each
/// queued job holds a thread waiting for its turn, and they run one at a time).
pub const MAX_PENDING_JOBS: usize = 16;

/// A re-index job.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct JobStatus {
    pub job_id: u64,
    /// `queued`, `running`, `done` or `failed`.
    pub state: String,
    /// Roots (absolute paths) the job targets: only their files (under `paths`, when given)
    /// are re-indexed or deleted. The build walks and parses every recorded root, so unchanged
    /// files of any root may be relinked, and the counts and errors below cover them all.
    pub roots: Vec<String>,
    /// Repo-relative path prefixes it is limited to (empty: whole roots).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    pub submitted_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elapsed_ms: Option<f64>,
    pub files_seen: usize,
    pub files_changed: usize,
    pub files_deleted: usize,
    /// Unchanged files written again because their calls or imports resolve differently now
    /// (a definition they use appeared, went or moved): their graph edges follow the change.
    pub files_relinked: usize,
    /// Files not parsed again: their chunks, calls and imports came from the index's facts
    /// cache (their bytes were those of its entry).
    pub files_cached: usize,
    pub chunks_embedded: usize,
    pub chunks_reused: usize,
    pub chunks_tombstoned: u64,
    /// Index generation the job committed (unchanged when nothing changed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    /// Code references re-checked after the commit (memories linked to code), and how many
    /// turned out stale or relocated; memories whose references were written back.
    pub refs_checked: usize,
    pub refs_stale: usize,
    pub refs_relocated: usize,
    pub memories_updated: usize,
    /// Files that could not be indexed (unreadable, walk errors).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub file_errors: Vec<String>,
    /// Files the walk left out, counted by reason (`too large`, `binary`, `invalid UTF-8`, …),
    /// as `indexer build` reports them.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub skipped: std::collections::BTreeMap<String, usize>,
    /// Files under the job's targets left out for a reason worth telling, each with the reason
    /// (a file that is not UTF-8: its edit is not indexed); at most [`MAX_LISTED`], then how
    /// many more. (`skipped` counts every file the build walked, in every root.)
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Symlinks not followed because they resolve outside their root (the link, its target,
    /// the root): the index never reads outside the roots it records.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outside_root: Vec<String>,
    /// What the build did besides indexing, or did not do and why (e.g. a recorded root that
    /// is gone was left out, so unchanged files' edges were not compared).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Why the job failed (its one build committed nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Most entries of a job's `warnings`.
pub const MAX_LISTED: usize = 20;

/// `items` cut to [`MAX_LISTED`], the last entry saying how many more there were.
pub(crate) fn listed(mut items: Vec<String>) -> Vec<String> {
    if items.len() > MAX_LISTED {
        let more = items.len() - (MAX_LISTED - 1);
        items.truncate(MAX_LISTED - 1);
        items.push(format!("… and {more} more"));
    }
    items
}

/// The job table of an engine.
#[derive(Default)]
pub struct Jobs {
    pub(crate) table: Mutex<(u64, VecDeque<JobStatus>)>,
    changed: Condvar,
    /// Held by the running job: one build at a time.
    pub(crate) run: Mutex<()>,
}

impl JobStatus {
    /// A job just submitted: `queued`, nothing counted yet (its id is set by [`Jobs::queue`]).
    pub(crate) fn queued(
        roots: Vec<String>,
        paths: Vec<String>,
        submitted_at: String,
    ) -> JobStatus {
        JobStatus {
            job_id: 0,
            state: "queued".into(),
            roots,
            paths,
            submitted_at,
            started_at: None,
            finished_at: None,
            elapsed_ms: None,
            files_seen: 0,
            files_changed: 0,
            files_deleted: 0,
            files_relinked: 0,
            files_cached: 0,
            chunks_embedded: 0,
            chunks_reused: 0,
            chunks_tombstoned: 0,
            generation: None,
            skipped: Default::default(),
            warnings: Vec::new(),
            refs_checked: 0,
            refs_stale: 0,
            refs_relocated: 0,
            memories_updated: 0,
            file_errors: Vec::new(),
            notes: Vec::new(),
            outside_root: Vec::new(),
            error: None,
        }
    }
}

impl Jobs {
    pub(crate) fn update(&self, id: u64, f: impl FnOnce(&mut JobStatus)) {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(j) = t.1.iter_mut().find(|j| j.job_id == id) {
            f(j);
        }
        self.changed.notify_all();
    }

    /// Queues `job` (its `job_id` is set here) unless [`MAX_PENDING_JOBS`] are queued or
    /// running already; then drops the oldest finished jobs beyond [`KEEP_JOBS`] (never a
    /// queued or running one, which a caller may be waiting for). Returns the new id, or the
    /// number of pending jobs when it was refused.
    pub(crate) fn queue(&self, mut job: JobStatus) -> Result<u64, usize> {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let pending = t.1.iter().filter(|j| !finished(j)).count();
        if pending >= MAX_PENDING_JOBS {
            return Err(pending);
        }
        t.0 += 1;
        let id = t.0;
        job.job_id = id;
        t.1.push_back(job);
        let mut done = t.1.iter().filter(|j| finished(j)).count();
        while done > KEEP_JOBS {
            match t.1.iter().position(finished) {
                Some(i) => {
                    t.1.remove(i);
                    done -= 1;
                }
                None => break,
            }
        }
        Ok(id)
    }

    pub(crate) fn get(&self, id: u64) -> Option<JobStatus> {
        let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t.1.iter().find(|j| j.job_id == id).cloned()
    }

    pub(crate) fn wait(&self, id: u64, timeout: Duration) -> Option<JobStatus> {
        let deadline = Instant::now() + timeout;
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let j = t.1.iter().find(|j| j.job_id == id).cloned()?;
            let now = Instant::now();
            if finished(&j) || now >= deadline {
                return Some(j);
            }
            t = self
                .changed
                .wait_timeout(t, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// Whether `j` has finished (`done` or `failed`).
fn finished(j: &JobStatus) -> bool {
    j.state == "done" || j.state == "failed"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(state: &str) -> JobStatus {
        JobStatus {
            state: state.into(),
            ..JobStatus::queued(Vec::new(), Vec::new(), String::new())
        }
    }

    /// A job someone may be waiting for is never dropped, however many jobs finish after it
    /// (dropping it made `reindex {"wait": true}` panic); finished ones beyond `KEEP_JOBS` are,
    /// oldest first; and no more than `MAX_PENDING_JOBS` may be pending.
    #[test]
    fn pending_jobs_stay_and_are_capped() {
        let jobs = Jobs::default();
        let first = jobs.queue(job("queued")).unwrap();
        for _ in 0..3 * KEEP_JOBS {
            let id = jobs.queue(job("queued")).unwrap();
            jobs.update(id, |j| j.state = "done".into());
        }
        assert_eq!(jobs.get(first).unwrap().state, "queued");
        let t = jobs.table.lock().unwrap();
        // Trimmed when a job is queued: the last one finished after that.
        assert_eq!(t.1.len(), KEEP_JOBS + 2);
        // The newest finished ones are the ones kept.
        assert_eq!(t.1.back().unwrap().job_id, 3 * KEEP_JOBS as u64 + 1);
        assert_eq!(t.1[1].job_id, 2 * KEEP_JOBS as u64 + 1);
        drop(t);
        for _ in 1..MAX_PENDING_JOBS {
            jobs.queue(job("queued")).unwrap();
        }
        assert_eq!(jobs.queue(job("queued")), Err(MAX_PENDING_JOBS));
        jobs.update(first, |j| j.state = "failed".into());
        assert_eq!(
            jobs.wait(first, Duration::from_millis(1)).unwrap().state,
            "failed"
        );
        // A slot is free again; the oldest finished job (now `first`) makes room.
        assert!(jobs.queue(job("queued")).is_ok());
        assert!(jobs.get(first).is_none());
    }
}
