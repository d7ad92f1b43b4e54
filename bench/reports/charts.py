"""The report's verdict charts: one SVG per task, candidate family and baseline family in the
(acceptance, quality) plane, with both frontiers, every point and its 95% intervals, the shared
acceptance range shaded and the verdict in the title.

Point names are placed, not stacked: settings that land on one point share one name
(``a=0.1 ... 0.9``), each name takes the first spot around its point that overlaps no other name,
no point and no title line, and a name with no free spot is left out (the folded point table
beside the chart names every setting).
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.reports.frontier import hull_points

BASE, CAND = "#2a9d8f", "#d62828"
WIDTH, HEIGHT, LEFT, BOTTOM, RIGHT = 470, 300, 52, 40, 12
LINE = 13  # a title line's height
HALO = 'stroke="#fff" stroke-width="3" paint-order="stroke"'
CHAR = 6.0  # a generous width of one character at font-size 10 (sans-serif), in pixels
# Where a name may sit around its point: (dx, dy, anchor), nearest first.
SPOTS = [
    (6, -6, "start"),
    (6, 13, "start"),
    (-6, -6, "end"),
    (-6, 13, "end"),
    (0, -10, "middle"),
    (0, 19, "middle"),
    (12, 3, "start"),
    (-12, 3, "end"),
]


@dataclass(frozen=True)
class Mark:
    """A point on a chart: acceptance, quality, their intervals, its name, colour and radius."""

    acceptance: float
    quality: float
    acceptance_ci: tuple[float, float]
    quality_ci: tuple[float, float]
    name: str
    colour: str
    radius: float = 3.5


def marks(
    points: pd.DataFrame, colour: str, names: list[str] | None = None, radius: float = 3.5
) -> list[Mark]:
    """Summary rows as marks, each named by ``names`` (default: its swept values)."""
    names = list(points["swept"]) if names is None else names
    return [
        Mark(
            r.acceptance_rate,
            r.quality,
            tuple(r.acceptance_rate_ci),
            tuple(r.quality_ci),
            name,
            colour,
            radius,
        )
        for r, name in zip(points.itertuples(), names)
    ]


def merged_name(names: list[str]) -> str:
    """One name for settings drawn on one point: ``a=0.1`` and ``a=0.3`` are ``a=0.1, 0.3``; a
    parameter with more than two values gives its first and last (``a=0.1 ... 0.9``), one that
    does not vary is named once (``topk=4, delta=0.05 ... 0.4``)."""
    names = list(dict.fromkeys(n for n in names if n))
    if len(names) < 2:
        return names[0] if names else ""
    parsed = [[part.split("=", 1) for part in n.split(", ")] for n in names]
    keys = [[kv[0] for kv in p] for p in parsed]
    if any(len(kv) != 2 for p in parsed for kv in p) or any(k != keys[0] for k in keys):
        return ", ".join(names)
    out = []
    for i, key in enumerate(keys[0]):
        values = sorted(dict.fromkeys(p[i][1] for p in parsed), key=_number_first)
        shown = ", ".join(values) if len(values) <= 2 else f"{values[0]} ... {values[-1]}"
        out.append(f"{key}={shown}")
    return ", ".join(out)


def _number_first(value: str) -> tuple[int, float, str]:
    """Numbers in their order, then anything else as text."""
    try:
        return (0, float(value), "")
    except ValueError:
        return (1, 0.0, value)


Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in pixels


def _overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def place_names(
    points: list[tuple[float, float, str, str]], taken: list[Box], frame: Box
) -> list[tuple[float, float, str, str, str]]:
    """(x, y, anchor, text, colour) for each named point (x, y, text, colour in pixels) whose name
    finds a spot inside ``frame`` clear of ``taken`` (points, titles) and of the names placed
    before it; the others are left out."""
    taken = list(taken)
    out = []
    for x, y, text, colour in points:
        width = CHAR * len(text)
        for dx, dy, anchor in SPOTS:
            left = x + dx - {"start": 0, "end": width, "middle": width / 2}[anchor]
            box = (left, y + dy - 10, left + width, y + dy + 2)
            inside = frame[0] <= box[0] and box[2] <= frame[2] and frame[1] <= box[1] and box[3] <= frame[3]
            if inside and not any(_overlaps(box, t) for t in taken):
                taken.append(box)
                out.append((x + dx, y + dy, anchor, text, colour))
                break
    return out


@dataclass(frozen=True)
class _Plane:
    """Where a chart draws: the data ranges shown and the plot's pixel box (``top`` below the
    title lines, ``base`` the x axis), with the maps from data to pixels."""

    x0: float
    x1: float
    y0: float
    y1: float
    top: int

    @property
    def height(self) -> int:
        return HEIGHT + self.top

    @property
    def base(self) -> int:
        return HEIGHT + self.top - BOTTOM

    def sx(self, v: float) -> float:
        return LEFT + (v - self.x0) / (self.x1 - self.x0) * (WIDTH - LEFT - RIGHT)

    def sy(self, v: float) -> float:
        return self.base - (v - self.y0) / (self.y1 - self.y0) * (self.base - self.top)


def _plane(points: list[Mark], percent: bool, lines: int) -> _Plane:
    """Ranges holding every mark and interval with 8% to spare, clipped to what the measures can
    take (acceptance in [0, 1], a non-negative score above 0, a share below 100%)."""
    xs = [v for m in points for v in (m.acceptance, *m.acceptance_ci) if np.isfinite(v)]
    ys = [v for m in points for v in (m.quality, *m.quality_ci) if np.isfinite(v)]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    pad_x, pad_y = (x1 - x0) * 0.08 or 0.01, (y1 - y0) * 0.08 or 0.01
    x0, x1, y0, y1 = max(x0 - pad_x, 0.0), min(x1 + pad_x, 1.0), y0 - pad_y, y1 + pad_y
    if min(ys) >= 0:  # a score that cannot be negative gets no negative axis
        y0 = max(y0, 0.0)
    if percent:  # nor a share one above 100%
        y1 = min(y1, 1.0)
    return _Plane(x0, x1, y0, y1, 8 + LINE * lines)


def _pct(v: float) -> str:
    """The table's unit."""
    return f"{100 * v:.1f}%"


def _axes(pl: _Plane, percent: bool) -> list[str]:
    """The SVG's opening tag, both axes, their end values and their names."""
    w, h, m, base, top = WIDTH, pl.height, LEFT, pl.base, pl.top
    qual = _pct if percent else (lambda v: f"{v:.3f}")
    return [
        f'<svg class="chart" width="{w}" height="{h}" viewBox="0 0 {w} {h}" xmlns="http://www.w3.org/2000/svg" '
        'font-size="11" font-family="sans-serif">',
        f'<line x1="{m}" y1="{base}" x2="{w - RIGHT}" y2="{base}" stroke="#888"/>',
        f'<line x1="{m}" y1="{top}" x2="{m}" y2="{base}" stroke="#888"/>',
        f'<text x="{m}" y="{base + 14}">{_pct(pl.x0)}</text>',
        f'<text x="{w - RIGHT}" y="{base + 14}" text-anchor="end">{_pct(pl.x1)}</text>',
        f'<text x="{(w + m) / 2}" y="{h - 8}" text-anchor="middle">acceptance rate</text>',
        f'<text x="{m - 3}" y="{base}" text-anchor="end">{qual(pl.y0)}</text>',
        f'<text x="{m - 3}" y="{top + 10}" text-anchor="end">{qual(pl.y1)}</text>',
        f'<text transform="translate(12 {(base + top) / 2}) rotate(-90)" text-anchor="middle">quality</text>',
    ]


def _marks_svg(pl: _Plane, points: list[Mark]) -> list[str]:
    """Each mark's intervals (where finite) and its dot."""
    sx, sy = pl.sx, pl.sy
    parts = []
    for p in points:
        (a, q), (aci, qci), c = (p.acceptance, p.quality), (p.acceptance_ci, p.quality_ci), p.colour
        if all(np.isfinite(aci)):
            parts.append(
                f'<line x1="{sx(aci[0]):.1f}" y1="{sy(q):.1f}" x2="{sx(aci[1]):.1f}" y2="{sy(q):.1f}" stroke="{c}"/>'
            )
        if all(np.isfinite(qci)):
            parts.append(
                f'<line x1="{sx(a):.1f}" y1="{sy(qci[0]):.1f}" x2="{sx(a):.1f}" y2="{sy(qci[1]):.1f}" stroke="{c}"/>'
            )
        parts.append(f'<circle cx="{sx(a):.1f}" cy="{sy(q):.1f}" r="{p.radius}" fill="{c}"/>')
    return parts


def chart(
    series: list[tuple[pd.DataFrame, str, bool]],
    points: list[Mark],
    titles: list[tuple[str, str]],
    percent: bool,
    shade: tuple[float, float] | None = None,
) -> str:
    """One SVG chart: each series' frontier (solid or dashed), the marks with their intervals and
    placed names, a shaded acceptance range and the title lines (text, colour) above the plot."""
    pl = _plane(points, percent, len(titles))
    sx, sy, top, base = pl.sx, pl.sy, pl.top, pl.base
    parts = _axes(pl, percent)
    if shade and all(np.isfinite(shade)) and shade[1] > shade[0]:
        parts.append(
            f'<rect class="shared" x="{sx(shade[0]):.1f}" y="{top}" width="{sx(shade[1]) - sx(shade[0]):.1f}" '
            f'height="{base - top}" fill="#000" fill-opacity="0.06"/>'
        )
    for frame, colour, dashed in series:
        hull = hull_points(frame["acceptance_rate"].to_numpy(float), frame["quality"].to_numpy(float))
        line = " ".join(f"{sx(a):.1f},{sy(q):.1f}" for a, q in hull)
        dash = ' stroke-dasharray="5 3"' if dashed else ""
        parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
    parts += _marks_svg(pl, points)
    for x, y, anchor, text, colour in _names(points, sx, sy, (LEFT + 1, top, WIDTH - 2, base - 1)):
        # A white halo under each name: a hull or an interval drawn through it does not strike it out.
        parts.append(
            f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" fill="{colour}" font-size="10" {HALO}>'
            f"{html.escape(text)}</text>"
        )
    for k, (text, colour) in enumerate(titles):
        parts.append(f'<text x="{LEFT}" y="{LINE * (k + 1)}" fill="{colour}">{html.escape(text)}</text>')
    return "".join(parts) + "</svg>"


def _names(points: list[Mark], sx, sy, frame: Box) -> list[tuple[float, float, str, str, str]]:  # noqa: ANN001
    """The marks' names, one per drawn position (coincident settings merged), placed clear of
    every point and of each other."""
    at: dict[tuple[int, int, str], list[str]] = {}
    for p in points:
        at.setdefault((round(sx(p.acceptance)), round(sy(p.quality)), p.colour), []).append(p.name)
    dots = [(sx(p.acceptance), sy(p.quality), p.radius) for p in points]
    taken = [(x - r, y - r, x + r, y + r) for x, y, r in dots]
    named = [(float(x), float(y), merged_name(names), c) for (x, y, c), names in at.items() if any(names)]
    return place_names(named, taken, frame)
