"""A baseline family's acceptance-quality frontier: the upper Pareto hull of its points, read at a
given acceptance (quality there) or at a given quality (acceptance there).

Higher acceptance and higher quality are both better. A point (a, q) makes every (a', q') with
a' <= a and q' <= q attainable (free disposal), and a random mix of two configurations attains
any point on the segment between them, so the frontier is the upper boundary of the convex hull
of the points closed towards lower acceptance and lower quality. Within the family's acceptance
range that boundary is the upper concave envelope of the points plus one corner (lowest
acceptance, highest quality); read sideways (acceptance at a quality) it is the same construction
with the axes swapped. Everything is vectorised over bootstrap replicates: points are ``[R, K]``.
"""

from __future__ import annotations

import numpy as np


def envelope(x: np.ndarray, y: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Upper concave envelope of the points (x, y) and the corner (min x, max y), at ``at``.

    ``x``, ``y``: [R, K] (K points per replicate); ``at``: [R]. NaN where ``at`` lies outside
    [min x, max x] of its replicate. The envelope at ``at`` is the highest value of any segment
    between two points that straddle it (a point of the upper hull is a mix of two points)."""
    x, y, at = np.atleast_2d(x), np.atleast_2d(y), np.atleast_1d(at).astype(float)
    corner_x, corner_y = x.min(1, keepdims=True), y.max(1, keepdims=True)
    xs, ys = np.concatenate([x, corner_x], 1), np.concatenate([y, corner_y], 1)
    x1, x2 = xs[:, :, None], xs[:, None, :]
    y1, y2 = ys[:, :, None], ys[:, None, :]
    a = at[:, None, None]
    straddle = (x1 <= a) & (a <= x2)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(x2 > x1, (a - x1) / (x2 - x1), 0.0)
    value = np.where(straddle, y1 + t * (y2 - y1), -np.inf)
    best = value.max(axis=(1, 2))
    return np.where(np.isfinite(best), best, np.nan)


def quality_at(acceptance: np.ndarray, quality: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The frontier's quality at acceptance ``at`` (NaN outside the family's acceptance range)."""
    return envelope(acceptance, quality, at)


def acceptance_at(acceptance: np.ndarray, quality: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The frontier's acceptance at quality ``at`` (NaN outside the family's quality range)."""
    return envelope(quality, acceptance, at)


def hull_points(acceptance: np.ndarray, quality: np.ndarray) -> list[tuple[float, float]]:
    """The vertices of one frontier, by increasing acceptance: what a plot draws as the line."""
    order = np.argsort(acceptance, kind="stable")
    a, q = np.asarray(acceptance, float)[order], np.asarray(quality, float)[order]
    grid = np.unique(a)
    top = quality_at(np.broadcast_to(a, (len(grid), len(a))), np.broadcast_to(q, (len(grid), len(q))), grid)
    points = [(float(x), float(y)) for x, y in zip(grid, top)]
    # Keep the vertices only: drop a point lying on the segment between its neighbours.
    out: list[tuple[float, float]] = []
    for p in points:
        while len(out) >= 2:
            (x0, y0), (x1, y1) = out[-2], out[-1]
            if (x1 - x0) * (p[1] - y0) - (y1 - y0) * (p[0] - x0) >= -1e-12:
                out.pop()
            else:
                break
        out.append(p)
    return out
