"""Summaries -> Table 1 in the paper's layout (markdown, LaTeX or CSV)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bench.errors import BenchError
from bench.reports.categories import category_tables
from bench.reports.margins import Margins
from bench.reports.summary import (
    SPREAD_LIMIT,
    UNMEASURED,
    Panel,
    panels,
    quality_metrics,
    Summarised,
    sorted_tasks,
    summarised,
    task_facts,
    timing_trusted,
)

FORMATS = ("markdown", "latex", "csv")


def _cell(value: float, ci: tuple[float, float], percent: bool, digits: int = 1) -> str:
    """A number and its 95% interval as measured, ``[low, high]``: bootstrap intervals of a ratio
    or of a bounded score are not symmetric, so no ``±`` is printed."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "NA"
    scale = 100 if percent else 1
    unit = "%" if percent else ""
    body = f"{value * scale:.{digits}f}{unit}"
    if not ci or np.isnan(ci[0]):
        return body
    return f"{body} [{ci[0] * scale:.{digits}f}, {ci[1] * scale:.{digits}f}]"


def _fidelity_columns(task: str, rows: pd.DataFrame, labels: list[str]) -> dict[tuple[str, str], list[str]]:
    """Table 1's fidelity cells beside quality, per configuration (``rows``: one task's summary
    rows by label): the TV from the target, the zero-mean divergence with its interval, and the
    verdict against ar."""
    def value(label: str, col: str) -> str:
        if label not in rows.index:
            return "NA"
        return _cell(rows.loc[label, col], rows.loc[label, f"{col}_ci"] if f"{col}_ci" in rows else (np.nan, np.nan), False, 3)

    return {
        (task, "TV to target"): [value(lb, "bias") for lb in labels],
        (task, "divergence/token"): [value(lb, "target_divergence") for lb in labels],
        (task, "fidelity vs ar"): [_fidelity_cell(rows, lb) for lb in labels],
    }


def _fidelity_cell(rows: pd.DataFrame, label: str) -> str:
    """A configuration's fidelity verdict against ar (on or off the target's distribution) with the
    divergence's difference from ar's and its interval; NA where it did not run this task."""
    if label not in rows.index:
        return "NA"
    row = rows.loc[label]
    if row["method"] == "ar":
        return str(row["fidelity"])
    return f"{row['fidelity']} (Δ {_cell(row['fidelity_diff'], row['fidelity_diff_ci'], False, 3)})"


def spread_note(spread: float) -> str:
    """Why a timing is not trusted (empty when it is, or when nothing was timed): re-timing the same
    examples moved the normalised time too much, or each was timed once (noise not measured)."""
    if np.isnan(spread) or timing_trusted(spread):
        return ""
    return "noise not measured: 1 repeat" if spread == UNMEASURED else f"repeats disagree {spread:.2f}x"


def table_frames(
    summary: pd.DataFrame, quality_metric: dict[str, str], found: list[Panel] | None = None
) -> list[tuple[str, pd.DataFrame, pd.DataFrame]]:
    """(title, Table 1 frame, speed frame) per panel (``found``: the summary's panels, when the
    caller has them), with formatted cells."""
    result = []
    for panel in panels(summary) if found is None else found:
        title, part = panel.title, panel.part
        tasks = sorted_tasks(part["task"].unique())
        labels = list(dict.fromkeys(part["label"]))
        quality, speed = {}, {}
        for task in tasks:
            t, percent_q = task_facts(task).title, task_facts(task).percent
            q_name = (
                "accuracy"
                if quality_metric.get(task, "").startswith("exact")
                else quality_metric.get(task, "quality")
            )
            rows = part[part["task"] == task].set_index("label")
            get = lambda label, col: rows.loc[label, col] if label in rows.index else np.nan  # noqa: E731
            ci = lambda label, col: rows.loc[label, col] if label in rows.index else (np.nan, np.nan)  # noqa: E731
            quality[(t, "accept rate")] = [
                _cell(get(lb, "acceptance_rate"), ci(lb, "acceptance_rate_ci"), True) for lb in labels
            ]
            quality[(t, q_name)] = [
                _cell(get(lb, "quality"), ci(lb, "quality_ci"), percent_q, 1 if percent_q else 2)
                for lb in labels
            ]
            quality[(t, "log p/token")] = [_cell(get(lb, "target_loglik"), ci(lb, "target_loglik_ci"), False, 3) for lb in labels]
            quality.update(_fidelity_columns(t, rows, labels))
            notes = [spread_note(get(lb, "time_spread")) for lb in labels]
            speed[(t, "norm. time")] = [
                _cell(get(lb, "normalised_time"), ci(lb, "normalised_time_ci"), False, 2)
                + (f" ({note})" if note else "")
                for lb, note in zip(labels, notes)
            ]
            speed[(t, "speedup")] = [
                f"not shown: {note}" if note else _cell(get(lb, "speedup"), (np.nan, np.nan), False, 2)
                for lb, note in zip(labels, notes)
            ]
            speed[(t, "norm. time/example")] = [
                _cell(get(lb, "normalised_time_example"), (np.nan, np.nan), False, 2) for lb in labels
            ]
            speed[(t, "s/example")] = [
                _cell(get(lb, "wall_time_s"), (np.nan, np.nan), False, 3) for lb in labels
            ]
            speed[(t, "ms/token")] = [
                _cell(get(lb, "time_per_token_s") * 1e3, (np.nan, np.nan), False, 2) for lb in labels
            ]
            speed[(t, "tokens/fwd")] = [
                _cell(get(lb, "acceptance_length"), (np.nan, np.nan), False, 2) for lb in labels
            ]
            speed[(t, "drafted")] = [_cell(get(lb, "drafting_share"), (np.nan, np.nan), True, 0) for lb in labels]
        q = pd.DataFrame(quality, index=pd.Index(labels, name="method"))
        s = pd.DataFrame(speed, index=pd.Index(labels, name="method"))
        result.append((title, q, s))
    return result


def _markdown(frame: pd.DataFrame) -> str:
    cols = [f"{a} {b}" for a, b in frame.columns]
    lines = ["| method | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    lines += [
        "| " + str(idx) + " | " + " | ".join(map(str, row)) + " |"
        for idx, row in zip(frame.index, frame.to_numpy())
    ]
    return "\n".join(lines)


def _margin(summary: pd.DataFrame) -> str:
    """The fidelity margin the summary's verdicts used."""
    return f"{summary['fidelity_margin'].iloc[0]:g}"


def render(summary: pd.DataFrame, quality_metric: dict[str, str], fmt: str) -> str:
    if fmt not in FORMATS:
        raise BenchError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt == "csv":
        flat = summary.copy()
        for col in [c for c in flat.columns if c.endswith("_ci")]:
            flat[col + "_low"] = flat[col].map(lambda v: v[0])
            flat[col + "_high"] = flat[col].map(lambda v: v[1])
            flat = flat.drop(columns=col)
        return flat.to_csv(index=False)
    parts = []
    for title, q, s in table_frames(summary, quality_metric):
        if fmt == "markdown":
            parts += [
                f"### {title}",
                "",
                "Acceptance rate and quality (Table 1 layout); [low, high] is the 95% bootstrap interval "
                "over examples; log p/token: the target's mean log-likelihood of the emitted tokens. "
                "Fidelity beside quality: TV to target, the mean total variation between the law a token "
                "was emitted from and the target's (0 for ar); divergence/token, the mean of log p(y) + H(p) "
                "under the target's sampling law, 0 in expectation when the tokens are the target's own; "
                "fidelity vs ar, on-distribution where the paired interval of the divergence minus ar's lies "
                f"within {_margin(summary)} nats per token either way (the fidelity margin, --margin fidelity=VALUE), "
                "off-distribution otherwise (below or above it, or inconclusive: too few examples to show it)",
                "",
                _markdown(q),
                "",
                "Time relative to ar with the same settings on the same timed examples (norm. time = "
                "time per emitted token / ar's, each the sum of time over the sum of tokens, [low, high] its "
                "95% bootstrap interval over examples; speedup = its inverse; norm. time/example = mean time "
                "per example / ar's, beside it: a method that stops early looks faster per example, not per "
                "token), tokens per target forward (Spec-Bench's mean accepted tokens) and the share of "
                "rounds that drafted. "
                "Each timed example is decoded --timing-repeats times, interleaved with ar each time; where "
                f"the normalised time of one repeat and another differ more than {SPREAD_LIMIT:g}x (noise), "
                "or the examples were timed once (noise not measured), the speedup is not shown: time "
                "again on a quieter machine",
                "",
                _markdown(s),
                "",
            ]
        else:
            parts += [
                f"% {title}",
                q.to_latex(escape=True, multicolumn_format="c"),
                s.to_latex(escape=True, multicolumn_format="c"),
            ]
    return "\n".join(parts)


def write_table(
    results: Path, fmt: str, output: Path | None = None, margins: Margins = Margins(), read: Summarised | None = None
) -> tuple[str, Path]:
    """The table of a results directory, written to ``output`` (RESULTS/table.md|tex|csv);
    ``margins``: the fidelity margin the off-distribution marks use; ``read``: its rows and summary,
    already read under those margins."""
    read = read or summarised(results, margins)
    rows, summary = read.rows, read.summary
    text = render(summary, quality_metrics(summary), fmt)
    if fmt == "markdown":  # tasks with categories (Spec-Bench) add their leaderboard-style tables
        text += "\n" + category_tables(rows, summary)
    path = output or results / {"markdown": "table.md", "latex": "table.tex", "csv": "table.csv"}[fmt]
    path.write_text(text)
    return text, path
