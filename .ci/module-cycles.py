#!/usr/bin/env python3
"""Fail when the files of a crate import each other in a cycle.

Reads every path into the crate in its source files, whole (`crate::a::b`,
`super::x`, `self::y`, in use lines and inline), and maps each to the
deepest module file that exists. Only test code is left out: a
`#[cfg(test)] mod name { ... }` block, and a file that a
`#[cfg(test)] mod name;` declares (a test module's own file), may reach
anywhere.

Two passes, both must find no cycle:
- modules: each top-level module with its submodules is one room (the
  crate's layers: `service`, `store`, `portal`, ...), so this shows the
  layering between them;
- files: every file is a node, and every `crate::`, `super::` and
  `self::` path is an edge to the file it names. A parent reaching its
  own children by their bare names (`mod child;`, `child::Item`, and a
  `pub use` of them) composes them and is not an edge; a child reaching
  back up (`super::Item`) is.

Usage: module-cycles.py CRATE_SRC_DIR
"""
import os
import re
import sys

src = sys.argv[1] if len(sys.argv) > 1 else "server/src"
mods = {}
for root, _, files in os.walk(src):
    for f in files:
        if not f.endswith(".rs"):
            continue
        path = os.path.join(root, f)
        rel = os.path.relpath(path, src)[:-3].split(os.sep)
        if rel[-1] in ("mod", "lib", "main"):
            rel = rel[:-1]
        mods[tuple(rel)] = path


def resolve(parts):
    for n in range(len(parts), 0, -1):
        if tuple(parts[:n]) in mods:
            return tuple(parts[:n])
    return None


def strip_comments(text):
    """The code of `text` with comments removed and string and char
    literals emptied, by one pass over its tokens (a "//" in a string is
    not a comment; an apostrophe in a comment opens nothing)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif re.match(r'b?r#*"', text[i : i + 8]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'b?r(#*)"', text[i : i + 8])
            end = text.find('"' + m.group(1), i + m.end())
            i = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""')
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "'" and re.match(r"'(\\.|\\u\{[0-9a-fA-F]+\}|[^'\\])'", text[i : i + 12]):
            m = re.match(r"'(\\.|\\u\{[0-9a-fA-F]+\}|[^'\\])'", text[i : i + 12])
            i += m.end()
            out.append("' '")
        else:
            out.append(c)
            i += 1
    return "".join(out)


TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*([{;])")


def cut_tests(m, text):
    """The text without its `#[cfg(test)] mod x { ... }` blocks, and the
    modules that `#[cfg(test)] mod x;` declares."""
    out, tests, at = [], set(), 0
    while True:
        hit = TEST_MOD.search(text, at)
        if not hit:
            out.append(text[at:])
            break
        out.append(text[at : hit.start()])
        if hit.group(2) == ";":
            tests.add(m + (hit.group(1),))
            at = hit.end()
            continue
        depth, i = 1, hit.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        at = i
    return "".join(out), tests


texts, test_files = {}, set()
for m, path in mods.items():
    text, tests = cut_tests(m, strip_comments(open(path, encoding="utf-8").read()))
    texts[m] = text
    test_files |= tests
# A test module's own submodules are test code too.
product = {
    m: t for m, t in texts.items() if not any(m[: len(x)] == x for x in test_files)
}


def targets_of(m, text):
    """Every module path `m`'s text names, made absolute, with whether the
    line re-exports (`pub use`)."""
    found = []
    for line in re.split(r";", text):
        reexport = re.match(r"\s*pub(?:\([^)]*\))?\s+use\b", line) is not None
        for hit in re.finditer(r"\b(crate|super|self)((?:::(?:\w+|\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}))+)", line):
            head, rest = hit.group(1), hit.group(2)
            if head == "crate":
                base = []
            elif head == "self":
                base = list(m)
            else:
                base = list(m)
                while rest.startswith("::super"):
                    rest = rest[len("::super") :]
                    base = base[:-1]
                base = base[:-1]
            for p in expand(rest):
                found.append((base + p, reexport))
    return found


def expand(rest):
    """`::a::{b, c::d}` -> [[a, b], [a, c, d]] (one level of nesting deep)."""
    rest = rest.lstrip(":")
    brace = rest.find("{")
    if brace < 0:
        return [[p for p in rest.split("::") if p]]
    base = [p for p in rest[:brace].split("::") if p]
    inner = rest[brace + 1 : rest.rfind("}")]
    items, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        cur += ch
    items.append(cur)
    out = []
    for item in items:
        item = item.strip().split(" as ")[0].strip()
        if not item or item == "self":
            out.append(base)
            continue
        for p in expand("::" + item):
            out.append(base + p)
    return out


name = lambda m: "::".join(m) or "crate"


def sccs_of(graph):
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sccs


rooms = {m[:1]: set() for m in product}
files = {m: set() for m in product}
for m, text in product.items():
    for parts, reexport in targets_of(m, text):
        t = resolve(parts)
        if t is None or t == m or t not in product:
            continue
        if m and t and m[0] != t[0]:
            rooms.setdefault(m[:1], set()).add(t[:1])
        # A parent re-exporting what its children define names them; it
        # does not depend on them.
        if reexport and t[: len(m)] == m:
            continue
        files[m].add(t)

failed = False
for kind, graph in (("module", rooms), ("file", files)):
    sccs = sccs_of(graph)
    if not sccs:
        continue
    failed = True
    print(f"{kind} cycles in {src}:")
    for comp in sorted(sccs, key=lambda c: sorted(c)):
        print("  " + " <-> ".join(sorted(name(m) for m in comp)))
        for m in sorted(comp):
            inside = sorted(name(t) for t in graph[m] if t in comp)
            print(f"    {name(m)} imports {', '.join(inside)}")
if failed:
    sys.exit(1)
print(f"no module or file cycles in {src} ({len(product)} files)")
