#!/usr/bin/env bash
# Structural checks of the workspace (tests/tests/layering.rs), with their report shown: no
# file-level import cycles inside a crate, crate dependencies only downwards (the ALLOWED
# table), long files stating why. Reads the sources only (no model, no build artifacts).
# Extra arguments go to the test harness, e.g. `scripts/layering.sh no_file_import_cycles`.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
# One test at a time so the reports do not interleave.
RUST_BACKTRACE=0 exec cargo test --release -p cix-tests --test layering -- --nocapture --test-threads=1 "$@"
