//! Segment sync: moves an index between its directory and object storage, so CI builds it once
//! and every machine pulls only what it lacks.
//!
//! The remote layout under a URL's prefix (every key but `latest` is written once):
//!
//! ```text
//! segments/seg-<id>/<file>      a segment's files; segment.json (<id>: the first 24 hex digits of its blake3) last: the seal
//! tombstones/<blake3>.del       tombstone bitmaps, named by content
//! manifests/<generation>.json   one per push, created with a create-if-absent put (the commit)
//! latest                        {"generation": N}: a hint, moved forward only
//! ```
//!
//! Guarantees (see `push`, `pull`, `gc`):
//! - A manifest names only sealed segments: every file is uploaded before its segment's seal and
//!   every seal before the manifest, so a reader never sees half a push.
//! - Exactly one pusher wins a generation: the manifest put is conditional (`If-None-Match: *`);
//!   a refused or unclear put is decided by reading the manifest back and comparing bytes. Stores
//!   that ignore the condition are refused (probed once per push).
//! - A pull verifies the size and blake3 of every file while streaming it, checks each segment's
//!   structure ([`format::Segment::open`]), and only then swaps `MANIFEST` under the directory
//!   lock; any failure leaves the local index as it was, and a rerun resumes from what was
//!   already verified. A pull keeps every local memory.

mod floor;
mod gc;
mod layout;
mod orphan;
mod pull;
mod push;
mod remote;

use std::path::PathBuf;

pub use gc::{gc_remote, GcOptions, GcReport};
pub use layout::{RemoteManifest, REMOTE_FORMAT};
pub use pull::{pull, Follower, PullOptions, PullReport};
pub use push::{push, PendingPush, PushOptions, PushReport};
pub use remote::{Remote, Stats};

/// Everything that can go wrong moving segments.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("{url}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("{url}: {op} {key}: {source}")]
    Store {
        url: String,
        op: &'static str,
        key: String,
        #[source]
        source: Box<object_store::Error>,
    },
    #[error("{key}: {reason}")]
    Corrupt { key: String, reason: String },
    #[error(
        "another push committed generation {generation} of {url} first; nothing of this push is \
         visible (its uploaded segments are reused by the next push): rerun the push"
    )]
    Conflict { url: String, generation: u64 },
    #[error(
        "{url}: the store ignored a create-if-absent put (If-None-Match: *) and overwrote an \
         object; refusing to push, since two pushers could overwrite each other's commit. Use a \
         store with conditional writes (AWS S3, GCS, Azure, MinIO, R2, file://)"
    )]
    NoConditionalWrites { url: String },
    #[error(
        "{url}: its newest generation is {found}, older than generation {pulled} that the last \
         pull into {} installed from it (the store was rolled back, or its newer manifests \
         deleted); nothing was changed. To install it anyway: `indexer pull {url} --out {} \
         --allow-older`",
        dir.display(),
        dir.display()
    )]
    Rollback {
        url: String,
        dir: std::path::PathBuf,
        found: u64,
        pulled: u64,
    },
    #[error("{url}: no index has been pushed there (no manifests/ generation)")]
    Empty { url: String },
    #[error("{url}: {what}")]
    Unsupported { url: String, what: String },
    #[error("{0}")]
    Mismatch(String),
    #[error("{path}: another pull into this index is running")]
    Busy { path: PathBuf },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Format(#[from] format::FormatError),
    #[error("stopped after {0} objects (test hook)")]
    Stopped(u64),
}

pub type Result<T> = std::result::Result<T, SyncError>;

pub(crate) fn io_err(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> SyncError + '_ {
    move |source| SyncError::Io {
        path: path.to_path_buf(),
        source,
    }
}
