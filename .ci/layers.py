#!/usr/bin/env python3
"""Checks the library's layering: no import circle between src/ modules,
and no module importing from a layer above its own.

A module is a file under src/ (a folder's mod.rs is the folder's module);
src/bin/ and src/testing/ are programs and test support built on the public
API, so they are not checked. A reference is any `crate::path` in a `use`
or in code; an item taken through a re-export of the crate root (`crate::
Error`) counts as a reference to the module that defines it.

Layers, lowest first (docs/architecture.md): the vocabulary every layer
speaks (`BASE`: public types such as `Error` and `FencingToken`, flat under
src/, using only each other), `protocol` (what goes on the wire),
`transport` (connections, workers, fan-out, cluster routing,
notifications), `lock` (the algorithm), and the public API at the top (the
other files directly under src/). A module may use its own layer and the
layers below.

    python3 .ci/layers.py          # check; exit 1 on a circle or an upward import
    python3 .ci/layers.py --graph  # print every module's imports
"""
import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
LAYERS = ["base", "protocol", "transport", "lock", "api"]
BASE = {"error", "token", "options", "telemetry", "address", "cancel"}
SKIP = {"bin", "testing"}


def module_of(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return "::".join(parts)


def layer_of(module: str) -> str:
    head = module.split("::")[0]
    if head in BASE:
        return "base"
    return head if head in LAYERS[1:-1] else "api"


def strip_comments(text: str) -> str:
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def expand(tree: str, prefix: str = ""):
    """Paths of a use tree: `a::{b, c::{d}}` -> a::b, a::c::d."""
    tree = tree.strip()
    if not tree:
        return
    depth, start, head = 0, None, tree
    for i, ch in enumerate(tree):
        if ch == "{" and depth == 0:
            head, start = tree[:i], i
            break
        depth += ch == "{"
    if start is None:
        yield prefix + re.sub(r"\s+as\s+\w+$", "", tree)
        return
    inner, depth, item = tree[start + 1 : tree.rindex("}")], 0, ""
    for ch in inner + ",":
        if ch == "," and depth == 0:
            yield from expand(item, prefix + head)
            item = ""
            continue
        depth += (ch == "{") - (ch == "}")
        item += ch


def resolve(path: str, modules: set, reexports: dict):
    """The module a `crate::...` path lands in, or None for the root."""
    parts = [p for p in path.split("::") if p and p != "self"]
    for n in range(len(parts), 0, -1):
        candidate = "::".join(parts[:n])
        if candidate in modules:
            return candidate
    if parts and parts[0] in reexports:
        return reexports[parts[0]]
    return None


def main() -> int:
    files = {
        module_of(p): p
        for p in SRC.rglob("*.rs")
        if p.relative_to(SRC).parts[0] not in SKIP
    }
    modules = set(files) - {""}
    reexports = {}
    for line in strip_comments(files[""].read_text()).split(";"):
        m = re.match(r"\s*(?:#\[[^\]]*\]\s*)*pub use\s+(.*)", line, re.S)
        if m:
            for path in expand(m.group(1)):
                target = resolve(path, modules, {})
                if target:
                    reexports[path.split("::")[-1]] = target
    graph = {}
    for module, path in files.items():
        if not module:
            continue
        text = strip_comments(path.read_text())
        refs = set()
        for m in re.finditer(r"\buse\s+crate::(.*?);", text, re.S):
            for p in expand(m.group(1)):
                refs.add(resolve(p, modules, reexports))
        for m in re.finditer(r"(?<!use )\bcrate::((?:\w+::)*\w+)", text):
            refs.add(resolve(m.group(1), modules, reexports))
        parent = module.rsplit("::", 1)[0] if "::" in module else None
        for m in re.finditer(r"\bsuper::((?:\w+::)*\w+)", text):
            base = parent if path.name != "mod.rs" else module.rsplit("::", 1)[0] if "::" in module else ""
            full = f"{base}::{m.group(1)}" if base else m.group(1)
            refs.add(resolve(full, modules, reexports))
        refs.discard(None)
        refs.discard(module)
        # A module's own submodules and its parent folder are one unit.
        graph[module] = {r for r in refs if not r.startswith(module + "::")}

    if "--graph" in sys.argv:
        for module in sorted(graph):
            print(f"{module} [{layer_of(module)}] -> {', '.join(sorted(graph[module]))}")

    problems = []
    for module, refs in sorted(graph.items()):
        for r in sorted(refs):
            if LAYERS.index(layer_of(r)) > LAYERS.index(layer_of(module)):
                problems.append(f"upward: {module} ({layer_of(module)}) uses {r} ({layer_of(r)})")
    # Circles: strongly connected components of more than one module,
    # not counting a folder's own files among themselves via its mod.rs.
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = counter[0]; counter[0] += 1
        stack.append(v); on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            comps.append(comp)
    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    def unit(m):
        """A folder with a mod.rs of its own code (cluster, notify) is one
        unit with the files inside it; a layer's folder is not."""
        parent = m.rsplit("::", 1)[0] if "::" in m else None
        return parent if parent in graph and parent not in LAYERS else m

    for comp in comps:
        if len({unit(m) for m in comp}) > 1:
            problems.append("circle: " + " <-> ".join(sorted(comp)))
    for p in problems:
        print(p)
    print(f"{len(graph)} modules, {sum(map(len, graph.values()))} imports, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
