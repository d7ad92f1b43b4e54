"""The paired bootstrap behind ``compare``'s verdicts: pure numpy over per-example arrays.

All methods decoded the same examples, so every interval is a PAIRED bootstrap: one resample of
examples is applied to every configuration, every point and hull is recomputed from it, and each
statistic is taken within the replicate. Two verdicts:

Point (``point_verdict``): a candidate configuration's (acceptance, quality) against a family's frontier
(its upper Pareto hull, ``bench.reports.frontier``) read at the candidate's acceptance:
"equivalent" when the 95% interval of the quality difference lies inside ±margin (the largest
difference that counts as none, declared per metric: ``bench.reports.margins``), else "above" or
"below" when it excludes zero, else "inconclusive", with the smallest difference this sample could
detect (``detectable``); "cannot judge" with the reason where there is no verdict.
Equivalence is two one-sided tests at 2.5% each (the 95% interval inside the margin), so a true
difference at the margin is called "equivalent" at most 2.5% of the time (tests/reports/test_compare.py
simulates it). The frontier is read only inside the sweep's
acceptance range. A resample whose candidate falls beyond the range is read at the nearest end of
the sweep, which bounds the difference on one side only (the frontier does not rise with
acceptance, but a setting just below the sweep could reach more quality): such resamples count
against "above" when below the range and against "below" when above it.

Frontier (``frontier_verdict``): a candidate's hull against a family's hull over the acceptance range
both span: the mean gap (candidate minus baseline, the area between the hulls over the shared
range's width) and the largest gap each way. "dominates" when the mean gap's interval lies above 0
and the candidate's largest deficit is not significant (the lower end of its interval is <= 0),
"dominated" the mirror (each only where the mean gap's interval reaches past the margin), "crosses" when both the largest lead and the largest deficit are
significant (lower ends > 0), "equivalent" when neither crosses and the mean gap's interval lies
inside ±margin, "inconclusive" otherwise (docs/compare.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bench.reports.frontier import acceptance_at, gaps, quality_at
from bench.reports.margins import EQUIVALENT, INCONCLUSIVE, detectable, settle
from bench.reports.summary import BOOTSTRAP

TAIL = 0.025  # each tail of the 95% interval
def _resamples(n: int, seed: int) -> np.ndarray:
    """[1 + BOOTSTRAP, n]: how often each example is drawn, the sample itself first (once each),
    then the resamples. A statistic of a resample is a weighted sum over the examples."""
    idx = np.random.default_rng(seed).integers(0, n, size=(BOOTSTRAP, n))
    counts = np.bincount((idx + n * np.arange(BOOTSTRAP)[:, None]).ravel(), minlength=BOOTSTRAP * n)
    return np.concatenate([np.ones((1, n)), counts.reshape(BOOTSTRAP, n)])


def _stack(family: list[dict[str, np.ndarray]], counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A family's points (acceptance, quality) per resample, each [R, K]."""

    def total(key: str) -> np.ndarray:
        return counts @ np.stack([f[key] for f in family], 1)

    drafted = total("drafted")
    with np.errstate(divide="ignore", invalid="ignore"):
        acceptance = total("accepted") / np.where(drafted == 0, np.nan, drafted)
    return acceptance, total("quality") / counts.shape[1]


def _interval(values: np.ndarray) -> tuple[float, float]:
    finite = values[np.isfinite(values)]
    if len(finite) < 2:
        return (float("nan"), float("nan"))
    lo, hi = np.percentile(finite, [2.5, 97.5])
    return float(lo), float(hi)


def point_verdict(
    candidate: dict[str, np.ndarray], family: list[dict[str, np.ndarray]], *, margin: float, seed: int = 0
) -> dict[str, Any]:
    """Point estimates, paired-bootstrap intervals and the verdict of one candidate point against
    one family, all on the same examples (arrays aligned by example); ``margin``: the quality
    difference that counts as none."""
    counts = _resamples(len(candidate["quality"]), seed)
    (ca, cq), (fa, fq) = _stack([candidate], counts), _stack(family, counts)
    ca, cq = ca[:, 0], cq[:, 0]
    lo_a, hi_a = np.nanmin(fa, 1), np.nanmax(fa, 1)
    # Each replicate reads its own hull, at the candidate's point moved to the nearest end of the
    # sweep when it falls outside it (see the module's docstring for what that bounds).
    front_q = quality_at(fa, fq, np.clip(ca, lo_a, hi_a))
    front_a = acceptance_at(fa, fq, np.clip(cq, np.nanmin(fq, 1), np.nanmax(fq, 1)))
    dq, da = cq - front_q, ca - front_a
    below, above = ca[1:] < lo_a[1:], ca[1:] > hi_a[1:]
    out: dict[str, Any] = {
        "acceptance": float(ca[0]),
        "acceptance_ci": _interval(ca[1:]),
        "quality": float(cq[0]),
        "quality_ci": _interval(cq[1:]),
        "frontier_quality": float(front_q[0]),
        "quality_diff": float(dq[0]),
        "quality_diff_ci": _interval(dq[1:]),
        "beyond_sweep": float(np.mean(below | above)),
        "detectable": detectable(_interval(dq[1:])),
    }
    if np.nanmin(fq[0]) <= cq[0] <= np.nanmax(fq[0]):
        out.update(
            frontier_acceptance=float(front_a[0]),
            acceptance_diff=float(da[0]),
            acceptance_diff_ci=_interval(da[1:]),
        )
    else:  # no setting of the family reaches the candidate's quality (or all exceed it)
        out.update(frontier_acceptance=np.nan, acceptance_diff=np.nan, acceptance_diff_ci=(np.nan, np.nan))
    span = f"[{lo_a[0]:.3f}, {hi_a[0]:.3f}]"
    lo, hi = out["quality_diff_ci"]
    if not np.isfinite(ca[0]):
        verdict, reason = "cannot judge", "the candidate drafts nothing (no acceptance rate)"
    elif not lo_a[0] <= ca[0] <= hi_a[0]:
        verdict, reason = (
            "cannot judge",
            f"candidate acceptance {ca[0]:.3f} is outside the sweep's range {span}: widen the sweep",
        )
    elif lo > 0 and np.mean((dq[1:] <= 0) | below) > TAIL:
        verdict, reason = (
            "cannot judge",
            f"{np.mean(below):.0%} of resamples fall below the sweep's acceptance range {span}, where a "
            "setting could reach more quality: widen the sweep to lower acceptance",
        )
    elif hi < 0 and np.mean((dq[1:] >= 0) | above) > TAIL:
        verdict, reason = (
            "cannot judge",
            f"{np.mean(above):.0%} of resamples fall above the sweep's acceptance range {span}, where the "
            "family reaches nothing: widen the sweep to higher acceptance",
        )
    else:
        verdict, reason = settle((lo, hi), margin), ""
    out.update(verdict=verdict, reason=reason)
    return out


def frontier_verdict(
    candidate: list[dict[str, np.ndarray]], family: list[dict[str, np.ndarray]], *, margin: float, seed: int = 0
) -> dict[str, Any]:
    """The candidate family's frontier against another family's, over the acceptance range both
    span, on the same examples (arrays aligned by example): the gaps, their paired-bootstrap
    intervals (one resample applied to every configuration of both, hulls recomputed) and the
    verdict (the rule is the module docstring's; ``margin``: the mean gap that counts as none)."""
    counts = _resamples(len(candidate[0]["quality"]), seed)
    (ca, cq), (fa, fq) = _stack(candidate, counts), _stack(family, counts)
    low, high, mean, lead, deficit = gaps(ca, cq, fa, fq)
    out: dict[str, Any] = {
        "shared_acceptance": (float(low[0]), float(high[0])),
        "mean_gap": float(mean[0]),
        "mean_gap_ci": _interval(mean[1:]),
        "largest_lead": float(lead[0]),
        "largest_lead_ci": _interval(lead[1:]),
        "largest_deficit": float(deficit[0]),
        "largest_deficit_ci": _interval(deficit[1:]),
        "detectable": detectable(_interval(mean[1:])),
    }
    spans = (
        f"the candidate spans [{np.nanmin(ca[0]):.3f}, {np.nanmax(ca[0]):.3f}], the family "
        f"[{np.nanmin(fa[0]):.3f}, {np.nanmax(fa[0]):.3f}]"
    )
    empty = np.mean(~np.isfinite(mean[1:]))
    m_lo, m_hi = out["mean_gap_ci"]
    ahead, behind = out["largest_lead_ci"][0] > 0, out["largest_deficit_ci"][0] > 0
    reason = ""
    if not (np.isfinite(ca[0]).all() and np.isfinite(fa[0]).all()):
        verdict, reason = "cannot judge", "a configuration drafts nothing (no acceptance rate)"
    elif not np.isfinite(mean[0]):
        verdict, reason = (
            "cannot judge",
            f"no shared acceptance range: {spans}; widen a sweep so they overlap",
        )
    elif empty > TAIL:
        verdict, reason = (
            "cannot judge",
            f"the shared acceptance range [{low[0]:.3f}, {high[0]:.3f}] vanishes in {empty:.0%} of resamples: "
            "widen a sweep so the ranges overlap more",
        )
    elif ahead and behind:
        verdict = "crosses"
    elif (verdict := settle((m_lo, m_hi), margin)) in (EQUIVALENT, INCONCLUSIVE):
        if ahead or behind:
            reason = f"significantly {'above' if ahead else 'below'} somewhere, but not on average"
    else:  # above or below by more than the margin; the largest gap that way is significant too
        verdict = "dominates" if verdict == "above" else "dominated"
    out.update(verdict=verdict, reason=reason)
    return out
