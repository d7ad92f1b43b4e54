"""``compare``'s verdicts as text: per panel and task one line per candidate family and baseline
family (the answer), then the table of point verdicts and the table of frontier verdicts; CSV,
JSON and LaTeX carry the same."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench.errors import BenchError
from bench.reports.compare import (
    HOW_TO_SWEEP,
    Comparison,
    FamilyVerdict,
    FrontierComparison,
    Verdicts,
    compare,
)
from bench.reports.margins import EQUIVALENT, INCONCLUSIVE
from bench.reports.margins import Margins
from bench.reports.summary import SPREAD_LIMIT
from bench.reports.table import spread_note

FORMATS = ("markdown", "csv", "json", "latex")


def _num(value: float, percent: bool, digits: int = 2) -> str:
    if value is None or not np.isfinite(value):
        return "NA"
    return f"{value * 100:.{digits - 1}f}%" if percent else f"{value:.{digits + 1}f}"


def _ci(ci: tuple[float, float], percent: bool) -> str:
    if not all(np.isfinite(ci)):
        return ""
    return f" [{_num(ci[0], percent)}, {_num(ci[1], percent)}]"


def drafts_differ(v: Comparison | FrontierComparison | FamilyVerdict) -> tuple[str, str]:
    """What drafted each side, where the two differ ("sampled drafts", "greedy drafts"), else
    ("", ""): a verdict between different drafts tells a better draft as much as a better verifier.
    A pool named by its drafts ("all baselines, greedy drafts") is not named twice."""
    mine, theirs = v.candidate_drafts, v.family_drafts
    if not (mine and theirs) or mine == theirs:
        return "", ""
    return mine, "" if v.family.endswith(theirs) else theirs


def _named(name: str, *parts: str) -> str:
    """A name with its count and drafts in one parenthesis: ``threshold (8 pts, greedy drafts)``."""
    shown = ", ".join(p for p in parts if p)
    return f"{name} ({shown})" if shown else name


def verdict_text(v: Comparison | FrontierComparison | FamilyVerdict) -> str:
    """A verdict as words, naming its margin: "equivalent within ±2.0% (exact_flexible, default)";
    "inconclusive" with the margin its interval reaches past and the smallest difference this
    sample detects (80% power), so a reader sees what more examples would buy."""
    p, margin = v.percent, f"±{_num(v.margin, v.percent)} ({v.metric})"
    if v.verdict == EQUIVALENT:
        return f"{EQUIVALENT} within {margin}"
    if v.verdict == INCONCLUSIVE:
        return (
            f"{INCONCLUSIVE}: the interval reaches past {margin}; this sample detects differences of about "
            f"{_num(v.detectable, p)} (80% power)"
        )
    return v.verdict


def verdict_short(v: Comparison | FrontierComparison | FamilyVerdict) -> str:
    """A verdict in a chart's title: with its margin where the margin decides it."""
    if v.verdict in (EQUIVALENT, INCONCLUSIVE):
        return f"{v.verdict} (margin ±{_num(v.margin, v.percent)})"
    return v.verdict


def cells(c: Comparison) -> dict[str, str]:
    """One point comparison as the formatted cells of a table row."""
    p, note = c.percent, spread_note(c.time_spread)
    mine, theirs = drafts_differ(c)
    return {
        "task": c.task,
        "candidate": _named(c.candidate, mine),
        "family": _named(c.family, f"{c.family_points} pts", theirs),
        "examples": str(c.examples),
        "accept rate": _num(c.acceptance, True) + _ci(c.acceptance_ci, True),
        "quality": _num(c.quality, p) + _ci(c.quality_ci, p),
        "frontier quality": _num(c.frontier_quality, p),
        "Δ quality [95%]": _num(c.quality_diff, p) + _ci(c.quality_diff_ci, p),
        "Δ accept at equal quality [95%]": _num(c.acceptance_diff, True) + _ci(c.acceptance_diff_ci, True),
        "norm. time": _num(c.normalised_time, False) + (f" ({note})" if note else ""),
        "speedup": f"not shown: {note}" if note else _num(c.speedup, False),
        "fidelity vs ar": c.fidelity,
        "verdict": verdict_text(c) + (f"; {c.reason}" if c.reason else ""),
    }


def frontier_cells(f: FrontierComparison) -> dict[str, str]:
    """One frontier comparison as the formatted cells of a table row."""
    p = f.percent
    lo, hi = f.shared_acceptance
    mine, theirs = drafts_differ(f)
    return {
        "task": f.task,
        "candidate": _named(f.candidate, f"{f.candidate_points} pts", mine),
        "family": _named(f.family, f"{f.family_points} pts", theirs),
        "examples": str(f.examples),
        "shared accept range": f"{_num(lo, True)} to {_num(hi, True)}" if np.isfinite(lo) else "NA",
        "mean Δ quality [95%]": _num(f.mean_gap, p) + _ci(f.mean_gap_ci, p),
        "largest lead [95%]": _num(f.largest_lead, p) + _ci(f.largest_lead_ci, p),
        "largest deficit [95%]": _num(f.largest_deficit, p) + _ci(f.largest_deficit_ci, p),
        "verdict": verdict_text(f) + (f"; {f.reason}" if f.reason else ""),
    }


def frame(comparisons: list[Comparison] | list[FrontierComparison] | list[FamilyVerdict]) -> pd.DataFrame:
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
    "Every frontier, the candidate's included, holds both anchors of its drafts (lossless sd and "
    "accept_all, keeping every draft, on the same drafts: sampled, greedy or lookup), counted in a family's "
    "points: a per-request mix with either is open to every verifier, so every frontier spans [sd's "
    "acceptance, 1]. all baselines: every baseline point and their anchors pooled (a "
    "random mix of any two settings is attainable), its frontier the upper hull of them all; where the "
    "baselines draft in more than one way, each way is pooled too (all baselines, sampled drafts; all "
    "baselines, greedy drafts), and a line names each side's drafts where they differ. "
    "Δ quality = candidate minus the family's frontier (upper Pareto hull, interpolated) at the "
    "candidate's acceptance rate; [95%] = paired bootstrap over examples. above/below: the interval "
    "excludes 0; equivalent: it holds 0 and lies inside ±margin, the largest difference that counts as none "
    "(per metric: 2 points of accuracy or pass@1, 0.5 of ROUGE x 100, or --margin NAME=VALUE; named in each "
    "verdict); inconclusive: it reaches past the margin, with the smallest difference this sample detects "
    "at 80% power. fidelity vs ar: on-distribution where the candidate's divergence (log p(y) + H(p) per "
    "token, 0 in expectation for the target's own tokens) minus ar's has its paired interval inside the "
    "fidelity margin (--margin fidelity=VALUE, default 0.1 nats per token), off-distribution otherwise; a "
    "verdict line names the candidate's settings that are off it. Δ accept is NA where no setting of the family reaches the candidate's quality. "
    "Frontier against frontier (a candidate run at several settings): mean Δ quality = the candidate's "
    "frontier minus the family's, averaged over the acceptance range both span; largest lead/deficit = "
    "the largest gap each way there. dominates: the mean's interval is above 0 and the deficit's lower "
    "end is at most 0 (dominated: the mirror); crosses: both the lead's and the deficit's lower ends are "
    "above 0; otherwise equivalent when the mean's interval lies inside ±margin, inconclusive when not. "
    f"Speedups are not shown where re-timing the same examples moved the normalised time more than "
    f"{SPREAD_LIMIT:g}x, or where they were timed once. "
)


def _count(n: int, what: str = "pt") -> str:
    return f"{n} {what}" + ("s" if n != 1 else "")


def gap_text(v: FamilyVerdict) -> str:
    """A family verdict's gap with its interval and where it was measured ("" when there is none)."""
    if not np.isfinite(v.gap):
        return ""
    p, (low, high) = v.percent, v.acceptance
    if v.kind == "frontier":
        where = f"over acceptance {_num(low, True)} to {_num(high, True)}"
        return f"mean Δ quality {_num(v.gap, p)}{_ci(v.gap_ci, p)} {where}"
    return f"Δ quality {_num(v.gap, p)}{_ci(v.gap_ci, p)} at acceptance {_num(low, True)}"


def family_line(v: FamilyVerdict) -> str:
    """One family verdict as a line of text: who against whom, the verdict, the gap and where."""
    mine, theirs = drafts_differ(v)
    who = (
        f"{_named(v.candidate, _count(v.candidate_points, 'setting'), mine)} vs "
        f"{_named(v.family, _count(v.family_points), theirs)}"
    )
    text = f"{who}: {verdict_text(v)}" + (f", {gap_text(v)}" if gap_text(v) else "")
    if v.reason:
        text += f" ({v.reason})"
    if v.candidate_points > 1:
        text += "; point verdicts: " + ", ".join(f"{n} {k}" for k, n in v.point_verdicts.items())
    if v.off_distribution:  # quality kept or not, these settings write what the target would not
        text += f"; off the target's distribution: {'; '.join(v.off_distribution)}"
    return text


def family_cells(v: FamilyVerdict) -> dict[str, str]:
    """One family verdict as the cells of a table row (LaTeX)."""
    return {"task": v.task, "verdict": family_line(v)}


def _by_panel(verdicts: Verdicts) -> list[str]:
    found: list[FamilyVerdict | Comparison | FrontierComparison] = [*verdicts.families, *verdicts.points, *verdicts.frontiers]
    return list(dict.fromkeys(v.panel for v in found))


def render(verdicts: Verdicts, fmt: str) -> str:
    """The verdicts as text: per panel the family lines per task, the point table, then the
    frontier table."""
    if fmt not in FORMATS:
        raise BenchError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    points, frontiers = frame(verdicts.points), frame(verdicts.frontiers)
    if fmt == "csv":
        both = pd.concat([points.assign(comparison="point"), frontiers.assign(comparison="frontier")])
        return both[["comparison", *(c for c in both.columns if c != "comparison")]].to_csv(index=False)
    if fmt == "json":
        return json.dumps(
            {
                "verdicts": _clean(frame(verdicts.families).to_dict("records")),
                "notes": [{"panel": p, "task": t, "note": line} for p, t, line in verdicts.notes],
                "points": _clean(points.to_dict("records")),
                "frontiers": _clean(frontiers.to_dict("records")),
            },
            indent=2,
        )
    parts = []
    for title in _by_panel(verdicts):
        families = [v for v in verdicts.families if v.panel == title]
        point_table = pd.DataFrame([cells(c) for c in verdicts.points if c.panel == title])
        front_table = pd.DataFrame([frontier_cells(f) for f in verdicts.frontiers if f.panel == title])
        if fmt == "latex":  # pdflatex has no Δ in its default fonts
            parts.append(f"% {title}")
            tables = (
                ("verdicts", pd.DataFrame([family_cells(v) for v in families])),
                ("points", point_table),
                ("frontier against frontier", front_table),
            )
            for name, table in tables:
                if len(table):
                    parts += [f"% {name}", table.to_latex(index=False, escape=True).replace("Δ", r"$\Delta$")]
            continue
        parts += [f"### {title}", ""]
        for task in dict.fromkeys(v.task for v in families):
            parts += [f"Verdicts, {task}:", ""]
            parts += [f"- {family_line(v)}" for v in families if v.task == task]
            parts += [f"- note: {line}" for p, t, line in verdicts.notes if (p, t) == (title, task)] + [""]
        if len(point_table):
            parts += ["Points:", "", *_markdown(point_table)]
        if len(front_table):
            parts += ["Frontier against frontier:", "", *_markdown(front_table)]
    if fmt == "markdown":
        parts.append(FOOTNOTE + HOW_TO_SWEEP + ".")
    return "\n".join(parts)


def write_compare(results: Path, candidates: list[str], fmt: str, margins: Margins = Margins()) -> str:
    from bench.store import load_results

    if not candidates:
        raise BenchError(
            "give --candidate NAME (a method, a family or a label as `diversed-bench table` prints it)"
        )
    return render(compare(load_results(results), candidates, margins=margins), fmt)
