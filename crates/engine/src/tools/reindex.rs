//! Live re-index of code: the `reindex` and `job_status` tools.
//!
//! `reindex` runs the indexer library ([`indexer::build::build`]) inside the server, as a
//! background job, over the source roots `MANIFEST` records (`indexer build` writes them), each
//! walked with the rules it was built with, and re-indexes them whole or some paths under them.
//! The build is the indexer's incremental one, one build over every root: all files of all
//! roots are walked and parsed (cross-file and cross-repository graph edges need them all);
//! only files whose content hash changed (and, with `paths`, lie under one of them) are chunked
//! into a new segment and embedded, the chunks they replace are tombstoned, deleted files'
//! chunks too; unchanged files whose calls or imports now resolve elsewhere are written again
//! with their vectors reused ("relinked", `indexer::build`). A recorded root that is no longer a
//! directory is left out (its files keep their indexed content, nothing is relinked, and the
//! job's `notes` say so): `reindex {}` targets the roots still here, and a job whose target
//! went after it was queued fails. The commit
//! takes the index directory lock like a memory flush, so the two never overwrite each other.
//! When the build has committed, the server swaps to the new snapshot; queries keep running on
//! the old one meanwhile. Jobs run one at a time, in submission order.
//!
//! Nothing outside the recorded roots is read: `paths` resolving outside (through `..`, an
//! absolute path elsewhere or a symlink) are refused, and the walk skips symlinks leading out of
//! the root (listed in the job's `outside_root`), as `indexer build` does.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use format::manifest::RootEntry;
use format::roots::{confine, ConfineError, ConfineOptions};
use indexer::build::{build, BuildOptions};
use memory::now_ms;
use memory::time::rfc3339;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::engine::Engine;
use crate::jobs::{JobStatus, KEEP_JOBS, MAX_PENDING_JOBS};
use crate::tools::common::{ms, Debug, ToolError, ToolResult};

/// Longest `wait: true` call.
const MAX_WAIT: Duration = Duration::from_secs(600);

/// Re-index code after edits, inside the server: the indexed roots whole, or some files or
/// directories (`paths`). Only files whose content changed are re-chunked and re-embedded;
/// replaced and deleted files' chunks are tombstoned; queries keep working and see the new code
/// when the job commits. Runs as a background job: returns its id (poll job_status), or its
/// result with wait: true.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReindexArgs {
    /// Files or directories to re-index: absolute, or relative to an indexed root. Default:
    /// every indexed root, whole.
    #[serde(default)]
    pub paths: Option<Vec<String>>,
    /// Wait for the job to finish (at most 10 minutes) and return its final status.
    #[serde(default)]
    pub wait: bool,
    /// Return a timing breakdown of this call: `other_ms` checking the paths and queueing
    /// the job, `total_ms` the whole call (with `wait`, the job's run included).
    #[serde(default)]
    pub debug: bool,
}

/// `reindex`'s answer: the job's status (the fields of a `job_status` entry) and, with `debug`,
/// the call's timing; its `generation` is the one serving when the call returned.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ReindexAnswer {
    #[serde(flatten)]
    pub job: JobStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

/// State and counts of a reindex job (queued, running, done, failed), or of the recent jobs.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobStatusArgs {
    /// A job id from `reindex`; without it, the recent jobs, newest first.
    #[serde(default)]
    pub job_id: Option<u64>,
    /// Return a per-phase timing breakdown.
    #[serde(default)]
    pub debug: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct JobStatusAnswer {
    pub jobs: Vec<JobStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug: Option<Debug>,
}

/// Resolves `p` to (root, repo-relative prefix with `/` separators) with the index's one
/// confinement rule ([`format::roots::confine`]): absolute paths must lie inside a root
/// (compared component by component after resolving symlinks, so `/src/app-old` is not inside
/// `/src/app`); relative ones are taken relative to the root in which they exist (the first
/// root, if they exist in none: a deleted file).
fn resolve(roots: &[RootEntry], p: &str) -> ToolResult<(RootEntry, String)> {
    if p.trim().is_empty() {
        return Err(ToolError::InvalidInput("an empty path in `paths`".into()));
    }
    let opts = ConfineOptions {
        repo: None,
        allow_absolute: true,
        allow_root: true,
    };
    match confine(roots, p.trim(), opts) {
        Ok(c) => Ok((c.root, c.rel)),
        // A symlink inside the root that points outside it is refused like an absolute path.
        Err(ConfineError::OutsideRoot { resolved, root, .. }) => Err(ToolError::InvalidInput(
            format!("`{p}` resolves to {resolved}, outside the root {root}"),
        )),
        Err(ConfineError::Escapes(_)) => Err(ToolError::InvalidInput(format!(
            "`{p}` must stay inside its root: `..` and root components are not allowed"
        ))),
        Err(ConfineError::NotInRoot { roots, .. }) => Err(ToolError::InvalidInput(format!(
            "`{p}` is not inside an indexed root ({roots})"
        ))),
        Err(e) => Err(ToolError::InvalidInput(format!("`{p}`: {e}"))),
    }
}

/// Whether the message `w` names the path `s` or a path below it (`src/a` is not `src/ab`).
fn names_under(w: &str, s: &str) -> bool {
    w.match_indices(s).any(|(i, _)| {
        matches!(
            w[i + s.len()..].chars().next(),
            None | Some('/' | ':' | ' ')
        )
    })
}

/// Whether the index serves a live file of repository `repo` at the repository-relative
/// `prefix` or below it.
fn indexes_under(snap: &crate::snapshot::Snapshot, repo: &str, prefix: &str) -> bool {
    let dir = format!("{prefix}/");
    snap.code.index.segments.iter().any(|ls| {
        let t = ls.segment.table();
        (0..t.files.len() as u32).any(|fi| {
            let f = &t.files[fi as usize];
            f.repo == repo
                && (f.path == prefix || f.path.starts_with(dir.as_str()))
                && ls.file_is_live(fi)
        })
    })
}

impl Engine {
    /// Queues a re-index job (see the module doc) and returns its status (final with `wait`).
    pub fn reindex(self: &Arc<Self>, a: &ReindexArgs) -> ToolResult<ReindexAnswer> {
        let t0 = Instant::now();
        let snap = self.snapshot();
        let roots = snap.code.index.manifest.roots.clone();
        if roots.is_empty() {
            return Err(ToolError::InvalidInput(
                "this index records no source roots (it holds only memories, was pulled from \
                 a shared store, whose roots are never taken over, or was built before roots \
                 were recorded): run `indexer build <your checkout> --out <index>` once"
                    .into(),
            ));
        }
        // (root, prefixes); no prefixes: the whole root.
        let mut targets: Vec<(RootEntry, Vec<String>)> = Vec::new();
        // Paths that name nothing: no file or directory on disk, nothing indexed under them.
        let mut unmatched: Vec<String> = Vec::new();
        match a.paths.as_deref() {
            // Every root still here (one that is gone is left out by the job, with a note);
            // none here: refused below.
            None | Some([]) => {
                let here = roots.iter().filter(|r| Path::new(&r.path).is_dir());
                targets = here.map(|r| (r.clone(), Vec::new())).collect();
                if targets.is_empty() {
                    targets.push((roots[0].clone(), Vec::new()));
                }
            }
            Some(ps) => {
                for p in ps {
                    let (mut root, prefix) = resolve(&roots, p)?;
                    let on_disk = Path::new(&root.path)
                        .join(&prefix)
                        .symlink_metadata()
                        .is_ok();
                    if !prefix.is_empty() && !on_disk && !indexes_under(&snap, &root.repo, &prefix)
                    {
                        // A relative path on disk in no root is taken in the first: a file
                        // deleted from another root is that root's (its chunks go).
                        let relative = !Path::new(p.trim()).is_absolute();
                        let holder = (roots.iter())
                            .filter(|_| relative)
                            .find(|r| indexes_under(&snap, &r.repo, &prefix));
                        match holder {
                            Some(r) => root = r.clone(),
                            None => unmatched.push(format!(
                                "`{p}` names no file or directory in the root {} and nothing \
                                 indexed under {}/{prefix}: nothing there to re-index or delete",
                                root.path, root.repo
                            )),
                        }
                    }
                    match targets.iter_mut().find(|(r, _)| r.repo == root.repo) {
                        Some((_, v)) if v.is_empty() => {} // already whole
                        Some((_, v)) if prefix.is_empty() => v.clear(),
                        Some((_, v)) => v.push(prefix),
                        None if prefix.is_empty() => targets.push((root, Vec::new())),
                        None => targets.push((root, vec![prefix])),
                    }
                }
            }
        }
        for (r, _) in &targets {
            if !Path::new(&r.path).is_dir() {
                return Err(ToolError::InvalidInput(format!(
                    "the root {} of repository `{}` is not a directory here any more",
                    r.path, r.repo
                )));
            }
        }
        let id = self
            .jobs
            .queue(JobStatus::queued(
                targets.iter().map(|(r, _)| r.path.clone()).collect(),
                targets
                    .iter()
                    .flat_map(|(r, v)| v.iter().map(move |p| format!("{}/{p}", r.repo)))
                    .collect(),
                rfc3339(now_ms()),
            ))
            .map_err(|pending| {
                ToolError::InvalidInput(format!(
                    "{pending} re-index jobs are queued or running already (at most \
                     {MAX_PENDING_JOBS}); wait for them (`job_status`) and call `reindex` again"
                ))
            })?;
        if !unmatched.is_empty() {
            self.jobs.update(id, |j| j.notes.extend(unmatched));
        }
        let engine = Arc::clone(self);
        std::thread::Builder::new()
            .name(format!("queryd-reindex-{id}"))
            .spawn(move || engine.run_job(id, roots, targets))
            .map_err(|e| {
                let error = format!("cannot start the job: {e}");
                self.jobs.update(id, |j| {
                    j.state = "failed".into();
                    j.error = Some(error.clone());
                });
                ToolError::Internal(error)
            })?;
        let queued = t0.elapsed();
        // Queued and running jobs are never dropped from the table, so the job is there.
        let job = if a.wait {
            self.jobs.wait(id, MAX_WAIT)
        } else {
            self.jobs.get(id)
        }
        .ok_or_else(|| ToolError::Internal(format!("job {id} is missing from the job table")))?;
        let debug = a.debug.then(|| Debug {
            other_ms: ms(queued),
            total_ms: ms(t0.elapsed()),
            generation: self.snapshot().generation(),
            ..Debug::default()
        });
        Ok(ReindexAnswer { job, debug })
    }

    /// One build of every recorded root that is still a directory here, each walked as it
    /// was built, so calls and imports resolve across all of them (the graph of a file in one
    /// repository can use another's definitions) and unchanged files whose edges moved are
    /// relinked (in any root); `only` limits re-indexed and deleted files to the targets. A
    /// root that is gone and not targeted is left out (its files keep their indexed content;
    /// the notes say so); a target that is gone fails the job.
    fn job_options(
        &self,
        roots: &[RootEntry],
        targets: Vec<(RootEntry, Vec<String>)>,
    ) -> Result<(BuildOptions, Vec<String>), String> {
        let mut notes = Vec::new();
        let mut walked = Vec::new();
        for r in roots {
            if Path::new(&r.path).is_dir() {
                walked.push(r.clone());
            } else if targets.iter().any(|(t, _)| t.repo == r.repo) {
                // Gone since the job was queued.
                return Err(format!(
                    "the root {} of repository `{}` is not a directory here any more",
                    r.path, r.repo
                ));
            } else {
                notes.push(format!(
                    "the root {} of repository `{}` is not a directory here any more: its \
                     files keep their indexed content and were not read",
                    r.path, r.repo
                ));
            }
        }
        let mut opts = BuildOptions::recorded(&walked, self.dir().into());
        let whole = |r: &RootEntry| {
            targets
                .iter()
                .any(|(t, p)| t.repo == r.repo && p.is_empty())
        };
        if !walked.iter().all(whole) {
            opts.only = Some(
                targets
                    .into_iter()
                    .flat_map(|(r, prefixes)| {
                        let repo = r.repo;
                        let prefixes = if prefixes.is_empty() {
                            vec![String::new()]
                        } else {
                            prefixes
                        };
                        prefixes.into_iter().map(move |p| (repo.clone(), p))
                    })
                    .collect(),
            );
        }
        Ok((opts, notes))
    }

    fn run_job(&self, id: u64, roots: Vec<RootEntry>, targets: Vec<(RootEntry, Vec<String>)>) {
        let _one = self.jobs.run.lock().unwrap_or_else(|e| e.into_inner());
        let t0 = Instant::now();
        self.jobs.update(id, |j| {
            j.state = "running".into();
            j.started_at = Some(rfc3339(now_ms()));
        });
        // The builds' parallel phases run on a pool of their own: on rayon's global pool a
        // search's work handed in from outside (its two rankings side by side, its segments
        // in parallel) would wait behind a build's queued jobs until a parallel phase drained.
        // One pool per job; without one, the global pool.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(rayon::current_num_threads())
            .thread_name(move |i| format!("queryd-reindex-{id}-{i}"))
            .build();
        // The roots as MANIFEST records them now (a build may have added one since the job
        // was queued); those of the queue-time snapshot if it cannot be read (the build then
        // says why).
        let roots = format::IndexManifest::read(self.dir())
            .map(|m| m.roots)
            .unwrap_or(roots);
        // Where the job's targets lie on disk: its warnings are those about files there (the
        // build walks every root).
        let scopes: Vec<String> = (targets.iter())
            .flat_map(|(r, ps)| {
                if ps.is_empty() {
                    vec![r.path.clone()]
                } else {
                    ps.iter().map(|p| format!("{}/{p}", r.path)).collect()
                }
            })
            .collect();
        let mut error = None;
        match self.job_options(&roots, targets) {
            Err(e) => error = Some(e),
            Ok((opts, notes)) => {
                self.jobs.update(id, |j| j.notes.extend(notes));
                let run = || {
                    build(
                        &opts,
                        self.encoder(),
                        &indexer::progress::Progress::silent(),
                    )
                };
                let result = match &pool {
                    Ok(p) => p.install(run),
                    Err(_) => run(),
                };
                match result {
                    Ok(r) => self.jobs.update(id, |j| {
                        j.files_seen = r.files_seen;
                        j.files_changed = r.files_changed;
                        j.files_deleted = r.files_deleted;
                        j.files_relinked = r.files_relinked;
                        j.files_cached = r.files_cached;
                        j.chunks_embedded = r.chunks_embedded;
                        j.chunks_reused = r.chunks_reused;
                        j.chunks_tombstoned = r.chunks_tombstoned;
                        j.generation = Some(r.generation);
                        j.file_errors.extend(r.errors);
                        j.skipped = (r.skipped.iter())
                            .map(|(why, n)| (why.to_string(), *n))
                            .collect();
                        let ours = (r.warnings.into_iter())
                            .filter(|w| scopes.iter().any(|s| names_under(w, s)));
                        j.warnings = crate::jobs::listed(ours.collect());
                        j.outside_root.extend(r.outside_root);
                        j.notes.extend(r.notes);
                    }),
                    Err(e) => error = Some(e.to_string()),
                }
            }
        }
        // Serve what was committed. A reload can lose a race with a memory flush (which then
        // installs the new generation itself); either way the snapshot catches up here.
        let want = self.jobs.get(id).and_then(|j| j.generation).unwrap_or(0);
        for _ in 0..20 {
            if let Err(e) = self.reload_if_changed() {
                error.get_or_insert(format!("the new generation could not be loaded: {e}"));
                break;
            }
            if self.snapshot().generation() >= want {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Eager staleness: memories linked to code are re-checked against the files now.
        if error.is_none() {
            let args = crate::tools::code_links::CheckStalenessArgs {
                ids: None,
                changed_files: None,
                debug: false,
            };
            match self.check_staleness(&args) {
                Ok(r) => self.jobs.update(id, |j| {
                    j.refs_checked = r.checked;
                    j.refs_stale = r.stale;
                    j.refs_relocated = r.relocated;
                    j.memories_updated = r.updated;
                    j.file_errors.extend(r.errors);
                }),
                Err(e) => self.jobs.update(id, |j| {
                    j.file_errors.push(format!("staleness check: {e}"));
                }),
            }
        }
        let elapsed = ms(t0.elapsed());
        self.jobs.update(id, |j| {
            j.state = if error.is_some() { "failed" } else { "done" }.into();
            j.error = error;
            j.finished_at = Some(rfc3339(now_ms()));
            j.elapsed_ms = Some(elapsed);
        });
    }

    pub fn job_status(&self, a: &JobStatusArgs) -> ToolResult<JobStatusAnswer> {
        let t0 = Instant::now();
        let t = self.jobs.table.lock().unwrap_or_else(|e| e.into_inner());
        let jobs: Vec<JobStatus> = match a.job_id {
            Some(id) => vec![t
                .1
                .iter()
                .find(|j| j.job_id == id)
                .cloned()
                .ok_or_else(|| ToolError::NotFound {
                    message: format!(
                        "no job {id}; this server keeps every queued or running job and its last \
                         {KEEP_JOBS} finished ones until it restarts"
                    ),
                    suggestions: vec!["job_status without job_id".into()],
                })?],
            None => t.1.iter().rev().take(20).cloned().collect(),
        };
        drop(t);
        let debug = a.debug.then(|| {
            let took = ms(t0.elapsed());
            Debug {
                other_ms: took,
                total_ms: took,
                generation: self.snapshot().generation(),
                ..Debug::default()
            }
        });
        Ok(JobStatusAnswer { jobs, debug })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_confined_to_roots() {
        let d = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(d.path()).unwrap();
        let app = base.join("app");
        let old = base.join("app-old");
        std::fs::create_dir_all(app.join("src")).unwrap();
        std::fs::create_dir_all(&old).unwrap();
        std::fs::write(app.join("src/a.rs"), "fn a() {}").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(&old, app.join("out")).unwrap();
        let roots = vec![RootEntry {
            repo: "app".into(),
            path: app.to_string_lossy().into_owned(),
            ..RootEntry::default()
        }];
        let ok = |p: &str| resolve(&roots, p).map(|(_, r)| r);
        assert_eq!(ok("src/a.rs").unwrap(), "src/a.rs");
        assert_eq!(ok("./src/").unwrap(), "src");
        assert_eq!(
            ok(app.join("src/a.rs").to_str().unwrap()).unwrap(),
            "src/a.rs"
        );
        assert_eq!(ok(app.to_str().unwrap()).unwrap(), "");
        // A deleted file is still a path under the root.
        assert_eq!(
            ok(app.join("src/gone.rs").to_str().unwrap()).unwrap(),
            "src/gone.rs"
        );
        for bad in [
            "../app-old/x.rs".to_string(),
            old.join("x.rs").to_string_lossy().into_owned(),
            "/etc/passwd".into(),
            String::new(),
        ] {
            assert!(ok(&bad).is_err(), "{bad}");
        }
        #[cfg(unix)]
        assert!(ok("out").unwrap_err().to_string().contains("outside"));
    }
}
