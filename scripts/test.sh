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
# The CUDA path builds and links offline (vendor/cubecl-llvm stands in for cubecl-cuda's LLVM
# backend, whose build script would download LLVM from GitHub; kernels compile through NVRTC at
# run time): the kernels crate's tests with `--features cuda`, built but not run (no GPU here;
# scripts/gpu-bench.sh runs them on one).
cargo test --release -p cix-kernels --features cuda --no-run
