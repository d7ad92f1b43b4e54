"""Results -> per-configuration summaries with bootstrap intervals, grouped into panels.

Normalised time is paired and per emitted token: over the examples a configuration shares with the
``ar`` run of the same settings (``SHARED_SETTINGS``: task, pair, temperature, budget, seed, data,
prompt options, device, dtype, engine), its time per emitted token (sum of time over sum of
tokens) divided by ``ar``'s on those same examples; speedup is its inverse (docs/spec.md §7, the
speed bound). Time per example would call a method that stops early faster for stopping; per token
it is not, and at equal lengths (greedy lossless decoding) the two agree. The ratio of mean times
per example is kept beside it (``normalised_time_example``). Intervals are 95% percentile
bootstraps over examples. Only rows decoded alone carry a time (rows decoded in a batch have NaN);
times are computed from those rows only.

A timing is trusted by what measures noise, not by how much examples differ (a long prompt or a
draft that fits one text better than another makes examples differ for real, and the bootstrap
interval carries that): each timed example is decoded ``--timing-repeats`` times, interleaved with
``ar`` each time, and ``time_spread`` is how far the normalised time moves from one repeat of the
whole timed set to another (docs/engines-and-timing.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench.drafters import drafter_label
from bench.errors import BenchError
from bench.reports.margins import EQUIVALENT, settle
from bench.reports.margins import FIDELITY, Margins
from bench.store import SHARED_SETTINGS, load_results
from bench.verifiers import VERIFIERS, MethodInfo
from bench.verifiers.base import LABEL_DIGITS

BOOTSTRAP = 1000
# max / min over repeats of the normalised time beyond which a timing is noise: re-timing the same
# examples moved the answer by more than a fifth, so no speedup is shown.
SPREAD_LIMIT = 1.2
UNMEASURED = np.inf  # time_spread where each example was timed once: no noise measured, not trusted
# A panel of the table holds the configurations that share these settings (tasks are its columns).
# Settings each task brings with it (its exemplar count, its split): tasks that differ only in
# these still sit side by side in one panel, each column naming its own.
PER_TASK = ["num_fewshot", "split"]
PANEL = [k for k in SHARED_SETTINGS if k not in ("task", *PER_TASK)]


def bootstrap(stat: Any, *arrays: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of ``stat(*resampled arrays)`` resampling examples jointly."""
    n = len(arrays[0])
    if n < 2:
        return (float("nan"), float("nan"))
    idx = np.random.default_rng(seed).integers(0, n, size=(BOOTSTRAP, n))
    values = stat(*(a[idx] for a in arrays))
    if np.isnan(values).all():  # e.g. a task without a score on these examples (Spec-Bench's qa)
        return (float("nan"), float("nan"))
    lo, hi = np.nanpercentile(values, [2.5, 97.5])
    return float(lo), float(hi)


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.sum(-1) / np.where(b.sum(-1) == 0, np.nan, b.sum(-1))


def _mean_ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.mean(-1) / b.mean(-1)


def _per_token_ratio(t: np.ndarray, n: np.ndarray, t_ar: np.ndarray, n_ar: np.ndarray) -> np.ndarray:
    """Time per emitted token over ar's, each pooled over the same examples (sum of time over sum
    of tokens): the one speed estimator of every report."""
    return _ratio(t, n) / _ratio(t_ar, n_ar)


def per_token_time(
    t: np.ndarray, n: np.ndarray, t_ar: np.ndarray, n_ar: np.ndarray
) -> tuple[float, tuple[float, float]]:
    """Normalised time per emitted token of paired examples (time and tokens of a configuration and
    of ar, aligned by example) and its 95% bootstrap interval over examples (resampled jointly)."""
    arrays = [np.asarray(a, float) for a in (t, n, t_ar, n_ar)]
    if not len(arrays[0]):
        return np.nan, (np.nan, np.nan)
    return float(_per_token_ratio(*arrays)), bootstrap(_per_token_ratio, *arrays)


def _per_token(g: pd.DataFrame, column: str = "target_loglik") -> tuple[float, tuple[float, float]]:
    """A per-token column's mean over a configuration's examples (token-weighted, as the table reads
    it: the target's log p, or the zero-mean divergence) and its bootstrap interval over examples;
    NaN for rows written before rows carried it."""
    known = g[g[column].notna()] if column in g else g.iloc[:0]
    tokens = known["new_tokens"].to_numpy(float)
    if not tokens.sum():
        return np.nan, (np.nan, np.nan)
    total = known[column].to_numpy(float) * tokens
    return float(total.sum() / tokens.sum()), bootstrap(_ratio, total, tokens)


def _divergence_gap(a: np.ndarray, n: np.ndarray, b: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Token-weighted mean divergence of one configuration minus ar's, on the same examples."""
    return _ratio(a * n, n) - _ratio(b * m, m)


OFF = "off-distribution"
ON = "on-distribution"


def _fidelity(g: pd.DataFrame, ar: pd.DataFrame, margin: float) -> dict[str, Any]:
    """A configuration's fidelity against ar with its settings, on the examples both decoded: the
    difference of their token-weighted mean divergence (log p_T(y) + H(p_T), 0 in expectation for
    ar) with its paired bootstrap interval, and the verdict of ``settle`` within ``margin``. Only
    "equivalent" is on the target's distribution; a difference, an inconclusive interval, a
    missing ar run or rows without the column are off it (nothing shows them on it)."""
    first = g.iloc[0]
    nan, pair = np.nan, (np.nan, np.nan)
    out = {"fidelity_diff": nan, "fidelity_diff_ci": pair, "fidelity_margin": margin}
    if first["method"] == "ar":
        return {**out, "fidelity_diff": 0.0, "fidelity": "reference", "off_distribution": False}
    ref = ar[_agrees(ar, first[list(SHARED_SETTINGS)])]
    column = "target_divergence"
    if column not in g or g[column].isna().all() or (len(ref) and ref[column].isna().all()):
        return {**out, "fidelity": f"{OFF}: not recorded (rows of schema 5 and older)", "off_distribution": True}
    shared = g[["example_id", column, "new_tokens"]].merge(
        ref[["example_id", column, "new_tokens"]], on="example_id", suffixes=("", "_ar")
    ).dropna()
    if not len(shared):
        return {**out, "fidelity": f"{OFF}: not shown, no ar run on these examples", "off_distribution": True}
    arrays = [shared[c].to_numpy(float) for c in (column, "new_tokens", f"{column}_ar", "new_tokens_ar")]
    interval = bootstrap(_divergence_gap, *arrays)
    verdict = settle(interval, margin) if np.isfinite(interval[0]) else "inconclusive"
    on = verdict == EQUIVALENT
    return {
        **out,
        "fidelity_diff": float(_divergence_gap(*arrays)),
        "fidelity_diff_ci": interval,
        "fidelity": ON if on else f"{OFF}: {verdict}",
        "off_distribution": not on,
    }


def _repeats(frame: pd.DataFrame, suffix: str = "") -> np.ndarray:
    """[example, repeat] times of timed rows, cut to the fewest repeats any of them has (rows
    written before repeats were kept have their one time, ``wall_time_s``)."""
    every = frame.get(f"wall_times_s{suffix}", pd.Series([None] * len(frame), index=frame.index))
    pairs = zip(every, frame[f"wall_time_s{suffix}"])
    each = [list(t) if isinstance(t, (list, np.ndarray)) and len(t) else [w] for t, w in pairs]
    fewest = min(map(len, each), default=0)
    return np.array([t[:fewest] for t in each], float).reshape(len(each), fewest)


def _spread(t: np.ndarray, t_ar: np.ndarray) -> float:
    """How far the normalised time moves between repeats: max / min over repeats r of sum_i t[i, r]
    / sum_i t_ar[i, r] (the same examples, interleaved with ar in each repeat). ``UNMEASURED``
    with fewer than two repeats."""
    repeats = min(t.shape[1], t_ar.shape[1])
    if repeats < 2 or not len(t):
        return UNMEASURED
    ratio = t[:, :repeats].sum(0) / t_ar[:, :repeats].sum(0)
    return float(ratio.max() / ratio.min())


def timing_trusted(spread: float) -> bool:
    """A timing is trusted where repeats measured its noise and it is within ``SPREAD_LIMIT``."""
    return bool(np.isfinite(spread) and spread <= SPREAD_LIMIT)


def _agrees(frame: pd.DataFrame, values: pd.Series) -> pd.Series:
    """Rows whose columns ``values.index`` equal ``values``; a setting left unset (NA) matches NA."""
    part = frame[list(values.index)]
    return ((part == values) | (part.isna() & values.isna())).all(axis=1)


def row_info(row: pd.Series) -> MethodInfo:
    """What a row's method declares: the ``method_info`` it was written with; rows of schema 3
    (written before rows carried it) take a built-in's from the registry, and a plug-in's is
    rebuilt from its parameters (every numeric one swept, as a class that declares no sweep). A
    declaration added since a row was written (``shipped_in``, ``shade``) is a built-in's class's."""
    text = row.get("method_info")
    method = str(row["method"])
    if isinstance(text, str) and text:
        stored = json.loads(text)
        later = MethodInfo.of(VERIFIERS[method]) if method in VERIFIERS else None
        added = {k: getattr(later, k) for k in MethodInfo.__dataclass_fields__ if k not in stored} if later else {}
        return MethodInfo(**stored, **added)
    if method in VERIFIERS:
        return MethodInfo.of(VERIFIERS[method])
    return MethodInfo(name=method, defaults=json.loads(row.get("params") or "{}"), sweep={})


def row_drafter(row: pd.Series) -> str | None:
    """What drafted a row's configuration: its ``drafter`` column; rows of schema 4 and older
    (written before drafters existed) were drafted by the draft model. None for ``ar``."""
    if row["method"] == "ar" or not row_info(row).uses_draft:
        return None
    value = row.get("drafter")
    return value if isinstance(value, str) and value else "model"


def _method(first: pd.Series) -> tuple[MethodInfo, dict[str, Any], str | None, str | None, str | None, str]:
    """A row's method as structure: its info, every parameter's value, head, draft policy (None
    under greedy decoding), drafter and the drafter's name in labels."""
    info = row_info(first)
    params = info.full(json.loads(first.get("params") or "{}"))
    head = first["head"] if isinstance(first.get("head"), str) else None
    policy = first.get("draft_policy") if first["temperature"] != 0 else None
    policy = policy if isinstance(policy, str) else None
    drafter = row_drafter(first)
    return info, params, head, policy, drafter, drafter_label(drafter) if drafter else ""


def structure(first: pd.Series, digits: int = LABEL_DIGITS) -> dict[str, Any]:
    """A configuration's method as structure, from its row's ``params`` and ``method_info`` (never
    from its label): every parameter's value, its family, its swept values (shown at ``digits``
    significant digits) and how to draw it."""
    info, params, head, policy, drafter, named = _method(first)
    return {
        "params": params,
        "drafter": drafter,
        "draft_policy": policy,
        "family": info.family(params, head, policy, named),
        # The label with a head named by its folder, not its whole path: for legends.
        "legend": info.label(
            params, head.replace(":", "/").rstrip("/").rsplit("/", 1)[-1] if head else None, policy, named, digits
        ),
        "swept": info.swept_text(params, digits),
        "sweep_key": info.sweep_key(params),
        "baseline": info.baseline,
        "order": info.order,
        "style": info.style,
        "method_info": info,
    }


def _tell_apart(summary: pd.DataFrame, firsts: dict[str, pd.Series]) -> None:
    """Labels show a float swept value at LABEL_DIGITS significant digits; a family (in one panel
    and task) whose points would then read the same shows as many digits as tell them apart, in
    its labels, legends and swept values (``firsts``: each configuration's first row)."""
    for _, family in summary.groupby(["family", "draft_len", *SHARED_SETTINGS], sort=False, dropna=False):
        digits = family["method_info"].iloc[0].digits(list(family["params"]))
        if digits == LABEL_DIGITS:
            continue
        for i in family.index:
            first = firsts[summary.at[i, "config_id"]]
            info, params, head, policy, _, named = _method(first)
            summary.at[i, "label"] = info.label(params, head, policy, named, digits)
            shown = structure(first, digits)
            summary.at[i, "legend"], summary.at[i, "swept"] = shown["legend"], shown["swept"]


def _sortable(values: tuple[Any, ...]) -> tuple[tuple[int, Any], ...]:
    """Swept values in an order that compares numbers as numbers and anything else as text."""
    return tuple(
        (0, float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, str(v)) for v in values
    )


def _headline(config_id: str, g: pd.DataFrame) -> dict[str, Any]:
    """One configuration's settings, method structure and headline numbers with their intervals,
    pooled over its examples ``g``; its time against ar is added by ``_against_ar``."""
    first = g.iloc[0]
    drafted, accepted = g["drafted_tokens"].to_numpy(float), g["accepted_tokens"].to_numpy(float)
    quality = g["quality"].to_numpy(float)
    reached = np.stack(g["reached_per_position"].to_numpy()).sum() if first["method"] != "ar" else 0
    timed = g[g["wall_time_s"].notna()]
    return {
        "config_id": config_id,
        **{k: first[k] for k in [*SHARED_SETTINGS, "method", "label", "draft_len", "head"]},
        **structure(first),
        "examples": len(g),
        "acceptance_rate": accepted.sum() / drafted.sum() if drafted.sum() else np.nan,
        "acceptance_rate_ci": bootstrap(_ratio, accepted, drafted) if drafted.sum() else (np.nan, np.nan),
        "per_token_acceptance": accepted.sum() / reached if reached else np.nan,
        "expected_acceptance": float(
            np.nansum(g["expected_acceptance"] * g["reached_per_position"].map(sum)) / reached
        )
        if reached
        else np.nan,
        # ar is the target: no distance from itself (it verifies nothing, so it logs none)
        "bias": 0.0
        if first["method"] == "ar"
        else float(np.nansum(g["bias"] * g["reached_per_position"].map(sum)) / reached)
        if reached
        else np.nan,
        "quality": quality.mean(),
        "quality_ci": bootstrap(lambda q: q.mean(-1), quality),
        "acceptance_length": g["new_tokens"].sum() / g["rounds"].sum(),
        "drafting_share": g["drafting_rounds"].sum() / g["rounds"].sum() if "drafting_rounds" in g else np.nan,
        **dict(zip(("target_loglik", "target_loglik_ci"), _per_token(g))),
        **dict(zip(("target_divergence", "target_divergence_ci"), _per_token(g, "target_divergence"))),
        "weight_mean": float(np.nanmean(g["weight_mean"])) if g["weight_mean"].notna().any() else np.nan,
        "wall_time_s": timed["wall_time_s"].mean(),
        "time_per_token_s": timed["wall_time_s"].sum() / timed["new_tokens"].sum()
        if len(timed)
        else np.nan,
        "timed_examples": len(timed),
        "time_spread": np.nan,
    }


def _against_ar(g: pd.DataFrame, ar: pd.DataFrame) -> dict[str, Any]:
    """A configuration's time relative to the ar run with its settings, over the examples both
    timed (NaN where none): normalised time per emitted token with its interval, speedup, the
    ratio of mean times per example beside them and the repeats' spread. Refuses a results
    directory holding two such ar runs (mixed harness versions)."""
    first, timed = g.iloc[0], g[g["wall_time_s"].notna()]
    ref = ar[_agrees(ar, first[list(SHARED_SETTINGS)])]
    if ref["config_id"].nunique() > 1:
        raise BenchError(
            f"{first['label']} ({first['config_id']}) matches {ref['config_id'].nunique()} ar runs with the "
            "same settings; the results directory mixes runs of different harness versions: use a fresh one"
        )
    ref = ref[ref["wall_time_s"].notna()]
    columns = ["example_id", "wall_time_s", "new_tokens", *(["wall_times_s"] if "wall_times_s" in g else [])]
    shared = timed[columns].merge(ref[columns], on="example_id", suffixes=("", "_ar"))
    nan, pair = np.nan, (np.nan, np.nan)
    if not len(shared):
        return {"normalised_time": nan, "normalised_time_ci": pair, "speedup": nan,
                "normalised_time_example": nan, "normalised_time_example_ci": pair}  # fmt: skip
    t, t_ar = shared["wall_time_s"].to_numpy(float), shared["wall_time_s_ar"].to_numpy(float)
    n, n_ar = shared["new_tokens"].to_numpy(float), shared["new_tokens_ar"].to_numpy(float)
    normalised, interval = per_token_time(t, n, t_ar, n_ar)
    return {
        "normalised_time": normalised,
        "normalised_time_ci": interval,
        "speedup": 1 / normalised,
        "normalised_time_example": t.mean() / t_ar.mean(),
        "normalised_time_example_ci": bootstrap(_mean_ratio, t, t_ar),
        # ar against itself is 1 by definition in every repeat: nothing for noise to move
        "time_spread": 1.0 if first["method"] == "ar" else _spread(_repeats(shared), _repeats(shared, "_ar")),
    }


@dataclass(frozen=True)
class Summarised:
    """A results directory's rows and their summary: read once when a run writes its table and its
    figures (summarising bootstraps every configuration, a good part of the demo's report time)."""

    rows: pd.DataFrame
    summary: pd.DataFrame


def summarised(results: Path, margins: Margins = Margins()) -> Summarised:
    rows = load_results(results)
    return Summarised(rows, summarise(rows, margins))


def summarise(rows: pd.DataFrame, margins: Margins = Margins()) -> pd.DataFrame:
    """One row per configuration with its headline numbers and their intervals, its fidelity
    against ar (on or off the target's distribution within the fidelity margin of ``margins``) and
    its method as structure (``structure``: parameters, family, swept values, style, order)."""
    if rows.empty:
        raise BenchError("no rows to summarise")
    if "quality" not in rows:
        raise BenchError(
            "these rows have no quality scores: the lm-eval backend's rows are scored by lm-eval (read its "
            "results JSON); give a `diversed-bench run` results directory"
        )
    ar = rows[rows["method"] == "ar"]
    out, firsts = [], {}
    for config_id, g in rows.groupby("config_id", sort=False):
        out.append({**_headline(config_id, g), **_against_ar(g, ar), **_fidelity(g, ar, margins.of(FIDELITY))})
        firsts[config_id] = g.iloc[0]
    summary = pd.DataFrame(out)
    _tell_apart(summary, firsts)
    order = sorted(
        range(len(summary)),
        key=lambda i: (
            summary["pair"].iat[i],
            summary["order"].iat[i],
            summary["family"].iat[i],
            _sortable(summary["sweep_key"].iat[i]),
            summary["label"].iat[i],
        ),
    )
    summary = summary.iloc[order]
    return summary.reset_index(drop=True)


@dataclass(frozen=True)
class Panel:
    """Configurations compared with each other: one table panel, one set of figures."""

    title: str
    slug: str  # for file names; unique among the panels of one results directory
    part: pd.DataFrame  # summary rows, the ar reference included


def _describe(key: dict[str, Any], part: pd.DataFrame) -> str:
    tasks = part[["task", *PER_TASK]].drop_duplicates().sort_values("task")
    shots = ", ".join(f"{t.task} {t.split} {t.num_fewshot}-shot" for t in tasks.itertuples())
    chat = ", chat template" if key["chat_template"] else ""
    chat += ", prompts cut to the context" if key["truncate_prompt"] == "left" else ""
    n = f", draft length {key['draft_len']}" if "draft_len" in key else ""
    n += f", drafter {drafter_label(key['drafter'])}" if key.get("drafter") not in (None, "model") else ""
    # ``hub`` is the task file's own source (the hub, its local files or a loader in code): no name.
    source = {"hub": "", "fixture": " from the shipped fixtures"}.get(key["data"], f" from {key['data']}")
    return (
        f"{key['pair']}: temperature {key['temperature']:g}{n}, {key['max_new_tokens']} tokens, seed "
        f"{key['seed']}, {shots}{source}{chat}, {key['device']} {key['dtype']}, {key['engine']} engine"
    )


def panels(summary: pd.DataFrame) -> list[Panel]:
    """One panel per combination of shared settings, draft length and drafter (acceptance means
    another thing where a drafter skips rounds); the ``ar`` run of the same shared settings joins
    each panel as its reference row. A task run with two exemplar counts or splits under otherwise
    equal settings gets one panel per count and split."""
    spec = summary[summary["method"] != "ar"]
    keys = [*PANEL, "draft_len", "drafter"] if len(spec) else PANEL
    found = (spec if len(spec) else summary)[keys].drop_duplicates().to_dict("records")
    out = []
    for key in found:
        same = _agrees(summary, pd.Series({k: key[k] for k in PANEL}))
        if "draft_len" in key:
            same &= (summary["draft_len"] == key["draft_len"]) | (summary["method"] == "ar")
            same &= (summary["drafter"] == key["drafter"]) | (summary["method"] == "ar")
        part = summary[same]
        if (part.groupby("task")[PER_TASK].nunique() > 1).any(axis=None):
            for _, sub in part.groupby(PER_TASK, sort=True):
                out.append(Panel(_describe(key, sub), str(key["pair"]), sub))
        else:
            out.append(Panel(_describe(key, part), str(key["pair"]), part))
    for pair in {p.slug for p in out}:
        mine = [p for p in out if p.slug == pair]
        for i, p in enumerate(mine[1:], start=1):
            out[out.index(p)] = Panel(p.title, f"{pair}_{i}", p.part)
    return out


@dataclass(frozen=True)
class TaskFacts:
    """How reports name, order and scale a task, as its YAML file declares (``title``, ``order``,
    ``percent``, ``quality``: bench.tasks.TaskSpec). A task whose file no longer resolves (a
    user's file moved since the run) keeps its name, sorts last and shows a plain number."""

    title: str
    order: int
    percent: bool
    quality: str


def task_facts(task: str) -> TaskFacts:
    """The report facts of the task rows name ``task``."""
    from bench.tasks import UNORDERED, resolve_task

    try:
        spec = resolve_task(task)
    except BenchError:
        return TaskFacts(task, UNORDERED, False, "quality")
    return TaskFacts(spec.title or task, spec.order, spec.percent, spec.quality)


def sorted_tasks(tasks: Iterable[str]) -> list[str]:
    """Tasks in their files' order (ties: as given)."""
    return sorted(tasks, key=lambda t: task_facts(t).order)


def quality_metrics(summary: pd.DataFrame) -> dict[str, str]:
    """Each task's quality metric, by task."""
    return {task: task_facts(task).quality for task in summary["task"].unique()}
