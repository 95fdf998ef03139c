//! Integrity of what is served (the state; the verifier and the checks on answers are in
//! [`crate::verify`]): damaged segments, panics and bad text never take the server
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
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use format::{DamagedSegment, Segment};
use serde::Serialize;
use serde_json::Value;

/// How often the verifier looks for new or changed segment files.
pub const VERIFY_INTERVAL: Duration = Duration::from_secs(2);

/// Something `index_status` reports as wrong.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct Problem {
    /// `segment` (a damaged or quarantined segment), `memory_segment`, `memory_log` (a tail
    /// cut at open that may have held acknowledged writes, or, on a server reading the log
    /// another one holds, memories of it not served there), `panic` or `text`.
    pub kind: String,
    /// The file at fault, when one is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    pub detail: String,
    /// Seconds since the Unix epoch.
    pub at_unix: u64,
}

/// (size, mtime) of each file of a segment when it was last verified.
pub(crate) type Stamp = Vec<(PathBuf, u64, Option<SystemTime>)>;

#[derive(Default)]
pub(crate) struct Integrity {
    state: Mutex<State>,
}

#[derive(Default)]
pub(crate) struct State {
    /// Segment id → file stamps at its last good verify.
    pub(crate) verified: HashMap<String, Stamp>,
    /// Code segments left out after a failed verify.
    pub(crate) quarantine: BTreeMap<String, DamagedSegment>,
    /// Problems other than left-out code segments (those come from the served index), newest
    /// last, bounded.
    pub(crate) problems: Vec<Problem>,
    /// On a server reading the log another one holds: what it cannot serve from it now (kind
    /// `memory_log`), replaced or cleared by every read of the log, so it lasts only while true.
    pub(crate) log_reading: Option<Problem>,
}

const MAX_PROBLEMS: usize = 32;

pub(crate) fn stamp(seg: &Segment) -> Stamp {
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
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets (or with `None` clears) what a server reading another's log cannot serve from it
    /// ([`State::log_reading`]); an unchanged text keeps its first time.
    pub(crate) fn set_log_reading(&self, path: String, detail: Option<String>) {
        let mut s = self.lock();
        if s.log_reading.as_ref().map(|p| &p.detail) == detail.as_ref() {
            return;
        }
        s.log_reading = detail.map(|d| problem("memory_log", Some(path), d));
    }

    pub(crate) fn report(&self, kind: &str, path: Option<String>, detail: String) {
        let mut s = self.lock();
        let p = problem(kind, path, detail);
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

    /// Leaves out code segment `id` from now on, for `damage` (whose `dir` is the directory
    /// the damage was found in: the quarantine lasts while it is the one at the path).
    pub(crate) fn quarantine(&self, id: &str, damage: DamagedSegment) {
        self.lock().quarantine.insert(id.to_string(), damage);
    }

    /// Drops the quarantine of every segment whose directory under `index_dir` is no longer
    /// the damaged one (`indexer pull` fetched it again after it was moved aside, or a rebuild
    /// wrote it again after garbage collection removed it), and forgets its verify: the next
    /// open maps the new files ([`format::Index::open_with`] skips such entries anyway) and
    /// the verifier checksums them. Returns the ids.
    pub(crate) fn lift_replaced(&self, index_dir: &Path) -> Vec<String> {
        let mut s = self.lock();
        let lifted: Vec<String> = s
            .quarantine
            .iter()
            .filter(|(id, d)| {
                format::segment::dir_replaced(&index_dir.join(format::segment::dir_name(id)), d.dir)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in &lifted {
            s.quarantine.remove(id);
            s.verified.remove(id);
        }
        lifted
    }
}

fn problem(kind: &str, path: Option<String>, detail: String) -> Problem {
    Problem {
        kind: kind.to_string(),
        path,
        detail,
        at_unix: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
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
pub(crate) fn fix_str(s: &mut String) -> bool {
    if bad(s) {
        *s = lossy(s);
        true
    } else {
        false
    }
}

/// Replaces every string in `v` (keys too) that is not valid UTF-8 with its lossy form.
pub(crate) fn fix_utf8(v: &mut Value) -> usize {
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
