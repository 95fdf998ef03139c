//! Shared helpers: the real model, a copy of the polyglot fixture, an index built from it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use indexer::build::{build, BuildOptions};
use indexer::progress::Progress;
use kernels::{DeviceChoice, Encoder};

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/queryd has a workspace root")
        .to_path_buf()
}

/// `$CIX_MODEL_DIR` (relative to the workspace root), else `<workspace>/models/all-MiniLM-L6-v2`.
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

/// The real encoder; a missing model fails the test (never skips).
pub fn encoder() -> &'static Encoder {
    ENCODER.get_or_init(|| {
        let dir = model_dir();
        Encoder::load(&dir, DeviceChoice::Cpu).unwrap_or_else(|e| {
            panic!(
                "cannot load the embedding model from {}: {e}\nrun scripts/fetch-model.sh (or set CIX_MODEL_DIR) before running these tests",
                dir.display()
            )
        })
    })
}

pub fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        let to = dst.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &to);
        } else {
            std::fs::copy(entry.path(), &to).unwrap();
        }
    }
}

/// Copies the fixture to `parent/polyglot`; returns the repository path.
pub fn fixture_copy(parent: &Path) -> PathBuf {
    let repo = parent.join("polyglot");
    copy_dir(&workspace_root().join("tests/fixtures/polyglot"), &repo);
    repo
}

/// Builds (or incrementally rebuilds) the index of `repo` into `out`.
pub fn build_index(repo: &Path, out: &Path) {
    let opts = BuildOptions::new(vec![repo.to_path_buf()], out.to_path_buf());
    build(&opts, encoder(), &Progress::silent())
        .unwrap_or_else(|e| panic!("indexing {} failed: {e}", repo.display()));
}

/// A temporary directory holding a fixture copy and its index.
pub struct Indexed {
    pub tmp: tempfile::TempDir,
    pub repo: PathBuf,
    pub index: PathBuf,
}

pub fn indexed_fixture() -> Indexed {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture_copy(tmp.path());
    let index = tmp.path().join("index");
    build_index(&repo, &index);
    Indexed { tmp, repo, index }
}
