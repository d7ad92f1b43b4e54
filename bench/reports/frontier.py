"""A baseline family's acceptance-quality frontier: the upper Pareto hull of its points, read at a
given acceptance (quality there) or at a given quality (acceptance there).

Higher acceptance and higher quality are both better. A point (a, q) makes every (a', q') with
a' <= a and q' <= q attainable (free disposal), and a random mix of two configurations attains
any point on the segment between them, so the frontier is the upper boundary of the convex hull
of the points closed towards lower acceptance and lower quality. Within the family's acceptance
range that boundary is the upper concave envelope of the points plus one corner (lowest
acceptance, highest quality); read sideways (acceptance at a quality) it is the same construction
with the axes swapped. Everything is vectorised over bootstrap replicates: points are ``[R, K]``.

Two frontiers are compared over the acceptance range they share (``gaps``): their difference is
piecewise linear with its corners at the points' acceptances, so reading both there (and at the
range's ends) gives the exact mean difference over the range and its exact largest values.
"""

from __future__ import annotations

import numpy as np


def envelope(x: np.ndarray, y: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Upper concave envelope of the points (x, y) and the corner (min x, max y), at ``at``.

    ``x``, ``y``: [R, K] (K points per replicate); ``at``: [R] (one place per replicate) or [R, P]
    (P places per replicate, as a frontier read across a range is); the result has ``at``'s shape.
    NaN where ``at`` lies outside [min x, max x] of its replicate. The envelope at ``at`` is the
    highest value of any segment between two points that straddle it (a point of the upper hull is
    a mix of two points)."""
    x, y = np.atleast_2d(x), np.atleast_2d(y)
    at = np.asarray(at, dtype=float)
    places = at if at.ndim == 2 else np.atleast_1d(at)[:, None]
    xs = np.concatenate([x, x.min(1, keepdims=True)], 1)
    ys = np.concatenate([y, y.max(1, keepdims=True)], 1)
    # Every pair of points once (a point with itself too), ordered by acceptance: [R, M].
    i, j = np.triu_indices(xs.shape[1])
    swap = xs[:, j] < xs[:, i]
    x1, x2 = np.where(swap, xs[:, j], xs[:, i])[:, None], np.where(swap, xs[:, i], xs[:, j])[:, None]
    y1, y2 = np.where(swap, ys[:, j], ys[:, i])[:, None], np.where(swap, ys[:, i], ys[:, j])[:, None]
    width, rise = x2 - x1, y2 - y1
    a = places[:, :, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(width > 0, (a - x1) / width, 0.0)
    value = np.where((x1 <= a) & (a <= x2), y1 + t * rise, -np.inf)
    best = value.max(axis=2)
    best = np.where(np.isfinite(best), best, np.nan)
    return best if at.ndim == 2 else best[:, 0]


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


def gaps(
    cand_a: np.ndarray, cand_q: np.ndarray, base_a: np.ndarray, base_q: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One frontier minus another over the acceptance range both span, per replicate.

    Points are [R, Kc] and [R, Kb]. Returns (low, high) of the shared range and, over it, the mean
    of candidate minus base (the area between the frontiers divided by the range's width), the
    largest value of candidate minus base and the largest of base minus candidate; each [R], the
    last three NaN where the range is empty. A range of a single acceptance (a candidate whose
    settings all land on one acceptance in a resample) gives the gap there, the limit of the mean
    over a range shrinking to it."""
    low = np.maximum(cand_a.min(1), base_a.min(1))
    high = np.minimum(cand_a.max(1), base_a.max(1))
    width = high - low
    ok = width >= 0
    # Both frontiers bend only at their points' acceptances: read them there and at the range's ends.
    lo_, hi_ = np.where(ok, low, 0.0)[:, None], np.where(ok, high, 1.0)[:, None]
    at = np.sort(np.clip(np.concatenate([cand_a, base_a, lo_, hi_], 1), lo_, hi_), 1)
    diff = quality_at(cand_a, cand_q, at) - quality_at(base_a, base_q, at)
    area = ((diff[:, 1:] + diff[:, :-1]) / 2 * np.diff(at, axis=1)).sum(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(width > 0, area / width, np.where(ok, diff[:, 0], np.nan))
    lead = np.where(ok, diff.max(1), np.nan)
    deficit = np.where(ok, (-diff).max(1), np.nan)
    return low, high, mean, lead, deficit
