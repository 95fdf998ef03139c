#!/usr/bin/env bash
# The GPU measurements (issue 6) on a machine with an NVIDIA GPU, in two steps:
#
#   scripts/gpu-bench.sh build   # here, with cargo: wgpu builds of the harnesses and the kernel
#                                # tests, stripped and compressed, plus the model, cut into
#                                # pieces under 60 MiB in target/gpu-carry/ (the device tool
#                                # carries at most 64 MiB per call: carry one or two pieces per
#                                # call, in quick succession, until all are there)
#   scripts/gpu-bench.sh run     # on the GPU machine (no cargo needed): wgpu parity + kernel
#                                # tests on the GPU, the embedding harness against
#                                # sentence-transformers fp16 (when python3 has torch and
#                                # sentence_transformers), IVF training 1M × 384 GPU vs FAISS CPU
#
# Vulkan on a machine without the loader: unpack libvulkan1 first (see the device README); set
# VK_DRIVER_FILES to NVIDIA's ICD if no driver is found. CUDA builds need github.com at build
# time (cubecl-cuda's LLVM bundle), so this script measures the wgpu (Vulkan) backend.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out="$here/target/gpu-bench"
case "${1:-}" in
build)
  cd "$here"
  cargo build --release -p cix-benches --features wgpu --bin embed --bin ivf_train
  mkdir -p "$out"
  cp target/release/embed target/release/ivf_train "$out/"
  # The kernel tests (unit tests: cubecl kernels vs CPU references; parity.rs: the encoder on
  # wgpu vs the numpy reference, f16/bf16 parity).
  cargo test --release -p cix-kernels --features wgpu --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] in ("kernels", "parity"):
        shutil.copy(m["executable"], sys.argv[1] + "/test-" + m["target"]["name"])
' "$out"
  strip "$out"/*
  carry="$here/target/gpu-carry"
  rm -rf "$carry" && mkdir -p "$carry"
  tar -C "$out" -cf - . | xz -T0 -6 | split -b 60M - "$carry/bin.tar.xz.part-"
  tar -C "$here" -cf - models/all-MiniLM-L6-v2 | xz -T0 -6 | split -b 60M - "$carry/model.tar.xz.part-"
  ls -la "$carry"
  ;;
run)
  cd "$here"
  carry="$here/target/gpu-carry"
  if [ ! -x "$out/embed" ]; then
    mkdir -p "$out" && cat "$carry"/bin.tar.xz.part-* | xz -d | tar -C "$out" -xf -
  fi
  if [ ! -f models/all-MiniLM-L6-v2/model.safetensors ]; then
    cat "$carry"/model.tar.xz.part-* | xz -d | tar -C "$here" -xf -
  fi
  export CIX_MODEL_DIR="${CIX_MODEL_DIR:-$here/models/all-MiniLM-L6-v2}"
  export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}" CIX_REQUIRE_WGPU=1
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
  # parity.rs reads its fixture relative to the crate.
  (cd crates/kernels && "$out/test-kernels" gpu --nocapture && "$out/test-parity" wgpu --nocapture)
  "$out/embed" crates --chunks 5000 --runs 3 --device wgpu --precision auto
  "$out/embed" crates --chunks 5000 --runs 3 --device wgpu --precision f32 --no-st-peer
  "$out/ivf_train" --device wgpu --n 1000000
  ;;
*)
  echo "usage: $0 build|run" >&2
  exit 2
  ;;
esac
