"""Parameter values that land a family at target acceptance levels: a monotone search along the
path its verifier class declares (``Calibration``), on any measure of acceptance.

Pure: ``measure`` maps a path position to an acceptance rate (short decodes in a run, a formula in
tests). The search brackets each target between evaluated positions and bisects, reusing every
evaluation for every target. A target the family cannot reach (outside its range, or inside a jump
of its acceptance) is reported, never replaced by a neighbouring point.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bench.verifiers.base import Calibration

# Bisection steps per target at most, and the narrowest bracket, as a share of the path's length,
# below which a target still not met lies in a jump of the family's acceptance.
MAX_STEPS = 12
MIN_WIDTH = 2.0**-13
STILL = "acceptance does not rise along"


@dataclass(frozen=True)
class Level:
    """One target level and where the search put it (``value`` None: not reached, ``note`` says why)."""

    target: float
    value: float | None
    acceptance: float | None
    note: str = ""


@dataclass
class Search:
    """The evaluations of one family's path (position -> acceptance), kept for reuse and the record."""

    path: Calibration
    measure: Callable[[float], float]
    seen: dict[float, float] = field(default_factory=dict)

    def at(self, x: float) -> float:
        x = self.path.values(x)[self.path.param]  # the rounded value a configuration would run
        if x not in self.seen:
            self.seen[x] = float(self.measure(x))
        return self.seen[x]

    def order(self, x: float) -> float:
        """Position along the path from its lowest-acceptance end (acceptance rises with it)."""
        return x if self.path.rising else -x

    def bracket(self, target: float) -> tuple[float, float]:
        """The last evaluated position at or below ``target`` and the next one above it."""
        ranked = sorted(self.seen, key=self.order)
        below = max((x for x in ranked if self.seen[x] <= target), key=self.order, default=ranked[0])
        above = min(
            (x for x in ranked if self.order(x) > self.order(below) and self.seen[x] >= target),
            key=self.order,
            default=ranked[-1],
        )
        return below, above

    def find(self, target: float, tol: float) -> Level:
        floor, top = self.at(self.path.floor), self.at(self.path.top)
        if not floor - tol <= target <= top + tol:
            return Level(target, None, None, f"outside the family's range {floor:.1%} ... {top:.1%}")
        span = abs(self.path.high - self.path.low)
        for _ in range(MAX_STEPS + 1):
            best = min(self.seen, key=lambda x: abs(self.seen[x] - target))
            if abs(self.seen[best] - target) <= tol:
                return Level(target, best, self.seen[best])
            below, above = self.bracket(target)
            if abs(above - below) < MIN_WIDTH * span:
                break
            self.at((below + above) / 2)
        below, above = self.bracket(target)
        return Level(
            target,
            None,
            None,
            f"acceptance jumps from {self.seen[below]:.1%} to {self.seen[above]:.1%} between "
            f"{self.path.param} = {below:g} and {above:g}",
        )


def targets(low: float, high: float, count: int, extra: Sequence[float] = ()) -> list[float]:
    """``count`` levels evenly from ``low`` to ``high`` (both included), plus the ``extra`` ones
    inside that range that are not within a quarter spacing of another, in increasing order."""
    if count < 2 or high <= low:
        return [low]
    step = (high - low) / (count - 1)
    out = [low + i * step for i in range(count)]
    for e in sorted(extra):
        if low < e < high and all(abs(e - t) > step / 4 for t in out):
            out.append(e)
    return sorted(out)


def calibrate_path(
    path: Calibration, measure: Callable[[float], float], low: float, count: int, extra: Sequence[float] = ()
) -> tuple[list[Level], Search]:
    """Levels spread from ``low`` (lossless SD's acceptance) to the highest the family reaches, and
        the positions that reach them. The family's lossless setting, when it has one, is always a
        level, and so is its lowest-acceptance end (compare reads the family below its sweep from it,
    bench.calibration.notes). Two levels that land
        on the same measured acceptance are one point: the second is reported, not repeated."""
    search = Search(path, measure)
    floor, top = search.at(path.floor), search.at(path.top)
    start = max(low, floor)
    wanted = targets(start, top, count, extra)
    tol = (top - start) / max(count - 1, 1) / 4
    ends = [path.floor] if path.lossless in (None, path.floor) else [path.lossless, path.floor]
    found = [Level(search.at(x), x, search.at(x)) for x in ends]
    wanted = [t for t in wanted if all(abs(t - level.target) > tol for level in found)]
    found += [search.find(t, tol) for t in wanted]
    if top <= start:  # nothing above its lowest point (or SD's level): say so, run no copies
        found.append(Level(top, None, None, f"{STILL} {path.param} ({top:.1%} at most)"))
    out: list[Level] = []
    for level in found:
        twin = next((o for o in out if o.value is not None and o.acceptance == level.acceptance), None)
        if level.value is not None and twin is not None:
            level = Level(level.target, None, None, f"lands on the point {path.param} = {twin.value:g} again")
        out.append(level)
    return out, search
