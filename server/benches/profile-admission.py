#!/usr/bin/env python3
"""Instructions per admission from callgrind_annotate's self and inclusive
listings (profile-admission.sh): self cost grouped by component, then the
inclusive cost of bizrq's and quota's own functions."""
import re
import sys
from collections import defaultdict

# First match wins: a generic function is named by where its code lives.
GROUPS = [
    ("TLS (rustls, ring)", ["rustls", "ring::", "ring_core", "ring-0.", "aws_lc"]),
    ("SQLite (libsqlite3, sqlx)", ["sqlite3", "sqlx"]),
    ("HTTP (hyper, h2, axum, tower)", ["hyper", "h2::", "axum", "tower", "httparse", "http::"]),
    ("JSON (serde_json)", ["serde_json", "serde::"]),
    ("quota rules (quota::)", ["quota::"]),
    ("bizrq server code (bizrq::)", ["bizrq::"]),
    ("tracing", ["tracing"]),
    ("async runtime (tokio, futures)", ["tokio::", "mio::", "futures"]),
    ("allocator, memcpy (libc)", ["malloc", "free", "realloc", "memcpy", "memmove", "memset",
                                  "_int_", "memcmp", "calloc", "strcmp", "strncmp"]),
    ("std generics (core::, alloc::)", ["core::", "alloc::", "std::"]),
]
LINE = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*?):(.*?)(?:\s+\[(.*)\])?$")


def entries(path):
    with open(path) as f:
        for line in f:
            m = LINE.match(line)
            if m and "PROGRAM TOTALS" not in line:
                # The file names the crate of C and assembly code (ring's).
                yield int(m.group(1).replace(",", "")), m.group(3), m.group(2)


def total(path):
    with open(path) as f:
        for line in f:
            if "PROGRAM TOTALS" in line:
                first = line.split()[0].replace(",", "")
                return int(first) if first.isdigit() else 0
    return 0


def main():
    n, self_txt, incl_txt = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    all_ir = total(self_txt)
    if not all_ir or not n:
        sys.exit(f"nothing counted ({all_ir} instructions, {n} admissions)")
    groups = defaultdict(int)
    for ir, fn, obj in entries(self_txt):
        name = next((g for g, keys in GROUPS if any(k in fn or k in obj for k in keys)), "other")
        groups[name] += ir
    print(f"\n{all_ir:,} instructions for {n} admissions: {all_ir // n:,} per admission\n")
    print("| component (self cost) | instructions per admission | share |")
    print("|---|---:|---:|")
    for g, ir in sorted(groups.items(), key=lambda x: -x[1]):
        print(f"| {g} | {ir // n:,} | {100 * ir / all_ir:.1f} % |")
    incl = {}
    for ir, fn, _ in entries(incl_txt):
        if re.match(r"^<?(bizrq|quota)::", fn):
            incl[fn] = max(incl.get(fn, 0), ir)
    print("\n| function (inclusive) | instructions per admission |")
    print("|---|---:|")
    for fn, ir in sorted(incl.items(), key=lambda x: -x[1])[:30]:
        print(f"| `{fn[:110]}` | {ir // n:,} |")


main()
