"""What the perf tools show besides Kafka's own lines: a progress bar on stderr, a results
table, a throughput plot in the terminal and, with ``--plot FILE.svg``, as an SVG file."""

from __future__ import annotations

import sys


class Progress:
    def __init__(self, total: int, enabled: bool, width: int = 40) -> None:
        self.total = max(1, total)
        self.enabled = enabled
        self.width = width
        self._last = -1

    def update(self, done: int, rate: float) -> None:
        if not self.enabled:
            return
        pct = min(100, done * 100 // self.total)
        if pct == self._last:
            return
        self._last = pct
        fill = self.width * pct // 100
        sys.stderr.write(f"\r[{'#' * fill}{'.' * (self.width - fill)}] {pct:3d}% {done}/{self.total} {rate:,.0f} rec/s")
        sys.stderr.flush()

    def finish(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def table(rows: list[tuple[str, str]], out=sys.stdout) -> None:
    w1 = max(len(r[0]) for r in rows)
    w2 = max(len(r[1]) for r in rows)
    line = f"+-{'-' * w1}-+-{'-' * w2}-+"
    print(line, file=out)
    for k, v in rows:
        print(f"| {k.ljust(w1)} | {v.rjust(w2)} |", file=out)
    print(line, file=out)


def ascii_plot(series: list[tuple[float, float]], title: str, height: int = 8, out=sys.stdout) -> None:
    """Records/s per interval as columns of '#'."""
    if not series:
        return
    vals = [v for _, v in series][-60:]
    top = max(vals) or 1.0
    print(title, file=out)
    for row in range(height, 0, -1):
        cut = top * (row - 0.5) / height
        label = f"{top * row / height:>12,.0f} |" if row in (height, 1) else " " * 12 + " |"
        print(label + "".join("#" if v >= cut else " " for v in vals), file=out)
    print(" " * 13 + "+" + "-" * len(vals) + f"> time ({series[-1][0]:.1f} s)", file=out)


def svg_plot(series: list[tuple[float, float]], path: str, title: str, ylabel: str) -> None:
    w, h, m = 640, 320, 50
    if not series:
        series = [(0.0, 0.0)]
    xmax = max(x for x, _ in series) or 1.0
    ymax = max(y for _, y in series) or 1.0
    pts = " ".join(f"{m + (x / xmax) * (w - 2 * m):.1f},{h - m - (y / ymax) * (h - 2 * m):.1f}" for x, y in series)
    svg = f"""<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{w / 2}" y="20" text-anchor="middle">{title}</text>
<line x1="{m}" y1="{h - m}" x2="{w - m}" y2="{h - m}" stroke="black"/>
<line x1="{m}" y1="{m}" x2="{m}" y2="{h - m}" stroke="black"/>
<text x="{m}" y="{m - 5}">{ymax:,.0f} {ylabel}</text>
<text x="{w - m}" y="{h - m + 20}" text-anchor="end">{xmax:.1f} s</text>
<polyline fill="none" stroke="steelblue" stroke-width="2" points="{pts}"/>
</svg>
"""
    with open(path, "w", encoding="utf-8") as f:
        f.write(svg)
