#!/usr/bin/env bash
# The main job on a fresh machine: set up, build, index a repository (default: this one) and
# answer a sample query from that index.
#   scripts/quickstart.sh [REPO_PATH] [QUERY]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
repo="${1:-$here}"
query="${2:-how are segment files checksummed and validated when opened}"
"$here/scripts/setup.sh"
cd "$here"
cargo build --release --bins
out="$here/.cache/index-$(basename "$(cd "$repo" && pwd)")"
export CIX_MODEL_DIR="$here/models/all-MiniLM-L6-v2"
# The index is this script's own cache: one left by an older version (or damaged) is rebuilt.
rebuild=()
if [ -f "$out/MANIFEST" ] && ! ./target/release/indexer verify "$out" >/dev/null 2>&1; then
    echo "quickstart: the cached index in $out is from another version or damaged; rebuilding it"
    rebuild=(--rebuild)
fi
./target/release/indexer build "$repo" --out "$out" "${rebuild[@]}"
echo
echo "query: $query"
./target/release/queryd search --index "$out" "$query"
