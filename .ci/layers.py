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

    python3 .ci/layers.py             # check; exit 1 on a circle or an upward import
    python3 .ci/layers.py --graph     # print every module's imports
    python3 .ci/layers.py --self-test # plants upward references the check must report

Comments and literals are removed by reading the source token by token
(`strip_comments`): a `//` inside `"redis://"` starts no comment, and a
path may be split over lines (`crate::transport\n    ::tls::describe`).
"""
import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
LAYERS = ["base", "protocol", "transport", "lock", "api"]
BASE = {"error", "token", "options", "telemetry", "address", "cancel", "tls_error", "sync"}
SKIP = {"bin", "testing"}


def module_of(path: Path, src_dir: Path = SRC) -> str:
    parts = list(path.relative_to(src_dir).with_suffix("").parts)
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return "::".join(parts)


def layer_of(module: str) -> str:
    head = module.split("::")[0]
    if head in BASE:
        return "base"
    return head if head in LAYERS[1:-1] else "api"


def strip_comments(text: str) -> str:
    """The source with comments removed and every string, byte string, raw
    string and character literal emptied, read token by token: a `//`
    inside `"redis://"` is no comment, a `"` inside a comment or a char
    literal opens no string, block comments nest."""
    out, i, n = [], 0, len(text)
    while i < n:
        ch, nxt = text[i], text[i + 1 : i + 2]
        if ch == "/" and nxt == "/":
            while i < n and text[i] != "\n":
                i += 1
        elif ch == "/" and nxt == "*":
            depth, i = 1, i + 2
            while i < n and depth:
                pair = text[i : i + 2]
                depth += (pair == "/*") - (pair == "*/")
                i += 2 if pair in ("/*", "*/") else 1
            out.append(" ")
        elif raw := re.match(r'b?r(#*)"', text[i:]) if ch in "rb" and not _ident(text, i) else None:
            end = text.find('"' + raw.group(1), i + raw.end())
            i = n if end < 0 else end + 1 + len(raw.group(1))
            out.append('""')
        elif ch == '"' or (ch == "b" and nxt == '"' and not _ident(text, i)):
            i += 1 if ch == '"' else 2
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""')
        elif ch == "'" and (m := re.match(r"'(?:\\.[^']*|[^\\'])'", text[i:])):
            i += m.end()
            out.append("' '")
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _ident(text: str, i: int) -> bool:
    """Whether position i continues an identifier (so `r"` there is not a
    raw string: `for"` cannot occur, but `bar"` could in a macro)."""
    return i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")


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
    if "--self-test" in sys.argv:
        return self_test()
    problems, graph = check(SRC)
    if "--graph" in sys.argv:
        for module in sorted(graph):
            print(f"{module} [{layer_of(module)}] -> {', '.join(sorted(graph[module]))}")
    for p in problems:
        print(p)
    print(f"{len(graph)} modules, {sum(map(len, graph.values()))} imports, {len(problems)} problems")
    return 1 if problems else 0


def self_test() -> int:
    """Plants, in a copy of src/, an upward reference by full path on a line
    of a file that holds URL strings, and one split over two lines, and
    expects both reported (the check once lost both)."""
    import shutil
    import tempfile

    plants = {
        "address.rs": (
            '\nfn planted_a() { let _u = "redis://host:6379"; '
            "let _ = crate::lock::moment::Moment::now(); }\n",
            "upward: address (base) uses lock::moment (lock)",
        ),
        "options.rs": (
            "\nfn planted_b() { let _ = crate::transport\n    ::round::yes_no; }\n",
            "upward: options (base) uses transport::round (transport)",
        ),
    }
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(SRC, src)
        for name, (code, _) in plants.items():
            with open(src / name, "a") as f:
                f.write(code)
        problems, _ = check(src)
    missed = [want for _, want in plants.values() if want not in problems]
    for want in missed:
        print(f"self-test: not reported: {want}")
    print(f"self-test: {len(plants) - len(missed)} of {len(plants)} planted references reported")
    return 1 if missed else 0


def check(src_dir: Path):
    """The problems found under `src_dir`, and the module graph."""
    files = {
        module_of(p, src_dir): p
        for p in src_dir.rglob("*.rs")
        if p.relative_to(src_dir).parts[0] not in SKIP
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
        for m in re.finditer(r"(?<!use )\bcrate\s*::\s*((?:\w+\s*::\s*)*\w+)", text, re.S):
            refs.add(resolve(re.sub(r"\s+", "", m.group(1)), modules, reexports))
        parent = module.rsplit("::", 1)[0] if "::" in module else None
        for m in re.finditer(r"\bsuper::((?:\w+::)*\w+)", text):
            base = parent if path.name != "mod.rs" else module.rsplit("::", 1)[0] if "::" in module else ""
            full = f"{base}::{m.group(1)}" if base else m.group(1)
            refs.add(resolve(full, modules, reexports))
        refs.discard(None)
        refs.discard(module)
        # A module's own submodules and its parent folder are one unit.
        graph[module] = {r for r in refs if not r.startswith(module + "::")}

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
    return problems, graph


if __name__ == "__main__":
    sys.exit(main())
