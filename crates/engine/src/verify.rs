//! The verifier and the checks on tool answers (see [`crate::integrity`] for what is
//! promised): one verifier pass, quarantine of damaged code segments, caught panics and text
//! that is not UTF-8.

use std::sync::{Arc, Weak};
use std::time::Duration;

use format::{DamagedSegment, Index, OpenOptions};
use serde_json::Value;

use crate::engine::Engine;
use crate::integrity::{fix_str, fix_utf8, stamp, Problem};
use crate::snapshot::Snapshot;
use crate::tools::common::ToolError;

impl Engine {
    /// Problems to report besides the left-out segments of the served index.
    pub fn problems(&self) -> Vec<Problem> {
        let s = self.integrity.lock();
        s.problems.iter().chain(&s.log_reading).cloned().collect()
    }

    /// Records a panic caught in tool `tool` and asks for a full re-verify.
    pub(crate) fn record_panic(&self, tool: &str, message: &str) {
        eprintln!("queryd: tool `{tool}` panicked: {message}; re-verifying the index");
        self.integrity.report(
            "panic",
            None,
            format!("`{tool}` failed with an internal error: {message}"),
        );
        self.integrity.reverify_all();
    }

    /// Replaces strings that are not valid UTF-8 in a tool's answer (segment bytes changed
    /// under the live map) and reports it. Returns how many were replaced.
    pub(crate) fn sanitize_text(&self, tool: &str, v: &mut Value) -> usize {
        let n = fix_utf8(v);
        self.text_replaced(tool, n);
        n
    }

    /// [`Engine::sanitize_text`] for a tool error's texts.
    /// A [`ToolError::Damaged`] is reported like replaced text (the file changed or was
    /// damaged after it was opened) and asks for a full re-verify.
    pub(crate) fn sanitize_error(&self, tool: &str, mut e: ToolError) -> ToolError {
        if let ToolError::Damaged(m) = &e {
            self.text_problem(
                format!("queryd: `{tool}` read a damaged index file: {m}; re-verifying the index"),
                format!("`{tool}` read a damaged index file: {m}"),
            );
        }
        let n = match &mut e {
            ToolError::InvalidInput(m) | ToolError::Internal(m) | ToolError::Damaged(m) => {
                usize::from(fix_str(m))
            }
            ToolError::NotFound {
                message,
                suggestions,
            } => {
                usize::from(fix_str(message))
                    + suggestions
                        .iter_mut()
                        .map(|s| usize::from(fix_str(s)))
                        .sum::<usize>()
            }
        };
        self.text_replaced(tool, n);
        e
    }

    fn text_replaced(&self, tool: &str, n: usize) {
        if n > 0 {
            self.text_problem(
                format!("queryd: `{tool}` read {n} invalid UTF-8 strings from the index; re-verifying it"),
                format!("`{tool}` read text that is not valid UTF-8 from the index (replaced with U+FFFD); the index files changed after they were opened"),
            );
        }
    }

    /// Logs `log`, reports `problem` (kind `text`) in `index_status` and asks for a full
    /// re-verify: what bad text read from the index sets off.
    fn text_problem(&self, log: String, problem: String) {
        eprintln!("{log}");
        self.integrity.report("text", None, problem);
        self.integrity.reverify_all();
    }

    /// One verifier pass over the current snapshot: checksums each segment not verified yet
    /// (or whose files changed since); quarantines code segments that fail. Returns the ids of
    /// segments found damaged in this pass.
    pub fn verify_pass(&self) -> Vec<String> {
        let snap = self.snapshot();
        let mut bad = Vec::new();
        let all = snap
            .code
            .index
            .segments
            .iter()
            .map(|ls| (&ls.segment, false))
            .chain(snap.code.index.memory.iter().map(|ls| (&ls.segment, true)));
        for (seg, is_memory) in all {
            let st = stamp(seg);
            if self.integrity.lock().verified.get(seg.id()) == Some(&st) {
                continue;
            }
            // The files verified are those at the path now (which may be another directory
            // than the one opened): a quarantine holds while this one is there.
            let dir = format::segment::dir_identity(seg.dir());
            let problems = seg.verify();
            if !seg.dir().is_dir() {
                // The directory is gone (garbage collection of a generation no longer named):
                // nothing on disk to quarantine or to call damaged; the next pass looks again.
                continue;
            }
            if problems.is_empty() {
                self.integrity
                    .lock()
                    .verified
                    .insert(seg.id().to_string(), st);
                continue;
            }
            let path = problems[0]
                .path()
                .map_or_else(|| seg.dir().to_path_buf(), |p| p.to_path_buf());
            // One clause per file, without the per-error hint (said once below).
            let error = problems
                .iter()
                .map(|p| match p {
                    format::FormatError::Corrupt { path, detail } => format!(
                        "{}: {detail}",
                        path.file_name().unwrap_or_default().to_string_lossy()
                    ),
                    other => other.to_string(),
                })
                .collect::<Vec<_>>()
                .join("; ");
            bad.push(seg.id().to_string());
            if is_memory {
                eprintln!("queryd: memory segment {} is damaged: {error}", seg.id());
                self.integrity.report(
                    "memory_segment",
                    Some(path.display().to_string()),
                    format!("memory segment {} failed its checksum ({error}); its memories are still served from the mapped bytes; export them now (`queryd export`) and keep a copy of the index directory", seg.id()),
                );
                // Reported once per change of its files.
                self.integrity
                    .lock()
                    .verified
                    .insert(seg.id().to_string(), st);
            } else {
                eprintln!(
                    "queryd: code segment {} is damaged, no longer served: {error}",
                    seg.id()
                );
                self.integrity.quarantine(
                    seg.id(),
                    DamagedSegment {
                        dir,
                        id: seg.id().to_string(),
                        path,
                        error: format!(
                            "failed its checksum after open ({error}); rebuild the code with \
                             `indexer build --rebuild` on the same roots (memories are kept), \
                             or, for an index pulled from a store, move the segment's directory \
                             aside and `indexer pull` again; queryd serves the new copy once \
                             the index changes"
                        ),
                    },
                );
            }
        }
        if bad
            .iter()
            .any(|id| self.integrity.lock().quarantine.contains_key(id))
        {
            if let Err(e) = self.reopen_with_quarantine(&snap) {
                eprintln!("queryd: could not leave out the damaged segments: {e}");
            }
        }
        bad
    }

    /// Re-opens the served generation without the quarantined code segments and installs it,
    /// keeping the memory delta.
    fn reopen_with_quarantine(&self, cur: &Arc<Snapshot>) -> Result<(), format::FormatError> {
        let options = OpenOptions {
            lenient: true,
            quarantine: self.integrity.quarantined(),
            ..OpenOptions::default()
        };
        let index: Index = Index::open_with(self.dir(), Some(&cur.code.index), options)?;
        self.install_index(cur, index, cur.manifest_mtime);
        Ok(())
    }

    /// Starts the verifier thread (see the module doc).
    pub fn spawn_verifier(self: &Arc<Self>, interval: Duration) -> std::thread::JoinHandle<()> {
        let weak: Weak<Engine> = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("queryd-verify".into())
            .spawn(move || loop {
                {
                    let Some(e) = weak.upgrade() else { return };
                    e.verify_pass();
                }
                std::thread::sleep(interval);
            })
            .expect("spawn the index verifier")
    }
}
