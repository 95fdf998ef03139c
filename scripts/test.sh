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
# The GPU step below reuses the workspace build's third-party crates only if both builds resolve
# them to the same features (workspace-hack/Cargo.toml); this fails when they would not.
python3 scripts/feature-diff.py
# Lints ride on the test build: clippy-driver compiles the workspace's own crates (lib, bins,
# tests, examples; with and without cfg(test): what `cargo clippy --all-targets` covers) and
# fails on any warning, while dependencies are compiled once, by rustc, for both. A separate
# `cargo clippy` would type-check every dependency a second time (~10 minutes on 2 cores).
RUSTC_WORKSPACE_WRAPPER=$(command -v clippy-driver) ||
  { echo "clippy-driver not found: rustup component add clippy" >&2; exit 1; }
export RUSTC_WORKSPACE_WRAPPER
export CLIPPY_ARGS=-Dwarnings
cargo test --release --workspace
# The GPU backends, in one build of the kernels crate with both (the CPU-only build above stays
# free of them), linted the same way: the encoder on burn's wgpu backend, on Mesa's lavapipe (a
# Vulkan driver on the CPU), against the numpy reference, the cubecl kernels against their CPU
# references and the kernel cache across processes (tests/gpu_cache.rs); a missing adapter fails
# the run instead of skipping. The same build compiles and links the CUDA path offline
# (vendor/cubecl-llvm stands in for cubecl-cuda's LLVM backend, whose build script would
# download LLVM from GitHub; kernels compile through NVRTC at run time); its tests skip here (no
# CUDA device) and run on a GPU through scripts/gpu-bench.sh.
CIX_REQUIRE_WGPU=1 XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}" \
  cargo test --release -p cix-kernels --features wgpu,cuda
# The encoder again with our own attention kernel (`CIX_FUSED=attention,norm,gelu`) and with
# burn's ops only (`none`), which the default (`norm,gelu,flash-unit`) leaves out, against the
# numpy reference in f32 and f16.
for fused in attention,norm,gelu none; do
  CIX_FUSED=$fused CIX_REQUIRE_WGPU=1 XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}" \
    cargo test --release -p cix-kernels --features wgpu,cuda --test parity wgpu_
done
