"""Checks that Cargo.toml's rust-version is at least the rust-version every
dependency of the library declares (normal and build dependencies reachable
with every feature on; dev-dependencies do not reach users). Toolchains
cannot be downloaded here, so this is the check, not an MSRV build.

    python3 .ci/msrv.py
"""
import json
import subprocess
import sys


def version(v):
    parts = [int(x) for x in v.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


meta = json.loads(
    subprocess.check_output(
        ["cargo", "metadata", "--format-version", "1", "--all-features", "--locked"]
    )
)
packages = {p["id"]: p for p in meta["packages"]}
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
root = meta["resolve"]["root"] or next(
    p["id"] for p in meta["packages"] if p["name"] == "redfence"
)
ours = packages[root].get("rust_version")
if not ours:
    sys.exit("Cargo.toml has no rust-version")

seen, stack, worst = set(), [root], []
while stack:
    node = nodes[stack.pop()]
    for dep in node["deps"]:
        kinds = {k["kind"] for k in dep["dep_kinds"]}
        if node["id"] == root and kinds == {"dev"}:
            continue
        if dep["pkg"] not in seen:
            seen.add(dep["pkg"])
            stack.append(dep["pkg"])
for pkg in seen:
    p = packages[pkg]
    rv = p.get("rust_version")
    if rv and version(rv) > version(ours):
        worst.append(f"{p['name']} {p['version']} needs {rv}")
needed = max(
    (packages[p].get("rust_version") or "0" for p in seen), key=version, default="0"
)
if worst:
    sys.exit(f"rust-version {ours} is below what dependencies need:\n  " + "\n  ".join(sorted(worst)))
print(f"rust-version {ours}: covers all {len(seen)} dependencies (highest needs {needed})")
