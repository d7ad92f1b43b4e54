"""A candidate verifier against each baseline family's frontier, and against all of them pooled.

Everything here reads the summary's structure (``family``, ``baseline``, ``swept``,
``method_info``), never a label: a label is only what a row is called on screen.

Per task x panel (the settings a comparison shares) the baselines are the families whose method
declares ``baseline`` (the static ensemble, lossy SD, each cascade rule, each engine rule), and
the candidates are the configurations a ``--candidate`` names (a method, a family or a label).
A per-request random mix of any two settings is attainable whatever their families, so every
family's frontier, a candidate's included, holds both anchors of its drafts (lossless ``sd`` and
``accept_all`` on the same drafts, ``bench.lossless``; ``with_anchors``) and spans [SD's
acceptance, 1], and every baseline point pooled is a family
too: "all baselines", whose frontier is the strongest a candidate can be set against (a family run
at one setting takes part as its point; the candidates' own configurations are left out of the
pool). Where the baselines draft in more than one way (sampled, greedy), each way is pooled too,
and the verdicts name each side's drafts where they differ: a better draft is not a better verifier.

Each candidate point is judged against each family's frontier, and a candidate run at several
settings (its configurations of one family in a panel and task) has its frontier judged against
each other family's frontier (``bench.reports.verdicts``: the paired bootstrap and the rules). The
family verdicts then give one line per candidate family and baseline family: the frontier verdict
where the candidate was swept, its point verdict where it ran one setting.
``bench.reports.compare_format`` turns them into text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from bench.calibration.notes import barely_moves, floor_point, reaches_floor
from bench.errors import BenchError
from bench.lossless import ANCHORS, Drafts, anchors
from bench.reports.verdicts import frontier_verdict, point_verdict
from bench.reports.margins import Margins
from bench.reports.summary import ON, Panel, panels, quality_metrics, summarise, task_facts
from bench.verifiers import MethodInfo

MIN_EXAMPLES = 10  # fewer paired examples than this: no verdict
POOLED = "all baselines"  # the family of every baseline point pooled (and "all baselines, sampled drafts", ...)
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
    time_spread: float  # how far re-timing the same examples moves norm. time; above SPREAD_LIMIT untrusted
    beyond_sweep: float  # share of resamples whose candidate falls outside the family's acceptance range
    verdict: str  # above, below, equivalent (within the margin), inconclusive or cannot judge
    reason: str
    percent: bool  # quality is a percentage (accuracy, pass@1)
    candidate_family: str  # the candidate configuration's family
    margin: float  # the quality difference that counts as none (bench.reports.margins)
    metric: str  # the margin's metric and source, as the verdict names it ("rouge2, default")
    detectable: float  # the smallest difference this sample detects at 80% power (margins.detectable)
    fidelity: str  # the candidate's fidelity against ar: on-distribution, or off-distribution and why
    candidate_drafts: str = ""  # what drafted each side ("sampled drafts", "greedy drafts", ...)
    family_drafts: str = ""


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
    verdict: str  # dominates, dominated, crosses, equivalent, inconclusive or cannot judge
    reason: str
    percent: bool
    margin: float  # the mean gap that counts as none
    metric: str
    detectable: float  # the smallest mean gap this sample detects at 80% power
    candidate_drafts: str = ""
    family_drafts: str = ""


@dataclass
class FamilyVerdict:
    """The answer for one candidate family against one baseline family in one panel and task: its
    frontier verdict when the candidate was swept, else its one point's verdict."""

    panel: str
    task: str
    candidate: str  # the candidate's family
    family: str
    candidate_points: int
    family_points: int
    kind: str  # "frontier", "point" or "own" (a swept candidate's points against its own family)
    verdict: str
    reason: str
    gap: float  # the mean gap (frontier) or Δ quality at the candidate's acceptance (point)
    gap_ci: tuple[float, float]
    acceptance: tuple[float, float]  # the shared acceptance range; a point's acceptance twice
    point_verdicts: dict[str, int]  # how the candidate's points fared against this family
    percent: bool
    margin: float
    metric: str
    detectable: float
    off_distribution: list[str]  # the candidate's settings off the target's distribution, with why
    candidate_drafts: str = ""
    family_drafts: str = ""


@dataclass
class Verdicts:
    """What ``compare`` finds: every point verdict, every frontier verdict, and the family lines."""

    points: list[Comparison]
    frontiers: list[FrontierComparison]
    families: list[FamilyVerdict] = field(default_factory=list)
    # (panel, task, line) per candidate sweep that barely moves
    notes: list[tuple[str, str, str]] = field(default_factory=list)


def chosen(part: pd.DataFrame, candidates: list[str]) -> pd.Series:
    """The summary rows a ``--candidate`` names: a method, a family, or (as a display convenience)
    a label."""
    return part["method"].isin(candidates) | part["family"].isin(candidates) | part["label"].isin(candidates)


def sweep_hint(info: MethodInfo) -> str:
    """How to sweep a method: by acceptance where its class declares a calibration (the sweep that
    moves acceptance on any pair), else with the fixed values its class declares."""
    fixed = " ".join(
        f"--param {name}={','.join(str(v) for v in values)}" for name, values in info.sweep.items()
    )
    if info.calibration:
        return "--grid baselines calibrates it by acceptance" + (f"; or fixed: {fixed}" if fixed else "")
    return fixed or "--param NAME=v1,v2,v3"


def drafts_of(row: pd.Series) -> Drafts:
    """What drafted a summary row's configuration (its draft policy and drafter)."""
    policy, drafter = row.get("draft_policy"), row.get("drafter")
    return Drafts(policy if isinstance(policy, str) else None, drafter if isinstance(drafter, str) else None)


def drafts_text(members: pd.DataFrame) -> str:
    """How a verdict line names a family's drafts: "greedy drafts", or "sampled and greedy drafts"
    for a pool of both; "" for a family that drafts nothing."""
    texts = list(dict.fromkeys(drafts_of(r).text for _, r in members.iterrows() if drafts_of(r).drafter))
    if len(texts) < 2:
        return texts[0] if texts else ""
    return " and ".join(t.removesuffix(" drafts") for t in texts) + " drafts"


def with_anchors(part: pd.DataFrame, members: pd.DataFrame) -> tuple[pd.DataFrame, list[tuple[str, Drafts]]]:
    """A family's configurations with the anchors of each one's drafts (bench/lossless.py: ``sd``
    and ``accept_all`` on the same drafts) that ``part`` holds and the family lacks, and the
    (method, drafts) anchors ``part`` does not hold. Every frontier, a candidate's included, is
    built on this."""
    need = list(dict.fromkeys(a for _, r in members.iterrows() for a in anchors(drafts_of(r))))
    pool = part[part["method"].isin(ANCHORS)]
    have = [(str(r["method"]), drafts_of(r)) for _, r in pool.iterrows()]
    found = pool[pd.Series([a in need for a in have], index=pool.index, dtype=bool)]
    found = found[~found["config_id"].isin(members["config_id"])]
    return pd.concat([members, found]), [a for a in need if a not in have]


def baseline_families(part: pd.DataFrame, candidates: list[str]) -> list[tuple[str, pd.DataFrame]]:
    """(name, configurations) of every family a candidate is judged against in one panel and task,
    each with the anchors of its drafts (``with_anchors``): "all baselines" first (every
    baseline point that is not a candidate, when they come from at least two families), then, where
    the baselines draft in more than one way, the pool of each way ("all baselines, greedy drafts":
    a better verifier told from a better draft), then each baseline family in the summary's order."""
    base = part["baseline"].astype(bool)
    pooled = part[base & ~chosen(part, candidates)]
    pools = [(POOLED, pooled)]
    texts = pd.Series([drafts_of(r).text for _, r in pooled.iterrows()], index=pooled.index, dtype=object)
    if texts.nunique() > 1:
        pools += [(f"{POOLED}, {text}", g) for text, g in pooled.groupby(texts, sort=False)]
    families = [(name, members) for name, members in pools if members["family"].nunique() > 1]
    families += [(str(name), members) for name, members in part[base].groupby("family", sort=False)]
    return [(name, with_anchors(part, members)[0]) for name, members in families]


def missing_anchors(part: pd.DataFrame, candidates: list[str]) -> str | None:
    """One line naming the anchors the families' frontiers lack (their drafts' ``sd`` or
    ``accept_all`` configurations are not in these results), the families that lack them and how
    to run them."""
    lacking: dict[tuple[str, Drafts], list[str]] = {}
    judged = part[part["baseline"].astype(bool) | chosen(part, candidates)]
    for name, members in judged.groupby("family", sort=False):
        for anchor in with_anchors(part, members)[1]:
            lacking.setdefault(anchor, []).append(str(name))
    if not lacking:
        return None
    points = "; ".join(
        f"{method} on {d.text} ({', '.join(names)})" + (f" (--draft-policy {d.policy})" if d.policy == "greedy" else "")
        for (method, d), names in lacking.items()
    )
    return (
        f"no anchor in these results for: {points}; those frontiers lack the per-request mix with it, "
        "and a comparison then measures sweep ranges: run it (`--grid baselines` runs every one it needs)"
    )


def _per_example(rows: pd.DataFrame, config_id: str, ids: list[str]) -> dict[str, np.ndarray]:
    g = rows[rows["config_id"] == config_id].drop_duplicates("example_id").set_index("example_id").loc[ids]
    return {
        "accepted": g["accepted_tokens"].to_numpy(float),
        "drafted": g["drafted_tokens"].to_numpy(float),
        "quality": g["quality"].to_numpy(float),
    }


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


def compare(
    rows: pd.DataFrame,
    candidates: list[str],
    *,
    seed: int = 0,
    margins: Margins = Margins(),
    summary: pd.DataFrame | None = None,
    found: list[Panel] | None = None,
) -> Verdicts:
    """Every candidate against every baseline family and all of them pooled, per panel and task:
    each candidate point against each family's frontier, each swept candidate's frontier against
    each other family's, and the family lines, "equivalent" meaning within the task metric's
    margin (``margins``). ``summary`` and ``found`` (its panels), when the caller has them
    already, are not computed again."""
    summary = summarise(rows, margins) if summary is None else summary
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
    notes: list[tuple[str, str, str]] = []
    for panel in panels(summary) if found is None else found:
        for task, part in panel.part.groupby("task", sort=False):
            mine = part[chosen(part, candidates)]
            baselines = baseline_families(part, candidates)
            metric = metrics.get(task, "quality")
            where = {"panel": panel.title, "task": str(task), "percent": task_facts(str(task)).percent,
                     "margin": margins.of(metric), "metric": margins.named(metric)}  # fmt: skip
            lacking = missing_anchors(part, candidates)
            notes += [(panel.title, str(task), lacking)] if lacking else []
            settings = mine["family"].value_counts()
            for _, cand in mine.iterrows():
                for family, members in baselines:
                    if family == cand["family"] and settings[family] < 2:
                        continue  # a baseline run once, given as candidate: never judged against itself
                    points.append(_point(rows, examples, where, cand, family, members, seed))
            for name, cands in mine.groupby("family", sort=False):
                if len(cands) < 2:
                    continue  # one setting: its point verdicts say all there is
                note = barely_moves(
                    str(name), cands["method_info"].iloc[0], list(cands["params"]), list(cands["acceptance_rate"])
                )
                notes += [(panel.title, str(task), note)] if note else []
                own = with_anchors(part, cands)[0]  # its frontier holds its drafts' anchors
                for family, members in baselines:
                    if family != name:  # never the candidate against itself
                        frontiers.append(
                            _frontier(rows, examples, where, str(name), own, len(cands), family, members, seed)
                        )
    if not points:
        raise BenchError(
            f"no baseline family to compare {', '.join(candidates)} with: run a sweep; {HOW_TO_SWEEP}"
        )
    return Verdicts(points, frontiers, family_verdicts(points, frontiers), notes)


def family_verdicts(points: list[Comparison], frontiers: list[FrontierComparison]) -> list[FamilyVerdict]:
    """One line per panel, task, candidate family and baseline family, in the points' order: the
    frontier verdict where there is one, else the candidate's single point's verdict; a swept
    candidate against its own family (a baseline given as candidate) is "own family", with the
    tally of its points' verdicts."""
    fronts = {(f.panel, f.task, f.candidate, f.family): f for f in frontiers}
    groups: dict[tuple[str, str, str, str], list[Comparison]] = {}
    for c in points:
        groups.setdefault((c.panel, c.task, c.candidate_family, c.family), []).append(c)
    return [_family_line(key, mine, fronts.get(key)) for key, mine in groups.items()]


def _family_line(
    key: tuple[str, str, str, str], mine: list[Comparison], front: FrontierComparison | None
) -> FamilyVerdict:
    nan = float("nan")
    if front is not None:
        kind, verdict, reason, detectable = "frontier", front.verdict, front.reason, front.detectable
        gap, gap_ci, acceptance = front.mean_gap, front.mean_gap_ci, front.shared_acceptance
    elif len(mine) == 1:
        (c,) = mine
        kind, verdict, reason, detectable = "point", c.verdict, c.reason, c.detectable
        gap, gap_ci, acceptance = c.quality_diff, c.quality_diff_ci, (c.acceptance, c.acceptance)
    else:
        kind, verdict, reason, detectable = "own", "own family", "", nan
        gap, gap_ci, acceptance = nan, (nan, nan), (nan, nan)
    tally = pd.Series([c.verdict for c in mine]).value_counts().sort_index()
    return FamilyVerdict(
        panel=key[0],
        task=key[1],
        candidate=key[2],
        family=key[3],
        candidate_points=len(mine),
        family_points=mine[0].family_points,
        kind=kind,
        verdict=verdict,
        reason=reason,
        gap=gap,
        gap_ci=gap_ci,
        acceptance=acceptance,
        point_verdicts={str(k): int(v) for k, v in tally.items()},
        percent=mine[0].percent,
        margin=mine[0].margin,
        metric=mine[0].metric,
        detectable=detectable,
        off_distribution=[f"{c.candidate}: {c.fidelity.partition(': ')[2]}" for c in mine if c.fidelity != ON],
        candidate_drafts=mine[0].candidate_drafts,
        family_drafts=mine[0].family_drafts,
    )


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
    # on it (equivalent, or inconclusive on too few examples), below it when other settings of its own family dominate it.
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
        result = point_verdict(
            _per_example(rows, cand["config_id"], paired),
            [_per_example(rows, cid, paired) for cid in ids] + _floor(members, len(paired)),
            margin=where["margin"],
            seed=seed,
        )
        if len(paired) < total:
            note = f"{len(paired)} of the candidate's {total} examples are shared with the family"
            result["reason"] = "; ".join(r for r in (result["reason"], note) if r)
        result["reason"] = _one_setting(result, family, members)
    return Comparison(
        **where,
        candidate=str(cand["label"]),
        family=family,
        family_points=len(members),
        examples=len(paired),
        normalised_time=float(cand["normalised_time"]),
        speedup=float(cand["speedup"]),
        time_spread=float(cand["time_spread"]),
        candidate_family=str(cand["family"]),
        fidelity=str(cand["fidelity"]),
        candidate_drafts=drafts_text(cand.to_frame().T),
        family_drafts=drafts_text(members),
        **result,
    )


def _one_setting(result: dict[str, Any], family: str, members: pd.DataFrame) -> str:
    """The reason of a verdict withheld from a family that ran one setting of its own (its frontier
    is its anchors and that point), with how to sweep it."""
    own = members[~members["method"].isin(ANCHORS)]
    if result["verdict"] != "cannot judge" or len(own) != 1 or family.startswith(POOLED):
        return str(result["reason"])
    hint = f"{family} ran one setting besides its anchors: sweep it ({sweep_hint(own['method_info'].iloc[0])})"
    return "; ".join(r for r in (result["reason"], hint) if r)


def _floor(members: pd.DataFrame, examples: int) -> list[dict[str, np.ndarray]]:
    """A family that ran its calibration path's lowest-acceptance end is known below its sweep
    (bench.calibration.notes): the point that extends its frontier there, else nothing. The pooled
    family extends when any family in it does."""
    ends = (
        reaches_floor(list(family["method_info"]), list(family["params"]))
        for _, family in members.groupby("family", sort=False)
    )
    return [floor_point(examples)] if any(ends) else []


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
        "detectable": nan,
        "verdict": "cannot judge",
        "reason": reason,
    }


def _frontier(
    rows: pd.DataFrame,
    examples: dict[str, set[str]],
    where: dict[str, Any],
    name: str,
    cands: pd.DataFrame,
    settings: int,
    family: str,
    members: pd.DataFrame,
    seed: int,
) -> FrontierComparison:
    """``cands``: the candidate family's configurations with its anchors; ``settings``: how
    many of them are its own."""
    cand_ids, ids = list(cands["config_id"]), list(members["config_id"])
    total = len(_paired(examples, cand_ids))
    paired = _paired(examples, [*cand_ids, *ids])
    shortfall = _shortfall(paired, "the candidate's settings and this family")
    nan, pair = float("nan"), (float("nan"), float("nan"))
    blank: dict[str, Any] = {
        "shared_acceptance": pair,
        **{k: nan for k in ("mean_gap", "largest_lead", "largest_deficit")},
        **{k: pair for k in ("mean_gap_ci", "largest_lead_ci", "largest_deficit_ci")},
        "detectable": nan,
        "verdict": "cannot judge",
    }
    if len(members) < 2:
        hint = sweep_hint(members["method_info"].iloc[0])
        result = {**blank, "reason": f"{family} ran one setting, no frontier: sweep it ({hint})"}
    elif shortfall:
        result = {**blank, "reason": shortfall}
    else:
        result = frontier_verdict(
            [_per_example(rows, cid, paired) for cid in cand_ids],
            [_per_example(rows, cid, paired) for cid in ids] + _floor(members, len(paired)),
            margin=where["margin"],
            seed=seed,
        )
        if len(paired) < total:
            note = f"{len(paired)} of the candidate's {total} examples are shared with the family"
            result["reason"] = "; ".join(r for r in (result["reason"], note) if r)
        result["reason"] = _one_setting(result, family, members)
    return FrontierComparison(
        **where,
        candidate=name,
        family=family,
        candidate_points=settings,
        family_points=len(members),
        examples=len(paired),
        candidate_drafts=drafts_text(cands),
        family_drafts=drafts_text(members),
        **result,
    )
