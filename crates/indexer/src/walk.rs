//! Finding the files to index: a gitignore-aware walk (the `ignore` crate) that classifies each
//! file as indexable or skipped-with-a-reason, so the summary can say what was left out and why.
//!
//! Confinement: the walk never reads outside its root. Symlinks are followed only while their
//! target resolves inside the root (`format::roots::resolve_within`, the index's one
//! confinement rule); a link to a file or directory outside it is skipped as
//! [`SkipReason::OutsideRoot`] and named in [`WalkOutput::outside`], unless the caller asks for
//! [`Symlinks::FollowExternal`]. Reads check again, on the opened file itself, so a file swapped
//! for an outside link between the walk and the read is refused too.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use format::roots::{is_within, resolve_within, Resolution};

use crate::chunk::Language;

/// Files larger than this are skipped as "too large" unless the caller raises the limit.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Why a file was not indexed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SkipReason {
    Binary,
    TooLarge,
    Generated,
    Unsupported,
    InvalidUtf8,
    Unreadable,
    /// A symlink (or a file read through one) that resolves outside the walked root.
    OutsideRoot,
    /// A symlink whose target does not exist: nothing to read (named in the summary's
    /// warnings, not an error).
    DanglingLink,
    /// A symlink to a file or directory inside the root that the walk's rules leave out
    /// (`notes.py -> .env`): followed, it would index under the link's name what the ignore
    /// rules or the hidden-file rule keep out (named in the summary's warnings).
    LinkToExcluded,
}

/// Which symlinks the walk follows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Symlinks {
    /// Only those whose target resolves inside the root (the default).
    #[default]
    Confined,
    /// Also those leading outside the root (`indexer build --follow-external-symlinks`).
    FollowExternal,
}

/// Which ignore rules and hidden files the walk respects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rules {
    /// Also the files that `.gitignore` / `.ignore` files (in the root, below it and in its
    /// parent directories) and git's excludes leave out (`indexer build --no-ignore`).
    pub no_ignore: bool,
    /// Also hidden files and directories (`--hidden`). `.git` directories stay out.
    pub hidden: bool,
}

impl SkipReason {
    pub fn name(self) -> &'static str {
        match self {
            SkipReason::Binary => "binary",
            SkipReason::TooLarge => "too large",
            SkipReason::Generated => "generated",
            SkipReason::Unsupported => "unsupported type",
            SkipReason::InvalidUtf8 => "invalid UTF-8",
            SkipReason::Unreadable => "unreadable",
            SkipReason::OutsideRoot => "outside root",
            SkipReason::DanglingLink => "dangling symlink",
            SkipReason::LinkToExcluded => "symlink to an excluded path",
        }
    }
}

/// The warning for a symbolic link to nothing.
pub fn dangling_message(link: &Path) -> String {
    let target = std::fs::read_link(link).unwrap_or_default();
    format!(
        "{}: a symbolic link to {}, which does not exist",
        link.display(),
        target.display()
    )
}

/// The warning for a link whose target inside the root the walk leaves out: the target as
/// resolved (through every link on the way), and what lets it in.
pub fn excluded_target_message(link: &Path, target: &Path) -> String {
    let in_git = target.components().any(|c| c.as_os_str() == ".git");
    format!(
        "{}: a symbolic link to {}, {}; the link is not followed",
        link.display(),
        target.display(),
        if in_git {
            "inside a .git directory, which is never indexed"
        } else {
            "which the ignore rules or the hidden-file rule leave out (--no-ignore / --hidden \
             let it in)"
        }
    )
}

/// The link of a walk error that is a symbolic link to nothing (the walk follows links, and
/// following this one found no file): `None` for every other error.
fn dangling_link(e: &ignore::Error) -> Option<PathBuf> {
    let path = error_path(e)?;
    if e.io_error()?.kind() != std::io::ErrorKind::NotFound {
        return None;
    }
    let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    (is_link && std::fs::metadata(path).is_err()).then(|| path.to_path_buf())
}

/// The path a walk error names, through its depth and line wrappers.
fn error_path(e: &ignore::Error) -> Option<&Path> {
    match e {
        ignore::Error::WithPath { path, .. } => Some(path),
        ignore::Error::WithDepth { err, .. } | ignore::Error::WithLineNumber { err, .. } => {
            error_path(err)
        }
        _ => None,
    }
}

/// A file the walk found, with its repository-relative path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Candidate {
    pub repo: String,
    /// Repository-relative, `/`-separated.
    pub rel_path: String,
    pub abs_path: PathBuf,
    pub language: Language,
    pub size: u64,
    /// The canonical root the file must resolve inside when it is read; `None` when external
    /// symlinks are followed.
    pub confined_to: Option<PathBuf>,
    /// The most bytes read (`--max-file-bytes`): the walk's size check is repeated on the read,
    /// since the file may have grown or been swapped since.
    pub max_bytes: u64,
}

/// What the walk produced.
#[derive(Debug, Default)]
pub struct WalkOutput {
    pub candidates: Vec<Candidate>,
    /// (path, reason) of files skipped by name, type or size; content checks come later.
    pub skipped: Vec<(PathBuf, SkipReason)>,
    /// Walk errors (permission denied, symlink loops, vanished files), as messages with paths.
    pub errors: Vec<String>,
    /// Symlinks not followed because they lead outside the root, as `(link, resolved target)`.
    pub outside: Vec<(PathBuf, PathBuf)>,
    /// Symlinks not followed because their target inside the root is a place the walk leaves
    /// out, as `(link, resolved target)`.
    pub excluded_targets: Vec<(PathBuf, PathBuf)>,
}

/// Lock files and similar machine-written files that would only add noise.
const GENERATED_NAMES: &[&str] = &[
    "Cargo.lock",
    "package-lock.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "poetry.lock",
    "Gemfile.lock",
    "composer.lock",
    "go.sum",
    "uv.lock",
];
const GENERATED_SUFFIXES: &[&str] = &[
    ".min.js",
    ".min.css",
    ".map",
    ".pb.go",
    "_pb2.py",
    ".pb.cc",
    ".pb.h",
    ".generated.ts",
    ".g.dart",
    ".designer.cs",
];

/// True when a file name says the file is generated.
pub fn generated_by_name(name: &str) -> bool {
    GENERATED_NAMES.contains(&name) || GENERATED_SUFFIXES.iter().any(|s| name.ends_with(s))
}

/// True when the first bytes of a file carry a generated-code marker.
pub fn generated_by_content(head: &[u8]) -> bool {
    let head = &head[..head.len().min(1024)];
    let s = String::from_utf8_lossy(head);
    s.contains("@generated") || s.contains("DO NOT EDIT") || s.contains("Code generated by")
}

/// Repository name of a root: its directory name (after canonicalisation), `.` if none.
pub fn repo_name(root: &Path) -> String {
    let canon = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let base = if canon.is_file() {
        canon.parent().map(Path::to_path_buf).unwrap_or(canon)
    } else {
        canon
    };
    base.file_name()
        .map(|n| n.to_string_lossy().replace(' ', "_"))
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| ".".to_string())
}

/// Walks `root` (a directory or a single file), respecting .gitignore/.ignore files and hidden
/// files unless `rules` says otherwise, following symlinks as `symlinks` says (loops are
/// reported as errors, not followed). `.git` directories are never walked.
pub fn walk(
    root: &Path,
    repo: &str,
    max_file_bytes: u64,
    symlinks: Symlinks,
    rules: Rules,
) -> WalkOutput {
    let mut out = WalkOutput::default();
    let base = if root.is_file() {
        root.parent().unwrap_or(Path::new(".")).to_path_buf()
    } else {
        root.to_path_buf()
    };
    // The place every followed link must resolve inside (the root given on the command line,
    // with its own symlinks resolved: naming a root is consent to read it).
    let confined_to = match symlinks {
        Symlinks::Confined => Some(std::fs::canonicalize(&base).unwrap_or_else(|_| base.clone())),
        Symlinks::FollowExternal => None,
    };
    let outside: Arc<Mutex<Vec<(PathBuf, PathBuf)>>> = Arc::default();
    let excluded: Arc<Mutex<Vec<(PathBuf, PathBuf)>>> = Arc::default();
    let link_targets = Mutex::new(format::roots::LinkTargets::new(
        &base,
        rules.no_ignore,
        rules.hidden,
    ));
    let mut builder = format::roots::walk_builder(root, rules.no_ignore, rules.hidden);
    let limit = confined_to.clone();
    let seen_outside = Arc::clone(&outside);
    let seen_excluded = Arc::clone(&excluded);
    // Pruned here, a `.git` directory, a directory link leading outside and a link to an
    // excluded place inside the root are never descended into.
    builder.filter_entry(move |e| {
        if e.depth() == 0 {
            return true;
        }
        if e.file_name() == ".git" {
            return false;
        }
        if !e.path_is_symlink() {
            return true;
        }
        if let Some(limit) = &limit {
            match resolve_within(limit, e.path()) {
                Resolution::Outside(target) => {
                    seen_outside
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((e.path().to_path_buf(), target));
                    return false;
                }
                Resolution::Missing => return true,
                Resolution::Inside(_) => {}
            }
        }
        // The link's target is judged by the same rules as the link's name. (Files under a
        // linked directory are judged by the directory: a rule in the target's own parent
        // directories naming such a file by its full path is not applied.)
        let judged = link_targets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .admitted(e.path());
        match judged {
            Ok(()) => true,
            Err(target) => {
                seen_excluded
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((e.path().to_path_buf(), target));
                false
            }
        }
    });
    for entry in builder.build() {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                match dangling_link(&e) {
                    Some(link) => out.skipped.push((link, SkipReason::DanglingLink)),
                    None => out.errors.push(e.to_string()),
                }
                continue;
            }
        };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        let rel = match path.strip_prefix(&base) {
            Ok(r) => r,
            Err(_) => path,
        };
        if rel.to_str().is_none() {
            // Stored paths are UTF-8: two such names would map to one path (`caf\xe9.py` and
            // `caf\xe8.py` both to `caf\u{FFFD}.py`), and incremental builds would confuse
            // the files. Left out, named in the summary.
            out.skipped
                .push((path.to_path_buf(), SkipReason::InvalidUtf8));
            continue;
        }
        let rel_path = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        if generated_by_name(&name) {
            out.skipped
                .push((path.to_path_buf(), SkipReason::Generated));
            continue;
        }
        let Some(language) = Language::from_path(path) else {
            out.skipped
                .push((path.to_path_buf(), SkipReason::Unsupported));
            continue;
        };
        let size = match entry.metadata() {
            Ok(m) => m.len(),
            Err(e) => {
                out.errors.push(format!("{}: {e}", path.display()));
                out.skipped
                    .push((path.to_path_buf(), SkipReason::Unreadable));
                continue;
            }
        };
        if size > max_file_bytes {
            out.skipped.push((path.to_path_buf(), SkipReason::TooLarge));
            continue;
        }
        out.candidates.push(Candidate {
            repo: repo.to_string(),
            rel_path,
            abs_path: path.to_path_buf(),
            language,
            size,
            confined_to: confined_to.clone(),
            max_bytes: max_file_bytes,
        });
    }
    let mut outside = std::mem::take(&mut *outside.lock().unwrap_or_else(|p| p.into_inner()));
    outside.sort();
    for (link, _) in &outside {
        out.skipped.push((link.clone(), SkipReason::OutsideRoot));
    }
    out.outside = outside;
    let mut excluded = std::mem::take(&mut *excluded.lock().unwrap_or_else(|p| p.into_inner()));
    excluded.sort();
    for (link, _) in &excluded {
        out.skipped.push((link.clone(), SkipReason::LinkToExcluded));
    }
    out.excluded_targets = excluded;
    out
}

/// Why a walk of the directory `root` under `rules` found no file to index although it holds
/// some: the ignore file and pattern that excluded them (or that they are hidden), with the
/// flag that lets them in, as the build summary's `warning: skipped …` line. `None` when the
/// walk finds files, or when the other rules find nothing either.
pub fn explain_empty(
    root: &Path,
    max_file_bytes: u64,
    symlinks: Symlinks,
    rules: Rules,
) -> Option<String> {
    let found = |r: Rules| walk(root, "", max_file_bytes, symlinks, r).candidates;
    if !root.is_dir() || !found(rules).is_empty() {
        return None;
    }
    if !rules.no_ignore {
        let all = found(Rules {
            no_ignore: true,
            ..rules
        });
        if let Some(first) = all.first() {
            let why = match ignoring_rule(&first.abs_path) {
                Some((file, pattern)) => {
                    format!("excluded by `{pattern}` in {}", file.display())
                }
                None => "excluded by ignore rules (a .gitignore or .ignore file, or git's \
                         excludes)"
                    .to_string(),
            };
            return Some(format!(
                "{} (all {} indexable files): {why}; `indexer build --no-ignore` indexes them",
                root.display(),
                all.len()
            ));
        }
    }
    if !rules.hidden {
        let all = found(Rules {
            no_ignore: true,
            hidden: true,
        });
        if !all.is_empty() {
            return Some(format!(
                "{} (all {} indexable files): hidden files or inside hidden directories; \
                 `indexer build --hidden` indexes them (with --no-ignore if ignore files \
                 exclude them too)",
                root.display(),
                all.len()
            ));
        }
    }
    None
}

/// The ignore file and pattern that exclude `file` (or a directory above it), looking at
/// `.ignore` and `.gitignore` files and git's `info/exclude` from its directory up to the
/// file-system root, nearest first (a nearer whitelist, `!pattern`, ends the search).
fn ignoring_rule(file: &Path) -> Option<(PathBuf, String)> {
    use ignore::gitignore::GitignoreBuilder;
    // Absolute and resolved, so every directory above it is seen and each matcher's root is a
    // prefix of it.
    let file = std::fs::canonicalize(file).ok()?;
    let file = file.as_path();
    let mut dir = file.parent();
    while let Some(d) = dir {
        for f in [
            d.join(".ignore"),
            d.join(".gitignore"),
            d.join(".git/info/exclude"),
        ] {
            if !f.is_file() {
                continue;
            }
            let mut b = GitignoreBuilder::new(d);
            if b.add(&f).is_some() {
                continue;
            }
            let Ok(gi) = b.build() else { continue };
            match gi.matched_path_or_any_parents(file, false) {
                ignore::Match::Ignore(g) => return Some((f, g.original().to_string())),
                ignore::Match::Whitelist(_) => return None,
                ignore::Match::None => {}
            }
        }
        dir = d.parent();
    }
    None
}

/// Reads a file of at most `max` bytes, refusing it when it resolves outside `confined_to`
/// (checked on the opened file, after the open), when it is not a regular file, or when it
/// holds more than `max` bytes now. The walk skipped FIFOs, devices and large files, but the
/// path may have been swapped since: a FIFO is opened without blocking (opening one for
/// reading waits for a writer) and then refused, and a `/dev/zero` or a growing log is read
/// only up to the limit.
fn read_confined(
    path: &Path,
    confined_to: Option<&Path>,
    max: u64,
) -> Result<Vec<u8>, (SkipReason, String)> {
    let unreadable =
        |e: std::io::Error| (SkipReason::Unreadable, format!("{}: {e}", path.display()));
    let file = format::fsio::open_for_read(path).map_err(unreadable)?;
    if let Some(root) = confined_to {
        let real = format::fsio::opened_path(&file, path).map_err(unreadable)?;
        if !is_within(root, &real) {
            return Err((SkipReason::OutsideRoot, outside_message(path, &real, root)));
        }
    }
    if !file.metadata().map_err(unreadable)?.is_file() {
        return Err((
            SkipReason::Unreadable,
            format!("{}: not a regular file any more", path.display()),
        ));
    }
    format::fsio::read_at_most(&file, max)
        .map_err(unreadable)?
        .ok_or_else(|| {
            (
                SkipReason::TooLarge,
                format!("{}: more than {max} bytes when read", path.display()),
            )
        })
}

/// The summary's line for a link left out because it leads outside its root.
pub fn outside_message(link: &Path, target: &Path, root: &Path) -> String {
    format!(
        "{}: resolves to {}, outside the root {} (not read; `indexer build \
         --follow-external-symlinks` follows such links)",
        link.display(),
        target.display(),
        root.display()
    )
}

/// Reads a candidate and decides whether its content is indexable. Returns the text or why not.
/// Files resolving outside the candidate's root (a swap after the walk) are refused as
/// [`SkipReason::OutsideRoot`].
pub fn read_source(c: &Candidate) -> Result<(String, [u8; 32]), (SkipReason, String)> {
    let bytes = read_confined(&c.abs_path, c.confined_to.as_deref(), c.max_bytes)?;
    if bytes.iter().take(8192).any(|&b| b == 0) {
        return Err((SkipReason::Binary, c.abs_path.display().to_string()));
    }
    if generated_by_content(&bytes) {
        return Err((SkipReason::Generated, c.abs_path.display().to_string()));
    }
    let hash = *blake3::hash(&bytes).as_bytes();
    match String::from_utf8(bytes) {
        Ok(s) => Ok((s, hash)),
        Err(e) => Err((
            SkipReason::InvalidUtf8,
            format!(
                "{}: invalid UTF-8 at byte {}",
                c.abs_path.display(),
                e.utf8_error().valid_up_to()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_files() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        std::fs::create_dir_all(p.join("src")).unwrap();
        std::fs::write(p.join("src/a.rs"), "fn a() {}\n").unwrap();
        std::fs::write(p.join("Cargo.lock"), "x").unwrap();
        std::fs::write(p.join("blob.bin"), [0u8, 1, 2]).unwrap();
        std::fs::write(p.join("big.rs"), vec![b'a'; 2000]).unwrap();
        std::fs::write(p.join("ignored.rs"), "fn i() {}").unwrap();
        std::fs::write(p.join(".gitignore"), "ignored.rs\n").unwrap();
        std::fs::write(p.join("nul.py"), b"x = 1\0\n").unwrap();
        std::fs::write(p.join("latin.py"), b"x = '\xff'\n").unwrap();
        std::fs::write(
            p.join("gen.go"),
            "// Code generated by protoc. DO NOT EDIT.\npackage x\n",
        )
        .unwrap();
        let out = walk(p, "r", 1000, Symlinks::Confined, Rules::default());
        let names: Vec<_> = out.candidates.iter().map(|c| c.rel_path.as_str()).collect();
        assert_eq!(names, ["gen.go", "latin.py", "nul.py", "src/a.rs"]);
        assert!(out
            .skipped
            .iter()
            .any(|(f, r)| f.ends_with("Cargo.lock") && *r == SkipReason::Generated));
        assert!(out
            .skipped
            .iter()
            .any(|(f, r)| f.ends_with("big.rs") && *r == SkipReason::TooLarge));
        assert!(out
            .skipped
            .iter()
            .any(|(f, r)| f.ends_with("blob.bin") && *r == SkipReason::Unsupported));
        let reasons: Vec<_> = out
            .candidates
            .iter()
            .map(|c| read_source(c).err().map(|e| e.0))
            .collect();
        assert_eq!(
            reasons,
            [
                Some(SkipReason::Generated),
                Some(SkipReason::InvalidUtf8),
                Some(SkipReason::Binary),
                None
            ]
        );
    }

    /// A virtualenv's `.gitignore` of `*` hides the whole tree: the default walk finds
    /// nothing and says which file and pattern did it; `--no-ignore` indexes it.
    #[test]
    fn ignore_rules_and_hidden_files_are_the_callers_choice() {
        let d = tempfile::tempdir().unwrap();
        let venv = d.path().join("venv");
        std::fs::create_dir_all(venv.join("lib/pkg")).unwrap();
        std::fs::write(venv.join(".gitignore"), "# created by virtualenv\n*\n").unwrap();
        std::fs::write(venv.join("lib/pkg/mod.py"), "def f():\n    pass\n").unwrap();
        std::fs::write(venv.join("lib/pkg/util.py"), "def g():\n    pass\n").unwrap();
        let names = |o: &WalkOutput| -> Vec<String> {
            o.candidates.iter().map(|c| c.rel_path.clone()).collect()
        };
        let max = DEFAULT_MAX_FILE_BYTES;
        let (conf, def) = (Symlinks::Confined, Rules::default());
        assert!(walk(&venv, "r", max, conf, def).candidates.is_empty());
        let why = explain_empty(&venv, max, conf, def).expect("an explanation");
        assert!(
            why.contains("2 indexable files")
                && why.contains("`*`")
                && why.contains(".gitignore")
                && why.contains("--no-ignore"),
            "{why}"
        );
        let all = Rules {
            no_ignore: true,
            hidden: false,
        };
        assert_eq!(
            names(&walk(&venv, "r", max, conf, all)),
            ["lib/pkg/mod.py", "lib/pkg/util.py"]
        );
        assert_eq!(explain_empty(&venv, max, conf, all), None);

        // Hidden files and directories: only on request, and `.git` never.
        let repo = d.path().join("repo");
        std::fs::create_dir_all(repo.join(".github/scripts")).unwrap();
        std::fs::create_dir_all(repo.join(".git/hooks")).unwrap();
        std::fs::write(repo.join(".github/scripts/ci.py"), "X = 1\n").unwrap();
        std::fs::write(repo.join(".git/hooks/pre.py"), "Y = 1\n").unwrap();
        std::fs::write(repo.join(".env.py"), "Z = 1\n").unwrap();
        assert!(walk(&repo, "r", max, conf, def).candidates.is_empty());
        let why = explain_empty(&repo, max, conf, def).expect("an explanation");
        assert!(
            why.contains("2 indexable files") && why.contains("--hidden"),
            "{why}"
        );
        let hidden = Rules {
            no_ignore: false,
            hidden: true,
        };
        assert_eq!(
            names(&walk(&repo, "r", max, conf, hidden)),
            [".env.py", ".github/scripts/ci.py"]
        );
        // A nearer whitelist wins over a broader ignore.
        std::fs::write(repo.join(".gitignore"), "*.py\n").unwrap();
        std::fs::create_dir_all(repo.join("src")).unwrap();
        std::fs::write(repo.join("src/.gitignore"), "!keep.py\n").unwrap();
        std::fs::write(repo.join("src/keep.py"), "K = 1\n").unwrap();
        std::fs::write(repo.join("src/drop.py"), "D = 1\n").unwrap();
        assert_eq!(names(&walk(&repo, "r", max, conf, def)), ["src/keep.py"]);
        assert_eq!(
            ignoring_rule(&repo.join("src/drop.py")).map(|(_, p)| p),
            Some("*.py".to_string())
        );
        assert_eq!(ignoring_rule(&repo.join("src/keep.py")), None);
    }

    #[cfg(unix)]
    #[test]
    fn symlink_loop_is_an_error_not_a_hang() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("a")).unwrap();
        std::fs::write(d.path().join("a/x.py"), "def x():\n    pass\n").unwrap();
        std::os::unix::fs::symlink(d.path(), d.path().join("a/loop")).unwrap();
        let out = walk(
            d.path(),
            "r",
            DEFAULT_MAX_FILE_BYTES,
            Symlinks::Confined,
            Rules::default(),
        );
        assert_eq!(out.candidates.len(), 1);
        assert!(!out.errors.is_empty());
    }

    /// The file names the walk skipped for `reason`, sorted.
    fn skipped_names(out: &WalkOutput, reason: SkipReason) -> Vec<String> {
        let mut names: Vec<String> = out
            .skipped
            .iter()
            .filter(|(_, r)| *r == reason)
            .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// A link to nothing (inside the root or not) is skipped and named, not an error; the
    /// other files are indexed.
    #[cfg(unix)]
    #[test]
    fn a_dangling_link_is_skipped_not_an_error() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("a")).unwrap();
        std::fs::write(d.path().join("a/x.py"), "def x():\n    pass\n").unwrap();
        std::os::unix::fs::symlink("gone.py", d.path().join("a/y.py")).unwrap();
        std::os::unix::fs::symlink("/nonexistent/z.so", d.path().join("a/z.so")).unwrap();
        for symlinks in [Symlinks::Confined, Symlinks::FollowExternal] {
            let out = walk(
                d.path(),
                "r",
                DEFAULT_MAX_FILE_BYTES,
                symlinks,
                Rules::default(),
            );
            assert_eq!(out.candidates.len(), 1, "{symlinks:?}");
            assert!(out.errors.is_empty(), "{:?}", out.errors);
            assert_eq!(
                skipped_names(&out, SkipReason::DanglingLink),
                ["y.py", "z.so"],
                "{symlinks:?}"
            );
        }
    }

    /// A symlink inside the root is judged by its target's place too: a link to a hidden
    /// file, into an ignored directory, or to a hidden directory is skipped and named, in
    /// either symlink mode, until the rule that excludes the target is lifted; a link to an
    /// admitted file is followed.
    #[test]
    fn links_to_excluded_places_inside_the_root_are_not_followed() {
        use std::os::unix::fs::symlink;
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        for dir in ["src", "build", ".private"] {
            std::fs::create_dir_all(repo.join(dir)).unwrap();
        }
        std::fs::write(repo.join(".gitignore"), "build/\n").unwrap();
        std::fs::write(repo.join(".env"), "TOKEN = 'x'\n").unwrap();
        std::fs::write(repo.join("build/gen.py"), "SECRET = 1\n").unwrap();
        std::fs::write(repo.join(".private/notes.py"), "KEY = 2\n").unwrap();
        std::fs::write(repo.join("src/a.py"), "def a():\n    pass\n").unwrap();
        symlink(".env", repo.join("settings.py")).unwrap();
        symlink("build/gen.py", repo.join("gen.py")).unwrap();
        symlink(".private", repo.join("docs")).unwrap();
        symlink("src/a.py", repo.join("alias.py")).unwrap();
        // Judged by the place a chain of links ends at; `.git` is never let in.
        symlink("settings.py", repo.join("chain.py")).unwrap();
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::write(repo.join(".git/config.py"), "[core]\n").unwrap();
        symlink(".git/config.py", repo.join("gitcfg.py")).unwrap();
        let names = |out: &WalkOutput| -> Vec<String> {
            out.candidates.iter().map(|c| c.rel_path.clone()).collect()
        };
        for symlinks in [Symlinks::Confined, Symlinks::FollowExternal] {
            let out = walk(
                &repo,
                "r",
                DEFAULT_MAX_FILE_BYTES,
                symlinks,
                Rules::default(),
            );
            assert_eq!(names(&out), ["alias.py", "src/a.py"], "{symlinks:?}");
            assert_eq!(
                skipped_names(&out, SkipReason::LinkToExcluded),
                ["chain.py", "docs", "gen.py", "gitcfg.py", "settings.py"],
                "{symlinks:?}"
            );
            let canon = std::fs::canonicalize(&repo).unwrap();
            assert_eq!(out.excluded_targets[0].1, canon.join(".env"));
            let msg =
                excluded_target_message(&out.excluded_targets[0].0, &out.excluded_targets[0].1);
            assert!(msg.contains(".env") && msg.contains("--hidden"), "{msg}");
            let msg =
                excluded_target_message(&out.excluded_targets[3].0, &out.excluded_targets[3].1);
            assert!(msg.contains("never indexed"), "{msg}");
        }
        let out = walk(
            &repo,
            "r",
            DEFAULT_MAX_FILE_BYTES,
            Symlinks::Confined,
            Rules {
                no_ignore: true,
                hidden: false,
            },
        );
        assert_eq!(
            names(&out),
            ["alias.py", "build/gen.py", "gen.py", "src/a.py"]
        );
        let all = Rules {
            no_ignore: true,
            hidden: true,
        };
        let out = walk(&repo, "r", DEFAULT_MAX_FILE_BYTES, Symlinks::Confined, all);
        assert_eq!(
            skipped_names(&out, SkipReason::LinkToExcluded),
            ["gitcfg.py"]
        );
        let out = walk(
            &repo,
            "r",
            DEFAULT_MAX_FILE_BYTES,
            Symlinks::Confined,
            Rules {
                no_ignore: false,
                hidden: true,
            },
        );
        assert_eq!(
            names(&out),
            [
                ".env",
                ".gitignore",
                ".private/notes.py",
                "alias.py",
                "chain.py",
                "docs/notes.py",
                "settings.py",
                "src/a.py"
            ]
        );
        assert_eq!(
            skipped_names(&out, SkipReason::LinkToExcluded),
            ["gen.py", "gitcfg.py"]
        );
    }

    /// Links leading outside the root (to a file, to a directory) are skipped as
    /// `OutsideRoot` and named; links inside it are followed; `FollowExternal` follows all.
    #[cfg(unix)]
    #[test]
    fn symlinks_outside_the_root_are_not_followed() {
        use std::os::unix::fs::symlink;
        let d = tempfile::tempdir().unwrap();
        let outside = d.path().join("outside");
        let repo = d.path().join("repo");
        std::fs::create_dir_all(outside.join("lib")).unwrap();
        std::fs::create_dir_all(repo.join("src")).unwrap();
        std::fs::write(outside.join("secret.py"), "TOKEN = 'x'\n").unwrap();
        std::fs::write(outside.join("lib/util.py"), "def u():\n    pass\n").unwrap();
        std::fs::write(repo.join("src/a.py"), "def a():\n    pass\n").unwrap();
        symlink(outside.join("secret.py"), repo.join("leak.py")).unwrap();
        symlink(outside.join("lib"), repo.join("vendored")).unwrap();
        symlink(repo.join("src/a.py"), repo.join("alias.py")).unwrap();
        symlink(repo.join("src"), repo.join("src2")).unwrap();

        let out = walk(
            &repo,
            "r",
            DEFAULT_MAX_FILE_BYTES,
            Symlinks::Confined,
            Rules::default(),
        );
        let names: Vec<_> = out.candidates.iter().map(|c| c.rel_path.as_str()).collect();
        assert_eq!(names, ["alias.py", "src/a.py", "src2/a.py"]);
        assert_eq!(
            skipped_names(&out, SkipReason::OutsideRoot),
            ["leak.py", "vendored"]
        );
        let targets: Vec<_> = out.outside.iter().map(|(_, t)| t.clone()).collect();
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap();
        assert_eq!(
            targets,
            [
                canon(&outside.join("secret.py")),
                canon(&outside.join("lib"))
            ]
        );
        for c in &out.candidates {
            assert!(read_source(c).is_ok(), "{}", c.rel_path);
        }

        let out = walk(
            &repo,
            "r",
            DEFAULT_MAX_FILE_BYTES,
            Symlinks::FollowExternal,
            Rules::default(),
        );
        let names: Vec<_> = out.candidates.iter().map(|c| c.rel_path.as_str()).collect();
        assert_eq!(
            names,
            [
                "alias.py",
                "leak.py",
                "src/a.py",
                "src2/a.py",
                "vendored/util.py"
            ]
        );
        assert!(out.outside.is_empty());
        assert!(out.candidates.iter().all(|c| read_source(c).is_ok()));
    }

    /// A file replaced by a link to outside the root after the walk is refused when read.
    #[cfg(unix)]
    #[test]
    fn a_file_swapped_for_an_outside_link_is_refused_at_read() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        std::fs::write(d.path().join("secret.py"), "TOKEN = 'x'\n").unwrap();
        std::fs::write(repo.join("a.py"), "def a():\n    pass\n").unwrap();
        let out = walk(
            &repo,
            "r",
            DEFAULT_MAX_FILE_BYTES,
            Symlinks::Confined,
            Rules::default(),
        );
        assert_eq!(out.candidates.len(), 1);
        std::fs::remove_file(repo.join("a.py")).unwrap();
        std::os::unix::fs::symlink(d.path().join("secret.py"), repo.join("a.py")).unwrap();
        let (reason, msg) = read_source(&out.candidates[0]).unwrap_err();
        assert_eq!(reason, SkipReason::OutsideRoot);
        assert!(msg.contains("outside the root"), "{msg}");
    }

    /// A path that is not UTF-8 is left out (two such names would become one stored path).
    #[cfg(unix)]
    #[test]
    fn paths_that_are_not_utf8_are_left_out() {
        use std::os::unix::ffi::OsStrExt;
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        for name in [&b"caf\xe9.py"[..], &b"caf\xe8.py"[..]] {
            std::fs::write(repo.join(std::ffi::OsStr::from_bytes(name)), "x = 1\n").unwrap();
        }
        std::fs::write(repo.join("ok.py"), "x = 1\n").unwrap();
        let out = walk(
            &repo,
            "r",
            DEFAULT_MAX_FILE_BYTES,
            Symlinks::Confined,
            Rules::default(),
        );
        let kept: Vec<&str> = out.candidates.iter().map(|c| c.rel_path.as_str()).collect();
        assert_eq!(kept, ["ok.py"]);
        let left_out = out
            .skipped
            .iter()
            .filter(|(_, r)| *r == SkipReason::InvalidUtf8)
            .count();
        assert_eq!(left_out, 2);
    }

    /// The walk's checks hold at read time too: a file that grew past `--max-file-bytes` is
    /// read only up to the limit and refused, and one swapped for a FIFO is refused at once
    /// (opening a FIFO for reading would wait for a writer for ever).
    #[cfg(unix)]
    #[test]
    fn a_file_that_grew_or_became_a_fifo_is_refused_at_read() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        std::fs::write(repo.join("a.py"), "def a():\n    pass\n").unwrap();
        std::fs::write(repo.join("b.py"), "def b():\n    pass\n").unwrap();
        let out = walk(&repo, "r", 64, Symlinks::Confined, Rules::default());
        assert_eq!(out.candidates.len(), 2);
        std::fs::write(repo.join("a.py"), "x = 1\n".repeat(100)).unwrap();
        let (reason, msg) = read_source(&out.candidates[0]).unwrap_err();
        assert_eq!(reason, SkipReason::TooLarge, "{msg}");
        std::fs::remove_file(repo.join("b.py")).unwrap();
        let fifo =
            std::ffi::CString::new(repo.join("b.py").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let (reason, msg) = read_source(&out.candidates[1]).unwrap_err();
        assert_eq!(reason, SkipReason::Unreadable);
        assert!(msg.contains("not a regular file"), "{msg}");
    }
}
