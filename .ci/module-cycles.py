#!/usr/bin/env python3
"""Fail when the modules of a crate import each other in a cycle.

Reads every `crate::a::b` path in the crate's source files (use lines and
inline paths), maps each to the deepest module file that exists, and
reports every strongly connected component of more than one module. A
module and its own submodules are one room: `a` importing `a::b` is not
a cycle edge. Usage: module-cycles.py CRATE_SRC_DIR
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
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(l.split("//")[0] for l in text.splitlines())


graph = {m: set() for m in mods}
for m, path in mods.items():
    text = strip_comments(open(path, encoding="utf-8").read())
    # Test modules may reach anywhere; only the product's imports count.
    text = re.split(r"#\[cfg\(test\)\]", text)[0]
    targets = []
    for brace in re.finditer(r"crate::((?:\w+::)*)\{([^}]*)\}", text):
        base = [p for p in brace.group(1).split("::") if p]
        for item in brace.group(2).split(","):
            item = item.strip().split(" as ")[0]
            if item:
                targets.append(base + [p for p in item.split("::") if p])
    for path_ in re.finditer(r"crate::((?:\w+)(?:::\w+)*)", text):
        targets.append(path_.group(1).split("::"))
    for parts in targets:
        t = resolve(parts)
        if t is None or t == m:
            continue
        # Within one room (a module and its descendants) is not an edge.
        if t[: len(m)] == m or m[: len(t)] == t:
            continue
        graph[m].add(t)

# Tarjan's strongly connected components.
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

name = lambda m: "::".join(m) or "crate"
if sccs:
    print(f"module cycles in {src}:")
    for comp in sccs:
        print("  " + " <-> ".join(sorted(name(m) for m in comp)))
        for m in sorted(comp):
            inside = sorted(name(t) for t in graph[m] if t in comp)
            print(f"    {name(m)} imports {', '.join(inside)}")
    sys.exit(1)
print(f"no module cycles in {src} ({len(mods)} modules)")
