//! Shared helpers: the real model, a copy of the polyglot fixture, an index built from it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use indexer::build::{build, BuildOptions};
use indexer::progress::Progress;

pub use cix_tests::{copy_dir, encoder, model_dir, workspace_root};

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
