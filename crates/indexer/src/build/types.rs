//! The public types of a build: its options ([`BuildOptions`]) and what it did
//! ([`BuildReport`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use format::manifest::RootEntry;

use crate::chunk::ChunkOptions;
use crate::walk;

/// Options of a build.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub roots: Vec<PathBuf>,
    pub out: PathBuf,
    /// Overrides the repository name of `roots` (default: each root's directory name;
    /// `walks` carry their own).
    pub repo: Option<String>,
    pub max_file_bytes: u64,
    pub chunk: ChunkOptions,
    /// Texts per embedding call (the encoder batches inside; on a GPU each call is read back
    /// before the next runs). `None`: the embedder's own (`Embedder::default_group`: 256 on
    /// the CPU, 4,096 on a GPU).
    pub embed_group: Option<usize>,
    /// Restricts what may change: (repository, repo-relative path prefix) pairs. Files
    /// outside every prefix keep their indexed content (neither re-indexed nor deleted), even
    /// if they changed on disk; all files are still read (and parsed, unless the facts cache
    /// holds their bytes' parse), for cross-file graph edges, and an
    /// unchanged file outside them whose edges now resolve elsewhere is written again with the
    /// same content ("relinked"; not while a file outside them changed). `None` (the default)
    /// re-indexes every changed file of the roots.
    pub only: Option<Vec<(String, String)>>,
    /// Which symlinks the walk follows: by default only those resolving inside their root.
    pub symlinks: walk::Symlinks,
    /// Which ignore rules and hidden files the walk respects (default: all of them).
    pub rules: walk::Rules,
    /// Bytes the build may hold besides the model and the tree-wide graph facts (chunk
    /// records, symbol names and ids, calls and imports until the graph is resolved, what
    /// declarations state): parsed text is kept up to a quarter of it (the rest is read again when its segment is written) and a segment is cut once its estimated in-memory
    /// size reaches half of it ([`DEFAULT_MEMORY_BUDGET`]; at least [`MIN_MEMORY_BUDGET`]).
    pub memory_budget: u64,
    /// How the segments' texts and raw vectors are written: through the page cache (the
    /// default) or around it (`--direct-io`: `format::fsio::StreamOut`), for a build whose
    /// output is shipped elsewhere or larger than memory.
    pub bulk_cache: format::fsio::PageCache,
    /// Roots walked with rules of their own, besides `roots` (which share `repo`, `rules` and
    /// `symlinks`): a re-index of what MANIFEST records, each root as it was built
    /// ([`BuildOptions::recorded`]).
    pub walks: Vec<RootWalk>,
    /// Read the facts a file's last parse gave from the index's facts cache (`facts.cache`)
    /// while its bytes are the same, instead of parsing it again (default). Off for
    /// `indexer build --rebuild`. Either way the build writes the cache for the next one.
    pub reuse_facts: bool,
}

/// One root as a build walks it: its directory, the repository name its files get and the
/// walk's rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootWalk {
    pub path: PathBuf,
    pub repo: String,
    pub rules: walk::Rules,
    pub symlinks: walk::Symlinks,
}

impl RootWalk {
    /// `root` walked as MANIFEST records it was (what [`RootWalk::entry`] wrote).
    pub fn recorded(root: &RootEntry) -> RootWalk {
        RootWalk {
            path: PathBuf::from(&root.path),
            repo: root.repo.clone(),
            rules: walk::Rules {
                no_ignore: root.no_ignore,
                hidden: root.hidden,
            },
            symlinks: if root.follow_external_symlinks {
                walk::Symlinks::FollowExternal
            } else {
                walk::Symlinks::Confined
            },
        }
    }

    /// The MANIFEST entry of this root (its path absolute, so a server can re-index it).
    pub fn entry(&self) -> RootEntry {
        RootEntry {
            repo: self.repo.clone(),
            path: std::fs::canonicalize(&self.path)
                .unwrap_or_else(|_| self.path.clone())
                .to_string_lossy()
                .into_owned(),
            no_ignore: self.rules.no_ignore,
            hidden: self.rules.hidden,
            follow_external_symlinks: self.symlinks == walk::Symlinks::FollowExternal,
        }
    }
}

/// `--memory-budget` by default: 1 GiB.
pub const DEFAULT_MEMORY_BUDGET: u64 = 1 << 30;
/// The smallest `--memory-budget` accepted: 1 MiB (small budgets force cuts in tests).
pub const MIN_MEMORY_BUDGET: u64 = 1 << 20;

impl BuildOptions {
    /// A build of `roots` (what MANIFEST records) into `out`, each root walked under its
    /// recorded name with its recorded rules, so a re-index neither drops nor adds files and
    /// resolves calls and imports across all of them.
    pub fn recorded(roots: &[RootEntry], out: PathBuf) -> BuildOptions {
        let mut opts = BuildOptions::new(Vec::new(), out);
        opts.walks = roots.iter().map(RootWalk::recorded).collect();
        opts
    }

    /// Every root this build walks: `roots` (named by `repo` or their directory, walked with
    /// `rules` and `symlinks`), then `walks`.
    pub fn root_walks(&self) -> Vec<RootWalk> {
        let shared = self.roots.iter().map(|r: &PathBuf| RootWalk {
            path: r.clone(),
            repo: self.repo_of(r),
            rules: self.rules,
            symlinks: self.symlinks,
        });
        shared.chain(self.walks.iter().cloned()).collect()
    }

    fn repo_of(&self, root: &Path) -> String {
        self.repo.clone().unwrap_or_else(|| walk::repo_name(root))
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
            embed_group: None,
            only: None,
            symlinks: walk::Symlinks::Confined,
            rules: walk::Rules::default(),
            memory_budget: DEFAULT_MEMORY_BUDGET,
            bulk_cache: format::fsio::PageCache::Keep,
            walks: Vec::new(),
            reuse_facts: true,
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
    /// Unchanged files written again because their calls or imports resolve differently
    /// now (a definition they use was added, removed or moved elsewhere): not counted in
    /// `files_changed`; their vectors are reused (where their chunks' texts are the indexed
    /// ones: after an upgrade that chunks differently, changed texts are embedded).
    pub files_relinked: usize,
    /// Files whose chunks, calls, imports and declarations came from the facts cache (their
    /// bytes were those of its entry) instead of a parse.
    pub files_cached: usize,
    /// The facts cache this build wrote for the next one (entries, bytes); `None` when it left
    /// the old one (every file a hit, none gone) or could not write one (a warning says why).
    pub facts_written: Option<(usize, u64)>,
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
    /// The first segment this build wrote (`None` when it wrote none).
    pub segment_id: Option<String>,
    /// Every segment this build wrote, in file order: more than one when `--memory-budget`
    /// cut the changed files into several.
    pub segment_ids: Vec<String>,
    /// Files whose text was dropped after parsing to stay within the budget and read again
    /// when their segment was written.
    pub files_reread: usize,
    /// Of [`BuildReport::files_reread`], those chunked again (there was no spill file for
    /// the texts their bytes cannot give back); the others had their texts sliced from the
    /// bytes after what the spill held of them.
    pub files_rechunked: usize,
    /// Bytes of shed texts written to the build's spill file (composed texts and the
    /// prefixes of body parts: what a file's bytes cannot give back).
    pub spilled_bytes: u64,
    /// Call sites held from the parse until the graph was resolved, and the bytes they took
    /// packed ([`crate::chunk::PackedCalls`]).
    pub calls_held: usize,
    pub calls_held_bytes: u64,
    pub generation: u64,
    pub live_chunks: u64,
    pub timings: Vec<(&'static str, Duration)>,
}

impl BuildReport {
    /// Time per phase, summed over the phase's runs (a build cut into several segments
    /// embeds and writes once per segment), in the order phases first ran.
    pub fn phase_times(&self) -> Vec<(&'static str, Duration)> {
        let mut out: Vec<(&'static str, Duration)> = Vec::new();
        for &(k, d) in &self.timings {
            match out.iter_mut().find(|(name, _)| *name == k) {
                Some(e) => e.1 += d,
                None => out.push((k, d)),
            }
        }
        out
    }

    pub fn time_of(&self, phase: &str) -> Duration {
        self.timings
            .iter()
            .filter(|t| t.0 == phase)
            .map(|t| t.1)
            .sum()
    }
}

/// Parses a `--memory-budget` size: bytes, or a number with a unit (`512MiB` and `1GiB` are
/// binary, `2GB` and `1g` decimal).
pub fn parse_budget(s: &str) -> Result<u64, String> {
    parse_size::parse_size(s.trim())
        .map_err(|e| format!("`{s}` is not a size ({e}); use e.g. 1GiB, 512MiB or 1048576"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_sizes_parse() {
        assert_eq!(parse_budget("1GiB"), Ok(1 << 30));
        assert_eq!(parse_budget("512MiB"), Ok(512 << 20));
        assert_eq!(parse_budget("1m"), Ok(1_000_000));
        assert_eq!(parse_budget("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_budget("1048576"), Ok(1 << 20));
        assert!(parse_budget("lots").unwrap_err().contains("1GiB"));
    }

    #[test]
    fn phase_times_sum_repeated_phases_in_first_order() {
        let r = BuildReport {
            timings: vec![
                ("parse", Duration::from_millis(5)),
                ("embed", Duration::from_millis(2)),
                ("write-segment", Duration::from_millis(1)),
                ("embed", Duration::from_millis(3)),
            ],
            ..BuildReport::default()
        };
        assert_eq!(
            r.phase_times(),
            vec![
                ("parse", Duration::from_millis(5)),
                ("embed", Duration::from_millis(5)),
                ("write-segment", Duration::from_millis(1)),
            ]
        );
    }
}
