//! The public types of a build: its options ([`BuildOptions`]) and what it did
//! ([`BuildReport`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use format::manifest::RootEntry;

use crate::chunk::ChunkOptions;
use crate::walk;

/// Options of a build.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub roots: Vec<PathBuf>,
    pub out: PathBuf,
    /// Overrides the repository name (default: each root's directory name).
    pub repo: Option<String>,
    pub max_file_bytes: u64,
    pub chunk: ChunkOptions,
    /// Texts per embedding call (progress granularity; the encoder batches inside).
    pub embed_group: usize,
    /// Restricts what may change: (repository, repo-relative path prefix) pairs. Files
    /// outside every prefix keep their indexed version (neither re-indexed nor deleted), even
    /// if they changed on disk; all files are still parsed, for cross-file graph edges. `None`
    /// (the default) re-indexes every changed file of the roots.
    pub only: Option<Vec<(String, String)>>,
    /// Which symlinks the walk follows: by default only those resolving inside their root.
    pub symlinks: walk::Symlinks,
    /// Which ignore rules and hidden files the walk respects (default: all of them).
    pub rules: walk::Rules,
}

impl BuildOptions {
    /// Walks the roots with the rules MANIFEST records for `root` (what `manifest_roots`
    /// wrote when it was built), so a re-index neither drops nor adds files.
    pub fn walk_as_recorded(&mut self, root: &RootEntry) {
        self.rules = walk::Rules {
            no_ignore: root.no_ignore,
            hidden: root.hidden,
        };
        self.symlinks = if root.follow_external_symlinks {
            walk::Symlinks::FollowExternal
        } else {
            walk::Symlinks::Confined
        };
    }

    /// Whether `only` lets file `rel` of `repo` change.
    pub fn in_scope(&self, repo: &str, rel: &str) -> bool {
        self.only.as_ref().is_none_or(|o| {
            o.iter().any(|(r, p)| {
                r == repo
                    && (p.is_empty()
                        || rel == p
                        || rel
                            .strip_prefix(p.as_str())
                            .is_some_and(|rest| rest.starts_with('/')))
            })
        })
    }
}

impl BuildOptions {
    pub fn new(roots: Vec<PathBuf>, out: PathBuf) -> BuildOptions {
        BuildOptions {
            roots,
            out,
            repo: None,
            max_file_bytes: walk::DEFAULT_MAX_FILE_BYTES,
            chunk: ChunkOptions::default(),
            embed_group: 256,
            only: None,
            symlinks: walk::Symlinks::Confined,
            rules: walk::Rules::default(),
        }
    }
}

/// What a build did; printed as the summary and used by tests.
#[derive(Debug, Default, Clone)]
pub struct BuildReport {
    pub files_seen: usize,
    pub files_indexed: usize,
    pub files_changed: usize,
    pub files_unchanged: usize,
    pub files_deleted: usize,
    pub source_bytes: u64,
    pub skipped: BTreeMap<&'static str, usize>,
    /// Problems that stop a file from being indexed (unreadable files, walk errors).
    pub errors: Vec<String>,
    /// Files left out for a reason worth telling (invalid UTF-8).
    pub warnings: Vec<String>,
    /// Symlinks (or files read through one) left out because they resolve outside their root:
    /// the link, where it leads, and the root.
    pub outside_root: Vec<String>,
    /// What the build did besides indexing (memories adopted into a new MANIFEST).
    pub notes: Vec<String>,
    pub parse_error_files: usize,
    pub chunks_written: usize,
    pub chunks_embedded: usize,
    pub chunks_reused: usize,
    pub tokens_embedded: usize,
    pub chunks_tombstoned: u64,
    pub edges: BTreeMap<&'static str, usize>,
    pub segment_id: Option<String>,
    pub generation: u64,
    pub live_chunks: u64,
    pub timings: Vec<(&'static str, Duration)>,
}

impl BuildReport {
    pub fn time_of(&self, phase: &str) -> Duration {
        self.timings
            .iter()
            .filter(|t| t.0 == phase)
            .map(|t| t.1)
            .sum()
    }
}
