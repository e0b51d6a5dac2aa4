#!/usr/bin/env bash
# Schedule exploration of the client's own threads (src/sync.rs,
# docs/testing.md): builds the library's unit tests with `--cfg loom` on
# the library alone (`cargo rustc` passes it to this crate only, so no
# dependency is rebuilt; the binary sits beside the plain one, whose name
# hash differs) and runs the `loom_checks` tests. Extra arguments go to
# the test binary (`--exact NAME`, `--nocapture`).
set -euo pipefail
cd "$(dirname "$0")/.."

binary="$(cargo rustc --lib --profile test --message-format=json-render-diagnostics \
  -- --cfg loom -D warnings |
  python3 -c '
import json, sys
paths = [m["executable"] for m in map(json.loads, sys.stdin)
         if m.get("reason") == "compiler-artifact" and m.get("executable")]
print(paths[-1] if paths else "")
')"
if [ -z "$binary" ]; then
  echo "== loom: no test binary was built" >&2
  exit 1
fi
"$binary" loom_checks "$@"
