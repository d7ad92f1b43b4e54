"""A candidate verifier against each baseline family's frontier: paired bootstrap, verdicts, tables.

Per task x panel (the settings a comparison shares), the candidate's point (acceptance rate,
quality) is set against every swept baseline family present (the static-ensemble weight sweep,
lossy SD's lenience, each cascade rule's alpha, each engine rule or plug-in with a swept
parameter). The frontier of a family is its upper Pareto hull (``bench.reports.frontier``), read at
the candidate's acceptance. All methods decoded the same examples, so the interval is a PAIRED
bootstrap: one resample of examples is applied to every configuration, every point and the hull
are recomputed from it, and the difference is taken within the replicate. The verdict is "above"
or "below" when the 95% interval of the quality difference excludes zero, "indistinguishable"
when it holds zero, and "cannot judge" with the reason otherwise.

The frontier is read only inside the sweep's acceptance range. A resample whose candidate falls
beyond the range is read at the nearest end of the sweep, which bounds the difference on one side
only (the frontier does not rise with acceptance, but a setting just below the sweep could reach
more quality): such resamples count against "above" when below the range and against "below"
when above it, so either verdict holds whatever the family does just outside its sweep.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench.errors import BenchError
from bench.reports.frontier import acceptance_at, quality_at
from bench.reports.summary import BOOTSTRAP, PERCENT_METRICS, SPREAD_LIMIT, panels, quality_metrics, summarise
from bench.reports.table import spread_note

FORMATS = ("markdown", "csv", "json", "latex")
MIN_EXAMPLES = 10  # fewer paired examples than this: no verdict
TAIL = 0.025  # each tail of the 95% interval
NOT_BASELINES = {"ar", "sd"}  # single lossless points, not families to sweep
# The baseline families and the flag that sweeps each: one of them run at a single setting gets a
# row saying how to sweep it. Any other method (DIVERSED, a plug-in) is a family only when swept.
SWEEP_FLAGS = {
    "ensemble": "--target-weight 0.2,0.4,0.6,0.8",
    "lossy": "--lenience 0.1,0.3,0.6,0.9",
    "cascade": "--cascade-alpha 0.1,0.3,0.5,0.7,0.9",
    "typical": "--param posterior_alpha=0.1,0.3,0.5,0.7",
    "threshold": "--param speculative_accept_threshold_acc=0.2,0.4,0.6,0.8",
    "relaxed": "--param relaxed_topk=4 --param relaxed_delta=0.05,0.1,0.2,0.4",
}
HOW_TO_SWEEP = (
    "baseline sweeps: `diversed-bench run --grid baselines --method CANDIDATE --task T --pair P` "
    "(or --target-weight/--lenience/--cascade-alpha/--param with several values)"
)


@dataclass
class Comparison:
    """The candidate against one family in one panel and task."""

    panel: str
    task: str
    candidate: str
    family: str
    family_points: int
    examples: int  # paired examples used
    acceptance: float
    acceptance_ci: tuple[float, float]
    quality: float
    quality_ci: tuple[float, float]
    frontier_quality: float  # the family's frontier at the candidate's acceptance
    quality_diff: float
    quality_diff_ci: tuple[float, float]
    frontier_acceptance: float  # the family's frontier at the candidate's quality
    acceptance_diff: float
    acceptance_diff_ci: tuple[float, float]
    normalised_time: float
    speedup: float
    time_spread: float  # max / min time per token of the timed examples; above SPREAD_LIMIT untrusted
    beyond_sweep: float  # share of resamples whose candidate falls outside the family's acceptance range
    verdict: str  # above, indistinguishable, below or cannot judge
    reason: str
    percent: bool  # quality is a percentage (accuracy, pass@1)


def family_of(row: pd.Series) -> str:
    """A family: one method's configurations whose labels differ only in their ``name=value``
    parameters (the swept ones). What else the label names (a cascade rule, a head, a mix, a
    draft policy) sets the family apart: ``cascade (opt, a=0.5)`` belongs to ``cascade (opt)``."""
    label = str(row["label"])
    inner = label[len(str(row["method"])) :].strip()
    if not (inner.startswith("(") and inner.endswith(")")):
        return str(row["method"])
    kept = [part for part in inner[1:-1].split(", ") if "=" not in part or part.startswith(("mix=", "head="))]
    return str(row["method"]) + (f" ({', '.join(kept)})" if kept else "")


def _per_example(rows: pd.DataFrame, config_id: str, ids: list[str]) -> dict[str, np.ndarray]:
    g = rows[rows["config_id"] == config_id].drop_duplicates("example_id").set_index("example_id").loc[ids]
    return {
        "accepted": g["accepted_tokens"].to_numpy(float),
        "drafted": g["drafted_tokens"].to_numpy(float),
        "quality": g["quality"].to_numpy(float),
    }


def _points(data: dict[str, np.ndarray], idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(acceptance, quality) for each resample in ``idx`` [R, n]."""
    drafted = data["drafted"][idx].sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        acceptance = data["accepted"][idx].sum(-1) / np.where(drafted == 0, np.nan, drafted)
    return acceptance, data["quality"][idx].mean(-1)


def _interval(values: np.ndarray) -> tuple[float, float]:
    finite = values[np.isfinite(values)]
    if len(finite) < 2:
        return (float("nan"), float("nan"))
    lo, hi = np.percentile(finite, [2.5, 97.5])
    return float(lo), float(hi)


def judge(
    candidate: dict[str, np.ndarray], family: list[dict[str, np.ndarray]], *, seed: int = 0
) -> dict[str, Any]:
    """Point estimates, paired-bootstrap intervals and the verdict of one candidate against one
    family, all on the same examples (arrays aligned by example)."""
    n = len(candidate["quality"])
    full = np.arange(n)[None, :]
    idx = np.concatenate([full, np.random.default_rng(seed).integers(0, n, size=(BOOTSTRAP, n))])
    ca, cq = _points(candidate, idx)
    pts = [_points(f, idx) for f in family]
    fa, fq = np.stack([p[0] for p in pts], 1), np.stack([p[1] for p in pts], 1)
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
        verdict = "above" if lo > 0 else "below" if hi < 0 else "indistinguishable"
        reason = ""
    out.update(verdict=verdict, reason=reason)
    return out


def _blank(reason: str, cand: pd.Series) -> dict[str, Any]:
    """No verdict: the candidate's own point (over all its examples) and the reason."""
    nan, pair = float("nan"), (float("nan"), float("nan"))
    return {
        "acceptance": float(cand["acceptance_rate"]),
        "acceptance_ci": tuple(cand["acceptance_rate_ci"]),
        "quality": float(cand["quality"]),
        "quality_ci": tuple(cand["quality_ci"]),
        "frontier_quality": nan,
        "quality_diff": nan,
        "quality_diff_ci": pair,
        "frontier_acceptance": nan,
        "acceptance_diff": nan,
        "acceptance_diff_ci": pair,
        "beyond_sweep": nan,
        "verdict": "cannot judge",
        "reason": reason,
    }


def _sweep_hint(family: str) -> str:
    return SWEEP_FLAGS.get(family.split(" ")[0], "--param NAME=v1,v2,v3")


def compare(rows: pd.DataFrame, candidates: list[str], *, seed: int = 0) -> list[Comparison]:
    """Every candidate against every baseline family, per panel and task."""
    summary = summarise(rows)
    known = set(summary["label"]) | set(summary["method"])
    missing = [c for c in candidates if c not in known]
    if missing:
        raise BenchError(
            f"--candidate {', '.join(missing)}: no such method or label in these results; give one of: "
            + "; ".join(dict.fromkeys(summary["label"]))
        )
    metrics = quality_metrics(summary)
    out = []
    for panel in panels(summary):
        for task, part in panel.part.groupby("task", sort=False):
            part = part.assign(family=part.apply(family_of, axis=1))
            chosen = part[part["label"].isin(candidates) | part["method"].isin(candidates)]
            for _, cand in chosen.iterrows():
                for family, members in part[~part["method"].isin(NOT_BASELINES)].groupby(
                    "family", sort=False
                ):
                    if len(members) == 1 and members["method"].iloc[0] not in SWEEP_FLAGS:
                        continue  # DIVERSED or a plug-in run once: a candidate, not a baseline
                    out.append(_one(rows, panel.title, str(task), cand, str(family), members, metrics, seed))
    if not out:
        raise BenchError(
            f"no baseline family to compare {', '.join(candidates)} with: run a sweep; {HOW_TO_SWEEP}"
        )
    return out


def _one(
    rows: pd.DataFrame,
    title: str,
    task: str,
    cand: pd.Series,
    family: str,
    members: pd.DataFrame,
    metrics: dict[str, str],
    seed: int,
) -> Comparison:
    # A candidate that belongs to the family is part of the frontier it is judged against: at best
    # on it (indistinguishable), below it when other settings of its own family dominate it.
    ids = set(rows.loc[rows["config_id"] == cand["config_id"], "example_id"].astype(str))
    total = len(ids)
    for cid in members["config_id"]:
        ids &= set(rows.loc[rows["config_id"] == cid, "example_id"].astype(str))
    paired = sorted(ids)
    if len(members) < 2:
        result = _blank(f"{family} ran one setting, no frontier: sweep it ({_sweep_hint(family)})", cand)
    elif not paired:
        result = _blank(
            "unpaired examples: the candidate and this family share no example (same --limit, --seed and --data needed)",
            cand,
        )
    elif len(paired) < MIN_EXAMPLES:
        result = _blank(f"too few examples: {len(paired)} paired, need {MIN_EXAMPLES}", cand)
    else:
        result = judge(
            _per_example(rows, cand["config_id"], paired),
            [_per_example(rows, cid, paired) for cid in members["config_id"]],
            seed=seed,
        )
        if len(paired) < total:
            note = f"{len(paired)} of the candidate's {total} examples are shared with the family"
            result["reason"] = "; ".join(r for r in (result["reason"], note) if r)
    return Comparison(
        panel=title,
        task=task,
        candidate=str(cand["label"]),
        family=family,
        family_points=len(members),
        examples=len(paired),
        normalised_time=float(cand["normalised_time"]),
        speedup=float(cand["speedup"]),
        time_spread=float(cand["time_spread"]),
        percent=metrics.get(task) in PERCENT_METRICS,
        **result,
    )


def _num(value: float, percent: bool, digits: int = 2) -> str:
    if value is None or not np.isfinite(value):
        return "NA"
    return f"{value * 100:.{digits - 1}f}%" if percent else f"{value:.{digits + 1}f}"


def _ci(ci: tuple[float, float], percent: bool) -> str:
    if not all(np.isfinite(ci)):
        return ""
    return f" [{_num(ci[0], percent)}, {_num(ci[1], percent)}]"


def cells(c: Comparison) -> dict[str, str]:
    """One comparison as the formatted cells of a table row."""
    p, note = c.percent, spread_note(c.time_spread)
    return {
        "task": c.task,
        "candidate": c.candidate,
        "family": f"{c.family} ({c.family_points} pts)",
        "examples": str(c.examples),
        "accept rate": _num(c.acceptance, True) + _ci(c.acceptance_ci, True),
        "quality": _num(c.quality, p) + _ci(c.quality_ci, p),
        "frontier quality": _num(c.frontier_quality, p),
        "Δ quality [95%]": _num(c.quality_diff, p) + _ci(c.quality_diff_ci, p),
        "Δ accept at equal quality [95%]": _num(c.acceptance_diff, True) + _ci(c.acceptance_diff_ci, True),
        "norm. time": _num(c.normalised_time, False) + (f" ({note})" if note else ""),
        "speedup": f"not shown: {note}" if note else _num(c.speedup, False),
        "verdict": c.verdict + (f": {c.reason}" if c.reason else ""),
    }


def frame(comparisons: list[Comparison]) -> pd.DataFrame:
    """Flat numbers, one row per comparison (intervals split into _low/_high)."""
    records = []
    for c in comparisons:
        rec = asdict(c)
        for key in [k for k in rec if k.endswith("_ci")]:
            rec[key + "_low"], rec[key + "_high"] = rec.pop(key)
        records.append(rec)
    return pd.DataFrame(records)


def render(comparisons: list[Comparison], fmt: str) -> str:
    if fmt not in FORMATS:
        raise BenchError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt == "csv":
        return frame(comparisons).to_csv(index=False)
    if fmt == "json":
        records = frame(comparisons).to_dict("records")
        clean = [
            {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in r.items()}
            for r in records
        ]
        return json.dumps(clean, indent=2)
    parts = []
    for title in dict.fromkeys(c.panel for c in comparisons):
        table = pd.DataFrame([cells(c) for c in comparisons if c.panel == title])
        if fmt == "latex":  # pdflatex has no Δ in its default fonts
            parts += [f"% {title}", table.to_latex(index=False, escape=True).replace("Δ", r"$\Delta$")]
            continue
        cols = list(table.columns)
        parts += [
            f"### {title}",
            "",
            "| " + " | ".join(cols) + " |",
            "|" + "---|" * len(cols),
            *("| " + " | ".join(row) + " |" for row in table.to_numpy()),
            "",
        ]
    if fmt == "markdown":
        parts += [
            "Δ quality = candidate minus the family's frontier (upper Pareto hull, interpolated) at the "
            "candidate's acceptance rate; [95%] = paired bootstrap over examples. above/below: the interval "
            "excludes 0. Δ accept is NA where no setting of the family reaches the candidate's quality. "
            f"Speedups are not shown where the timed examples' time per token varies more than {SPREAD_LIMIT:g}x. "
            + HOW_TO_SWEEP
            + ".",
        ]
    return "\n".join(parts)


def write_compare(results: Path, candidates: list[str], fmt: str) -> str:
    from bench.store import load_results

    if not candidates:
        raise BenchError("give --candidate LABEL (a method or label as `diversed-bench table` prints it)")
    return render(compare(load_results(results), candidates), fmt)
