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
# The encoder on burn's wgpu backend, on Mesa's lavapipe (a Vulkan driver on the CPU): a
# separate build of the kernels crate with the `wgpu` feature (the CPU-only build above stays
# free of wgpu). A missing adapter fails the run instead of skipping.
CIX_REQUIRE_WGPU=1 XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}" \
  cargo test --release -p cix-kernels --features wgpu
# The CUDA path type-checks (no CUDA toolkit or GPU needed). cubecl-cuda's build downloads an
# LLVM bundle from GitHub (tracel-llvm-bundler's build script), which CI cannot reach; that
# script skips the download when DOCS_RS is set (the docs.rs convention), which is enough for
# `cargo check` (no linking). A separate target dir keeps these build-script runs apart.
DOCS_RS=1 CARGO_TARGET_DIR="$here/target/cuda-check" \
  cargo check --release -p cix-kernels --features cuda
