//! The re-index job table of an engine: queued, running and finished jobs (the last
//! [`KEEP_JOBS`]), with a condition variable for callers that wait, and the lock that runs one
//! build at a time. The `reindex` and `job_status` tools live in `tools/reindex.rs`.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Serialize;

/// Jobs kept for `job_status`.
pub const KEEP_JOBS: usize = 64;

/// A re-index job.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct JobStatus {
    pub job_id: u64,
    /// `queued`, `running`, `done` or `failed`.
    pub state: String,
    /// Roots (absolute paths) the job re-indexes.
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
    /// Symlinks not followed because they resolve outside their root (the link, its target,
    /// the root): the index never reads outside the roots it records.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outside_root: Vec<String>,
    /// Why the job failed (nothing was committed for the root that failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The job table of an engine.
#[derive(Default)]
pub struct Jobs {
    pub(crate) table: Mutex<(u64, VecDeque<JobStatus>)>,
    changed: Condvar,
    /// Held by the running job: one build at a time.
    pub(crate) run: Mutex<()>,
}

impl Jobs {
    pub(crate) fn update(&self, id: u64, f: impl FnOnce(&mut JobStatus)) {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(j) = t.1.iter_mut().find(|j| j.job_id == id) {
            f(j);
        }
        self.changed.notify_all();
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
            if j.state == "done" || j.state == "failed" || now >= deadline {
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
