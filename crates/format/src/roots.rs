//! Confinement of paths to the source roots an index records (`MANIFEST`'s `roots`): the one
//! place that decides whether a path given by an agent (a memory's code reference, a
//! `reindex` target) names a file inside an indexed root.
//!
//! A relative path may hold only normal and `.` components (never `..`, a root or a drive
//! prefix) and is taken relative to the root in which it exists (the first candidate root when
//! it exists in none: a deleted file). An absolute path, where the caller accepts one, must lie
//! inside a root, compared component by component after resolving symlinks (so
//! `/src/app-old` is not inside `/src/app`). Either way a path that exists and resolves through
//! a symlink to somewhere outside its root is refused. Callers word the errors for their tool.

use std::path::{Component, Path, PathBuf};

use crate::manifest::RootEntry;

/// A path confined to a root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confined {
    pub root: RootEntry,
    /// Repository-relative, `/`-separated; empty for the root itself.
    pub rel: String,
    /// `root.path` joined with `rel` (symlinks not resolved).
    pub full: PathBuf,
}

/// Why a path is not confined to a root.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfineError {
    #[error("the path is empty")]
    Empty,
    /// A `..`, root or prefix component in a relative path (or an absolute path where only
    /// relative ones are accepted).
    #[error("`{0}` must stay inside its root: `..` and root components are not allowed")]
    Escapes(String),
    /// Only `.` components: no file named.
    #[error("`{0}` names no file")]
    NoFile(String),
    #[error("no indexed repository `{repo}`; the index holds: {known}")]
    UnknownRepo { repo: String, known: String },
    #[error("`{path}` is not inside an indexed root ({roots})")]
    NotInRoot { path: String, roots: String },
    #[error("`{path}` resolves to {resolved}, outside the root {root}")]
    OutsideRoot {
        path: String,
        resolved: String,
        root: String,
    },
}

/// What a caller accepts.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConfineOptions<'a> {
    /// Only roots of this repository (`None` or empty: any root).
    pub repo: Option<&'a str>,
    /// Absolute paths inside a root are accepted (else they are [`ConfineError::Escapes`]).
    pub allow_absolute: bool,
    /// A path naming the root itself (`.`) is accepted (else [`ConfineError::NoFile`]).
    pub allow_root: bool,
}

/// Where a path leads once every symlink in it is resolved, relative to a root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// It exists and resolves inside the root (the canonical path).
    Inside(PathBuf),
    /// It exists and resolves outside the root (the canonical path).
    Outside(PathBuf),
    /// It does not exist (or cannot be resolved): nothing to read through it.
    Missing,
}

/// Whether `resolved` (a canonical path) lies inside `root` (canonical too), compared
/// component by component (so `/src/app-old` is not inside `/src/app`).
pub fn is_within(root: &Path, resolved: &Path) -> bool {
    resolved.starts_with(root)
}

/// Resolves every symlink of `path` and says whether it stays inside `root` (a canonical
/// path). The one check behind [`confine`], the indexer's walk (a symlink whose target is
/// outside the root is not followed) and its reads.
pub fn resolve_within(root: &Path, path: &Path) -> Resolution {
    match std::fs::canonicalize(path) {
        Ok(c) if is_within(root, &c) => Resolution::Inside(c),
        Ok(c) => Resolution::Outside(c),
        Err(_) => Resolution::Missing,
    }
}

/// `p`'s components without `.`, or `None` when one could leave the root (`..`, a root or a
/// prefix component).
pub fn clean_relative(p: &Path) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for c in p.components() {
        match c {
            Component::Normal(x) => out.push(x.to_string_lossy().into_owned()),
            Component::CurDir => {}
            _ => return None,
        }
    }
    Some(out)
}

fn joined<'a>(items: impl Iterator<Item = &'a str>) -> String {
    items.collect::<Vec<_>>().join(", ")
}

/// The walk of a root as `indexer build` does it (and `reindex`): `.gitignore`, `.ignore`,
/// git's excludes and parent directories' ignore files apply unless `no_ignore`, hidden files
/// and directories are skipped unless `hidden`, symlinks are followed, entries come sorted.
/// The caller adds its own filters (`.git` is pruned by every walk; confinement of links).
pub fn walk_builder(root: &Path, no_ignore: bool, hidden: bool) -> ignore::WalkBuilder {
    let mut builder = ignore::WalkBuilder::new(root);
    builder
        .follow_links(true)
        .require_git(false)
        .hidden(!hidden)
        .sort_by_file_path(|a, b| a.cmp(b));
    if no_ignore {
        builder
            .ignore(false)
            .git_ignore(false)
            .git_global(false)
            .git_exclude(false)
            .parents(false);
    }
    builder
}

/// Whether the walk of `root` ([`walk_builder`] with the root's recorded rules) reaches the
/// file `rel` (repository-relative): `false` for a file its ignore rules exclude, one that is
/// hidden or under a hidden or ignored directory, one inside `.git`, and one that does not
/// exist, and one that resolves through a symlink to a place inside the root that the same
/// rules leave out ([`LinkTargets`]). Only the directories on the way to the file
/// (and to its target) are read.
pub fn walk_admits(root: &RootEntry, rel: &str) -> bool {
    let base = Path::new(&root.path);
    let target = base.join(rel);
    walk_reaches(base, root.no_ignore, root.hidden, &target)
        .is_some_and(|t| t.is_file() || t.is_symlink())
        && LinkTargets::new(base, root.no_ignore, root.hidden)
            .admitted(&target)
            .is_ok()
}

/// What the walk of `base` ([`walk_builder`] with these rules) finds at `target` (a path
/// under `base`, as the walk names it), if it reaches it: only the directories on the way
/// are read.
fn walk_reaches(
    base: &Path,
    no_ignore: bool,
    hidden: bool,
    target: &Path,
) -> Option<std::fs::FileType> {
    let mut b = walk_builder(base, no_ignore, hidden);
    let chain = target.to_path_buf();
    b.filter_entry(move |e| {
        e.depth() == 0 || (e.file_name() != ".git" && chain.starts_with(e.path()))
    });
    b.build()
        .flatten()
        .find(|e| e.path() == target)
        .and_then(|e| e.file_type())
}

/// Judges a path that resolves through a symlink (its own, or a linked directory's) to
/// another place inside the root by that place too: the walk judges a link by its own name,
/// and `notes.py -> .env` or `docs -> .private/` would otherwise let in what the ignore rules,
/// the hidden-file rule or the `.git` rule keep out. What the walk admits in each target
/// directory is read once and kept, so many links into one directory cost one listing.
#[derive(Debug)]
pub struct LinkTargets {
    base: PathBuf,
    canon_base: Option<PathBuf>,
    no_ignore: bool,
    hidden: bool,
    /// Per canonical directory: the names the walk admits in it (none when it does not reach
    /// the directory).
    admitted_in: std::collections::HashMap<PathBuf, std::collections::HashSet<std::ffi::OsString>>,
}

impl LinkTargets {
    /// For the walk of `base` with these rules.
    pub fn new(base: &Path, no_ignore: bool, hidden: bool) -> LinkTargets {
        LinkTargets {
            base: base.to_path_buf(),
            canon_base: std::fs::canonicalize(base).ok(),
            no_ignore,
            hidden,
            admitted_in: Default::default(),
        }
    }

    /// `Err(target)` when `at` (a path under the base, as the walk names it) resolves to
    /// another place inside the base that the same walk leaves out; `Ok` when it resolves to
    /// itself, to a place the walk admits, outside the base (the confinement rule decides)
    /// or nowhere.
    pub fn admitted(&mut self, at: &Path) -> Result<(), PathBuf> {
        let (Some(canon_base), Ok(real)) = (&self.canon_base, std::fs::canonicalize(at)) else {
            return Ok(());
        };
        let Ok(rel) = real.strip_prefix(canon_base) else {
            return Ok(());
        };
        let as_named = at.strip_prefix(&self.base).map(|r| canon_base.join(r));
        if as_named.as_deref() == Ok(real.as_path()) || rel.as_os_str().is_empty() {
            return Ok(());
        }
        let (Some(dir), Some(name)) = (real.parent(), real.file_name()) else {
            return Ok(());
        };
        if !self.admitted_in.contains_key(dir) {
            let names = self.names_admitted_in(canon_base, dir);
            self.admitted_in.insert(dir.to_path_buf(), names);
        }
        if self.admitted_in[dir].contains(name) {
            Ok(())
        } else {
            Err(real)
        }
    }

    /// The names the walk of `canon_base` admits in `dir` (a canonical directory under it):
    /// only the directories on the way, and `dir` itself, are read.
    fn names_admitted_in(
        &self,
        canon_base: &Path,
        dir: &Path,
    ) -> std::collections::HashSet<std::ffi::OsString> {
        let Ok(rel) = dir.strip_prefix(canon_base) else {
            return Default::default();
        };
        let depth = rel.components().count();
        let mut b = walk_builder(canon_base, self.no_ignore, self.hidden);
        b.max_depth(Some(depth + 1));
        let chain = dir.to_path_buf();
        b.filter_entry(move |e| {
            e.depth() == 0
                || (e.file_name() != ".git"
                    && (chain.starts_with(e.path()) || e.path().parent() == Some(&chain)))
        });
        b.build()
            .flatten()
            .filter(|e| e.depth() == depth + 1 && e.path().parent() == Some(dir))
            .map(|e| e.file_name().to_os_string())
            .collect()
    }
}

/// Confines `path` (already trimmed by the caller as it wants) to one of `roots` (not empty).
pub fn confine(
    roots: &[RootEntry],
    path: &str,
    opts: ConfineOptions<'_>,
) -> Result<Confined, ConfineError> {
    if path.is_empty() {
        return Err(ConfineError::Empty);
    }
    let candidates: Vec<&RootEntry> = match opts.repo.filter(|r| !r.is_empty()) {
        None => roots.iter().collect(),
        Some(repo) => {
            let v: Vec<&RootEntry> = roots.iter().filter(|r| r.repo == repo).collect();
            if v.is_empty() {
                return Err(ConfineError::UnknownRepo {
                    repo: repo.to_string(),
                    known: joined(roots.iter().map(|r| r.repo.as_str())),
                });
            }
            v
        }
    };
    let raw = Path::new(path);
    if raw.is_absolute() && opts.allow_absolute {
        // Resolve symlinks of what exists (a deleted file: its parent).
        let abs = std::fs::canonicalize(raw).or_else(|_| {
            let parent = raw.parent().unwrap_or(raw);
            std::fs::canonicalize(parent).map(|d| d.join(raw.file_name().unwrap_or_default()))
        });
        let abs = abs.unwrap_or_else(|_| raw.to_path_buf());
        for r in &candidates {
            if let Ok(rest) = abs.strip_prefix(&r.path) {
                let rel = rest
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy())
                    .collect::<Vec<_>>()
                    .join("/");
                return Ok(Confined {
                    root: (*r).clone(),
                    full: Path::new(&r.path).join(rest),
                    rel,
                });
            }
        }
        return Err(ConfineError::NotInRoot {
            path: path.to_string(),
            roots: joined(candidates.iter().map(|r| r.path.as_str())),
        });
    }
    let parts = clean_relative(raw).ok_or_else(|| ConfineError::Escapes(path.to_string()))?;
    if parts.is_empty() && !opts.allow_root {
        return Err(ConfineError::NoFile(path.to_string()));
    }
    let rel = parts.join("/");
    let Some(first) = candidates.first() else {
        return Err(ConfineError::NotInRoot {
            path: path.to_string(),
            roots: String::new(),
        });
    };
    let root = candidates
        .iter()
        .find(|r| Path::new(&r.path).join(&rel).exists())
        .unwrap_or(first);
    let full = Path::new(&root.path).join(&rel);
    // A symlink inside the root that points outside it is refused.
    if let Resolution::Outside(c) = resolve_within(Path::new(&root.path), &full) {
        return Err(ConfineError::OutsideRoot {
            path: rel,
            resolved: c.display().to_string(),
            root: root.path.clone(),
        });
    }
    Ok(Confined {
        root: (*root).clone(),
        rel,
        full,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(repo: &str, path: &Path) -> RootEntry {
        RootEntry {
            repo: repo.into(),
            path: std::fs::canonicalize(path)
                .unwrap()
                .to_string_lossy()
                .into_owned(),
            ..RootEntry::default()
        }
    }

    #[test]
    fn relative_absolute_and_symlinked_paths() {
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("app");
        let b = tmp.path().join("lib");
        let old = tmp.path().join("app-old");
        for d in [&a, &b, &old] {
            std::fs::create_dir_all(d.join("src")).unwrap();
        }
        std::fs::write(b.join("src/x.rs"), "x").unwrap();
        std::fs::write(old.join("secret.rs"), "s").unwrap();
        let roots = vec![root("app", &a), root("lib", &b)];
        let rel = ConfineOptions::default();

        // Relative: the root where it exists, else the first.
        let c = confine(&roots, "./src//x.rs", rel).unwrap();
        assert_eq!((c.root.repo.as_str(), c.rel.as_str()), ("lib", "src/x.rs"));
        let c = confine(&roots, "src/gone.rs", rel).unwrap();
        assert_eq!(c.root.repo, "app");
        assert_eq!(c.full, Path::new(&roots[0].path).join("src/gone.rs"));
        // `..`, absolute (when not allowed), empty, the root itself.
        assert_eq!(
            confine(&roots, "../app-old/secret.rs", rel),
            Err(ConfineError::Escapes("../app-old/secret.rs".into()))
        );
        assert!(matches!(
            confine(&roots, "/etc/passwd", rel),
            Err(ConfineError::Escapes(_))
        ));
        assert_eq!(confine(&roots, "", rel), Err(ConfineError::Empty));
        assert!(matches!(
            confine(&roots, ".", rel),
            Err(ConfineError::NoFile(_))
        ));
        let whole = ConfineOptions {
            allow_root: true,
            allow_absolute: true,
            repo: None,
        };
        assert_eq!(confine(&roots, ".", whole).unwrap().rel, "");
        // By repository.
        let only_lib = ConfineOptions {
            repo: Some("lib"),
            ..rel
        };
        assert_eq!(
            confine(&roots, "src/gone.rs", only_lib).unwrap().root.repo,
            "lib"
        );
        assert!(matches!(
            confine(
                &roots,
                "x",
                ConfineOptions {
                    repo: Some("nope"),
                    ..rel
                }
            ),
            Err(ConfineError::UnknownRepo { .. })
        ));
        // Absolute: inside a root by components, not by string prefix.
        let inside = format!("{}/src/x.rs", roots[1].path);
        let c = confine(&roots, &inside, whole).unwrap();
        assert_eq!((c.root.repo.as_str(), c.rel.as_str()), ("lib", "src/x.rs"));
        let sibling = format!("{}-old/secret.rs", roots[0].path);
        assert!(matches!(
            confine(&roots, &sibling, whole),
            Err(ConfineError::NotInRoot { .. })
        ));
        // A symlink inside a root pointing outside it.
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(&old, a.join("escape")).unwrap();
            assert!(matches!(
                confine(&roots, "escape/secret.rs", rel),
                Err(ConfineError::OutsideRoot { .. })
            ));
            let via_link = format!("{}/escape/secret.rs", roots[0].path);
            assert!(matches!(
                confine(&roots, &via_link, whole),
                Err(ConfineError::NotInRoot { .. })
            ));
        }
    }

    /// The walk's rules decide which files a root admits: ignore files (and a directory they
    /// exclude), hidden files and directories, `.git`, each lifted by the root's flags.
    #[test]
    fn walk_admits_what_the_walk_reaches() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        for (p, text) in [
            (".gitignore", "ignored.rs\nbuild/\n"),
            ("a.rs", "fn a() {}"),
            ("sub/b.rs", "fn b() {}"),
            ("ignored.rs", "secret"),
            ("build/gen.rs", "generated"),
            (".hidden/h.rs", "hidden"),
            (".env", "TOKEN=x"),
            (".git/config", "[core]"),
        ] {
            let f = r.join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, text).unwrap();
        }
        // Links are judged by their targets too.
        for (link, to) in [
            ("l_a.rs", "a.rs"),
            ("l_env.rs", ".env"),
            ("l_ignored.rs", "ignored.rs"),
            ("l_build", "build"),
            ("l_git.rs", ".git/config"),
        ] {
            std::os::unix::fs::symlink(to, r.join(link)).unwrap();
        }
        let mut e = root("repo", r);
        let admitted = |e: &RootEntry| -> Vec<&str> {
            [
                "a.rs",
                "sub/b.rs",
                "ignored.rs",
                "build/gen.rs",
                ".hidden/h.rs",
                ".env",
                ".git/config",
                "missing.rs",
                "sub",
                "l_a.rs",
                "l_env.rs",
                "l_ignored.rs",
                "l_build/gen.rs",
                "l_git.rs",
            ]
            .into_iter()
            .filter(|p| walk_admits(e, p))
            .collect()
        };
        assert_eq!(admitted(&e), ["a.rs", "sub/b.rs", "l_a.rs"]);
        e.no_ignore = true;
        assert_eq!(
            admitted(&e),
            [
                "a.rs",
                "sub/b.rs",
                "ignored.rs",
                "build/gen.rs",
                "l_a.rs",
                "l_ignored.rs",
                "l_build/gen.rs"
            ]
        );
        e.hidden = true;
        assert_eq!(
            admitted(&e),
            [
                "a.rs",
                "sub/b.rs",
                "ignored.rs",
                "build/gen.rs",
                ".hidden/h.rs",
                ".env",
                "l_a.rs",
                "l_env.rs",
                "l_ignored.rs",
                "l_build/gen.rs"
            ]
        );
        e.no_ignore = false;
        assert_eq!(
            admitted(&e),
            [
                "a.rs",
                "sub/b.rs",
                ".hidden/h.rs",
                ".env",
                "l_a.rs",
                "l_env.rs"
            ]
        );
    }
}
