//! Code-linked memories: code references resolved against the indexed roots, their hashes,
//! staleness checks with relocation, and confidence.
//!
//! - A reference names a repo-relative `path` and 1-based inclusive lines; as a URI
//!   `file:<path>#L<start>-L<end>` ([`parse_uri`], [`uri`]).
//! - `code_hash` is `sha256:` + hex of the referenced lines, each with trailing whitespace
//!   (and `\r`) removed, joined by `\n` ([`block_hash`]): edits that only change line endings
//!   or trailing spaces do not make a memory stale.
//! - Paths resolve inside the roots `MANIFEST` records ([`resolve_path`]): `..`, absolute
//!   paths, symlinks that leave the root and sibling-prefix tricks (`/src/app-old` for root
//!   `/src/app`) are refused.
//!   A path with a `.git` component is refused (the indexer never reads `.git`), and a new
//!   reference to an existing file its root's ignore files exclude, that the index does not
//!   hold, is refused ([`resolve_readable`]): code references read no file the user's ignore
//!   files keep out of the index (a git-ignored `.env` or secret), not even to hash it.
//! - [`check_ref`]: the file is gone → stale (`deleted`); the lines still hash the same →
//!   fresh; a same-length block elsewhere in the file hashes the same (searched outward from
//!   the old start, nearest first, the lower start on a tie, at most [`RELOCATE_BUDGET`] lines
//!   hashed per check), or the symbol's current lines do → relocated (fresh, new lines);
//!   otherwise stale (`changed`). A file over [`MAX_FILE_BYTES`], or one that cannot be read,
//!   is not read: unverified. Files are read through a cache keyed by (path, mtime, size) and
//!   bounded in files and bytes, so checking an unchanged file costs a `stat` and a hash of
//!   the block.
//! - [`confidence`]: 0.3·verification recency (1 → 0 over 30 days since `last_verified_at`;
//!   0.5 if never verified; 0 when a reference is stale: the check refuted it) + 0.2·min(1,
//!   evidence/3) + 0.3·(1.0 if no reference is stale, else 0.2) + 0.2·(1.0 for `user`, else
//!   0.7). A new user memory is ≥ 0.8; a stale one ≤ 0.5.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use format::manifest::RootEntry;
use format::memory::{CodeRef, MemoryRecord};
use format::roots::{clean_relative, confine, ConfineError, ConfineOptions};
use sha2::{Digest, Sha256};

use code::CodeView;

pub const HASH_PREFIX: &str = format::memory::CODE_HASH_PREFIX;
const DAY_MS: f64 = 86_400_000.0;

/// `file:<path>#L<start>-L<end>` (`#L<n>` for one line).
pub fn uri(path: &str, start: u32, end: u32) -> String {
    if start == end {
        format!("file:{path}#L{start}")
    } else {
        format!("file:{path}#L{start}-L{end}")
    }
}

/// Why a code reference (or code link) is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodeRefError {
    /// Holds the first 200 characters of the text.
    #[error("`{0}` is not a code link; expected file:<path>#L<start>-L<end> (or #L<line>)")]
    BadUri(String),
    #[error("a code reference needs a `path`")]
    NoPath,
    #[error("code reference path `{0}` must be relative to its repository root, without `..`")]
    Escapes(String),
    #[error("code reference path `{0}` names no file")]
    NoFile(String),
    /// Holds the clipped path.
    #[error("code reference path `{0}` is a file the index never reads (its root's ignore files exclude it); reference an indexed file")]
    NotIndexed(String),
    /// Holds the clipped path.
    #[error("code reference path `{0}` is inside a `.git` directory, which is never indexed; reference a source file instead")]
    GitDir(String),
    #[error("no indexed repository `{repo}`; the index holds: {known}")]
    UnknownRepo { repo: String, known: String },
    #[error("code reference path `{path}` resolves to {resolved}, outside the root {root}")]
    OutsideRoot {
        path: String,
        resolved: String,
        root: String,
    },
}

/// Parses [`uri`]'s format back into (path, start, end).
pub fn parse_uri(s: &str) -> Result<(String, u32, u32), CodeRefError> {
    let bad = || CodeRefError::BadUri(s.chars().take(200).collect::<String>());
    let rest = s.trim().strip_prefix("file:").ok_or_else(bad)?;
    let (path, frag) = rest.rsplit_once('#').ok_or_else(bad)?;
    let path = path.trim_start_matches("//");
    let num = |x: &str| -> Result<u32, CodeRefError> {
        x.strip_prefix('L')
            .and_then(|n| n.parse::<u32>().ok())
            .ok_or_else(bad)
    };
    let (start, end) = match frag.split_once('-') {
        Some((a, b)) => (num(a)?, num(b)?),
        None => {
            let n = num(frag)?;
            (n, n)
        }
    };
    if path.is_empty() {
        return Err(bad());
    }
    Ok((path.to_string(), start, end))
}

/// A line as hashed: without trailing whitespace (and `\r`).
fn norm(line: &str) -> &str {
    line.trim_end()
}

/// The hash of lines `start..=end` (1-based) of `lines`, or `None` when out of range.
pub fn block_hash(lines: &[String], start: u32, end: u32) -> Option<String> {
    if start == 0 || end < start || end as usize > lines.len() {
        return None;
    }
    let mut h = Sha256::new();
    for (i, l) in lines[start as usize - 1..end as usize].iter().enumerate() {
        if i > 0 {
            h.update(b"\n");
        }
        h.update(norm(l).as_bytes());
    }
    let d = h.finalize();
    let mut out = String::with_capacity(HASH_PREFIX.len() + 64);
    out.push_str(HASH_PREFIX);
    for b in d {
        out.push_str(&format!("{b:02x}"));
    }
    Some(out)
}

/// A file's lines, as read.
#[derive(Debug)]
pub struct FileView {
    pub lines: Vec<String>,
}

impl FileView {
    /// About how many bytes of memory the view holds: the text and one `String` per line.
    fn cost(&self) -> u64 {
        self.lines
            .iter()
            .map(|l| (l.capacity() + std::mem::size_of::<String>()) as u64)
            .sum()
    }
}

/// Largest file a code reference can name, in bytes: a larger one is never read.
pub const MAX_FILE_BYTES: u64 = 16 << 20;
/// Most files and about the most bytes ([`FileView`]s' memory) [`FileCache`] keeps; past
/// either it starts over.
const CACHE_FILES: usize = 4096;
const CACHE_BYTES: u64 = 256 << 20;

/// Why [`FileCache::get`] has no lines for a path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    /// It does not exist or is not a regular file.
    #[error("no such file")]
    Missing,
    #[error("the file is {size} bytes, over the {limit}-byte ({} MiB) limit on files code references name", limit >> 20)]
    TooLarge { size: u64, limit: u64 },
    /// It exists but reading it failed (the I/O error's text).
    #[error("the file cannot be read: {0}")]
    Unreadable(String),
}

/// A cached file: (mtime, size) it was read at, its lines and their cost.
type Cached = (SystemTime, u64, Arc<FileView>, u64);

#[derive(Default)]
struct Files {
    map: HashMap<PathBuf, Cached>,
    /// The sum of the cached views' costs.
    bytes: u64,
}

/// Files read for checks, keyed by path and revalidated by (mtime, size); at most
/// [`MAX_FILE_BYTES`] per file, and bounded in files and bytes.
pub struct FileCache {
    files: Mutex<Files>,
    max_file: u64,
    max_files: usize,
    max_bytes: u64,
    /// [`resolve_readable`]'s ignore-rule decisions by (root, path), with when they were
    /// made: re-decided after [`ADMIT_TTL`] (an ignore file edited since counts then), so a
    /// reference checked on every search is not walked every time.
    admitted: Mutex<HashMap<(String, String), (std::time::Instant, bool)>>,
}

/// How long an ignore-rule decision of [`FileCache`] is reused.
const ADMIT_TTL: std::time::Duration = std::time::Duration::from_secs(10);

impl Default for FileCache {
    fn default() -> FileCache {
        FileCache::with_limits(MAX_FILE_BYTES, CACHE_FILES, CACHE_BYTES)
    }
}

impl FileCache {
    /// A cache reading files of at most `max_file` bytes and keeping at most `max_files`
    /// files and about `max_bytes` bytes.
    pub fn with_limits(max_file: u64, max_files: usize, max_bytes: u64) -> FileCache {
        FileCache {
            files: Mutex::default(),
            max_file,
            max_files,
            max_bytes,
            admitted: Mutex::default(),
        }
    }

    /// The current content of `p`, a file under `root`. A file over the size limit is not
    /// read, nor one that resolves outside `root` when it is opened (a symlink swapped in
    /// after the path was confined), unless the root was built to follow such links.
    pub fn get(&self, p: &Path, root: &RootEntry) -> Result<Arc<FileView>, FileError> {
        let md = std::fs::metadata(p)
            .ok()
            .filter(|m| m.is_file())
            .ok_or(FileError::Missing)?;
        let key = (md.modified().ok(), md.len());
        if md.len() > self.max_file {
            return Err(FileError::TooLarge {
                size: md.len(),
                limit: self.max_file,
            });
        }
        if let (Some(t), Some((ct, n, v, _))) = (key.0, self.lock().map.get(p)) {
            if (*ct, *n) == (t, key.1) {
                return Ok(Arc::clone(v));
            }
        }
        let text = self.read(p, root)?;
        let text = String::from_utf8_lossy(&text);
        let v = Arc::new(FileView {
            lines: text.lines().map(str::to_string).collect(),
        });
        // Without an mtime a file cannot be revalidated: not cached.
        let Some(mtime) = key.0 else {
            return Ok(v);
        };
        let cost = v.cost();
        let mut m = self.lock();
        if let Some(old) = m.map.remove(p) {
            m.bytes = m.bytes.saturating_sub(old.3);
        }
        // A view larger than the whole budget is served, not kept.
        if cost <= self.max_bytes {
            if m.map.len() >= self.max_files || m.bytes.saturating_add(cost) > self.max_bytes {
                m.map.clear();
                m.bytes = 0;
            }
            m.bytes += cost;
            m.map
                .insert(p.to_path_buf(), (mtime, key.1, Arc::clone(&v), cost));
        }
        Ok(v)
    }

    /// The bytes of `p`, at most the size limit (a file that grew past it since the `stat` is
    /// refused, not read whole).
    fn read(&self, p: &Path, root: &RootEntry) -> Result<Vec<u8>, FileError> {
        let io = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::NotFound => FileError::Missing,
            _ => FileError::Unreadable(e.to_string()),
        };
        let f = format::fsio::open_for_read(p).map_err(io)?;
        // Checked on the opened file: the path was confined before, and may have been
        // swapped for a symlink leading out of the root since.
        if !root.follow_external_symlinks {
            let base =
                std::fs::canonicalize(&root.path).unwrap_or_else(|_| PathBuf::from(&root.path));
            let real = format::fsio::opened_path(&f, p).map_err(io)?;
            if !format::roots::is_within(&base, &real) {
                return Err(FileError::Unreadable(format!(
                    "it resolves to {}, outside the root {} (not read)",
                    real.display(),
                    root.path
                )));
            }
        }
        if !f.metadata().map_err(io)?.is_file() {
            return Err(FileError::Missing);
        }
        match format::fsio::read_at_most(&f, self.max_file).map_err(io)? {
            Some(buf) => Ok(buf),
            None => {
                let now = f.metadata().map_or(0, |m| m.len());
                Err(FileError::TooLarge {
                    size: now.max(self.max_file.saturating_add(1)),
                    limit: self.max_file,
                })
            }
        }
    }

    /// Forgets every cached file (the next check reads from disk) and ignore-rule decision.
    pub fn clear(&self) {
        let mut m = self.lock();
        m.map.clear();
        m.bytes = 0;
        self.admitted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Whether `root`'s walk admits `rel` ([`format::roots::walk_admits`] with hidden files let
    /// in), decided at most every [`ADMIT_TTL`].
    fn admits(&self, root: &RootEntry, rel: &str) -> bool {
        let key = (root.path.clone(), rel.to_string());
        let now = std::time::Instant::now();
        if let Some((at, ok)) = self
            .admitted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            if now.duration_since(*at) < ADMIT_TTL {
                return *ok;
            }
        }
        let rules = RootEntry {
            hidden: true,
            ..root.clone()
        };
        let ok = format::roots::walk_admits(&rules, rel);
        let mut m = self.admitted.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= self.max_files {
            m.clear();
        }
        m.insert(key, (now, ok));
        ok
    }

    /// (files, bytes) held now.
    pub fn held(&self) -> (usize, u64) {
        let m = self.lock();
        (m.map.len(), m.bytes)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Files> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A repo-relative path with `/` separators, refusing anything that could leave the root
/// (the rule of [`format::roots::clean_relative`]).
pub fn clean_path(p: &str) -> Result<String, CodeRefError> {
    let p = p.trim().replace('\\', "/");
    if p.is_empty() {
        return Err(CodeRefError::NoPath);
    }
    let parts = clean_relative(Path::new(&p))
        .ok_or_else(|| CodeRefError::Escapes(format::memory::clip(&p)))?;
    if parts.is_empty() {
        return Err(CodeRefError::NoFile(format::memory::clip(&p)));
    }
    if parts.iter().any(|c| c.eq_ignore_ascii_case(".git")) {
        return Err(CodeRefError::GitDir(format::memory::clip(&p)));
    }
    Ok(parts.join("/"))
}

/// The file of repo-relative `path` (of `repo`, or of the root where it exists; the first root
/// if it exists nowhere), confined to that root after resolving symlinks
/// ([`format::roots::confine`]). `Ok(None)` when the index records no roots (nothing to
/// resolve against).
pub fn resolve_path(
    roots: &[RootEntry],
    repo: &str,
    path: &str,
) -> Result<Option<(RootEntry, PathBuf)>, CodeRefError> {
    let rel = clean_path(path)?;
    if roots.is_empty() {
        return Ok(None);
    }
    let opts = ConfineOptions {
        repo: Some(repo),
        allow_absolute: false,
        allow_root: false,
    };
    match confine(roots, &rel, opts) {
        Ok(c) => Ok(Some((c.root, c.full))),
        Err(ConfineError::UnknownRepo { repo, known }) => {
            Err(CodeRefError::UnknownRepo { repo, known })
        }
        Err(ConfineError::OutsideRoot {
            path,
            resolved,
            root,
        }) => Err(CodeRefError::OutsideRoot {
            path,
            resolved,
            root,
        }),
        Err(ConfineError::NoFile(_)) => Err(CodeRefError::NoFile(rel)),
        // `rel` is clean: these cannot happen; refuse rather than guess.
        Err(ConfineError::Empty) => Err(CodeRefError::NoPath),
        Err(ConfineError::Escapes(_) | ConfineError::NotInRoot { .. }) => {
            Err(CodeRefError::Escapes(rel))
        }
    }
}

/// [`resolve_path`] for a new reference (one being added or suggested), refusing an existing
/// file that the index does not hold (in the root's repository) and that its root's ignore
/// files exclude ([`format::roots::walk_admits`] with hidden files let in: a committed
/// `.github/workflows/ci.yml` is a fine thing to point at, a git-ignored `.env` is not).
/// Such a file is never read, not even to hash lines of it. A file that does not exist passes
/// (nothing is read). `check_ref` applies it to stored references too (a dump's, a pulled
/// segment's, one made before its file was ignored); the decisions are cached for a few
/// seconds ([`FileCache`]).
pub fn resolve_readable(
    ctx: &RefCtx<'_>,
    repo: &str,
    path: &str,
) -> Result<Option<(RootEntry, PathBuf)>, CodeRefError> {
    let Some((root, full)) = resolve_path(ctx.roots, repo, path)? else {
        return Ok(None);
    };
    let rel = clean_path(path)?;
    if full.is_file() && !ctx.code.holds_file(&root.repo, &rel) && !ctx.cache.admits(&root, &rel) {
        return Err(CodeRefError::NotIndexed(format::memory::clip(&rel)));
    }
    Ok(Some((root, full)))
}

/// The commit `HEAD` names in the git work tree holding `dir` (read from `.git` directly:
/// `HEAD`, loose refs, `packed-refs`), if any.
pub fn git_head(dir: &Path) -> Option<String> {
    let mut d = Some(dir);
    let git = loop {
        let cur = d?;
        let g = cur.join(".git");
        if g.is_dir() {
            break g;
        }
        if g.is_file() {
            // A worktree or submodule: `gitdir: <path>`.
            let t = read_small(&g, SMALL_GIT_FILE)?;
            let p = PathBuf::from(t.trim().strip_prefix("gitdir:")?.trim());
            break if p.is_absolute() { p } else { cur.join(p) };
        }
        d = cur.parent();
    };
    let head = read_small(&git.join("HEAD"), SMALL_GIT_FILE)?;
    let head = head.trim();
    let is_sha = |s: &str| s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit());
    let Some(r) = head.strip_prefix("ref:").map(str::trim) else {
        return is_sha(head).then(|| head.to_string());
    };
    // A ref is a name under `refs/`: never an absolute path or one that climbs out (a
    // crafted `HEAD` of `ref: /dev/zero` would otherwise be read, without end).
    if !r.starts_with("refs/") || r.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return None;
    }
    // Worktrees keep shared refs in the common directory.
    let common = read_small(&git.join("commondir"), SMALL_GIT_FILE)
        .map(|c| git.join(c.trim()))
        .unwrap_or_else(|| git.clone());
    for base in [&git, &common] {
        if let Some(s) = read_small(&base.join(r), SMALL_GIT_FILE) {
            let s = s.trim();
            if is_sha(s) {
                return Some(s.to_string());
            }
        }
        if let Some(p) = read_small(&base.join("packed-refs"), PACKED_REFS_MAX) {
            for l in p.lines() {
                if let Some((sha, name)) = l.split_once(' ') {
                    if name.trim() == r && is_sha(sha) {
                        return Some(sha.to_string());
                    }
                }
            }
        }
    }
    None
}

/// Longest `HEAD`, loose ref, `.git` pointer or `commondir` file read (they hold one line).
const SMALL_GIT_FILE: u64 = 4096;
/// Longest `packed-refs` read (a large repository's holds tens of thousands of refs).
const PACKED_REFS_MAX: u64 = 64 << 20;

/// The text of the regular file `p`, read only when it is at most `max` bytes (a FIFO, a
/// device or a huge file is not read).
fn read_small(p: &Path, max: u64) -> Option<String> {
    String::from_utf8(format::fsio::read_regular_at_most(p, max).ok()??).ok()
}

/// What a check found.
#[derive(Debug, Clone, PartialEq)]
pub enum RefStatus {
    Fresh,
    /// The same code now sits at these lines.
    Relocated {
        start: u32,
        end: u32,
    },
    Stale {
        reason: String,
    },
    /// Cannot be checked (no hash, or no indexed root holds it).
    Unverified {
        reason: String,
    },
}

impl RefStatus {
    pub fn name(&self) -> &'static str {
        match self {
            RefStatus::Fresh => "fresh",
            RefStatus::Relocated { .. } => "relocated",
            RefStatus::Stale { .. } => "stale",
            RefStatus::Unverified { .. } => "unverified",
        }
    }

    pub fn is_stale(&self) -> bool {
        matches!(self, RefStatus::Stale { .. })
    }
}

/// Most lines [`check_ref`] hashes looking for a moved block (a long stale block in a long
/// file costs a bounded amount on every read).
pub const RELOCATE_BUDGET: u64 = 200_000;

/// The start of a `len`-line block of `lines` hashing to `hash`, nearest to `start` (at equal
/// distance the lower start), searched outward from `start` (`start`, `start - 1`,
/// `start + 1`, `start - 2`, …) until found or `budget` lines have been hashed.
pub fn relocate(lines: &[String], hash: &str, start: u32, len: u32, budget: u64) -> Option<u32> {
    let n = lines.len() as u64;
    let len64 = u64::from(len);
    if len == 0 || len64 > n {
        return None;
    }
    // Starts 1..=last hold a whole block.
    let last = n - len64 + 1;
    let start = u64::from(start).clamp(1, last);
    let mut spent = 0u64;
    let mut try_at = |s: u64| -> Option<Option<u32>> {
        spent += len64;
        if spent > budget {
            return None;
        }
        let s = s as u32;
        Some((block_hash(lines, s, s + len - 1).as_deref() == Some(hash)).then_some(s))
    };
    for d in 0..last {
        let below = start.checked_sub(d).filter(|&s| s >= 1);
        let above = (d > 0).then_some(start + d).filter(|&s| s <= last);
        if below.is_none() && above.is_none() {
            break;
        }
        for s in [below, above].into_iter().flatten() {
            if let Some(found) = try_at(s)? {
                return Some(found);
            }
        }
    }
    None
}

/// What checks need: the roots, the file cache and the snapshot (for symbol lookups).
pub struct RefCtx<'a> {
    pub roots: &'a [RootEntry],
    pub cache: &'a FileCache,
    pub code: &'a CodeView,
}

/// Checks one reference against the current files (see the module doc).
pub fn check_ref(ctx: &RefCtx<'_>, r: &CodeRef) -> RefStatus {
    if r.code_hash.is_empty() {
        return RefStatus::Unverified {
            reason: "no code hash was recorded".into(),
        };
    }
    // The same admission as a new reference (a file the root's ignore files keep out of the
    // index is not read): a stored reference may come from a dump or a pulled memory
    // segment, or name a file ignored since it was made.
    let (root, full) = match resolve_readable(ctx, &r.repo, &r.path) {
        Ok(Some(found)) => found,
        Ok(None) => {
            return RefStatus::Unverified {
                reason: "the index records no source roots".into(),
            }
        }
        Err(e) => {
            return RefStatus::Unverified {
                reason: e.to_string(),
            }
        }
    };
    if !format::memory::is_code_hash(&r.code_hash) {
        return RefStatus::Unverified {
            reason: format!(
                "the recorded code hash `{}` is not sha256: + 64 hex digits",
                format::memory::clip(&r.code_hash)
            ),
        };
    }
    let view = match ctx.cache.get(&full, &root) {
        Ok(v) => v,
        Err(FileError::Missing) => {
            return RefStatus::Stale {
                reason: "deleted".into(),
            }
        }
        Err(e) => {
            return RefStatus::Unverified {
                reason: format!("not checked: {e}"),
            }
        }
    };
    if block_hash(&view.lines, r.start_line, r.end_line).as_deref() == Some(&r.code_hash) {
        return RefStatus::Fresh;
    }
    // Moved: the same block elsewhere, nearest to where it was.
    let len = r.end_line.saturating_sub(r.start_line) + 1;
    if let Some(s) = relocate(
        &view.lines,
        &r.code_hash,
        r.start_line,
        len,
        RELOCATE_BUDGET,
    ) {
        return RefStatus::Relocated {
            start: s,
            end: s + len - 1,
        };
    }
    // The same symbol, same body, at its current lines in the index.
    if !r.symbol_id.is_empty() {
        for node in ctx.code.by_symbol_id(&r.symbol_id) {
            let c = ctx.code.chunk(node);
            let f = ctx.code.file(node);
            if f.path.as_str() != clean_path(&r.path).unwrap_or_default() {
                continue;
            }
            let (s, e) = (c.start_line.to_native(), c.end_line.to_native());
            if block_hash(&view.lines, s, e).as_deref() == Some(&r.code_hash) {
                return RefStatus::Relocated { start: s, end: e };
            }
        }
    }
    RefStatus::Stale {
        reason: format!("changed: lines {}-{} differ", r.start_line, r.end_line),
    }
}

/// The confidence of a memory whose references have `statuses` (see the module doc).
pub fn confidence(m: &MemoryRecord, statuses: &[RefStatus], now_ms: i64) -> f32 {
    let any_stale = statuses.iter().any(RefStatus::is_stale);
    let verified = if m.code_refs.is_empty() {
        Some(m.updated_at)
    } else {
        m.code_refs.iter().filter_map(|r| r.last_verified_at).max()
    };
    let verification = if any_stale {
        0.0
    } else {
        match verified {
            Some(t) => (1.0 - (now_ms - t).max(0) as f64 / DAY_MS / 30.0).max(0.0),
            None => 0.5,
        }
    };
    let evidence = (m.evidence.len() as f64 / 3.0).min(1.0);
    let hash = if any_stale { 0.2 } else { 1.0 };
    let source = if m.source == "user" { 1.0 } else { 0.7 };
    (0.3 * verification + 0.2 * evidence + 0.3 * hash + 0.2 * source) as f32
}

/// Applies a check's result to a stored reference; returns whether anything changed.
/// Idempotent: checking again with the same files changes nothing (beyond refreshing a
/// verification older than a day).
pub fn apply_status(r: &mut CodeRef, st: &RefStatus, now_ms: i64) -> bool {
    let before = r.clone();
    match st {
        RefStatus::Fresh => {
            r.stale_since = None;
            if r.reason.starts_with("stale") {
                r.reason.clear();
            }
            if r.last_verified_at
                .is_none_or(|t| now_ms - t > DAY_MS as i64)
            {
                r.last_verified_at = Some(now_ms);
            }
        }
        RefStatus::Relocated { start, end } => {
            r.reason = format!("relocated from lines {}-{}", r.start_line, r.end_line);
            r.start_line = *start;
            r.end_line = *end;
            r.stale_since = None;
            r.last_verified_at = Some(now_ms);
        }
        RefStatus::Stale { reason } => {
            if r.stale_since.is_none() {
                r.stale_since = Some(now_ms);
            }
            r.reason = format!("stale: {reason}");
        }
        RefStatus::Unverified { .. } => {}
    }
    *r != before
}

#[cfg(test)]
mod tests;
