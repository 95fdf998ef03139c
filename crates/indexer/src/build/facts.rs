//! The facts cache: what the parse of each file gave a build (its chunks without their texts,
//! imports, calls, bindings and declarations: everything graph resolution reads), kept in
//! `facts.cache` in the index directory so that the next build reads it back instead of
//! parsing a file whose bytes did not change.
//!
//! Why: an incremental build resolves the calls and imports of every file of the tree, so it
//! needs every file's facts, changed or not. Parsing them all again made a one-file change on
//! the cargo registry (366 MB) cost about 30 s of tree-sitter on 2 cores; reading a cached
//! file's facts costs a hash of its bytes and a decode.
//!
//! What makes a hit: the same repository, path, language and blake3 of the bytes as the
//! entry, the entry's own checksum, and a file written under the same key, which is the
//! extraction code's fingerprint (`CIX_EXTRACT_KEY`, computed by `build.rs` from the chunker,
//! the declarations reader, the walk and the grammars' versions) and the chunk options. Any
//! other case parses the file, as every build did before. The cache is advisory: it is not in
//! `MANIFEST`, not pushed or pulled, never read by queries; a damaged or foreign file is
//! ignored (said once in the report) and replaced by the next build. A cached file that is to
//! be written (it is not the indexed version, or its edges moved) is chunked again from its
//! bytes, as a file whose texts were shed is. `indexer build --rebuild` reads no cache.
//!
//! Layout: `CIXFACTS`, [`FORMAT`] (a `u32`), the key (length as a `u16`, bytes); the entries' bytes, one after
//! another; the table (per entry: repository, path, blake3 of the file, language, where its
//! bytes start, their length, the first 8 bytes of their blake3); a 32-byte footer (where
//! the table starts, its length and check, `CIXFEND1`). A build writes a new file next to the
//! old one (`.facts-*` until renamed), with the entries of every file it read and those of
//! repositories it did not walk, and renames it over `facts.cache` once the build succeeded.
//! A build whose every file was a hit and that lost no file leaves the old file as it is.
//!
//! Entry: the bytes of text the file's chunks held (a varint: the budget's estimate of the
//! file counts them), `chunk::stored` (extract and calls), then `Declarations::encode`.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use super::shed::check;
use crate::chunk::{self, put_str, put_varint, ChunkOptions, FileExtract, Language, PackedCalls};
use crate::graph::Declarations;
use crate::walk::Candidate;

/// The cache's file name in the index directory.
pub const FACTS_FILE: &str = "facts.cache";
const MAGIC: &[u8; 8] = b"CIXFACTS";
/// The layout below; bumped with any change to it or to what an entry means (this file is
/// also part of `CIX_EXTRACT_KEY`).
const FORMAT: u32 = 1;
const END: &[u8; 8] = b"CIXFEND1";
const FOOTER: usize = 32;
/// A build's new cache before its rename.
const TEMP_PREFIX: &str = ".facts-";

/// A file's facts read back from the cache.
pub(super) struct Hit {
    pub(super) extract: FileExtract,
    pub(super) calls: PackedCalls,
    pub(super) decls: Declarations,
    /// Bytes of text its chunks held when it was parsed.
    pub(super) text_bytes: u64,
}

/// One entry of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    repo: String,
    path: String,
    hash: [u8; 32],
    lang: u8,
    at: u64,
    len: u32,
    check: u64,
}

/// The cache of the last build, as found at the start of this one.
struct Old {
    file: File,
    /// Sorted by (repository, path), as written.
    entries: Vec<Entry>,
    /// Entries this build read back (their bytes go to the new file at [`Facts::finish`]).
    hit: Vec<AtomicBool>,
}

/// The file this build writes: its entries so far.
struct New {
    file: tempfile::NamedTempFile,
    end: AtomicU64,
    entries: Mutex<Vec<Entry>>,
}

/// A build's facts cache: the old one it reads, the new one it writes.
pub(super) struct Facts {
    dir: PathBuf,
    key: String,
    /// `None` when the build reads no cache (`reuse_facts` off, no file, another key, damage).
    old: Option<Old>,
    new: OnceLock<io::Result<New>>,
    /// Files read from the cache, and files parsed and put in the new one.
    pub(super) hits: AtomicUsize,
    misses: AtomicUsize,
    failed_put: AtomicBool,
}

fn lang_id(lang: Language) -> u8 {
    Language::ALL.iter().position(|l| *l == lang).unwrap_or(0) as u8
}

fn bad(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

/// The key a cache is written under: the extraction code's fingerprint and the options.
fn key_of(chunk: &ChunkOptions) -> String {
    format!("{} {chunk:?}", env!("CIX_EXTRACT_KEY"))
}

fn header(key: &str) -> Vec<u8> {
    let mut h = MAGIC.to_vec();
    h.extend_from_slice(&FORMAT.to_le_bytes());
    h.extend_from_slice(&(key.len() as u16).to_le_bytes());
    h.extend_from_slice(key.as_bytes());
    h
}

/// Reads the table of the cache at `path`; `Ok(None)` when it was written under another key.
fn read_old(path: &Path, key: &str) -> io::Result<Option<Old>> {
    let file = File::open(path)?;
    let size = file.metadata()?.len();
    let head = header(key);
    let mut got = vec![0u8; head.len().min(size as usize)];
    file.read_exact_at(&mut got, 0)?;
    if got.get(..8) != Some(&MAGIC[..]) {
        return Err(bad("not a facts cache"));
    }
    if got != head {
        return Ok(None);
    }
    if size < (head.len() + FOOTER) as u64 {
        return Err(bad("shorter than its header and footer"));
    }
    let mut foot = [0u8; FOOTER];
    file.read_exact_at(&mut foot, size - FOOTER as u64)?;
    let word = |i: usize| u64::from_le_bytes(foot[i * 8..i * 8 + 8].try_into().unwrap_or_default());
    let (at, len, sum) = (word(0), word(1), word(2));
    if &foot[24..] != END
        || at < head.len() as u64
        || at.checked_add(len) != Some(size - FOOTER as u64)
    {
        return Err(bad("its footer does not describe the file (cut short?)"));
    }
    let mut table = vec![0u8; len as usize];
    file.read_exact_at(&mut table, at)?;
    if check(&table) != sum {
        return Err(bad("its table does not match its checksum"));
    }
    let mut r = chunk::Reader::new(&table);
    let mut entries = Vec::new();
    while !r.is_done() {
        let e = (|| {
            let repo = r.str()?.to_string();
            let path = r.str()?.to_string();
            let hash: [u8; 32] = r.bytes(32)?.try_into().ok()?;
            let lang = r.byte()?;
            let e_at = r.varint()?;
            let e_len = r.u32()?;
            let check = u64::from_le_bytes(r.bytes(8)?.try_into().ok()?);
            let fits = e_at >= head.len() as u64 && e_at.checked_add(u64::from(e_len))? <= at;
            fits.then_some(Entry {
                repo,
                path,
                hash,
                lang,
                at: e_at,
                len: e_len,
                check,
            })
        })()
        .ok_or_else(|| bad("a malformed table entry"))?;
        entries.push(e);
    }
    let sorted = entries
        .windows(2)
        .all(|w| (&w[0].repo, &w[0].path) < (&w[1].repo, &w[1].path));
    if !sorted {
        return Err(bad("its table is not sorted by repository and path"));
    }
    let hit = entries.iter().map(|_| AtomicBool::new(false)).collect();
    Ok(Some(Old { file, entries, hit }))
}

/// Removes the `.facts-*` files in `dir` that no build holds (their build was killed before
/// it could rename or remove its file): each is locked by its build while it runs.
fn remove_abandoned(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
            continue;
        }
        let p = e.path();
        // A lock on a read-only descriptor conflicts all the same (another user's file too).
        let free = std::fs::File::open(&p).is_ok_and(|f| f.try_lock().is_ok());
        if free {
            let _ = std::fs::remove_file(&p);
        }
    }
}

/// A new `.facts-*` file in `dir`, readable as the index's other files are (a server may
/// run as another user), and locked: the lock is held until the file is renamed or dropped,
/// so [`remove_abandoned`] spares it. A concurrent build's `remove_abandoned` can still unlink
/// it between its creation and its lock; then another is made.
fn locked_temp(dir: &Path) -> io::Result<tempfile::NamedTempFile> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    for _ in 0..8 {
        let file = tempfile::Builder::new()
            .prefix(TEMP_PREFIX)
            .permissions(std::fs::Permissions::from_mode(0o644))
            .tempfile_in(dir)?;
        file.as_file().lock()?;
        let held = file.as_file().metadata()?.ino();
        if std::fs::metadata(file.path()).is_ok_and(|m| m.ino() == held) {
            return Ok(file);
        }
    }
    Err(io::Error::other(
        "its temporary file was removed as soon as it was made, eight times",
    ))
}

impl Facts {
    /// The cache of the index in `dir` for a build with `chunk` options: read (when `reuse`)
    /// and written. A cache that cannot be used is said in the returned note.
    pub(super) fn open(dir: &Path, chunk: &ChunkOptions, reuse: bool) -> (Facts, Option<String>) {
        remove_abandoned(dir);
        let key = key_of(chunk);
        let path = dir.join(FACTS_FILE);
        let (old, note) = match reuse.then(|| read_old(&path, &key)) {
            None => (None, None),
            Some(Ok(old)) => (old, None),
            Some(Err(e)) if e.kind() == io::ErrorKind::NotFound => (None, None),
            Some(Err(e)) => (
                None,
                Some(format!(
                    "the facts cache {} was not used ({e}): every file was parsed, and the \
                     build wrote a new one",
                    path.display()
                )),
            ),
        };
        let facts = Facts {
            dir: dir.to_path_buf(),
            key,
            old,
            new: OnceLock::new(),
            hits: AtomicUsize::new(0),
            misses: AtomicUsize::new(0),
            failed_put: AtomicBool::new(false),
        };
        (facts, note)
    }

    /// The facts of `cand` (its bytes hash to `hash`) as the cache holds them, when it does.
    pub(super) fn lookup(&self, cand: &Candidate, hash: &[u8; 32]) -> Option<Hit> {
        let old = self.old.as_ref()?;
        let key = (cand.repo.as_str(), cand.rel_path.as_str());
        let i = (old.entries)
            .binary_search_by(|e| (e.repo.as_str(), e.path.as_str()).cmp(&key))
            .ok()?;
        let e = &old.entries[i];
        if e.hash != *hash || e.lang != lang_id(cand.language) {
            return None;
        }
        let mut bytes = vec![0u8; e.len as usize];
        old.file.read_exact_at(&mut bytes, e.at).ok()?;
        if check(&bytes) != e.check {
            return None;
        }
        let hit = decode_entry(&bytes)?;
        old.hit[i].store(true, Ordering::Relaxed);
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(hit)
    }

    /// Puts the facts of `cand`, just parsed, in the new cache. A write that fails leaves the
    /// old cache in place at the end (said in the report).
    pub(super) fn put(
        &self,
        cand: &Candidate,
        hash: &[u8; 32],
        text_bytes: u64,
        (extract, calls, decls): (&FileExtract, &PackedCalls, &Declarations),
    ) {
        self.misses.fetch_add(1, Ordering::Relaxed);
        let Ok(new) = self.new_file() else {
            self.failed_put.store(true, Ordering::Relaxed);
            return;
        };
        let bytes = encode_entry(text_bytes, (extract, calls, decls));
        let entry = |at| Entry {
            repo: cand.repo.clone(),
            path: cand.rel_path.clone(),
            hash: *hash,
            lang: lang_id(cand.language),
            at,
            len: bytes.len() as u32,
            check: check(&bytes),
        };
        match new.append(&bytes) {
            Ok(at) if u32::try_from(bytes.len()).is_ok() => {
                let e = entry(at);
                new.entries
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(e);
            }
            _ => self.failed_put.store(true, Ordering::Relaxed),
        }
    }

    fn new_file(&self) -> Result<&New, &io::Error> {
        self.new
            .get_or_init(|| {
                let file = locked_temp(&self.dir)?;
                let head = header(&self.key);
                file.as_file().write_all_at(&head, 0)?;
                Ok(New {
                    file,
                    end: AtomicU64::new(head.len() as u64),
                    entries: Mutex::new(Vec::new()),
                })
            })
            .as_ref()
    }

    /// Once the build succeeded: the new cache (this build's files, and the old entries of
    /// repositories outside `walked` that the index still records, `recorded`; `None` keeps
    /// them all) replaces the old one. Nothing is written when every file was a hit and no
    /// entry went. Returns the entries and bytes written, `None` when nothing was. An error
    /// leaves the old file (the next build parses what it lacks).
    pub(super) fn finish(
        self,
        walked: &HashSet<String>,
        recorded: Option<&HashSet<String>>,
    ) -> io::Result<Option<(usize, u64)>> {
        let misses = self.misses.load(Ordering::Relaxed);
        if self.failed_put.load(Ordering::Relaxed) {
            let e = self.new.get().and_then(|r| r.as_ref().err());
            return Err(io::Error::other(match e {
                Some(e) => format!("the new facts cache could not be made: {e}"),
                None => "an entry of the new facts cache could not be written".to_string(),
            }));
        }
        // What of the old cache goes on: the entries this build read, and those of
        // repositories it did not walk.
        let (kept, dropped): (Vec<&Entry>, usize) = match &self.old {
            None => (Vec::new(), 0),
            Some(old) => {
                let mut kept = Vec::new();
                let mut dropped = 0;
                for (e, hit) in old.entries.iter().zip(&old.hit) {
                    let elsewhere =
                        !walked.contains(&e.repo) && recorded.is_none_or(|r| r.contains(&e.repo));
                    if hit.load(Ordering::Relaxed) || elsewhere {
                        kept.push(e);
                    } else {
                        dropped += 1;
                    }
                }
                (kept, dropped)
            }
        };
        if misses == 0 && dropped == 0 && self.old.is_some() {
            return Ok(None);
        }
        let new = self
            .new_file()
            .map_err(|e| io::Error::new(e.kind(), e.to_string()))?;
        let mut entries =
            std::mem::take(&mut *new.entries.lock().unwrap_or_else(|p| p.into_inner()));
        if let Some(old) = &self.old {
            for e in kept {
                let mut bytes = vec![0u8; e.len as usize];
                old.file.read_exact_at(&mut bytes, e.at)?;
                let at = new.append(&bytes)?;
                entries.push(Entry { at, ..e.clone() });
            }
        }
        entries.sort_unstable_by(|a, b| (&a.repo, &a.path).cmp(&(&b.repo, &b.path)));
        // One entry per file (the walk already gives one candidate per repository and path;
        // the reader refuses a table that repeats one).
        entries.dedup_by(|a, b| a.repo == b.repo && a.path == b.path);
        let mut table = Vec::new();
        for e in &entries {
            put_str(&mut table, &e.repo);
            put_str(&mut table, &e.path);
            table.extend_from_slice(&e.hash);
            table.push(e.lang);
            put_varint(&mut table, e.at);
            put_varint(&mut table, u64::from(e.len));
            table.extend_from_slice(&e.check.to_le_bytes());
        }
        let at = new.append(&table)?;
        let mut foot = Vec::with_capacity(FOOTER);
        foot.extend_from_slice(&at.to_le_bytes());
        foot.extend_from_slice(&(table.len() as u64).to_le_bytes());
        foot.extend_from_slice(&check(&table).to_le_bytes());
        foot.extend_from_slice(END);
        new.append(&foot)?;
        let bytes = new.end.load(Ordering::Relaxed);
        let Some(Ok(new)) = self.new.into_inner() else {
            return Err(io::Error::other("the new facts cache went away"));
        };
        new.file
            .persist(self.dir.join(FACTS_FILE))
            .map_err(|e| e.error)?;
        Ok(Some((entries.len(), bytes)))
    }
}

/// A file parsed: its extract (calls moved out, packed), declarations and the bytes of text
/// its chunks hold. What a cache entry stands for, so it lives here (this file is part of
/// `CIX_EXTRACT_KEY`): a change to it changes the key.
pub(super) fn parse(
    cand: &Candidate,
    text: &str,
    opts: &ChunkOptions,
) -> (FileExtract, Declarations, PackedCalls, u64) {
    let mut extract = chunk::extract(cand.language, &cand.repo, &cand.rel_path, text, opts);
    let decls = Declarations::of(&cand.rel_path, cand.language, &extract);
    // Held for the whole tree until the graph is resolved: calls packed (88 bytes each as
    // values, 26.5 on the cargo registry), no spare capacity.
    let calls = PackedCalls::pack(&std::mem::take(&mut extract.calls));
    extract.module_bindings.shrink_to_fit();
    extract.member_bindings.shrink_to_fit();
    extract.imports.shrink_to_fit();
    let text_bytes = extract.chunks.iter().map(|c| c.text.len() as u64).sum();
    (extract, decls, calls, text_bytes)
}

/// An entry's bytes (see the module doc).
fn encode_entry(
    text_bytes: u64,
    (extract, calls, decls): (&FileExtract, &PackedCalls, &Declarations),
) -> Vec<u8> {
    let mut bytes = Vec::new();
    put_varint(&mut bytes, text_bytes);
    chunk::stored::encode(extract, calls, &mut bytes);
    decls.encode(&mut bytes);
    bytes
}

/// [`encode_entry`]'s inverse; `None` unless `bytes` are exactly one well-formed entry.
fn decode_entry(bytes: &[u8]) -> Option<Hit> {
    let mut r = chunk::Reader::new(bytes);
    let text_bytes = r.varint()?;
    let (extract, calls) = chunk::stored::decode(&mut r)?;
    let decls = Declarations::decode(&mut r, extract.chunks.len())?;
    r.is_done().then_some(Hit {
        extract,
        calls,
        decls,
        text_bytes,
    })
}

impl New {
    /// Writes `bytes` after everything written so far (from any thread); returns where.
    fn append(&self, bytes: &[u8]) -> io::Result<u64> {
        let at = self.end.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        self.file.as_file().write_all_at(bytes, at)?;
        Ok(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::{extract, ChunkOptions, Language};

    /// A `.facts-*` file whose build is gone (nobody holds its lock) is removed when the next
    /// build opens the cache; one a running build holds is not.
    #[test]
    fn abandoned_temporaries_go_and_held_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join(".facts-gone");
        std::fs::write(&gone, b"half a cache").unwrap();
        let (running, _) = Facts::open(dir.path(), &ChunkOptions::default(), true);
        let cand = |path: &str| Candidate {
            abs_path: dir.path().join(path),
            rel_path: path.to_string(),
            repo: "r".to_string(),
            language: Language::Rust,
            size: 1,
            confined_to: None,
            max_bytes: 1 << 20,
        };
        let (ex, decls, calls, n) = parse(&cand("a.rs"), "fn a() {}\n", &ChunkOptions::default());
        running.put(&cand("a.rs"), &[7; 32], n, (&ex, &calls, &decls));
        assert!(!gone.exists());
        let held: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect();
        assert_eq!(held.len(), 1, "{held:?}");
        // Another build opening the same directory meanwhile leaves it alone.
        let (other, note) = Facts::open(dir.path(), &ChunkOptions::default(), true);
        assert_eq!(note, None);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        drop(other);
        let walked = HashSet::from(["r".to_string()]);
        assert_eq!(running.finish(&walked, None).unwrap().map(|w| w.0), Some(1));
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect();
        assert_eq!(names, vec![FACTS_FILE.to_string()]);
        let (next, _) = Facts::open(dir.path(), &ChunkOptions::default(), true);
        let hit = next.lookup(&cand("a.rs"), &[7; 32]).expect("a hit");
        assert_eq!(hit.extract.chunks.len(), ex.chunks.len());
        assert!(next.lookup(&cand("a.rs"), &[8; 32]).is_none());
        assert!(next.lookup(&cand("b.rs"), &[7; 32]).is_none());
    }

    /// Every source file of this crate and the repository's fixtures in each language come
    /// back as they were extracted (texts aside) with their declarations; every shorter
    /// prefix of an entry is refused.
    #[test]
    fn entries_give_back_what_the_parse_gave() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        let mut dirs = vec![root.join("src"), root.join("../../tests/fixtures")];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    dirs.push(p);
                } else if Language::from_path(&p).is_some_and(|l| l.is_code()) {
                    files.push(p);
                }
            }
        }
        files.sort();
        assert!(files.len() > 50, "{} files", files.len());
        let mut langs = std::collections::BTreeSet::new();
        for (n, p) in files.iter().enumerate() {
            let lang = Language::from_path(p).unwrap();
            let Ok(text) = std::fs::read_to_string(p) else {
                continue;
            };
            langs.insert(lang);
            let mut ex = extract(lang, "r", "a/b.x", &text, &ChunkOptions::default());
            let decls = Declarations::of("a/b.x", lang, &ex);
            let calls = PackedCalls::pack(&std::mem::take(&mut ex.calls));
            let bytes = encode_entry(text.len() as u64, (&ex, &calls, &decls));
            let hit = decode_entry(&bytes).unwrap_or_else(|| panic!("{}", p.display()));
            for c in &mut ex.chunks {
                c.text = String::new();
            }
            assert_eq!(hit.extract, ex, "{}", p.display());
            assert_eq!(hit.calls, calls, "{}", p.display());
            assert_eq!(hit.decls, decls, "{}", p.display());
            assert_eq!(hit.text_bytes, text.len() as u64);
            if n % 16 == 0 {
                for cut in 0..bytes.len() {
                    let short = decode_entry(&bytes[..cut]);
                    assert!(short.is_none(), "{} cut at {cut}", p.display());
                }
            }
        }
        assert!(langs.len() >= 6, "{langs:?}");
    }
}
