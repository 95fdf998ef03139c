//! Integrity of what is served: damaged segments, panics and bad text never take the server
//! down, and `index_status` says what is wrong.
//!
//! - A code segment that fails to open is left out ([`format::OpenOptions::lenient`]); the
//!   server serves memories and the healthy segments.
//! - The verifier thread ([`Engine::spawn_verifier`]) checksums every segment once after it is
//!   first served, and again whenever one of its files changes size or modification time (a
//!   segment is immutable, so any change is damage) or a tool panicked. A code segment whose
//!   checksums fail is quarantined: the snapshot is rebuilt without it. A damaged memory
//!   segment is reported (never left out: that would hide memories).
//! - A panic inside a tool becomes a tool error ([`crate::catalog::call`]) and triggers a full
//!   re-verify; text that is not valid UTF-8 (bytes changed under the live map after the
//!   open-time validation) is replaced before it reaches JSON, and reported.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use format::{DamagedSegment, Index, OpenOptions, Segment};
use serde::Serialize;
use serde_json::Value;

use crate::engine::{unix_secs, Engine};
use crate::snapshot::Snapshot;
use crate::tools::common::ToolError;

/// How often the verifier looks for new or changed segment files.
pub const VERIFY_INTERVAL: Duration = Duration::from_secs(2);

/// Something `index_status` reports as wrong.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct Problem {
    /// `segment` (a damaged or quarantined segment), `memory_segment`, `panic` or `text`.
    pub kind: String,
    /// The file at fault, when one is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    pub detail: String,
    /// Seconds since the Unix epoch.
    pub at_unix: u64,
}

/// (size, mtime) of each file of a segment when it was last verified.
type Stamp = Vec<(PathBuf, u64, Option<SystemTime>)>;

#[derive(Default)]
pub(crate) struct Integrity {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Segment id → file stamps at its last good verify.
    verified: HashMap<String, Stamp>,
    /// Code segments left out after a failed verify.
    quarantine: BTreeMap<String, DamagedSegment>,
    /// Problems other than left-out code segments (those come from the served index), newest
    /// last, bounded.
    problems: Vec<Problem>,
}

const MAX_PROBLEMS: usize = 32;

fn stamp(seg: &Segment) -> Stamp {
    seg.meta()
        .files
        .iter()
        .map(|f| {
            let p = seg.dir().join(&f.name);
            let m = std::fs::metadata(&p).ok();
            let len = m.as_ref().map_or(u64::MAX, |m| m.len());
            (p, len, m.and_then(|m| m.modified().ok()))
        })
        .collect()
}

impl Integrity {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn report(&self, kind: &str, path: Option<String>, detail: String) {
        let mut s = self.lock();
        let p = Problem {
            kind: kind.to_string(),
            path,
            detail,
            at_unix: unix_secs(SystemTime::now()),
        };
        if s.problems
            .iter()
            .any(|q| q.kind == p.kind && q.path == p.path && q.detail == p.detail)
        {
            return;
        }
        s.problems.push(p);
        let n = s.problems.len();
        if n > MAX_PROBLEMS {
            s.problems.drain(..n - MAX_PROBLEMS);
        }
    }

    /// Forget every verify: the next verifier pass checksums everything again.
    pub(crate) fn reverify_all(&self) {
        self.lock().verified.clear();
    }

    pub(crate) fn quarantined(&self) -> BTreeMap<String, DamagedSegment> {
        self.lock().quarantine.clone()
    }
}

impl Engine {
    /// Problems to report besides the left-out segments of the served index.
    pub fn problems(&self) -> Vec<Problem> {
        self.integrity.lock().problems.clone()
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
    pub(crate) fn sanitize_error(&self, tool: &str, mut e: ToolError) -> ToolError {
        let n = match &mut e {
            ToolError::InvalidInput(m) | ToolError::Internal(m) => usize::from(fix_str(m)),
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
            eprintln!(
                "queryd: `{tool}` read {n} invalid UTF-8 strings from the index; re-verifying it"
            );
            self.integrity.report(
                "text",
                None,
                format!("`{tool}` read text that is not valid UTF-8 from the index (replaced with U+FFFD); the index files changed after they were opened"),
            );
            self.integrity.reverify_all();
        }
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
            let problems = seg.verify();
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
                self.integrity.lock().quarantine.insert(
                    seg.id().to_string(),
                    DamagedSegment {
                        id: seg.id().to_string(),
                        path,
                        error: format!(
                            "failed its checksum after open ({error}); rebuild the code with \
                             `indexer build --rebuild` on the same roots (memories are kept)"
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

/// True when the bytes of `s` are not UTF-8 (possible only when they were read from a map
/// that changed after validation).
fn bad(s: &str) -> bool {
    std::str::from_utf8(s.as_bytes()).is_err()
}

fn lossy(s: &str) -> String {
    String::from_utf8_lossy(s.as_bytes()).into_owned()
}

/// Replaces `s` with its lossy form when it is not UTF-8; returns whether it did.
fn fix_str(s: &mut String) -> bool {
    if bad(s) {
        *s = lossy(s);
        true
    } else {
        false
    }
}

/// Replaces every string in `v` (keys too) that is not valid UTF-8 with its lossy form.
fn fix_utf8(v: &mut Value) -> usize {
    match v {
        Value::String(s) => usize::from(fix_str(s)),
        Value::Array(a) => a.iter_mut().map(fix_utf8).sum(),
        Value::Object(m) => {
            let mut n = 0;
            if m.keys().any(|k| bad(k)) {
                let old = std::mem::take(m);
                for (k, x) in old {
                    let k = if bad(&k) {
                        n += 1;
                        lossy(&k)
                    } else {
                        k
                    };
                    m.insert(k, x);
                }
            }
            n + m.values_mut().map(fix_utf8).sum::<usize>()
        }
        _ => 0,
    }
}
