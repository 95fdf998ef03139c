#!/usr/bin/env python3
"""Check that CI's GPU build reuses the CPU build's third-party crates.

`scripts/test.sh` builds the workspace's tests, then `-p cix-kernels --features wgpu,cuda`.
Cargo resolves features per command: a shared crate whose feature set differs between the two is
compiled twice, and so is every crate above it. `workspace-hack/Cargo.toml` pins the union. This
script asks cargo for both unit graphs (no build; `--unit-graph` is unstable, hence
RUSTC_BOOTSTRAP) and lists every crate instance (host or target) present in both builds with
different features. Allowed: the burn/cubecl crates whose features the GPU backends change
(adding those to the CPU build would compile wgpu into it), and cix-kernels itself.

Exit status 1 when something else differs: add the union the report shows to
workspace-hack/Cargo.toml ([dependencies] for target, [build-dependencies] for host).
"""
import json
import os
import re
import subprocess
import sys

TARGET = "x86_64-unknown-linux-gnu"
ALLOWED = re.compile(r"^(burn(-[a-z]+)?|cubecl-environment|cix-kernels)@")
CPU = ["test", "--release", "--workspace", "--no-run"]
GPU = ["test", "--release", "-p", "cix-kernels", "--features", "wgpu,cuda", "--no-run"]


def instances(args):
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    out = subprocess.run(
        ["cargo", *args, "--target", TARGET, "-Z", "unstable-options", "--unit-graph"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found = {}
    for unit in json.loads(out)["units"]:
        kinds = unit["target"]["kind"]
        if unit["mode"] != "build" or not ({"lib", "rlib", "proc-macro"} & set(kinds)):
            continue
        side = "host" if unit["platform"] is None else "target"
        key = (unit["pkg_id"].split("#")[-1], side)
        found.setdefault(key, set()).update(unit["features"])
    return found


def main():
    cpu, gpu = instances(CPU), instances(GPU)
    shared = sorted(set(cpu) & set(gpu))
    bad = 0
    for key in shared:
        if cpu[key] == gpu[key]:
            continue
        pkg, side = key
        allowed = bool(ALLOWED.match(pkg))
        bad += not allowed
        print(
            f"{'allowed ' if allowed else 'DIFFERS '}{pkg} ({side}): "
            f"CPU-only {sorted(cpu[key] - gpu[key])}, GPU-only {sorted(gpu[key] - cpu[key])}"
        )
    print(f"{len(shared)} crate instances in both builds, {bad} with unexpected feature differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
