#!/usr/bin/env python3
"""Latency over time from the admission bench's --csv files, as one SVG.

    python3 server/benches/plot-latency.py OUT.svg [--caption=TEXT] "TITLE=run.csv" ["TITLE=run.csv" ...]

One panel per CSV: the p99 of each window (log scale) of the floor (grey)
and of bizrq (blue), bizrq's max (pale dots), 3x the floor's p99 over the
whole phase (the target, dashed red), and the server's background runs
(alert sweep, usage sample) as shaded spans. Python's standard library only.
"""

import csv
import math
import sys
from xml.sax.saxutils import escape

W, PANEL_H, LEFT, RIGHT, TOP, BOTTOM = 960, 260, 64, 180, 34, 34
TASK_COLOURS = {"alert_sweep": "#f4a261", "usage_sample": "#2a9d8f"}


def read(path):
    rows = {"window": {}, "summary": {}, "background": []}
    with open(path, newline="") as f:
        for r in csv.DictReader(line for line in f if not line.startswith("#")):
            kind, series = r["kind"], r["series"]
            if kind == "window":
                rows["window"].setdefault(series, []).append(
                    (float(r["t_s"]), float(r["p99_ms"]), float(r["max_ms"]))
                )
            elif kind == "summary":
                rows["summary"][series] = float(r["p99_ms"])
            elif kind == "background":
                rows["background"].append(
                    (float(r["t_s"]), float(r["max_ms"]) / 1e3, r["task"])
                )
    return rows


def panel(out, y0, title, data):
    width = W - LEFT - RIGHT
    height = PANEL_H - TOP - BOTTOM
    series = data["window"]
    t_max = max((t for s in series.values() for t, _, _ in s), default=1.0) + 1.0
    values = [v for s in series.values() for _, p, m in s for v in (p, m)]
    floor_p99 = data["summary"].get("floor")
    if floor_p99:
        values.append(3 * floor_p99)
    lo = 10 ** math.floor(math.log10(max(min(values, default=0.1), 0.05)))
    hi = 10 ** math.ceil(math.log10(max(values, default=1.0) * 1.05))

    def x(t):
        return LEFT + width * t / t_max

    def y(v):
        v = min(max(v, lo), hi)
        return y0 + TOP + height * (1 - (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)))

    out.append(f'<text x="{LEFT}" y="{y0 + 20}" font-size="14" font-weight="bold">{escape(title)}</text>')
    for start, took, task in data["background"]:
        colour = TASK_COLOURS.get(task, "#999")
        x1, x2 = x(start), max(x(start + took), x(start) + 2)
        out.append(
            f'<rect x="{x1:.1f}" y="{y0 + TOP}" width="{x2 - x1:.1f}" height="{height}" '
            f'fill="{colour}" fill-opacity="0.35"><title>{escape(task)} {took * 1e3:.0f} ms</title></rect>'
        )
    # Axes and grid.
    decade = lo
    while decade <= hi * 1.0001:
        yy = y(decade)
        out.append(f'<line x1="{LEFT}" x2="{LEFT + width}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#ddd"/>')
        label = f"{decade:g} ms"
        out.append(f'<text x="{LEFT - 6}" y="{yy + 4:.1f}" font-size="11" text-anchor="end">{label}</text>')
        decade *= 10
    step = 10 if t_max > 30 else 5
    t = 0
    while t <= t_max:
        xx = x(t)
        out.append(f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{y0 + TOP}" y2="{y0 + TOP + height}" stroke="#eee"/>')
        out.append(f'<text x="{xx:.1f}" y="{y0 + TOP + height + 14}" font-size="11" text-anchor="middle">{t} s</text>')
        t += step
    out.append(f'<rect x="{LEFT}" y="{y0 + TOP}" width="{width}" height="{height}" fill="none" stroke="#888"/>')
    # bizrq's max per window, then the p99 lines.
    for t, _, m in series.get("bizrq", []):
        out.append(f'<circle cx="{x(t + 0.5):.1f}" cy="{y(m):.1f}" r="1.6" fill="#9ecae1"/>')
    for name, colour in (("floor", "#777"), ("bizrq", "#1f5fbf")):
        pts = " ".join(f"{x(t + 0.5):.1f},{y(p):.1f}" for t, p, _ in series.get(name, []))
        if pts:
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.6"/>')
    if floor_p99:
        yy = y(3 * floor_p99)
        out.append(
            f'<line x1="{LEFT}" x2="{LEFT + width}" y1="{yy:.1f}" y2="{yy:.1f}" '
            f'stroke="#d62728" stroke-dasharray="5,4"/>'
        )
    # Legend.
    lx, ly = LEFT + width + 12, y0 + TOP + 8
    entries = [("#1f5fbf", "line", "bizrq p99"), ("#777", "line", "floor p99"), ("#9ecae1", "dot", "bizrq max")]
    if floor_p99:
        entries.append(("#d62728", "dash", f"3× floor p99 ({3 * floor_p99:.1f} ms)"))
    entries += [(c, "box", t.replace("_", " ")) for t, c in TASK_COLOURS.items()]
    summary = data["summary"]
    for i, (colour, mark, text) in enumerate(entries):
        yy = ly + 18 * i
        if mark == "dot":
            out.append(f'<circle cx="{lx + 9}" cy="{yy}" r="3" fill="{colour}"/>')
        elif mark == "box":
            out.append(f'<rect x="{lx}" y="{yy - 6}" width="18" height="12" fill="{colour}" fill-opacity="0.35"/>')
        else:
            dash = ' stroke-dasharray="5,4"' if mark == "dash" else ""
            out.append(f'<line x1="{lx}" x2="{lx + 18}" y1="{yy}" y2="{yy}" stroke="{colour}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{lx + 24}" y="{yy + 4}" font-size="11">{escape(text)}</text>')
    if "bizrq" in summary and "floor" in summary:
        yy = ly + 18 * len(entries) + 8
        ratio = summary["bizrq"] / summary["floor"]
        out.append(
            f'<text x="{lx}" y="{yy}" font-size="11">whole phase p99: {summary["bizrq"]:.1f} ms</text>'
            f'<text x="{lx}" y="{yy + 15}" font-size="11">= {ratio:.1f}× the floor\'s {summary["floor"]:.1f} ms</text>'
        )


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    runs = []
    caption = "each point a 1 s window from the server's start (latency from each review's scheduled send time)"
    for arg in sys.argv[2:]:
        if arg.startswith("--caption="):
            caption = arg.split("=", 1)[1]
            continue
        title, _, path = arg.rpartition("=")
        runs.append((title or path, read(path)))
    height = PANEL_H * len(runs) + 24
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" '
        f'viewBox="0 0 {W} {height}" font-family="sans-serif">',
        f'<rect width="{W}" height="{height}" fill="white"/>',
    ]
    for i, (title, data) in enumerate(runs):
        panel(out, PANEL_H * i, title, data)
    out.append(f'<text x="{LEFT}" y="{height - 8}" font-size="11" fill="#555">{escape(caption)}</text>')
    out.append("</svg>")
    with open(sys.argv[1], "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
