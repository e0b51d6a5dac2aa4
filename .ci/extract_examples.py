"""Writes every ```rust block of the given Markdown files as an example of a
scratch crate, exactly as a reader sees it and would paste it. Markdown
viewers show rustdoc's hidden lines (`# `) verbatim, so a block may have
none, and each must have its own `fn main`.

    python3 .ci/extract_examples.py OUT_DIR README.md docs/*.md
"""
import pathlib
import re
import sys

out = pathlib.Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
count = 0
for path in sys.argv[2:]:
    text = pathlib.Path(path).read_text(encoding="utf-8")
    for n, block in enumerate(re.findall(r"^```rust[^\n]*\n(.*?)^```", text, re.S | re.M)):
        hidden = [l for l in block.splitlines() if l == "#" or l.startswith("# ")]
        if hidden:
            sys.exit(f"{path}: rust block {n + 1} has hidden lines, shown verbatim outside rustdoc: {hidden[0]!r}")
        code = block
        if "fn main" not in code:
            sys.exit(f"{path}: rust block {n + 1} has no fn main: a user could not paste it")
        name = re.sub(r"[^a-z0-9]+", "_", pathlib.Path(path).stem.lower()) + f"_{n + 1}"
        (out / f"{name}.rs").write_text(code, encoding="utf-8")
        count += 1
print(f"{count} examples from {len(sys.argv) - 2} files")
