#!/usr/bin/env bash
# The GPU measurements (issues 6 and 18) on a machine with an NVIDIA GPU, in two steps:
#
#   scripts/gpu-bench.sh build   # here, with cargo, no network beyond the registries: one build of
#                                # the harnesses and the kernel tests with both GPU backends
#                                # (`--features wgpu,cuda`; CUDA builds offline through the
#                                # vendor/cubecl-llvm stand-in and NVRTC), stripped and compressed
#                                # together with the model into pieces of 55 MiB in
#                                # target/gpu-carry/ (the device tool carries at most 64 MiB per
#                                # call: carry one or two pieces per call, in quick succession)
#   scripts/gpu-bench.sh run [tests] [cuda] [fused] [latency] [group] [buildgroup] [scaling] [wgpu] [f32] [ivf] [cache] [corpus]
#                                # on the GPU machine (no cargo needed), each step under its own
#                                # time limit, everything also written to $OUT/gpu-bench.log:
#                                # (all parts when none is named):
#     1. the cubecl kernels against their CPU references on CUDA and on wgpu (Vulkan)
#     2. encoder parity against the numpy reference: f32, f16, bf16, auto on both backends
#     3. throughput on CIX_GPU_CHUNKS (default 50000) real code chunks (the .py files of the
#        machine's torch and transformers packages, copied out of the venv): CUDA and wgpu at
#        auto precision (f16 after its parity check) beside sentence-transformers fp16 at batch
#        sizes CIX_ST_BATCHES (default 256,512: the best two of 32-512 on an H100), the ratio to its best; then f32 on 10,000
#     3b. (fused) the encoder's fused GPU kernels against burn's ops (CIX_FUSED): none,
#        norm,gelu, the default (norm,gelu,flash-unit) and our attention kernel
#        (attention,norm,gelu), interleaved, twice on CUDA and once on wgpu at auto precision,
#        over CIX_FUSED_CHUNKS (default 20000) chunks
#     4. query embedding latency, one question at a time, GPU vs CPU (queryd --device; also
#        alone as `latency`)
#     4b. (group) the build's grouping: groups of 256 in chunk order vs longest first (`embed
#        --group 256`: tokens/s, padding, forward passes of each), then groups of 4096 (what
#        `indexer build` does on a GPU)
#     4c. (buildgroup) the same on the real build: `indexer build --device cuda` over the torch and
#        transformers corpus (or CIX_BUILD_CORPUS) at --embed-group 256 and 4096, interleaved
#        (CIX_BUILD_GROUPS)
#     4d. (scaling) the non-embedding pipeline bench on 1-16 of the host's cores
#     5. IVF k-means 1M x 384 on CUDA vs FAISS on the CPU
#     6. (cache) the GPU kernel cache: the same CUDA throughput and query-latency run twice, each
#        in a new process, over one fresh CIX_GPU_CACHE: the first compiles every kernel, the
#        second finds them in the cache
#     7. (corpus) the real large-corpus benchmark (benches/src/bin/corpus.rs) on the .py files of
#        ten packages of the machine's Python (the 336k-chunk class of issue 16): `indexer build
#        --device cuda` with phase times and peak RSS, then warm queryd over MCP (all cores, then
#        pinned to one core) and recall@10 against exact search
#
# Vulkan on a machine without the loader: unpack libvulkan1 first (see the device README); set
# VK_DRIVER_FILES to NVIDIA's ICD if no driver is found. CUDA needs the driver's libcuda and
# NVRTC (libnvrtc from the toolkit or the nvidia-cuda-nvrtc wheel), both loaded at run time.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out="$here/target/gpu-bench"
case "${1:-}" in
build)
  cd "$here"
  target="${CARGO_TARGET_DIR:-$here/target}"
  cargo build --release -p cix-benches -p cix-indexer -p cix-queryd \
    --features cix-benches/wgpu,cix-benches/cuda,cix-indexer/wgpu,cix-indexer/cuda,cix-queryd/wgpu,cix-queryd/cuda \
    --bin embed --bin ivf_train --bin corpus --bin indexer --bin queryd --bin pipeline
  rm -rf "$out" && mkdir -p "$out"
  for b in embed ivf_train corpus indexer queryd pipeline; do cp "$target/release/$b" "$out/"; done
  # The kernel tests (unit tests: cubecl kernels vs CPU references; parity.rs: the encoder on
  # the GPU vs the numpy reference, f16/bf16 parity).
  cargo test --release -p cix-kernels --features wgpu,cuda --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] in ("kernels", "parity", "gpu_cache"):
        shutil.copy(m["executable"], sys.argv[1] + "/test-" + m["target"]["name"])
' "$out"
  strip "$out"/*
  # Shared libraries the binaries link that a bare GPU image may lack or hold in another build
  # (OpenBLAS and its libblas.so.3 front for FAISS: a machine's own libblas.so.3 may be a
  # different BLAS than the libopenblas.so.0 carried beside it).
  mkdir -p "$out/lib"
  for b in "$out"/embed "$out"/ivf_train "$out"/indexer "$out"/queryd; do
    ldd "$b" | awk '/=> \// {print $3}' | grep -E 'blas|lapack|gfortran|quadmath|gomp' || true
  done | sort -u | xargs -r -I{} cp -L {} "$out/lib/"
  carry="$here/target/gpu-carry"
  rm -rf "$carry" && mkdir -p "$carry"
  { tar -C "$here/target" -cf - gpu-bench; tar -C "$here" -cf - models/all-MiniLM-L6-v2; } |
    xz -T0 -6 | split -b 55M - "$carry/gpu.tar.xz.part-"
  ls -la "$carry"
  ;;
run)
  cd "$here"
  carry="$here/target/gpu-carry"
  if [ ! -x "$out/indexer" ] || [ ! -f models/all-MiniLM-L6-v2/model.safetensors ]; then
    cat "${CIX_CARRY_DIR:-$carry}"/gpu.tar.xz.part-* | xz -d | tar -C "$here" -xif - --transform 's,^gpu-bench,target/gpu-bench,'
  fi
  log="${OUT:-$here/target}/gpu-bench.log"
  exec > >(tee -a "$log") 2>&1
  export CIX_MODEL_DIR="${CIX_MODEL_DIR:-$here/models/all-MiniLM-L6-v2}"
  export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}" CIX_REQUIRE_WGPU=1 CIX_REQUIRE_CUDA=1
  export CUDA_PATH="${CUDA_PATH:-/usr/local/cuda}"
  nvrtc=$(python3 -c 'import nvidia.cuda_nvrtc, os; print(os.path.join(list(nvidia.cuda_nvrtc.__path__)[0], "lib"))' 2>/dev/null || true)
  export LD_LIBRARY_PATH="$out/lib:$CUDA_PATH/lib64:${nvrtc:+$nvrtc:}${LD_LIBRARY_PATH:-}"
  step() { # step SECONDS NAME COMMAND...: one measurement under its own limit; a failure is reported, the rest still run
    local limit=$1 name=$2; shift 2
    echo "=== $name ($(date -u +%T), limit ${limit}s)"
    timeout "$limit" "$@" || echo "=== $name FAILED (exit $?)"
  }
  want() { [ -z "$parts" ] || [[ " $parts " == *" $1 "* ]]; }
  parts="${*:2}"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
  if want tests; then
    # parity.rs reads its fixture relative to the crate.
    cd crates/kernels
    step 120 "kernels on cuda" env CIX_GPU_RUNTIME=cuda "$out/test-kernels" gpu
    step 120 "kernels on wgpu" env CIX_GPU_RUNTIME=wgpu "$out/test-kernels" gpu
    step 180 "parity (wgpu, cuda)" "$out/test-parity" cuda_ wgpu_ --nocapture --test-threads 1
    step 180 "parity, our attention kernel (CIX_FUSED=attention,norm,gelu)" env CIX_FUSED=attention,norm,gelu "$out/test-parity" cuda_ wgpu_ --nocapture --test-threads 1
    step 180 "parity, burn's ops only (CIX_FUSED=none)" env CIX_FUSED=none "$out/test-parity" cuda_ wgpu_ --nocapture --test-threads 1
    step 120 "kernel cache across processes on cuda" env CIX_GPU_RUNTIME=cuda "$out/test-gpu_cache" --nocapture
    cd "$here"
  fi
  corpus=/tmp/cix-corpus
  if [ ! -d "$corpus" ]; then
    sp=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
    mkdir -p "$corpus"
    (cd "$sp" && find torch transformers -name '*.py' -print0 | tar --null -cf - -T - | tar -C "$corpus" -xf -)
  fi
  n="${CIX_GPU_CHUNKS:-50000}" runs="${CIX_GPU_RUNS:-2}"
  want cuda && step 300 "cuda auto vs sentence-transformers" "$out/embed" "$corpus" --chunks "$n" \
    --runs "$runs" --device cuda --precision auto --st-peer \
    --st-batches "${CIX_ST_BATCHES:-256,512}" --query-latency 200
  # The fused kernels (attention; bias + residual + LayerNorm; bias + GELU) against burn's
  # separate ops, same binary, interleaved so that drift hits every setting alike.
  if want fused; then
    settings="none norm,gelu norm,gelu,flash-unit attention,norm,gelu"
    for dev in cuda cuda wgpu; do
      for f in $settings; do
        step 120 "fused: CIX_FUSED=$f on $dev" env CIX_FUSED="$f" "$out/embed" "$corpus" \
          --chunks "${CIX_FUSED_CHUNKS:-20000}" --runs 2 --device "$dev" --precision auto --no-st-peer
      done
    done
  fi
  # Query embedding as queryd does it (`embed_query`: the CPU's half-precision query path, the
  # GPU's batch path), one question at a time, beside the host CPU, without the throughput run's
  # cost (2,000 chunks, one run).
  want latency && step 90 "query embedding latency, cuda vs cpu" "$out/embed" "$corpus" \
    --chunks 2000 --runs 1 --device cuda --precision auto --no-st-peer --query-latency 200
  # The build's way of embedding (groups of 256 texts, each read back before the next): chunk
  # order (what the build does) against longest first, on the first 20,000 chunks in walk order.
  want group && step 150 "cuda auto, groups of 256: chunk order vs longest first" "$out/embed" \
    "$corpus" --chunks "${CIX_GROUP_CHUNKS:-20000}" --runs 2 --device cuda --precision auto \
    --no-st-peer --group 256
  # Larger groups (`indexer build --embed-group N`): fewer read-backs, sorting over more texts.
  want group && step 150 "cuda auto, groups of 4096: chunk order vs longest first" "$out/embed" \
    "$corpus" --chunks "${CIX_GROUP_CHUNKS:-20000}" --runs 2 --device cuda --precision auto \
    --no-st-peer --group 4096
  # The same question on the real build: `indexer build --device cuda` over the torch and
  # transformers corpus at --embed-group 256 (the CPU's default) and 4096 (the GPU's), twice
  # each, interleaved, after a small build that fills this executable's kernel cache; the
  # `time:` line has the phases (embed is the one that changes).
  if want buildgroup; then
    small=$(find "$corpus/transformers/models" -maxdepth 1 -type d -name 'bert*' | head -1)
    step 120 "buildgroup: warm-up build (kernel cache)" "$out/indexer" build "${small:-$corpus}" \
      --out /tmp/cix-bg-warm --device cuda --rebuild --quiet
    for g in ${CIX_BUILD_GROUPS:-256 4096 256 4096}; do
      rm -rf /tmp/cix-bg
      step 200 "buildgroup: indexer build --device cuda --embed-group $g" "$out/indexer" build \
        ${CIX_BUILD_CORPUS:-$corpus} --out /tmp/cix-bg --device cuda --embed-group "$g" --quiet
    done
  fi
  # The non-embedding pipeline (walk, parse, graph, BM25, writes; the hash stand-in for the
  # model) on 16, 8, 4, 2 and 1 of the host's cores (taskset, rayon's and OpenMP's threads), on
  # the transformers corpus (or CIX_SCALING_CORPUS): how it scales with cores.
  if want scaling; then
    for c in ${CIX_SCALING_CORES:-16 8 4 2 1}; do
      step 150 "scaling: pipeline on $c core(s)" env RAYON_NUM_THREADS="$c" OMP_NUM_THREADS="$c" \
        taskset -c "0-$((c - 1))" "$out/pipeline" ${CIX_SCALING_CORPUS:-$corpus/transformers} \
        --runs 1 --no-peer
    done
  fi
  want ivf && step 150 "ivf k-means on cuda vs faiss, top-k kernels" "$out/ivf_train" --device cuda --n 1000000
  want wgpu && step 150 "wgpu auto" "$out/embed" "$corpus" --chunks "$n" --runs "$runs" \
    --device wgpu --precision auto --no-st-peer --query-latency 200
  if want cache; then
    # A cache no earlier process filled; the rest of the run keeps its default cache.
    kc=$(mktemp -d /tmp/cix-kernel-cache.XXXX)
    for pass in 1 2; do
      step 150 "cuda auto, kernel cache pass $pass of 2 (new process)" env CIX_GPU_CACHE="$kc" \
        "$out/embed" "$corpus" --chunks "${CIX_CACHE_CHUNKS:-20000}" --runs 1 --device cuda \
        --precision auto --no-st-peer --query-latency 200
      du -sh "$kc" || true
    done
  fi
  if want corpus; then
    sp=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
    big=/tmp/cix-big
    if [ ! -d "$big" ]; then
      mkdir -p "$big"
      (cd "$sp" && find transformers torch scipy sklearn jax pandas numpy sympy networkx matplotlib \
        -name '*.py' -print0 2>/dev/null | tar --null -cf - -T - | tar -C "$big" -xf -) || true
    fi
    echo "corpus: $(find "$big" -name '*.py' | wc -l) files, $(du -sm "$big" | cut -f1) MB"
    step 420 "corpus: build on cuda, queryd on all cores" "$out/corpus" --corpus "$big" \
      --index /tmp/cix-big-index --device cuda --bin "$out" --rebuild \
      ${CIX_EMBED_GROUP:+--embed-group "$CIX_EMBED_GROUP"}
    step 150 "corpus: queryd pinned to one core" taskset -c 3 "$out/corpus" --corpus "$big" \
      --index /tmp/cix-big-index --bin "$out"
  fi
  if want f32; then
    step 90 "cuda f32" "$out/embed" "$corpus" --chunks 10000 --runs 1 --device cuda --precision f32 --no-st-peer
    step 90 "wgpu f32" "$out/embed" "$corpus" --chunks 10000 --runs 1 --device wgpu --precision f32 --no-st-peer
  fi
  true
  ;;
*)
  echo "usage: $0 build|run" >&2
  exit 2
  ;;
esac
