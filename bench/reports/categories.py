"""Per-category tables for a task whose rows carry a ``category`` (Spec-Bench), laid out as
Spec-Bench's leaderboard: a column per category group (the task file's ``category_groups``, e.g.
MT-bench's eight pooled), then ``overall``; a row per configuration; one table per measure.

- speedup: the estimator of every report (``bench.reports.summary.per_token_time``): ``ar``'s time
  per emitted token over this configuration's, each the sum of time over the sum of tokens on the
  examples timed in both (their count in parentheses), with its 95% bootstrap interval over
  examples. Spec-Bench's own (its evaluation/speed.py: the mean of tokens per second over
  examples) weighs short examples' rates like long ones' and is not used. Only rows decoded alone
  have a time: give ``--timing-examples`` the ``--limit`` to time them all.
- mean accepted tokens: emitted tokens / decoding rounds (= target forwards after the prefill):
  Spec-Bench's "#Mean accepted tokens", the bonus token included; 1.00 for ``ar``.
- mean log-likelihood: the target's log-probability per emitted token (``target_loglik``, weighted
  by tokens), where the rows record it: a quality measure that needs no gold answer.
- agreement with ``ar`` (greedy panels only): the share of examples whose every turn's text equals
  ``ar``'s, and the prefix agreement: per example, the characters before the first difference
  over ``ar``'s length (turns joined), averaged.
- the category's reference score (``quality``, named by ``reference_metric``), where it has one.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from bench.errors import BenchError
from bench.reports.summary import panels, per_token_time

OVERALL = "overall"
PERCENT = {"exact", "hit", "exact_flexible", "exact_strict", "pass@1"}


def groups(task: str, categories: list[str]) -> dict[str, list[str]]:
    """Report columns: the task file's groups that occur, then any other category on its own."""
    from bench.tasks import resolve_task

    try:
        declared = resolve_task(task).category_groups
    except BenchError:  # a task file that moved: its categories on their own
        declared = {}
    present = set(categories)
    out = {name: [c for c in members if c in present] for name, members in declared.items()}
    out = {name: members for name, members in out.items() if members}
    grouped = {c for members in out.values() for c in members}
    out |= {c: [c] for c in sorted(present - grouped)}
    return out


def _texts(rows: pd.DataFrame) -> pd.Series:
    """Each row's output as one text: its turns' answers joined, or its completion."""
    if "turn_completions" in rows:
        turns = rows["turn_completions"].map(
            lambda t: "\n\n".join(t) if isinstance(t, (list, tuple, np.ndarray)) and len(t) else None
        )
        return turns.fillna(rows["completion"])
    return rows["completion"]


def prefix_share(text: str, reference: str) -> float:
    """The share of ``reference`` before ``text`` first differs from it (1.0 when equal)."""
    if not reference:
        return float(text == reference)
    return len(os.path.commonprefix([text, reference])) / len(reference)


def _measures(part: pd.DataFrame, ar: pd.DataFrame | None, greedy: bool) -> dict[str, str]:
    """One configuration's cells on one column's rows."""
    cells: dict[str, str] = {"examples": str(len(part))}
    rounds = part["rounds"].sum()
    cells["accepted"] = f"{part['new_tokens'].sum() / rounds:.2f}" if rounds else "NA"
    if "target_loglik" in part:
        known = part[part["target_loglik"].notna() & (part["new_tokens"] > 0)]
        tokens = known["new_tokens"].sum()
        cells["logprob"] = f"{(known['target_loglik'] * known['new_tokens']).sum() / tokens:.3f}" if tokens else "NA"
    scored = part["quality"].dropna()
    names = sorted({n for n in part.get("reference_metric", pd.Series(dtype=str)).dropna() if n})
    percent = bool(names) and set(names) <= PERCENT
    # One score per column: an overall mean of ROUGE and hit rates would mean nothing.
    cells["reference"] = (
        "—"
        if scored.empty or len(names) > 1
        else f"{scored.mean() * 100:.0f}%"
        if percent
        else f"{scored.mean():.1f}"
    )
    cells["reference_name"] = "+".join(names)
    if ar is None:
        return cells
    both = part.assign(text=_texts(part)).merge(
        ar.assign(text=_texts(ar))[["example_id", "text", "new_tokens", "wall_time_s"]],
        on="example_id",
        suffixes=("", "_ar"),
    )
    timed = both[both["wall_time_s"].notna() & both["wall_time_s_ar"].notna()]
    if len(timed):
        ratio, (low, high) = per_token_time(
            *(timed[c].to_numpy(float) for c in ("wall_time_s", "new_tokens", "wall_time_s_ar", "new_tokens_ar"))
        )
        shown = f" [{1 / high:.2f}, {1 / low:.2f}]" if np.isfinite(low) else ""
        cells["speedup"] = f"{1 / ratio:.2f}x{shown} ({len(timed)})"
    else:
        cells["speedup"] = "NA (0)"
    if greedy and len(both):
        cells["same"] = f"{(both['text'] == both['text_ar']).mean() * 100:.0f}%"
        shares = [prefix_share(a, b) for a, b in zip(both["text"], both["text_ar"])]
        cells["prefix"] = f"{np.mean(shares) * 100:.0f}%"
    return cells


TABLES = [
    (
        "speedup",
        "Speedup over ar (ar's time per emitted token over this one's, each summed over the examples timed in "
        "both; [95% bootstrap interval]; (their count))",
    ),
    ("accepted", "Mean accepted tokens (emitted tokens per decoding round, i.e. per target forward)"),
    ("logprob", "Target's mean log-likelihood per emitted token (no gold answer needed)"),
    ("same", "Same output as ar (share of examples, every turn equal)"),
    ("prefix", "Prefix agreement with ar (share of ar's text before the first difference, mean over examples)"),
    ("reference", "Reference score where the category has one (metric in the header)"),
    ("examples", "Examples"),
]


Cells = dict[tuple[str, str], dict[str, str]]


def _markdown(labels: list[str], columns: list[str], cells: Cells, key: str, header: list[str]) -> str:
    lines = ["| method | " + " | ".join(header) + " |", "|---|" + "---|" * len(columns)]
    lines += [
        "| " + label + " | " + " | ".join(cells[label, c].get(key, "NA") for c in columns) + " |"
        for label in labels
    ]
    return "\n".join(lines)


def task_tables(task: str, title: str, configs: pd.DataFrame, rows: pd.DataFrame) -> str:
    """The tables of one panel's configurations on one task (``configs``: their summary rows)."""
    cols = groups(task, rows["category"].astype(str).tolist())
    cols[OVERALL] = [c for members in cols.values() for c in members]
    greedy = bool((configs["temperature"] == 0).all())
    ar_ids = configs.loc[configs["method"] == "ar", "config_id"].tolist()
    ar = rows[rows["config_id"] == ar_ids[0]] if ar_ids else None
    labels = configs["label"].tolist()
    cells: Cells = {}
    for label, config_id in zip(labels, configs["config_id"]):
        mine = rows[rows["config_id"] == config_id]
        for name, members in cols.items():
            part = mine[mine["category"].isin(members)]
            theirs = ar[ar["category"].isin(members)] if ar is not None else None
            cells[label, name] = _measures(part, theirs, greedy)
    columns = list(cols)
    out = [f"### {title}: per category", ""]
    for key, caption in TABLES:
        if key in ("same", "prefix") and not greedy:
            continue
        if key == "logprob" and "target_loglik" not in rows:
            out += ["Mean log-likelihood: not recorded in these rows (a harness version without it).", ""]
            continue
        header = columns
        if key == "reference":
            if all(cells[lb, c]["reference"] == "—" for lb in labels for c in columns):
                continue
            named = [next((cells[lb, c]["reference_name"] for lb in labels), "") for c in columns]
            header = [f"{c} ({name})" if name and "+" not in name else c for c, name in zip(columns, named)]
        out += [caption, "", _markdown(labels, columns, cells, key, header), ""]
    return "\n".join(out)


def category_tables(rows: pd.DataFrame, summary: pd.DataFrame) -> str:
    """Every panel's per-category tables for the tasks whose rows carry a category ('' if none)."""
    if "category" not in rows or rows["category"].isna().all():
        return ""
    parts = []
    for panel in panels(summary):
        for task in panel.part["task"].unique():
            configs = panel.part[panel.part["task"] == task]
            mine = rows[rows["config_id"].isin(configs["config_id"]) & rows["category"].notna()]
            if len(mine):
                parts.append(task_tables(task, panel.title, configs, mine))
    return "\n".join(parts)
