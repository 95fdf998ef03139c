#!/usr/bin/env bash
# Call-graph ground truth with scip-python / scip-typescript (see README, "Call-graph quality").
#
#   scripts/callgraph/make_truth.sh [--out DIR] CASE...
#
# CASE is one of: python-json python-email python-asyncio ts-rxjs ts-query-core ts-immer,
# or `fixtures` (regenerates tests/fixtures/callgraph/*/truth.json in place from the vendored
# sources). For each other case DIR/CASE/ (default DIR: /work/callgraph-truth) receives the
# indexed sources (the root to score) and DIR/CASE/truth.json. Score with
#   cargo run --release -p cix-benches --bin callgraph -- --case DIR/CASE=DIR/CASE/truth.json
#
# Tools are installed with npm into $CIX_SCIP_CACHE (default /work/scip):
# @sourcegraph/scip-python@0.6.6, @sourcegraph/scip-typescript@0.4.0, typescript. The npm
# packages scored are installed into $CIX_SCIP_CACHE/pkgs. Python sources come from the
# interpreter's standard library ($CIX_PYLIB, default: python3's own, CPython 3.11.7 measured).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out=/work/callgraph-truth
if [[ "${1:-}" == "--out" ]]; then
    out="$2"
    shift 2
fi
cache="${CIX_SCIP_CACHE:-/work/scip}"
pylib="${CIX_PYLIB:-$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')}"
pyver="$(python3 -c 'import platform; print(platform.python_version())')"

tools() {
    if [[ ! -x "$cache/node_modules/.bin/scip-python" || ! -x "$cache/node_modules/.bin/scip-typescript" ]]; then
        mkdir -p "$cache"
        npm install --prefix "$cache" --no-audit --no-fund \
            @sourcegraph/scip-python@0.6.6 @sourcegraph/scip-typescript@0.4.0 typescript >&2
    fi
}

npm_pkg() { # name@version -> prints the installed package directory
    local spec="$1" name="${1%@*}"
    if [[ ! -f "$cache/pkgs/node_modules/$name/package.json" ]]; then
        mkdir -p "$cache/pkgs"
        [[ -f "$cache/pkgs/package.json" ]] || echo '{"private":true}' >"$cache/pkgs/package.json"
        npm install --prefix "$cache/pkgs" --ignore-scripts --no-audit --no-fund "$spec" >&2
    fi
    echo "$cache/pkgs/node_modules/$name"
}

# Indexes a copy of ROOT (a temp git repo: scip-python needs one plus --project-version, else
# it crashes with "reading 'indexOf'") and writes ROOT/truth.json. A stdlib package (ROOT/PKG)
# is renamed in the copy to a name of the same length that is not in the stdlib (`email` ->
# `xmail`, every whole-word use in every file): under its own name pyright reads the typeshed
# stub for `from email import errors` and resolves `errors.X` to nothing useful. Columns do not
# move, and the paths are mapped back.
index_python() { # root pkg source
    local root="$1" name="$2" source="$3" tmp alias
    alias="x${name:1}"
    tmp="$(mktemp -d)"
    cp -r "$root/." "$tmp/"
    rm -f "$tmp/truth.json"
    mv "$tmp/$name" "$tmp/$alias"
    find "$tmp/$alias" -name '*.py' -exec sed -i -E "s/\b$name\b/$alias/g" {} +
    (cd "$tmp" && git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm x &&
        "$cache/node_modules/.bin/scip-python" index . --project-name "$alias" --project-version 1 \
            --output index.scip >&2)
    python3 "$here/scip_truth.py" --index "$tmp/index.scip" --src-root "$root" --language python \
        --path-rename "$alias/=$name/" --source "$source" --root-name "$name" --out "$root/truth.json"
    rm -rf "$tmp"
}

index_ts() { # root name source
    local root="$1" name="$2" source="$3" tmp
    tmp="$(mktemp -d)"
    cp -r "$root/." "$tmp/"
    rm -f "$tmp/truth.json"
    [[ -f "$tmp/tsconfig.json" ]] || cat >"$tmp/tsconfig.json" <<'EOF'
{ "compilerOptions": { "target": "es2020", "module": "esnext", "moduleResolution": "node",
    "lib": ["es2020", "dom"], "strict": false, "skipLibCheck": true, "noEmit": true,
    "allowJs": false, "experimentalDecorators": true },
  "include": ["src/**/*.ts"] }
EOF
    (cd "$tmp" && "$cache/node_modules/.bin/scip-typescript" index --output index.scip >&2)
    python3 "$here/scip_truth.py" --index "$tmp/index.scip" --src-root "$root" \
        --language typescript --utf16 --exclude-suffix .d.ts --source "$source" \
        --root-name "$name" --out "$root/truth.json"
    rm -rf "$tmp"
}

py_case() { # case package
    local dst="$out/$1"
    rm -rf "$dst"
    mkdir -p "$dst"
    cp -r "$pylib/$2" "$dst/$2"
    find "$dst" -name __pycache__ -type d -prune -exec rm -rf {} +
    find "$dst" -type f ! -name '*.py' -delete
    index_python "$dst" "$2" "scip-python 0.6.6 over CPython $pyver Lib/$2"
}

ts_case() { # case npm-spec
    local dst="$out/$1" src
    src="$(npm_pkg "$2")"
    rm -rf "$dst"
    mkdir -p "$dst"
    (cd "$src" && find src -name '*.ts' ! -name '*.d.ts' -exec cp --parents {} "$dst/" \;)
    index_ts "$dst" "$2" "scip-typescript 0.4.0 over npm $2 src/**/*.ts"
}

tools
for case in "$@"; do
    case "$case" in
    python-json) py_case python-json json ;;
    python-email) py_case python-email email ;;
    python-asyncio) py_case python-asyncio asyncio ;;
    ts-rxjs) ts_case ts-rxjs rxjs@7.8.2 ;;
    ts-query-core) ts_case ts-query-core @tanstack/query-core@5.108.0 ;;
    ts-immer) ts_case ts-immer immer@11.2.10 ;;
    # Held out: scored once after the resolution work, never used to tune it.
    python-logging) py_case python-logging logging ;;
    python-http) py_case python-http http ;;
    ts-table-core) ts_case ts-table-core @tanstack/table-core@8.20.5 ;;
    ts-mobx) ts_case ts-mobx mobx@6.13.7 ;;
    fixtures)
        index_python "$repo/tests/fixtures/callgraph/python-json" json \
            "scip-python 0.6.6 over CPython 3.11.7 Lib/json"
        index_ts "$repo/tests/fixtures/callgraph/ts-immer" immer@11.2.10 \
            "scip-typescript 0.4.0 over npm immer@11.2.10 src/**/*.ts"
        ;;
    *)
        echo "unknown case $case" >&2
        exit 2
        ;;
    esac
done
