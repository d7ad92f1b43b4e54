"""A candidate verifier against each baseline family's frontier: paired bootstrap, verdicts, tables.

Everything here reads the summary's structure (``family``, ``baseline``, ``swept``,
``method_info``), never a label: a label is only what a row is called on screen.

Per task x panel (the settings a comparison shares) the baselines are the families whose method
declares ``baseline`` (the static ensemble, lossy SD, each cascade rule, each engine rule), and
the candidates are the configurations a ``--candidate`` names (a method, a family or a label).
All methods decoded the same examples, so every interval is a PAIRED bootstrap: one resample of
examples is applied to every configuration, every point and hull is recomputed from it, and each
statistic is taken within the replicate. Two verdicts:

Point: each candidate configuration's (acceptance, quality) against each baseline family's
frontier (its upper Pareto hull, ``bench.reports.frontier``) read at the candidate's acceptance.
"above" or "below" when the 95% interval of the quality difference excludes zero,
"indistinguishable" when it holds zero, "cannot judge" with the reason otherwise. The frontier is
read only inside the sweep's acceptance range. A resample whose candidate falls beyond the range is
read at the nearest end of the sweep, which bounds the difference on one side only (the frontier
does not rise with acceptance, but a setting just below the sweep could reach more quality): such
resamples count against "above" when below the range and against "below" when above it.

Frontier: a candidate run at several settings (its configurations of one family in a panel and
task) is a family of its own, and its hull is set against each other baseline family's hull over
the acceptance range both span: the mean gap (candidate minus baseline, the area between the hulls
over the shared range's width) and the largest gap each way. "dominates" when the mean gap's
interval lies above 0 and the candidate's largest deficit is not significant (the lower end of its
interval is <= 0), "dominated" the mirror, "crosses" when both the largest lead and the largest
deficit are significant (lower ends > 0), "indistinguishable" otherwise (docs/compare.md).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench.calibration.notes import barely_moves, floor_point, reaches_floor
from bench.errors import BenchError
from bench.reports.frontier import acceptance_at, gaps, quality_at
from bench.reports.summary import BOOTSTRAP, PERCENT_METRICS, SPREAD_LIMIT, panels, quality_metrics, summarise
from bench.reports.table import spread_note
from bench.verifiers import MethodInfo

FORMATS = ("markdown", "csv", "json", "latex")
MIN_EXAMPLES = 10  # fewer paired examples than this: no verdict
TAIL = 0.025  # each tail of the 95% interval
HOW_TO_SWEEP = (
    "baseline sweeps: `diversed-bench run --grid baselines --method CANDIDATE --task T --pair P` "
    "(or --param NAME=v1,v2,v3 with several values to sweep one by hand)"
)


@dataclass
class Comparison:
    """One candidate configuration against one family's frontier in one panel and task."""

    panel: str
    task: str
    candidate: str  # the configuration's label (display only)
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


@dataclass
class FrontierComparison:
    """A swept candidate's frontier against one baseline family's frontier in one panel and task."""

    panel: str
    task: str
    candidate: str  # the candidate's family
    family: str
    candidate_points: int
    family_points: int
    examples: int  # paired examples used (decoded by every configuration of both families)
    shared_acceptance: tuple[float, float]  # the acceptance range both frontiers span
    mean_gap: float  # candidate minus family, averaged over the shared range
    mean_gap_ci: tuple[float, float]
    largest_lead: float  # max over the shared range of candidate minus family
    largest_lead_ci: tuple[float, float]
    largest_deficit: float  # max over the shared range of family minus candidate
    largest_deficit_ci: tuple[float, float]
    verdict: str  # dominates, dominated, crosses, indistinguishable or cannot judge
    reason: str
    percent: bool


@dataclass
class Verdicts:
    """What ``compare`` finds: every point verdict and every frontier verdict."""

    points: list[Comparison]
    frontiers: list[FrontierComparison]
    notes: list[str] = field(default_factory=list)  # one line per candidate sweep that barely moves


def chosen(part: pd.DataFrame, candidates: list[str]) -> pd.Series:
    """The summary rows a ``--candidate`` names: a method, a family, or (as a display convenience)
    a label."""
    return part["method"].isin(candidates) | part["family"].isin(candidates) | part["label"].isin(candidates)


def sweep_hint(info: MethodInfo) -> str:
    """The flags that sweep a method, from the sweep its class declares."""
    if not info.sweep:
        return "--param NAME=v1,v2,v3"
    return " ".join(
        f"--param {name}={','.join(str(v) for v in values)}" for name, values in info.sweep.items()
    )


def _per_example(rows: pd.DataFrame, config_id: str, ids: list[str]) -> dict[str, np.ndarray]:
    g = rows[rows["config_id"] == config_id].drop_duplicates("example_id").set_index("example_id").loc[ids]
    return {
        "accepted": g["accepted_tokens"].to_numpy(float),
        "drafted": g["drafted_tokens"].to_numpy(float),
        "quality": g["quality"].to_numpy(float),
    }


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


def judge(
    candidate: dict[str, np.ndarray], family: list[dict[str, np.ndarray]], *, seed: int = 0
) -> dict[str, Any]:
    """Point estimates, paired-bootstrap intervals and the verdict of one candidate point against
    one family, all on the same examples (arrays aligned by example)."""
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


def judge_frontiers(
    candidate: list[dict[str, np.ndarray]], family: list[dict[str, np.ndarray]], *, seed: int = 0
) -> dict[str, Any]:
    """The candidate family's frontier against another family's, over the acceptance range both
    span, on the same examples (arrays aligned by example): the gaps, their paired-bootstrap
    intervals (one resample applied to every configuration of both, hulls recomputed) and the
    verdict (the rule is the module docstring's)."""
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
    elif m_lo > 0 and not behind:
        verdict = "dominates"
    elif m_hi < 0 and not ahead:
        verdict = "dominated"
    elif ahead and behind:
        verdict = "crosses"
    else:
        verdict = "indistinguishable"
        if ahead or behind:
            reason = f"significantly {'above' if ahead else 'below'} somewhere, but not on average"
    out.update(verdict=verdict, reason=reason)
    return out


def _paired(examples: dict[str, set[str]], config_ids: list[str]) -> list[str]:
    """The examples every one of these configurations decoded, sorted."""
    return sorted(set.intersection(*(examples[cid] for cid in config_ids)))


def _shortfall(paired: list[str], who: str) -> str:
    """Why there is no verdict on these paired examples, or "" when there are enough."""
    if not paired:
        return f"unpaired examples: {who} share no example (same --limit, --seed and --data needed)"
    if len(paired) < MIN_EXAMPLES:
        return f"too few examples: {len(paired)} paired, need {MIN_EXAMPLES}"
    return ""


def compare(rows: pd.DataFrame, candidates: list[str], *, seed: int = 0) -> Verdicts:
    """Every candidate against every baseline family, per panel and task: each candidate point
    against each family's frontier, and each swept candidate's frontier against each other
    baseline family's frontier."""
    summary = summarise(rows)
    missing = [c for c in candidates if not chosen(summary, [c]).any()]
    if missing:
        raise BenchError(
            f"--candidate {', '.join(missing)}: no such method, family or label in these results; give one of: "
            + "; ".join(dict.fromkeys([*summary["method"].astype(str), *summary["family"].astype(str)]))
        )
    examples = {str(cid): set(g.astype(str)) for cid, g in rows.groupby("config_id")["example_id"]}
    metrics = quality_metrics(summary)
    points: list[Comparison] = []
    frontiers: list[FrontierComparison] = []
    notes: list[str] = []
    for panel in panels(summary):
        for task, part in panel.part.groupby("task", sort=False):
            mine = part[chosen(part, candidates)]
            baselines = list(part[part["baseline"].astype(bool)].groupby("family", sort=False))
            percent = metrics.get(task) in PERCENT_METRICS
            where = {"panel": panel.title, "task": str(task), "percent": percent}
            for _, cand in mine.iterrows():
                for family, members in baselines:
                    points.append(_point(rows, examples, where, cand, str(family), members, seed))
            for name, cands in mine.groupby("family", sort=False):
                if len(cands) < 2:
                    continue  # one setting: its point verdicts say all there is
                note = barely_moves(
                    str(name), cands["method_info"].iloc[0], list(cands["params"]), list(cands["acceptance_rate"])
                )
                notes += [f"{task} | {panel.title}: {note}"] if note else []
                for family, members in baselines:
                    if family != name:  # never the candidate against itself
                        frontiers.append(
                            _frontier(rows, examples, where, str(name), cands, str(family), members, seed)
                        )
    if not points:
        raise BenchError(
            f"no baseline family to compare {', '.join(candidates)} with: run a sweep; {HOW_TO_SWEEP}"
        )
    return Verdicts(points, frontiers, notes)


def _point(
    rows: pd.DataFrame,
    examples: dict[str, set[str]],
    where: dict[str, Any],
    cand: pd.Series,
    family: str,
    members: pd.DataFrame,
    seed: int,
) -> Comparison:
    # A candidate that belongs to the family is part of the frontier it is judged against: at best
    # on it (indistinguishable), below it when other settings of its own family dominate it.
    ids = list(members["config_id"])
    total = len(examples[cand["config_id"]])
    paired = _paired(examples, [cand["config_id"], *ids])
    shortfall = _shortfall(paired, "the candidate and this family")
    if len(members) < 2:
        hint = sweep_hint(members["method_info"].iloc[0])
        result = _blank_point(f"{family} ran one setting, no frontier: sweep it ({hint})", cand)
    elif shortfall:
        result = _blank_point(shortfall, cand)
    else:
        result = judge(
            _per_example(rows, cand["config_id"], paired),
            [_per_example(rows, cid, paired) for cid in ids] + _floor(members, len(paired)),
            seed=seed,
        )
        if len(paired) < total:
            note = f"{len(paired)} of the candidate's {total} examples are shared with the family"
            result["reason"] = "; ".join(r for r in (result["reason"], note) if r)
    return Comparison(
        **where,
        candidate=str(cand["label"]),
        family=family,
        family_points=len(members),
        examples=len(paired),
        normalised_time=float(cand["normalised_time"]),
        speedup=float(cand["speedup"]),
        time_spread=float(cand["time_spread"]),
        **result,
    )


def _floor(members: pd.DataFrame, examples: int) -> list[dict[str, np.ndarray]]:
    """A family that ran its calibration path's lowest-acceptance end is known below its sweep
    (bench.calibration.notes): the point that extends its frontier there, else nothing."""
    if reaches_floor(list(members["method_info"]), list(members["params"])):
        return [floor_point(examples)]
    return []


def _blank_point(reason: str, cand: pd.Series) -> dict[str, Any]:
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


def _frontier(
    rows: pd.DataFrame,
    examples: dict[str, set[str]],
    where: dict[str, Any],
    name: str,
    cands: pd.DataFrame,
    family: str,
    members: pd.DataFrame,
    seed: int,
) -> FrontierComparison:
    cand_ids, ids = list(cands["config_id"]), list(members["config_id"])
    total = len(_paired(examples, cand_ids))
    paired = _paired(examples, [*cand_ids, *ids])
    shortfall = _shortfall(paired, "the candidate's settings and this family")
    nan, pair = float("nan"), (float("nan"), float("nan"))
    blank = {
        "shared_acceptance": pair,
        **{k: nan for k in ("mean_gap", "largest_lead", "largest_deficit")},
        **{k: pair for k in ("mean_gap_ci", "largest_lead_ci", "largest_deficit_ci")},
        "verdict": "cannot judge",
    }
    if len(members) < 2:
        hint = sweep_hint(members["method_info"].iloc[0])
        result = {**blank, "reason": f"{family} ran one setting, no frontier: sweep it ({hint})"}
    elif shortfall:
        result = {**blank, "reason": shortfall}
    else:
        result = judge_frontiers(
            [_per_example(rows, cid, paired) for cid in cand_ids],
            [_per_example(rows, cid, paired) for cid in ids] + _floor(members, len(paired)),
            seed=seed,
        )
        if len(paired) < total:
            note = f"{len(paired)} of the candidate's {total} examples are shared with the family"
            result["reason"] = "; ".join(r for r in (result["reason"], note) if r)
    return FrontierComparison(
        **where,
        candidate=name,
        family=family,
        candidate_points=len(cands),
        family_points=len(members),
        examples=len(paired),
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
    """One point comparison as the formatted cells of a table row."""
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


def frontier_cells(f: FrontierComparison) -> dict[str, str]:
    """One frontier comparison as the formatted cells of a table row."""
    p = f.percent
    lo, hi = f.shared_acceptance
    return {
        "task": f.task,
        "candidate": f"{f.candidate} ({f.candidate_points} pts)",
        "family": f"{f.family} ({f.family_points} pts)",
        "examples": str(f.examples),
        "shared accept range": f"{_num(lo, True)} to {_num(hi, True)}" if np.isfinite(lo) else "NA",
        "mean Δ quality [95%]": _num(f.mean_gap, p) + _ci(f.mean_gap_ci, p),
        "largest lead [95%]": _num(f.largest_lead, p) + _ci(f.largest_lead_ci, p),
        "largest deficit [95%]": _num(f.largest_deficit, p) + _ci(f.largest_deficit_ci, p),
        "verdict": f.verdict + (f": {f.reason}" if f.reason else ""),
    }


def frame(comparisons: list[Comparison] | list[FrontierComparison]) -> pd.DataFrame:
    """Flat numbers, one row per comparison (intervals and ranges split into _low/_high)."""
    records = []
    for c in comparisons:
        rec = asdict(c)
        for key in [k for k, v in rec.items() if isinstance(v, tuple)]:
            rec[key + "_low"], rec[key + "_high"] = rec.pop(key)
        records.append(rec)
    return pd.DataFrame(records)


def _clean(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in r.items()}
        for r in records
    ]


def _markdown(table: pd.DataFrame) -> list[str]:
    cols = list(table.columns)
    return [
        "| " + " | ".join(cols) + " |",
        "|" + "---|" * len(cols),
        *("| " + " | ".join(row) + " |" for row in table.to_numpy()),
        "",
    ]


FOOTNOTE = (
    "Δ quality = candidate minus the family's frontier (upper Pareto hull, interpolated) at the "
    "candidate's acceptance rate; [95%] = paired bootstrap over examples. above/below: the interval "
    "excludes 0. Δ accept is NA where no setting of the family reaches the candidate's quality. "
    "Frontier against frontier (a candidate run at several settings): mean Δ quality = the candidate's "
    "frontier minus the family's, averaged over the acceptance range both span; largest lead/deficit = "
    "the largest gap each way there. dominates: the mean's interval is above 0 and the deficit's lower "
    "end is at most 0 (dominated: the mirror); crosses: both the lead's and the deficit's lower ends are "
    "above 0; indistinguishable: otherwise. "
    f"Speedups are not shown where the timed examples' time per token varies more than {SPREAD_LIMIT:g}x. "
)


def render(verdicts: Verdicts, fmt: str) -> str:
    """The verdicts as text: per panel the point table, then the frontier table."""
    if fmt not in FORMATS:
        raise BenchError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    points, frontiers = frame(verdicts.points), frame(verdicts.frontiers)
    if fmt == "csv":
        both = pd.concat([points.assign(comparison="point"), frontiers.assign(comparison="frontier")])
        return both[["comparison", *(c for c in both.columns if c != "comparison")]].to_csv(index=False)
    if fmt == "json":
        return json.dumps(
            {"points": _clean(points.to_dict("records")), "frontiers": _clean(frontiers.to_dict("records"))},
            indent=2,
        )
    parts = []
    titles = dict.fromkeys([*(c.panel for c in verdicts.points), *(f.panel for f in verdicts.frontiers)])
    for title in titles:
        point_table = pd.DataFrame([cells(c) for c in verdicts.points if c.panel == title])
        front_table = pd.DataFrame([frontier_cells(f) for f in verdicts.frontiers if f.panel == title])
        if fmt == "latex":  # pdflatex has no Δ in its default fonts
            parts.append(f"% {title}")
            for name, table in (("points", point_table), ("frontier against frontier", front_table)):
                if len(table):
                    parts += [f"% {name}", table.to_latex(index=False, escape=True).replace("Δ", r"$\Delta$")]
            continue
        parts += [f"### {title}", ""]
        if len(point_table):
            parts += _markdown(point_table)
        if len(front_table):
            parts += ["Frontier against frontier:", "", *_markdown(front_table)]
    if fmt == "markdown":
        parts += [*verdicts.notes, *([""] if verdicts.notes else [])]
        parts.append(FOOTNOTE + HOW_TO_SWEEP + ".")
    return "\n".join(parts)


def write_compare(results: Path, candidates: list[str], fmt: str) -> str:
    from bench.store import load_results

    if not candidates:
        raise BenchError(
            "give --candidate NAME (a method, a family or a label as `diversed-bench table` prints it)"
        )
    return render(compare(load_results(results), candidates), fmt)
