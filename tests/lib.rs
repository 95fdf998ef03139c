//! Workspace-level end-to-end tests live in `tests/tests/`; this library holds their shared
//! helpers: where the real model is, one encoder per test binary, the fixture repositories (and
//! an index of the polyglot one) and small file utilities.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use kernels::{DeviceChoice, Encoder};

/// The workspace root (the parent of this package).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The real model directory: `$CIX_MODEL_DIR` (relative paths are taken from the workspace
/// root), else `<workspace>/models/all-MiniLM-L6-v2`.
pub fn model_dir() -> PathBuf {
    match std::env::var_os("CIX_MODEL_DIR") {
        Some(d) if !d.is_empty() => {
            let p = PathBuf::from(d);
            if p.is_absolute() {
                p
            } else {
                workspace_root().join(p)
            }
        }
        _ => workspace_root().join("models/all-MiniLM-L6-v2"),
    }
}

static ENCODER: OnceLock<Encoder> = OnceLock::new();

/// The real encoder on the CPU, loaded once per test binary. Panics (fails the test) when the
/// model is missing: these tests never skip.
pub fn encoder() -> &'static Encoder {
    ENCODER.get_or_init(|| {
        let dir = model_dir();
        match Encoder::load(&dir, DeviceChoice::Cpu) {
            Ok(e) => e,
            Err(e) => panic!(
                "cannot load the embedding model from {}: {e}\n\
                 run scripts/fetch-model.sh (or set CIX_MODEL_DIR) before running these tests",
                dir.display()
            ),
        }
    })
}

/// The shared real encoder behind a cache of the vectors it returned, by text, for tests that
/// build the same tree several times and compare the indexes (budget cuts, merges): each
/// distinct text is embedded by the model once per test binary, in the batch it first came
/// in (on the CPU a text's vector came out bit for bit the same alone and in batches of 2 and
/// 5 with texts of other lengths). Tokens are counted for the texts the model ran on, not for
/// those served from the cache.
pub fn cached_encoder() -> &'static CachedEncoder {
    static CACHED: OnceLock<CachedEncoder> = OnceLock::new();
    CACHED.get_or_init(|| CachedEncoder {
        vectors: std::sync::Mutex::new(std::collections::HashMap::new()),
    })
}

/// See [`cached_encoder`].
pub struct CachedEncoder {
    vectors: std::sync::Mutex<std::collections::HashMap<String, Vec<f32>>>,
}

impl indexer::build::Embedder for CachedEncoder {
    fn model_id(&self) -> &str {
        encoder().model_id()
    }
    fn dim(&self) -> usize {
        encoder().dim()
    }
    fn embed(&self, texts: &[&str]) -> Result<(Vec<f32>, usize), indexer::build::EmbedError> {
        let real: &dyn indexer::build::Embedder = encoder();
        // Held while the model runs, so tests building the same texts side by side embed
        // them once.
        let mut cache = self.vectors.lock().unwrap_or_else(|e| e.into_inner());
        let mut misses: Vec<&str> = texts
            .iter()
            .copied()
            .filter(|t| !cache.contains_key(*t))
            .collect();
        misses.sort_unstable();
        misses.dedup();
        let mut tokens = 0;
        if !misses.is_empty() {
            let (v, t) = real.embed(&misses)?;
            tokens = t;
            for (text, row) in misses.iter().zip(v.chunks_exact(real.dim())) {
                cache.insert(text.to_string(), row.to_vec());
            }
        }
        let out = texts.iter().flat_map(|t| cache[*t].iter().copied());
        Ok((out.collect(), tokens))
    }
}

/// Embeds one text with the shared encoder.
pub fn embed_one(text: &str) -> Vec<f32> {
    let (v, _) = encoder()
        .embed(&[text])
        .unwrap_or_else(|e| panic!("embedding {text:?} failed: {e}"));
    v
}

/// A fixture repository under `tests/fixtures/`.
pub fn fixture(name: &str) -> PathBuf {
    workspace_root().join("tests/fixtures").join(name)
}

/// Recursively copies the regular files and directories of `src` into `dst` (created).
pub fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap_or_else(|e| panic!("mkdir {}: {e}", dst.display()));
    let mut entries: Vec<_> = std::fs::read_dir(src)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", src.display()))
        .map(|e| e.expect("dir entry"))
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let from = entry.path();
        let to = dst.join(entry.file_name());
        let ty = entry.file_type().expect("file type");
        if ty.is_dir() {
            copy_dir(&from, &to);
        } else if ty.is_file() {
            std::fs::copy(&from, &to)
                .unwrap_or_else(|e| panic!("copy {} -> {}: {e}", from.display(), to.display()));
        }
    }
}

/// 1-based number of the only line of `text` that contains `needle`; panics when there is
/// none or more than one, so expectations are always computed from the fixture itself.
pub fn line_of(text: &str, needle: &str) -> u32 {
    let hits: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(needle))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "expected exactly one line containing {needle:?}, found lines {hits:?}"
    );
    hits[0] as u32
}

/// 1-based line of the first line at or after `from` (1-based) that is exactly `closing`
/// once trimmed at its end (e.g. `}` or `    }`).
pub fn closing_line(text: &str, from: u32, closing: &str) -> u32 {
    text.lines()
        .enumerate()
        .skip(from as usize - 1)
        .find(|(_, l)| l.trim_end() == closing)
        .map(|(i, _)| i as u32 + 1)
        .unwrap_or_else(|| panic!("no line {closing:?} after line {from}"))
}

/// Start line of a definition on line `def_line` once the comment lines directly above it
/// (which the chunker attaches to the definition) are included.
pub fn with_leading_comments(text: &str, def_line: u32, markers: &[&str]) -> u32 {
    let lines: Vec<&str> = text.lines().collect();
    let mut start = def_line;
    while start > 1 {
        let prev = lines[start as usize - 2].trim_start();
        if markers.iter().any(|m| prev.starts_with(m)) {
            start -= 1;
        } else {
            break;
        }
    }
    start
}

/// A copy of the polyglot fixture under `parent`.
pub fn fixture_copy(parent: &Path) -> PathBuf {
    let repo = parent.join("polyglot");
    copy_dir(&fixture("polyglot"), &repo);
    repo
}

/// Builds (or incrementally rebuilds) the index of `repo` into `out` with the real model
/// ([`cached_encoder`]: most test binaries index the same fixture in many tests).
pub fn build_index(repo: &Path, out: &Path) {
    let opts = indexer::build::BuildOptions::new(vec![repo.to_path_buf()], out.to_path_buf());
    indexer::build::build(
        &opts,
        cached_encoder(),
        &indexer::progress::Progress::silent(),
    )
    .unwrap_or_else(|e| panic!("indexing {} failed: {e}", repo.display()));
}

/// What `indexer build --rebuild` does: the code segments dropped (memories kept), then a
/// build of `repo` into `out`.
pub fn rebuild_index(repo: &Path, out: &Path) {
    let e = encoder();
    indexer::rebuild::prepare_rebuild(out, e.model_id(), e.dim() as u32)
        .unwrap_or_else(|err| panic!("rebuild of {} refused: {err}", out.display()));
    build_index(repo, out);
}

/// A temporary directory holding a fixture copy and its index.
pub struct Indexed {
    pub tmp: tempfile::TempDir,
    pub repo: PathBuf,
    pub index: PathBuf,
}

/// A fresh copy of the polyglot fixture and its index, in a temporary directory.
pub fn indexed_fixture() -> Indexed {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture_copy(tmp.path());
    let index = tmp.path().join("index");
    build_index(&repo, &index);
    Indexed { tmp, repo, index }
}

/// Another binary of the workspace, from the directory of `bin` (a `CARGO_BIN_EXE_*` path):
/// tests that drive two binaries (`indexer` then `queryd`) find the second one beside the
/// first. Fails the test, saying how to build it, when it is missing.
pub fn sibling_bin(bin: &str, name: &str) -> PathBuf {
    let p = Path::new(bin).with_file_name(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        p.is_file(),
        "{} is missing: build it first (`cargo build --release -p cix-{name}`, or run the whole \
         workspace's tests)",
        p.display()
    );
    p
}
