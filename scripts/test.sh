#!/usr/bin/env bash
# The test command: set up (apt packages, model), check formatting and lints, run every test
# with the real model. One profile (release) for binaries and tests so FAISS's C++ and burn
# build once.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/setup.sh"
cd "$here"
export CIX_MODEL_DIR="$here/models/all-MiniLM-L6-v2"
cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets -- -D warnings
cargo test --release --workspace
