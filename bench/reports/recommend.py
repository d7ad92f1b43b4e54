"""The setting to deploy: per panel and task, the measured setting with the highest acceptance (or
speedup, where every timing is trustworthy) whose quality clears a floor, chosen honestly.

The floor is a share of ``ar``'s quality on the same examples (``0.98`` or ``98%``) or an absolute
value in the task's own unit (``abs:0.5``). A setting clears it when the one-sided 95% lower bound
of its mean paired margin (per example: its quality minus the floor, ``q_i - f * q_ar,i`` for a
share) is at least 0: Student's t on the paired margins with one pseudo-example at the worst margin
a score in [0, 1] allows (quality 0 where ar scores 1). Without it a half with no failure has no
variance and "clears" floors it cannot support: 25 examples all correct bound an accuracy only at
88.7% (exact binomial), yet t alone would clear 94%; with it, the false clearances stay under the
nominal rate (docs/recommend.md gives the simulation).

Picking the best of many settings on the examples that judge it would overstate how well it does
(the winner's curse), so the examples are split in two by a hash of their id (the same split for
every setting and every run): the setting is SELECTED on one half (the highest score among those
that clear the floor there) and CONFIRMED on the other, where one test of one setting holds its
nominal rate: a confirmed floor holds on fresh examples with probability at least 95% (the
simulation in tests/reports/test_recommend.py measures it). A setting that fails its confirmation is
reported as such; the next best is not tried (that would be a second look at the same half).

A lossless setting (``sd`` with any drafter, or a family at its lossless value: ensemble w = 1,
lossy lenience 1, threshold acc 1, cascade alpha -1) keeps the target's quality by construction:
its output has the target's law (greedy: the target's tokens, up to floating-point rounding). Under
a floor of at most ar's own quality it needs no quality test, only its speed confirmed; it takes
part in the ranking as cleared on both halves, and when the pick is not deployed, the fastest
lossless setting confirmed faster than ar is (its quality needs no look at either half).

A setting off the target's distribution (``summarise``'s fidelity verdict: its divergence, log p(y)
+ H(p) per token, not shown equivalent to ar's within the fidelity margin) is not considered under a
quality floor unless asked (``allow_off_distribution``, --allow-off-distribution): a floor on the
task's metric says nothing of what the metric does not see, and such a setting has changed what the
target would write. Lossless settings are on it by construction and always considered.

A setting is worth deploying only if it is faster than the target alone: the pick is recommended
when it is confirmed and its speedup's 95% interval (trustworthy timings only) lies above 1;
otherwise the recommendation is ``ar``, the target alone, with the reason and the numbers (nothing
clears the floor, the pick is not confirmed, its speed is unknown, or it is not confirmed faster).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from bench.errors import BenchError
from bench.lossless import LOSSLESS_METHOD
from bench.reports.deploy import how_to_run
from bench.reports.margins import Margins
from bench.reports.summary import (
    SPREAD_LIMIT,
    panels,
    summarise,
    task_facts,
    timing_trusted,
)
from bench.reports.table import spread_note
from bench.verifiers import MethodInfo, method_info

ALPHA = 0.05  # one-sided: a cleared floor holds with 95% confidence
FORMATS = ("markdown", "json")
FLOOR_SYNTAX = "a share of ar's quality (0.98 or 98%) or abs:VALUE (a quality in the task's own unit)"


@dataclass(frozen=True)
class Floor:
    """The quality a setting must keep: ``value`` times ar's quality, or ``value`` itself."""

    value: float
    relative: bool

    @classmethod
    def parse(cls, text: str) -> Floor:
        body, relative = (text[4:], False) if text.startswith("abs:") else (text.rstrip("%"), True)
        try:
            value = float(body) / (100 if relative and text.endswith("%") else 1)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or (relative and value <= 0):
            raise BenchError(f"--quality-floor {text!r}: give {FLOOR_SYNTAX}")
        return cls(value, relative)

    def __str__(self) -> str:
        return f"{self.value:.0%} of ar's quality" if self.relative else f"quality {self.value:g}"

    @property
    def worst(self) -> float:
        """The lowest margin a score in [0, 1] allows: quality 0 where ar scores 1."""
        return -self.value

    def margin(self, quality: np.ndarray, ar: np.ndarray | None) -> np.ndarray:
        """Per example: quality minus the floor (paired with ar's quality on that example)."""
        if not self.relative:
            return quality - self.value
        if ar is None:
            raise BenchError(f"a relative quality floor ({self.value:g} x ar's) needs ar's quality on the same examples")
        return quality - self.value * ar

    @property
    def kept_by_lossless(self) -> bool:
        """A lossless setting has the target's quality: it keeps a floor of at most ar's own."""
        return self.relative and self.value <= 1


def lossless(setting: pd.Series) -> bool:
    """Whether a summarised setting is lossless speculative decoding: ``sd`` (any drafter, any draft
    policy: SD keeps the target's law whatever q is), or a family at its declared lossless value."""
    info: MethodInfo = setting["method_info"]
    path = info.calibrated
    if info.name == LOSSLESS_METHOD:
        return True
    return path is not None and path.lossless is not None and setting["params"].get(path.param) == path.lossless


# Too few examples is the usual cause (docs/recommend.md: 25 clean examples support 88.7%): name the fix.
NOTHING_CLEARS = (
    "nothing clears the floor on the selection half: decode more examples (--limit) or lower the floor"
)
LOSSLESS = "lossless: keeps ar's quality by construction (only its speed needs confirming)"
TARGET_ALONE = "ar"  # what to deploy when no setting keeps the floor and is confirmed faster than ar


def lower_bound(margin: np.ndarray, worst: float) -> float:
    """One-sided (1 - ALPHA) lower bound of the mean margin: Student's t on the paired margins and
    one pseudo-example at ``worst`` (NaN without examples)."""
    if len(margin) == 0:
        return math.nan
    margin = np.append(margin, worst)
    n = len(margin)
    spread = float(np.std(margin, ddof=1)) / math.sqrt(n)
    return float(np.mean(margin)) - float(stats.t.ppf(1 - ALPHA, n - 1)) * spread


def confirmation_half(example_id: str) -> bool:
    """Which half an example is in: a hash of its id, the same for every setting and run."""
    return bool(hashlib.sha1(str(example_id).encode()).digest()[0] & 1)


@dataclass
class Candidate:
    """One measured setting: its score on the selection half and its margins on both halves."""

    name: str
    score: float  # acceptance (or speedup) on the selection half: higher is better
    select: np.ndarray  # margins on the selection half
    confirm: np.ndarray  # margins on the confirmation half
    acceptance: float = math.nan  # on the selection half
    quality: float = math.nan  # mean quality on the confirmation half
    lossless: bool = False  # keeps the floor by construction: no quality test on either half


@dataclass
class Choice:
    """The rule's answer: the pick (None when nothing clears the floor on the selection half)."""

    pick: Candidate | None
    selection_bound: float
    confirmation_bound: float
    confirmed: bool
    cleared: int  # settings that cleared the floor on the selection half (lossless ones included)


def choose(candidates: list[Candidate], worst: float) -> Choice:
    """Select on one half, confirm on the other: among the settings whose margin's lower bound
    clears 0 on the selection half (a lossless one clears by construction), the highest score (the
    first given on a tie); confirmed when its lower bound on the confirmation half clears 0 too
    (``worst``: the floor's worst margin), or when it is lossless."""
    bounds = [math.nan if c.lossless else lower_bound(c.select, worst) for c in candidates]
    cleared = [(c, b) for c, b in zip(candidates, bounds) if c.lossless or b >= 0]
    if not cleared:
        return Choice(None, math.nan, math.nan, False, 0)
    pick, bound = max(cleared, key=lambda cb: cb[0].score)
    if pick.lossless:
        return Choice(pick, math.nan, math.nan, True, len(cleared))
    confirm = lower_bound(pick.confirm, worst)
    return Choice(pick, bound, confirm, bool(confirm >= 0), len(cleared))


@dataclass
class Recommendation:
    """The setting to deploy for one panel and task, and how to run it."""

    panel: str
    task: str
    pair: str
    floor: str
    ranked_by: str  # "speedup" or "acceptance"
    settings: int  # settings considered
    cleared: int  # of them, cleared the floor on the selection half
    setting: str | None  # the pick's label
    method: str | None
    params: dict[str, Any]
    acceptance: float  # the pick's acceptance on the selection half
    speedup: float  # over its timed examples (NaN where not timed or not trusted)
    quality: float  # on the confirmation half
    floor_quality: float  # the floor on the confirmation half (a share of ar's quality there)
    selection_bound: float  # lower bound of the margin on the selection half
    confirmation_bound: float  # lower bound of the margin on the confirmation half
    examples: tuple[int, int]  # (selection, confirmation) examples
    status: str  # confirmed, not confirmed, or nothing clears the floor
    percent: bool  # quality is a share (accuracy, pass@1)
    deploy: str  # the pick's label, or ar (the target alone) when the pick is not worth it
    reason: str  # why, with the measured numbers
    speedup_ci: tuple[float, float]  # the pick's speedup's 95% interval (NaN where not trusted)
    ar_quality: float  # ar's mean quality on these examples (NaN without ar)
    fidelity: str  # the pick's fidelity against ar (on-distribution, off-distribution: why); "" without a pick
    run: list[tuple[str, str]] = field(default_factory=list)  # how to run what to deploy: (where, what)
    left_out: int = 0  # settings not considered: off the target's distribution (without --allow-off-distribution)


def _examples(rows: pd.DataFrame, config_id: str) -> pd.DataFrame:
    return rows[rows["config_id"] == config_id].drop_duplicates("example_id").set_index("example_id")


def _candidate(
    rows: pd.DataFrame, setting: pd.Series, ar: pd.DataFrame | None, floor: Floor, by: str
) -> Candidate:
    """A setting's margins per half (on the examples it shares with ar, for a share of ar's quality)
    and its score: acceptance on the selection half, or its speedup."""
    mine = _examples(rows, setting["config_id"])
    ids = mine.index if ar is None else mine.index.intersection(ar.index)
    half = np.array([confirmation_half(e) for e in ids], bool)
    quality = mine.loc[ids, "quality"].to_numpy(float)
    margin = floor.margin(quality, None if ar is None else ar.loc[ids, "quality"].to_numpy(float))
    selected = mine.loc[ids[~half]]
    drafted = selected["drafted_tokens"].sum()
    acceptance = float(selected["accepted_tokens"].sum() / drafted) if drafted else math.nan
    score = float(setting["speedup"]) if by == "speedup" else acceptance
    confirmed = float(quality[half].mean()) if half.any() else math.nan
    kept = floor.kept_by_lossless and lossless(setting)
    return Candidate(str(setting["config_id"]), score, margin[~half], margin[half], acceptance, confirmed, kept)


def recommend(
    rows: pd.DataFrame, floor: Floor, margins: Margins = Margins(), allow_off_distribution: bool = False
) -> list[Recommendation]:
    """Per panel and task, the setting to deploy under ``floor`` (module docstring: the rule), among
    the settings on the target's distribution within the fidelity margin of ``margins`` (all of them
    with ``allow_off_distribution``)."""
    summary = summarise(rows, margins)
    out = []
    for panel in panels(summary):
        for task, part in panel.part.groupby("task", sort=False):
            percent = task_facts(str(task)).percent
            off = part.apply(lambda s: bool(s["off_distribution"]) and not lossless(s), axis=1).astype(bool)
            left_out = set() if allow_off_distribution else set(part.loc[off, "config_id"])
            found = _one(rows, panel.title, str(task), part, floor, percent, left_out)
            out.append(replace(found, left_out=len(left_out)))
    return out


def _one(
    rows: pd.DataFrame, title: str, task: str, part: pd.DataFrame, floor: Floor, percent: bool, left_out: set[str]
) -> Recommendation:
    """One panel and task: every setting but ar and those ``left_out`` (configuration ids), ranked by
    speedup when every timing is trusted."""
    ar_rows = part[part["method"] == "ar"]
    if floor.relative and ar_rows.empty:
        raise BenchError(
            f"{task} ({title}): a floor relative to ar needs ar's run with the same settings; run "
            "--method ar too, or give an absolute floor (--quality-floor abs:VALUE)"
        )
    ar = _examples(rows, ar_rows["config_id"].iloc[0]) if len(ar_rows) else None
    settings = part[(part["method"] != "ar") & ~part["config_id"].isin(left_out)]
    trusted = settings["speedup"].notna() & settings["time_spread"].map(timing_trusted)
    by = "speedup" if len(settings) and trusted.all() else "acceptance"
    candidates = [_candidate(rows, s, ar, floor, by) for _, s in settings.iterrows()]
    choice = choose([c for c in candidates if np.isfinite(c.score)], floor.worst)
    ar_quality = float(ar["quality"].mean()) if ar is not None else math.nan
    alone = ar_rows.iloc[0] if len(ar_rows) else part.iloc[0]  # an absolute floor may have no ar run
    choice, pick, deployment = _settle(choice, settings, candidates, by, alone, ar_quality, percent)
    record = dict(
        panel=title, task=task, pair=str(part["pair"].iloc[0]), floor=str(floor), ranked_by=by,
        settings=len(settings), cleared=choice.cleared, selection_bound=choice.selection_bound,
        confirmation_bound=choice.confirmation_bound, percent=percent, ar_quality=ar_quality, **deployment,
    )  # fmt: skip
    if pick is None:
        nan, first = math.nan, candidates[0] if candidates else Candidate("", math.nan, np.array([]), np.array([]))
        return Recommendation(
            **record, setting=None, method=None, params={}, acceptance=nan, speedup=nan, quality=nan,
            floor_quality=nan, examples=(len(first.select), len(first.confirm)), status=NOTHING_CLEARS, fidelity="",
        )  # fmt: skip
    c = choice.pick
    assert c is not None
    return Recommendation(
        **record,
        setting=str(pick["label"]),
        method=str(pick["method"]),
        params=dict(pick["params"]),
        acceptance=c.acceptance,
        speedup=(_speed(pick) or (math.nan,))[0],
        quality=c.quality,
        floor_quality=c.quality - float(np.mean(c.confirm)) if len(c.confirm) else math.nan,
        examples=(len(c.select), len(c.confirm)),
        status=LOSSLESS if c.lossless else "confirmed" if choice.confirmed else "not confirmed on the other half",
        fidelity=str(pick["fidelity"]),
    )


def _settle(
    choice: Choice, settings: pd.DataFrame, candidates: list[Candidate], by: str, alone: pd.Series,
    ar_quality: float, percent: bool,
) -> tuple[Choice, pd.Series | None, dict[str, Any]]:
    """The pick's deployment; where it is ar, the fastest lossless setting confirmed faster instead
    (with why the pick is not deployed). Returns the choice, its setting's row and the deployment."""
    pick = settings[settings["config_id"] == choice.pick.name].iloc[0] if choice.pick else None
    deployment = _deployment(pick, choice.confirmed, by, alone, ar_quality, percent)
    fallback = _fastest_lossless(settings, candidates) if deployment["deploy"] == TARGET_ALONE else None
    if fallback is None or fallback is choice.pick:
        return choice, pick, deployment
    why_not = _deploy(pick, choice.confirmed, _speed(pick) if pick is not None else None, by)[1]
    lossless_pick = settings[settings["config_id"] == fallback.name].iloc[0]
    deployment = _deployment(lossless_pick, True, by, alone, ar_quality, percent)
    deployment["reason"] += f" (the fastest lossless setting; the first pick is not deployed: {why_not})"
    return Choice(fallback, math.nan, math.nan, True, choice.cleared), lossless_pick, deployment  # fmt: skip


def _fastest_lossless(settings: pd.DataFrame, candidates: list[Candidate]) -> Candidate | None:
    """The fastest lossless setting confirmed faster than ar (its trusted speedup's interval above
    1): deployable whatever the quality halves say, since its quality is the target's."""
    fast = [
        (c, speed[0])
        for c in candidates
        if c.lossless
        and (speed := _speed(settings[settings["config_id"] == c.name].iloc[0])) is not None
        and speed[1][0] > 1
    ]
    return max(fast, key=lambda cs: cs[1])[0] if fast else None


def _deployment(
    pick: pd.Series | None, confirmed: bool, by: str, alone: pd.Series, ar_quality: float, percent: bool
) -> dict[str, Any]:
    """What to deploy (the pick, or ar: ``_deploy``), why, the pick's trusted speedup interval and
    how to run what is deployed (``alone``: ar's row, for its settings)."""
    speed = _speed(pick) if pick is not None else None
    deploy, reason = _deploy(pick, confirmed, speed, by)
    return dict(
        deploy=deploy,
        reason=_why(deploy, reason, ar_quality, percent),
        speedup_ci=speed[1] if speed else (math.nan, math.nan),
        run=how_to_run(method_info(TARGET_ALONE), {}, None, alone)
        if pick is None or deploy == TARGET_ALONE
        else how_to_run(pick["method_info"], dict(pick["params"]), _head(pick), pick),
    )


def _speed(pick: pd.Series) -> tuple[float, tuple[float, float]] | None:
    """A setting's speedup over ar and its 95% interval, where its timing is trustworthy (the
    table's rule); None where it was not timed or its times vary too much."""
    if not np.isfinite(pick["speedup"]) or not timing_trusted(pick["time_spread"]):
        return None
    low, high = pick["normalised_time_ci"]  # of its time over ar's: the speedup's bounds inverted
    return float(pick["speedup"]), (1 / high, 1 / low)


def _deploy(
    pick: pd.Series | None, confirmed: bool, speed: tuple[float, tuple[float, float]] | None, by: str
) -> tuple[str, str]:
    """What to deploy and why: the pick when it keeps the floor on both halves (or is lossless) and
    is confirmed faster than ar (its speedup's 95% interval above 1); the target alone otherwise."""
    if pick is None:
        return TARGET_ALONE, "no setting clears the floor on the selection half"
    name = str(pick["label"])
    if not confirmed:
        return TARGET_ALONE, f"the best setting on the selection half, {name}, is not confirmed on the other half"
    keeps = "it is lossless (ar's quality by construction)" if lossless(pick) else "it keeps the floor"
    if speed is None:  # ranked by acceptance: this run cannot tell whether the pick is faster
        measured = pick["speedup"]
        timing = (
            f"its measured {measured:.2f}x ar's speed is not trustworthy ({spread_note(pick['time_spread'])})"
            if np.isfinite(measured)
            else "it was not timed"
        )
        return TARGET_ALONE, (
            f"no setting is confirmed faster than ar: the pick (by acceptance), {name}, {keeps.removeprefix('it ')} "
            f"but {timing}; time it against ar before deploying it"
        )
    s, (low, high) = speed
    measured_speed = f"{s:.2f}x ar's speed (95% interval {low:.2f} to {high:.2f})"
    if low > 1:
        return name, f"{keeps} and is confirmed faster than ar: {measured_speed}"
    which = "the fastest" if by == "speedup" else "the pick (by acceptance)"
    return TARGET_ALONE, (
        f"no setting that keeps the floor is confirmed faster than ar: {which}, {name}, runs at {measured_speed}"
    )


def _why(deploy: str, reason: str, ar_quality: float, percent: bool) -> str:
    """The recommendation in words: what to deploy and why (the target alone with ar's quality)."""
    if deploy != TARGET_ALONE:
        return f"deploy {deploy}: {reason}"
    known = f"; ar's quality here: {_num(ar_quality, percent)}" if np.isfinite(ar_quality) else ""
    return f"deploy ar, the target alone: {reason}{known}"


def _left_out(r: Recommendation) -> str:
    """How many settings were not considered for being off the target's distribution."""
    if not r.left_out:
        return ""
    return f"; {r.left_out} off the target's distribution not considered: --allow-off-distribution considers them"


def _head(pick: pd.Series) -> str | None:
    return pick["head"] if isinstance(pick.get("head"), str) and pick["head"] else None


def _num(value: float, percent: bool = True) -> str:
    if value is None or not np.isfinite(value):
        return "NA"
    return f"{value * 100:.1f}%" if percent else f"{value:.3f}"


def _finite(value: Any) -> Any:
    """NaN as null, in numbers and in pairs of them (JSON has no NaN)."""
    if isinstance(value, (tuple, list)):
        return [_finite(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def render(found: list[Recommendation], fmt: str) -> str:
    """The recommendations as a markdown table per panel with how to run each, or JSON."""
    if fmt not in FORMATS:
        raise BenchError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt == "json":
        records = [asdict(r) | {"run": [{"where": w, "how": h} for w, h in r.run]} for r in found]
        clean = [{k: _finite(v) for k, v in r.items()} for r in records]
        return json.dumps(clean, indent=2)
    parts = []
    for title in dict.fromkeys(r.panel for r in found):
        mine = [r for r in found if r.panel == title]
        parts += [
            f"### {title}",
            "",
            "| task | floor | deploy | best setting | ranked by | accept rate (selection half) | speedup "
            "| quality (confirmation half) | floor there | margin's 95% lower bound (selection; confirmation) "
            "| examples (selection, confirmation) | fidelity vs ar | status |",
            "|" + "---|" * 13,
        ]
        for r in mine:
            deploy = "ar (the target alone)" if r.deploy == TARGET_ALONE else r.deploy
            parts.append(
                f"| {r.task} | {r.floor} | {deploy} | {r.setting or 'none'} | {r.ranked_by} | {_num(r.acceptance)} | "
                f"{_num(r.speedup, False)} | {_num(r.quality, r.percent)} | {_num(r.floor_quality, r.percent)} | "
                f"{_num(r.selection_bound, r.percent)}; {_num(r.confirmation_bound, r.percent)} | "
                f"{r.examples[0]}, {r.examples[1]} | {r.fidelity or 'NA'} | "
                f"{r.status} ({r.cleared} of {r.settings} settings cleared the floor on the selection half"
                f"{_left_out(r)}) |"
            )
        parts.append("")
        for r in mine:
            what = "ar, the target alone" if r.deploy == TARGET_ALONE else r.deploy
            parts += [f"{r.task}: {r.reason}.", "", f"How to run {what} ({r.task}):"]
            parts += [*(f"- {w}: `{h}`" for w, h in r.run), ""]
    parts.append(
        "Selected on one half of the examples (a hash of their id), confirmed on the other: a confirmed "
        f"floor holds at {1 - ALPHA:.0%} confidence (one-sided Student t on the paired margins, one "
        "pseudo-example at the worst margin added). Ranked "
        "by speedup only where every setting's timing is trustworthy (each example timed at least twice, "
        f"the repeats' normalised times within {SPREAD_LIMIT:g}x of each other). A lossless setting (sd, or a "
        "family at its lossless value) keeps ar's quality by construction: it clears a floor of at most ar's "
        "quality untested, and only its speed is confirmed; where the pick is not deployed, the fastest "
        "lossless setting confirmed faster than ar is. "
        "Only settings on the target's distribution are considered (fidelity vs ar: the paired interval of "
        "their divergence, log p(y) + H(p) per token, minus ar's inside the fidelity margin; lossless ones by "
        "construction) unless --allow-off-distribution is given. "
        "The pick is deployed only where it is also confirmed faster than ar (its speedup's 95% interval "
        "above 1, on trustworthy timings); otherwise ar, the target alone. "
        "Quality and the floor are in the task's unit (shown as %). TARGET and DRAFT: the paths of the "
        "pair's models (a hub pair's ids are filled in)."
    )
    return "\n".join(parts)


def write_recommend(
    results: Path, floor: str, fmt: str, margins: Margins = Margins(), allow_off_distribution: bool = False
) -> str:
    from bench.store import load_results

    return render(recommend(load_results(results), Floor.parse(floor), margins, allow_off_distribution), fmt)
