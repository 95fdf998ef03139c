//! Shared by the kernels crate's integration tests.

use std::path::PathBuf;

/// The model directory: `$CIX_MODEL_DIR`, else the workspace's `models/all-MiniLM-L6-v2`
/// (where `scripts/fetch-model.sh` puts it), whatever the working directory.
pub fn model_dir() -> PathBuf {
    std::env::var_os("CIX_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2")
        })
}
