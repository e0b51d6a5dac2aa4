#!/usr/bin/env python3
"""Fails when a public operation of redfence that sends requests is called
by no workload of the nemesis bench (examples/nemesis/*.rs).

What is listed: the public methods of `Redlock` (every `impl Redlock`
block of src/), of the guards (`LockGuard`, `MultiGuard`, `Permit`, and
the methods the `lease_methods!` and `rw_guard!` macros give every guard,
`ReadGuard` and `WriteGuard` included), of `Semaphore`, `RwLock`,
`Election` and `Leadership`, and the free functions of src/fenced.rs.
Each must be called somewhere in the bench, unless it is on ALLOWED below
(it sends nothing: a getter, a builder step, a local wait), with its
reason.

A call is found textually, with the comments left out: `.name(` for a
method, `Type::name(` for an associated function, `name(` for a free
function, with as many arguments as the definition takes (so the
parameterless `.lock()` of a mutex is not `Redlock::lock(resource)`).
It cannot tell two types' methods of one name and arity apart: the list
of names below is what keeps it honest.

    python3 .ci/bench_coverage.py             # exit 0: every one is called
    python3 .ci/bench_coverage.py --self-test # plants a method nobody calls

Exit 0: covered; 1: a method is not called (each named), an allow-list
entry names no method, or the self-test failed; 2: the sources are missing.
"""

import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The types whose methods are listed, and the files to read them from.
TYPES = ("Redlock", "LockGuard", "MultiGuard", "Permit", "Semaphore", "RwLock",
         "Election", "Leadership")
# Macros in src/guard.rs whose methods every guard has.
GUARD_MACROS = ("lease_methods", "rw_guard")
FREE_FUNCTION_FILES = ("fenced.rs",)

# Methods that send nothing, each with why. Keyed `Type::name`; `guards::`
# for what every guard has.
ALLOWED = {
    "Redlock::builder": "returns a builder; build() connects, the calls send",
    "Redlock::identity": "a getter of the configured identity",
    "Redlock::instance_count": "a getter of the configuration",
    "Redlock::quorum": "arithmetic on the instance count",
    "Redlock::semaphore": "makes a handle; its acquire calls send",
    "Redlock::rw_lock": "makes a handle; its read and write calls send",
    "Semaphore::name": "a getter",
    "Semaphore::permits": "a getter",
    "RwLock::name": "a getter",
    "Election::lease": "a builder step",
    "Election::cancel": "a builder step",
    "Election::name": "a getter",
    "Leadership::term": "a getter of the token the campaign returned",
    "Leadership::is_leader": "reads the lease's local state (the watchdog sends)",
    "Leadership::ensure_leader": "reads the lease's local state",
    "Leadership::validity": "local arithmetic on the lease",
    "Leadership::loss_signal": "a local channel",
    "Leadership::election": "a getter",
    "Leadership::identity": "a getter",
    "LockGuard::token": "a getter",
    "LockGuard::resource": "a getter",
    "MultiGuard::token": "a getter",
    "MultiGuard::resources": "a getter",
    "Permit::semaphore": "a getter",
    "Permit::slot": "a getter",
    "Permit::token": "a getter",
    "guards::token": "a getter (rw_guard!)",
    "guards::validity": "local arithmetic on the lease",
    "guards::is_held": "reads the lease's local state (the watchdog sends)",
    "guards::ensure_held": "reads the lease's local state",
    "guards::wait_lost": "waits on a local channel",
    "guards::loss_signal": "a local channel",
}


def strip(code):
    """The code with comments, string and char literals blanked (lengths
    kept), so braces and parentheses can be counted."""
    out = []
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if code.startswith("//", i):
            j = code.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif code.startswith("/*", i):
            j = code.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", code[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and code[j] != '"':
                j += 2 if code[j] == "\\" else 1
            out.append('"' + re.sub(r"[^\n]", " ", code[i + 1:j]) + '"')
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", code[i:i + 4]):
            m = re.match(r"'(\\.|[^\\'])'", code[i:i + 4])
            out.append("' '".ljust(len(m.group(0))))
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def closing(code, at, open_, close):
    """The index just past the bracket closing the one at `at`."""
    depth = 0
    for i in range(at, len(code)):
        if code[i] == open_:
            depth += 1
        elif code[i] == close:
            depth -= 1
            if depth == 0:
                return i + 1
    return len(code)


def arguments(text):
    """How many top-level, comma-separated arguments `text` (between the
    parentheses) has."""
    depth, count, seen = 0, 0, False
    for c in text:
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        elif c == "," and depth == 0:
            count += 1
            seen = False
            continue
        if not c.isspace():
            seen = True
    return count + (1 if seen else 0)


def functions(code):
    """(name, takes self, arity without self) of every `pub fn` in `code`
    at the top level of it (not in nested blocks)."""
    found = []
    depth = 0
    i = 0
    pattern = re.compile(r"pub fn (\w+)\s*(<[^(]*>)?\s*\(")
    while i < len(code):
        m = pattern.match(code, i) if depth == 0 else None
        if m:
            start = m.end() - 1
            end = closing(code, start, "(", ")")
            params = code[start + 1:end - 1]
            arity = arguments(params)
            has_self = re.match(r"\s*(&\s*(mut\s+)?|mut\s+)?self\b", params) is not None
            found.append((m.group(1), has_self, arity - (1 if has_self else 0)))
            i = end
            continue
        if code[i] == "{":
            depth += 1
        elif code[i] == "}":
            depth -= 1
        i += 1
    return found


def blocks(code, header):
    """The bodies of every block whose header matches `header` (a regex
    ending just before its `{`)."""
    for m in re.finditer(header, code):
        brace = code.find("{", m.end() - 1)
        if brace >= 0:
            yield code[brace + 1:closing(code, brace, "{", "}") - 1]


def listed(src):
    """`Type::name` -> (takes self, arity) of every public operation."""
    ops = {}
    for name in sorted(os.listdir(src)):
        if not name.endswith(".rs"):
            continue
        with open(os.path.join(src, name), encoding="utf-8") as f:
            code = strip(f.read())
        for ty in TYPES:
            for body in blocks(code, rf"\bimpl\s+{ty}\s*\{{"):
                for fn, has_self, arity in functions(body):
                    ops[f"{ty}::{fn}"] = (has_self, arity)
        for macro in GUARD_MACROS:
            for body in blocks(code, rf"macro_rules!\s*{macro}\s*\{{"):
                for fn, has_self, arity in functions(strip_macro(body)):
                    ops[f"guards::{fn}"] = (has_self, arity)
        if name in FREE_FUNCTION_FILES:
            for fn, has_self, arity in functions(code):
                ops[f"fn::{fn}"] = (has_self, arity)
    return ops


def strip_macro(body):
    """Every `pub fn` of a macro, whatever its nesting: their bodies are
    removed, the rest of the braces dropped."""
    out, i = [], 0
    pattern = re.compile(r"pub fn \w+")
    while i < len(body):
        m = pattern.search(body, i)
        if not m:
            break
        brace = body.find("{", m.end())
        if brace < 0:
            break
        out.append(body[m.start():brace] + "{}")
        i = closing(body, brace, "{", "}")
    return "\n".join(out)


def called(examples):
    """The bench's code, comments and strings blanked, in one text."""
    texts = []
    for name in sorted(os.listdir(examples)):
        if name.endswith(".rs"):
            with open(os.path.join(examples, name), encoding="utf-8") as f:
                texts.append(strip(f.read()))
    return "\n".join(texts)


def is_called(key, has_self, arity, code):
    ty, fn = key.split("::")
    if has_self:
        pattern = rf"\.\s*{fn}\s*(::\s*<[^>]*>\s*)?\("
    elif ty == "fn":
        pattern = rf"(?<!fn )\b{fn}\s*(::\s*<[^>]*>\s*)?\("
    else:
        pattern = rf"\b{ty}\s*::\s*{fn}\s*(::\s*<[^>]*>\s*)?\("
    for m in re.finditer(pattern, code):
        start = m.end() - 1
        end = closing(code, start, "(", ")")
        if arguments(code[start + 1:end - 1]) == arity:
            return True
    return False


def check(src, examples, allowed):
    """Every problem, as text."""
    ops = listed(src)
    code = called(examples)
    problems = []
    for key, (has_self, arity) in sorted(ops.items()):
        if key in allowed:
            continue
        if not is_called(key, has_self, arity, code):
            problems.append(f"{key} ({arity} argument{'s' * (arity != 1)}) sends requests and "
                            f"no workload calls it: call it in examples/nemesis, or, if it sends "
                            f"nothing, allow-list it in .ci/bench_coverage.py with a reason")
    for key in sorted(set(allowed) - set(ops)):
        problems.append(f"{key} is allow-listed but is no public method any more")
    return ops, problems


def main():
    src, examples = os.path.join(ROOT, "src"), os.path.join(ROOT, "examples", "nemesis")
    if not os.path.isdir(src) or not os.path.isdir(examples):
        print(f"bench_coverage: {src} or {examples} is missing", file=sys.stderr)
        return 2
    ops, problems = check(src, examples, ALLOWED)
    for p in problems:
        print(f"NOT COVERED: {p}")
    sends = len(ops) - len(set(ops) & set(ALLOWED))
    print(f"bench_coverage: {len(ops)} public operations, {sends} that send requests, "
          f"{len(problems)} problems")
    return 1 if problems else 0


def self_test():
    """A copy of src/ with a planted `Redlock::zap(&self, n)` nobody calls
    must fail naming it; a call with the wrong arity must not count; the
    right call passes; a stale allow-list entry fails."""
    failures = []
    src = os.path.join(ROOT, "src")
    examples = os.path.join(ROOT, "examples", "nemesis")
    with tempfile.TemporaryDirectory() as tmp:
        fake_src, fake_ex = os.path.join(tmp, "src"), os.path.join(tmp, "ex")
        os.mkdir(fake_src)
        os.mkdir(fake_ex)
        for name in os.listdir(src):
            if name.endswith(".rs"):
                with open(os.path.join(src, name), encoding="utf-8") as f:
                    text = f.read()
                with open(os.path.join(fake_src, name), "w", encoding="utf-8") as f:
                    f.write(text)
        with open(os.path.join(fake_src, "zap.rs"), "w", encoding="utf-8") as f:
            f.write("impl Redlock {\n    /// Sends a zap { } (\n"
                    "    pub fn zap(&self, n: u32) -> Result<(), Error> { let _ = n; Ok(()) }\n}\n")
        bench = called(examples)

        def run(extra):
            with open(os.path.join(fake_ex, "main.rs"), "w", encoding="utf-8") as f:
                f.write(bench + "\n" + extra)
            return check(fake_src, fake_ex, ALLOWED)[1]

        found = run("")
        if not any(p.startswith("Redlock::zap ") for p in found) or len(found) != 1:
            failures.append(f"the planted Redlock::zap was not the one problem: {found}")
        found = run("fn f(l: &Redlock) { l.zap(); } // l.zap(1)")
        if not any(p.startswith("Redlock::zap ") for p in found):
            failures.append("a call with no argument, or in a comment, counted as zap(n)")
        found = run("fn f(l: &Redlock) { l.zap(1); }")
        if found:
            failures.append(f"zap(1) called, still reported: {found}")
        found = check(fake_src, fake_ex, dict(ALLOWED, **{"Redlock::gone": "planted"}))[1]
        if not any("Redlock::gone" in p for p in found):
            failures.append("a stale allow-list entry was not reported")
    real = check(src, examples, ALLOWED)[0]
    for must in ("Redlock::force_release", "Redlock::doctor", "guards::release",
                 "Election::run", "fn::fenced_get", "RwLock::try_write_until"):
        if must not in real:
            failures.append(f"{must} was not listed from src/")
    for f in failures:
        print(f"SELF-TEST FAILED: {f}")
    if not failures:
        print("bench_coverage self-test: a planted method nobody calls is named, a call of "
              "the wrong arity or in a comment does not count, a stale allow-list entry fails")
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if sys.argv[1:]:
        print("usage: bench_coverage.py [--self-test]", file=sys.stderr)
        sys.exit(2)
    sys.exit(main())
