"""Figures from a results directory: the Pareto frontier (the paper's Figure 2), acceptance against
the static-ensemble weight with its theory line, acceptance per draft position, DIVERSED weights.

Each figure is written as PNG, PDF and SVG, ready for a paper: axes in words with units, 95%
intervals as (asymmetric) error bars, one colour and one marker per method, a short title, and the
settings that produced it in a caption file (``<name>.txt``) rather than on the figure.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.colors
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.artist import Artist  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.container import ErrorbarContainer  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from bench.reports.summary import (  # noqa: E402
    SPREAD_LIMIT,
    Panel,
    bootstrap,
    panels,
    quality_metrics,
    Summarised,
    sorted_tasks,
    summarised,
    task_facts,
    timing_trusted,
)
from bench.lossless import LOSSLESS_METHOD  # noqa: E402

FORMATS = ("png", "pdf", "svg")
# Further DIVERSED heads in one weights figure (the first has DIVERSED's colour); Okabe-Ito again.
HEAD_COLOURS = ["#0072B2", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"]
QUALITY_LABELS = {
    "exact_flexible": "accuracy (%)",
    "exact_strict": "accuracy, strict (%)",
    "pass@1": "pass@1 (%)",
    "rouge1": "ROUGE-1 F1 (x100)",
    "rouge2": "ROUGE-2 F1 (x100)",
    "rougeL": "ROUGE-L F1 (x100)",
}
MIN_QUALITY_SPAN = 5.0  # percentage points (or ROUGE x 100)
HOLLOW = f"hollow: repeats disagree > {SPREAD_LIMIT:g}x (or 1 repeat), not trusted"
PARETO_AXES = {
    # column: (file name, title, axis label, scale)
    "normalised_time": ("pareto", "Quality vs time", "time per token vs AR (AR = 1)", 1.0),
    "acceptance_rate": ("pareto_acceptance", "Quality vs acceptance", "acceptance rate (%)", 100.0),
}
# The paper's second quality axis, drawn against time: the target's log p per emitted token needs no
# gold answer and moves with every token a relaxed verifier lets through.
LOGP = "target_loglik"
# The fidelity axis with a known zero: log p(y) + H(p) per token has mean 0 when the tokens are the
# target's own, so a setting off the target's distribution is seen as a distance below 0.
DIVERGENCE = "target_divergence"
FIDELITY_FIGURES = {
    # column: (file name, title, axis label, what the caption says it is)
    LOGP: ("pareto_logp", "Log p vs time", "target's log p per token", "the target's mean log p per emitted token (token-weighted)"),
    DIVERGENCE: (
        "pareto_divergence",
        "Divergence vs time",
        "log p + H per token (0: the target's own)",
        "the mean of log p(y) + H(p) per emitted token under the target's sampling law (token-weighted), 0 in "
        "expectation for the target's own tokens",
    ),
}


def _tasks(frame: pd.DataFrame) -> list[str]:
    return sorted_tasks(frame["task"].unique())


# Figures are laid out at the resolution they are saved at, so that labels placed on the layout
# (_place_labels) are where they will be drawn, and that layout can be kept rather than run again.
DPI = 200


def _grid(n: int) -> tuple[plt.Figure, list[plt.Axes]]:
    cols = min(n, 2)
    rows = (n + cols - 1) // cols
    width = 4.6 * cols if cols > 1 else 5.6
    fig, axes = plt.subplots(
        rows, cols, figsize=(width, 3.6 * rows + 1.0), squeeze=False, layout="constrained", dpi=DPI
    )
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _save(fig: plt.Figure, out: Path, name: str, caption: str, formats: Sequence[str] = FORMATS) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.{fmt}" for fmt in formats]
    # Text stays text (editable in a paper's figure tools): SVG <text>, TrueType fonts in the PDF.
    with plt.rc_context({"svg.fonttype": "none", "pdf.fonttype": 42}):
        for p in paths:
            fig.savefig(p, dpi=DPI, bbox_inches="tight", pad_inches=0.03)
    plt.close(fig)
    text = out / f"{name}.txt"
    text.write_text(caption.strip() + "\n")
    return [*paths, text]


def quality_label(metric: str) -> str:
    return QUALITY_LABELS.get(metric, metric)


def _err(value: float, ci: Any, scale: float) -> list[list[float]] | None:
    """Distances from a value to the ends of its interval, as measured (not symmetric)."""
    if not isinstance(ci, (tuple, list)) or np.isnan(ci[0]) or np.isnan(value):
        return None
    return [[max(value - ci[0], 0.0) * scale], [max(ci[1] - value, 0.0) * scale]]


def _along(xy: np.ndarray, step: float = 2.0 * DPI / 100) -> np.ndarray:
    """Points every ``step`` pixels (a fiftieth of an inch) along a polyline, so that a label box can
    be tested against it."""
    xy = xy[np.isfinite(xy).all(axis=1)]
    out = [xy[:1]]
    for a, b in zip(xy[:-1], xy[1:]):
        n = max(int(np.hypot(*(b - a)) / step), 1)
        out.append(a + (b - a) * np.linspace(0, 1, n + 1)[1:, None])
    return np.concatenate(out)


def _obstacles(ax: plt.Axes) -> tuple[list[Bbox], np.ndarray]:
    """Everything already drawn in the axes, in display coordinates: a box per marker, and points
    along every line and error bar (of every method, not only the sweep being labelled)."""
    markers: list[Bbox] = []
    points = [np.empty((0, 2))]
    px = ax.figure.dpi / 72
    for line in ax.lines:
        xy = line.get_transform().transform(np.asarray(line.get_xydata(), float))
        if line.get_marker() not in (None, "None", "none", "", " "):
            half = line.get_markersize() * px / 2
            markers += [Bbox.from_extents(x - half, y - half, x + half, y + half) for x, y in xy]
        if line.get_linestyle() not in ("None", "none", "", " "):
            points.append(_along(xy))
    for collection in ax.collections:  # error bars
        if isinstance(collection, LineCollection):
            for segment in collection.get_segments():
                points.append(_along(collection.get_transform().transform(segment)))
    return markers, np.concatenate(points)


# Where a label may sit around its point (offset in points), nearest and upper right first.
LABEL_OFFSETS = [
    (r * dx, r * dy)
    for r in (5, 12, 22, 34)
    for dx, dy in ((1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0), (-1, 0), (0, 1.4), (0, -1.4))
]


LABEL_CLASH = 1000  # the cost of a label over another or a marker: never paid, the label is left out
# A white ground under each label: a line or an error bar through it does not strike it out (a box,
# not a path effect, which would turn the label's text into paths in the SVG and PDF).
HALO = dict(boxstyle="square,pad=0.1", facecolor="white", edgecolor="none", alpha=0.8)


def _rate_err(accepted: Any, total: Any) -> list[list[float]]:
    """Error bar (in %) of the pooled rate sum(accepted) / sum(total): its 95% bootstrap interval
    over examples, as measured, like the table's."""
    accepted, total = np.asarray(accepted, float), np.asarray(total, float)
    rate = accepted.sum() / max(total.sum(), 1)
    ci = bootstrap(lambda a, t: a.sum(-1) / np.maximum(t.sum(-1), 1), accepted, total)
    return _err(rate, ci, 100.0) or [[0.0], [0.0]]


def _place_labels(ax: plt.Axes, points: list[tuple[float, float]], texts: list[str], color: str) -> None:
    """Label points where they cover the least: each label takes the offset around its point whose
    box stays inside the axes and meets the fewest lines and error bars. A label with no offset clear
    of the axes' edge, of every other label and of every marker is left out (the table names every
    point): a label is never drawn over another, nor over a point."""
    figure = ax.figure
    assert isinstance(figure, plt.Figure)  # these plots draw no subfigures
    figure.draw_without_rendering()  # the layout, and the text's sizes, without the pixels
    renderer = ax.figure.canvas.get_renderer()  # type: ignore[attr-defined]  # Agg's; FigureCanvasBase lacks it
    frame = ax.get_window_extent(renderer)
    markers, lines = _obstacles(ax)
    taken = [text.get_window_extent(renderer) for text in ax.texts]  # other sweeps' labels

    def cost(box: Bbox) -> float:
        if not (frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1)):
            return np.inf
        lx, ly = lines[:, 0], lines[:, 1]
        covered = ((lx >= box.x0) & (lx <= box.x1) & (ly >= box.y0) & (ly <= box.y1)).sum()
        clashes = sum(box.overlaps(t) for t in taken)
        overlaps = LABEL_CLASH * (clashes + sum(box.overlaps(m) for m in markers))
        return overlaps + float(covered)

    for (x, y), text in zip(points, texts):
        best, best_cost = None, np.inf
        for dx, dy in LABEL_OFFSETS:
            label = ax.annotate(
                text,
                (x, y),
                textcoords="offset points",
                xytext=(dx, dy),
                fontsize=8,
                color=color,
                ha="left" if dx > 0 else "right" if dx < 0 else "center",
                va="bottom" if dy > 0 else "top" if dy < 0 else "center",
                bbox=HALO,
            )
            score = cost(label.get_window_extent(renderer).expanded(1.05, 1.1))
            if score < best_cost:
                if best is not None:
                    best.remove()
                best, best_cost = label, score
            else:
                label.remove()
            if score == 0:
                break
        if best is not None and best_cost >= LABEL_CLASH:
            best.remove()
            best = None
        if best is not None:
            taken.append(best.get_window_extent(renderer))


# Methods whose class declares no style (a user's verifier): these in turn, bold enough to find a
# candidate among the baselines.
EXTRA_STYLES = [
    dict(marker="p", color="#7B2CBF", markersize=11, markeredgecolor="black", zorder=6),
    dict(marker="H", color="#1B9E77", markersize=10, markeredgecolor="black", zorder=6),
    dict(marker="d", color="#A6761D", markersize=10, markeredgecolor="black", zorder=6),
    dict(marker="8", color="#E7298A", markersize=10, markeredgecolor="black", zorder=6),
]


def method_styles(summary: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Each method's style as its class declares it; methods declaring none take the extra
    styles in turn. Keys in the table's order of methods."""
    declared = dict(zip(summary["method"], summary["style"]))
    extra = sorted(m for m, style in declared.items() if not style)
    return {m: dict(style) or EXTRA_STYLES[extra.index(m) % len(EXTRA_STYLES)] for m, style in declared.items()}


def _sweep(family: pd.DataFrame) -> tuple[str, list[str]] | None:
    """(what is swept, one text per point) when the family's points differ in numeric swept
    parameters, read from their ``params`` as the method's class names them; None otherwise
    (a single point, or settings that are not a sweep)."""
    info = family["method_info"].iloc[0]
    varying = [k for k in info.swept if len({repr(p.get(k)) for p in family["params"]}) > 1]
    numeric = all(isinstance(p.get(k), (int, float)) for p in family["params"] for k in varying)
    if len(family) < 2 or not varying or not numeric:
        return None
    digits = info.digits(list(family["params"]))  # as many as tell the points apart
    texts = [", ".join(info.shown(k, p[k], digits) for k in varying) for p in family["params"]]
    return ", ".join(info.shorthand.get(k) or k for k in varying), texts


def _merge_coincident(
    points: list[tuple[float, float]], texts: list[str]
) -> tuple[list[tuple[float, float]], list[str]]:
    """One label per drawn position: sweep values that land on the same point (``a=0.1``,
    ``a=0.3``) become one label (``a=0.1, 0.3``; ``a=0.1 ... 0.9`` for more than two) instead of
    a pile of overlapping ones."""
    from bench.reports.charts import merged_name

    merged: dict[tuple[float, float], list[str]] = {}
    for (px, py), text in zip(points, texts):
        merged.setdefault((round(px, 6), round(py, 6)), []).append(text)
    return list(merged), [merged_name(group) for group in merged.values()]


def _bound_quality_axis(ax: plt.Axes, metric: str) -> None:
    """Keep a 0-100 quality axis (accuracy, pass@1, ROUGE x 100) inside 0-100 and at least
    ``MIN_QUALITY_SPAN`` tall: a row of zeros (the tiny pair) is drawn at 0 on an axis from 0 up,
    not at the middle of one from -0.05 to 0.05."""
    if metric not in QUALITY_LABELS:
        return
    low, high = ax.get_ylim()
    if high - low < MIN_QUALITY_SPAN:
        middle = (low + high) / 2
        low, high = middle - MIN_QUALITY_SPAN / 2, middle + MIN_QUALITY_SPAN / 2
    pad = 0.03 * (high - low)  # room for a marker at 0 or 100
    if low < -pad:
        low, high = -pad, high - pad - low
    if high > 100 + pad:
        low, high = low - (high - 100 - pad), 100 + pad
    ax.set_ylim(low, high)


POOLED_LINE = "all baselines (upper hull, anchors sd and accept_all included)"


def _pooled_hull(ax: plt.Axes, rows: pd.DataFrame, q_scale: float) -> bool:
    """Draw the upper hull of every baseline point and the anchors of their drafts
    (compare's "all baselines", the same rule: ``baseline_families``), where they come from at
    least two families; True when drawn."""
    from bench.reports.compare import POOLED, baseline_families
    from bench.reports.frontier import hull_points

    pools = [members for name, members in baseline_families(rows, []) if name == POOLED]
    pool = pools[0][pools[0]["acceptance_rate"].notna()] if pools else rows.iloc[:0]
    if pool.empty:
        return False
    hull = np.array(hull_points(pool["acceptance_rate"].to_numpy(float), pool["quality"].to_numpy(float)))
    ax.plot(hull[:, 0] * 100, hull[:, 1] * q_scale, ":", color="0.35", lw=1.6, zorder=1, label=POOLED_LINE)
    return True


# A sweep's labels to place once the layout is final: its axes, points, texts and colour.
SweepLabels = tuple[plt.Axes, list[tuple[float, float]], list[str], str]


def _pareto_family(
    ax: plt.Axes,
    family_name: str,
    family: pd.DataFrame,
    axes: tuple[str, str],
    scales: tuple[float, float],
    style: dict[str, Any],
) -> tuple[list[str], SweepLabels | None, bool]:
    """One family on a Pareto panel, ``axes`` its (x, y) columns: a line through a swept family's
    points, then each point with its error bars (hollow where its timing is not trusted). Returns
    the legend entries drawn, the sweep's labels to place (None: not a sweep) and whether a
    hollow marker was drawn."""
    x, y = axes
    x_scale, q_scale = scales
    drawn: list[str] = []
    labels: SweepLabels | None = None
    flagged = False
    sweep = _sweep(family)  # rows not drawn (no time) are not in the legend either
    if sweep is not None:
        key, texts = sweep
        xs, ys = family[x].to_numpy(float) * x_scale, family[y].to_numpy(float) * q_scale
        label = f"{family_name}, {key} swept"
        # markers: each point's own, below (hollow where its timing is not trusted); the legend keeps one
        ax.plot(xs, ys, "-", lw=1.2, label=label, **{**style, "markersize": 6, "markevery": []})
        drawn.append(label)
        labels = (ax, *_merge_coincident(list(zip(xs, ys)), texts), style["color"])
    for _, r in family.iterrows():
        drawn.append(r["legend"])
        unsteady = x == "normalised_time" and not timing_trusted(r.get("time_spread", np.nan))
        flagged |= bool(unsteady)
        ax.errorbar(
            r[x] * x_scale,
            r[y] * q_scale,
            xerr=_err(r[x], r.get(f"{x}_ci"), x_scale),
            yerr=_err(r[y], r[f"{y}_ci"], q_scale),
            ls="none",
            ecolor=style["color"],
            elinewidth=0.8,
            capsize=2,
            label=None if sweep is not None else r["legend"],
            **{
                "markersize": 6 if sweep is not None else 8,
                **style,
                **({"markerfacecolor": "none"} if unsteady else {}),
            },
        )
    return drawn, labels, flagged


def _pareto_caption(title: str, axes: tuple[str, str], flagged: bool, panel: Panel) -> str:
    """What a Pareto figure shows, hollow markers explained where it draws one."""
    x, y = axes
    what = (
        "time per emitted token relative to AR with the same settings, on the same timed examples (sum of "
        "time over sum of tokens)"
        if x == "normalised_time"
        else "acceptance rate = accepted / drafted tokens"
    )
    quality = "the task's quality" if y == "quality" else FIDELITY_FIGURES[y][3]
    hollow = (
        " Hollow markers: re-timing the same examples moved the normalised time more than "
        f"{SPREAD_LIMIT:g}x, or they were timed once (noise not measured); that time is not to be trusted."
        if flagged
        else ""
    )
    return (
        f"{title}. x: {what}; y: {quality}. Error bars: 95% bootstrap intervals over examples "
        f"(asymmetric, as measured). Lines: methods swept over one parameter (points labelled), the static "
        f"ensemble's target-weight sweep among them; a label that would cover another or a point is left "
        "out; dotted "
        "(on the acceptance axis): the upper hull of every baseline point and their anchors (lossless sd, accept_all) pooled, what a "
        f"random mix of settings attains; dashed: AR's, the target alone.{hollow} "
        f"Settings: {panel.title}."
    )


def plot_pareto(
    panel: Panel,
    qualities: dict[str, str],
    out: Path,
    x: str = "normalised_time",
    y: str = "quality",
    formats: Sequence[str] = FORMATS,
) -> list[Path]:
    """Quality (``y``: the task's, or a fidelity axis of ``FIDELITY_FIGURES``) against ``x`` (time relative to AR, or acceptance
    rate). A method swept over one parameter is a line with its points labelled; the static
    ensemble's line is the frontier the paper compares with; every other method (a user's
    verifier too) is a marker of its own."""
    part = panel.part
    name, title, x_label, x_scale = PARETO_AXES[x]
    if y in FIDELITY_FIGURES:
        name, title, y_label, _ = FIDELITY_FIGURES[y]
    # A task without one quality (Spec-Bench: per category, in the table) has nothing to draw here.
    tasks = [t for t in _tasks(part) if y in part and part.loc[part["task"] == t, y].notna().any()]
    if not tasks:
        return []
    styles = method_styles(part)
    fig, axes = _grid(len(tasks))
    sweeps: list[SweepLabels] = []
    drawn: list[str] = ["ar (target alone)"]  # legend order: the table's order of methods
    flagged = False
    for ax, task in zip(axes, tasks):
        rows = part[part["task"] == task]
        metric = qualities.get(task, "quality") if y == "quality" else y
        q_scale = 100.0 if y == "quality" and task_facts(task).percent else 1.0
        for _, r in rows[rows["method"] == "ar"].iterrows():  # the reference: a line, never hidden
            ax.axhline(r[y] * q_scale, color="black", ls="--", lw=0.9, label="ar (target alone)")
        for family_name, family in rows[(rows["method"] != "ar") & rows[x].notna()].groupby("family", sort=False):
            style = styles[family["method"].iloc[0]]
            entries, labels, hollow = _pareto_family(ax, family_name, family, (x, y), (x_scale, q_scale), style)
            drawn += entries
            sweeps += [labels] if labels is not None else []
            flagged |= hollow
        if x == "acceptance_rate" and _pooled_hull(ax, rows, q_scale):
            drawn.insert(1, POOLED_LINE)
        _bound_quality_axis(ax, metric)
        ax.set_title(task_facts(task).title, fontsize=10)
        ax.set_xlabel(x_label)
        ax.set_ylabel(quality_label(metric) if y == "quality" else y_label)
        ax.grid(alpha=0.3)
    if flagged:  # the legend says what a hollow marker means wherever one is drawn
        axes[0].plot([], [], ls="none", marker="o", color="0.35", markerfacecolor="none", label=HOLLOW)
        drawn.append(HOLLOW)
    _legend(fig, axes, drawn)
    fig.suptitle(f"{title} ({panel.slug})", fontsize=11)
    for sweep_points in sweeps:  # once the layout is final, so that label boxes are where they will be drawn
        _place_labels(*sweep_points)
    if sweeps:  # placing them ran the layout at the saved resolution: saving keeps it, not runs it again
        fig.set_layout_engine("none")
    return _save(fig, out, f"{name}_{panel.slug}", _pareto_caption(title, (x, y), flagged, panel), formats)


MEASURED, LOGGED, THEORY = "measured: accepted / verified", "logged 1 - TV(q, pi)", "theory 1 - w TV(p, q)"


def _acceptance_vs_weight_axes(
    ax: plt.Axes, rows: pd.DataFrame, examples: pd.DataFrame, styles: dict[str, Any]
) -> None:
    """One task's panel: a mixture's (the static ensemble's) measured per-token acceptance with its
    intervals, the logged expectation, and the theory line from SD's acceptance where SD ran; the y
    range fits the data."""
    ens = rows[rows["method_info"].map(lambda info: info.mixes_target is not None)]
    method = str(ens["method"].iloc[0])
    ens = ens[ens["method"] == method]
    weight = ens["method_info"].iloc[0].mixes_target
    ens = ens.assign(target_weight=[p[weight] for p in ens["params"]]).sort_values("target_weight")
    runs = [examples[examples["config_id"] == c] for c in ens["config_id"]]
    err = np.hstack([_rate_err(g["accepted_tokens"], g["reached_per_position"].map(sum)) for g in runs])
    ax.errorbar(
        ens["target_weight"],
        ens["per_token_acceptance"] * 100,
        yerr=err,
        ls="none",
        elinewidth=0.8,
        capsize=2,
        label=MEASURED,
        **{"markersize": 7, **styles[method]},  # a plug-in's spare style sets its own size
    )
    ax.plot(
        ens["target_weight"],
        ens["expected_acceptance"] * 100,
        "x",
        color="black",
        ms=7,
        label=LOGGED,
    )
    sd = rows[rows["method"] == LOSSLESS_METHOD]  # its acceptance is 1 - TV(p, q)
    if len(sd):
        tv = 1 - float(sd["per_token_acceptance"].iloc[0])
        w = np.linspace(0, 1, 50)
        ax.plot(w, (1 - w * tv) * 100, "--", color=styles[LOSSLESS_METHOD]["color"], label=THEORY)
        ax.text(0.03, 0.05, f"TV(p, q) = {tv:.3f} (from SD)", transform=ax.transAxes, fontsize=8)
    shown = np.concatenate(
        [
            ens["per_token_acceptance"] - err[0] / 100,  # the lower ends of the error bars
            ens["expected_acceptance"],
            (1 - tv,) if len(sd) else (),
        ]
    )
    low = float(np.nanmin(shown)) * 100 if len(shown) else 0.0
    ax.set_xlim(0, 1.02)
    ax.set_ylim(max(0.0, low - 0.15 * (100 - low) - 1), 100.5)  # the data fill the axes


def plot_acceptance_vs_weight(
    rows: pd.DataFrame, panel: Panel, out: Path, formats: Sequence[str] = FORMATS
) -> list[Path]:
    """A mixture's (the static ensemble's: its class declares ``mixes_target``) per-token acceptance
    against its target weight, per task, beside what the theory predicts from SD: the check that
    acceptance falls linearly in w."""
    part = panel.part
    mixed = part["method_info"].map(lambda info: info.mixes_target is not None)
    tasks = [t for t in _tasks(part) if (mixed & (part["task"] == t)).any()]
    if not tasks:
        return []
    examples = _panel_rows(rows, panel)
    styles = method_styles(part)
    fig, axes = _grid(len(tasks))
    for ax, task in zip(axes, tasks):
        _acceptance_vs_weight_axes(ax, part[part["task"] == task], examples, styles)
        ax.set_title(task_facts(task).title, fontsize=10)
        ax.set_xlabel("target weight w")
        ax.set_ylabel("per-token acceptance (%)")
        ax.grid(alpha=0.3)
    _legend(fig, axes, [MEASURED, LOGGED, THEORY])
    fig.suptitle(f"Ensemble acceptance vs weight ({panel.slug})", fontsize=11)
    caption = (
        "Static ensemble: per-token acceptance (accepted / verified positions) against the target "
        "weight w, with its 95% bootstrap interval over examples; crosses: the expected acceptance "
        "1 - TV(q, pi) logged per position; dashed: the theory line 1 - w TV(p, q), with TV(p, q) = "
        "1 - SD's per-token acceptance. "
        f"Settings: {panel.title}."
    )
    return _save(fig, out, f"acceptance_vs_weight_{panel.slug}", caption, formats)


def _shaded(color: str, value: float) -> tuple[float, float, float, float]:
    """A family's colour at one point of its shaded parameter (0 .. 1), from a light tint of its
    declared colour (0) through the colour itself to a dark shade of it (1)."""
    ramp = matplotlib.colors.LinearSegmentedColormap.from_list("shade", ["white", color, "black"])
    return ramp(0.25 + 0.5 * min(max(value, 0.0), 1.0))


def _panel_rows(rows: pd.DataFrame, panel: Panel) -> pd.DataFrame:
    return rows[rows["config_id"].isin(panel.part["config_id"])]


def plot_acceptance_per_position(
    rows: pd.DataFrame, panel: Panel, out: Path, formats: Sequence[str] = FORMATS
) -> list[Path]:
    part = _panel_rows(rows, panel)
    part = part[part["method"] != "ar"]
    tasks = _tasks(part)
    if not tasks:
        return []
    fig, axes = _grid(len(tasks))
    order = list(dict.fromkeys(panel.part["config_id"]))  # the table's order, sweeps ascending
    styles = method_styles(panel.part)
    params = dict(zip(panel.part["config_id"], panel.part["params"]))
    infos = dict(zip(panel.part["config_id"], panel.part["method_info"]))
    legends = dict(zip(panel.part["config_id"], panel.part["legend"]))
    for ax, task in zip(axes, tasks):
        groups = dict(list(part[part["task"] == task].groupby("config_id", sort=False)))
        seen: dict[str, int] = {}
        seen_labels: list[str] = []
        for config_id in [c for c in order if c in groups]:
            g = groups[config_id]
            label = legends[config_id]
            acc = np.stack(g["accepted_per_position"].to_numpy()).astype(float)
            drafted = np.stack(g["drafted_per_position"].to_numpy()).astype(float)
            rate = acc.sum(0) / np.maximum(drafted.sum(0), 1) * 100
            err = np.hstack([_rate_err(acc[:, i], drafted[:, i]) for i in range(len(rate))])
            method, shade = g["method"].iloc[0], infos[config_id].shade
            style = {**styles[method], "markersize": 6}
            k = seen[method] = seen.get(method, -1) + 1
            if shade:  # the class's shaded sweep (the ensemble's: darker for more weight on the target)
                style["color"] = _shaded(style["color"], float(params[config_id][shade]))
            ls = ("-", "--", ":", "-.")[k % 4] if not shade else "-"
            dodge = 0.04 * (len(seen_labels) - (len(groups) - 1) / 2)  # bars side by side, not on top
            seen_labels.append(label)
            ax.errorbar(
                np.arange(1, len(rate) + 1) + dodge,
                rate,
                yerr=err,
                ls=ls,
                label=label,
                lw=1,
                elinewidth=0.7,
                capsize=1.5,
                **style,
            )
        ax.set_title(task_facts(task).title, fontsize=10)
        ax.set_xlabel("position in the draft")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_ylabel("acceptance rate (%)")
        ax.grid(alpha=0.3)
    _legend(fig, axes)
    fig.suptitle(f"Acceptance per draft position ({panel.slug})", fontsize=11)
    caption = (
        "Acceptance rate at each position of the draft: tokens accepted at position i / tokens drafted "
        "at position i, pooled over examples; error bars: 95% bootstrap intervals over examples. "
        f"Settings: {panel.title}."
    )
    return _save(fig, out, f"acceptance_per_position_{panel.slug}", caption, formats)


def plot_weights(
    rows: pd.DataFrame, panel: Panel, out: Path, formats: Sequence[str] = FORMATS
) -> list[Path]:
    """The per-token target weights a learned verifier logged (DIVERSED's head, or a plug-in's that
    logs them), one histogram per head and task."""
    part = _panel_rows(rows, panel)
    logged = part["weights"].map(lambda w: w is not None and len(w) > 0) if "weights" in part else None
    if logged is None or not logged.any():
        return []
    part = part[logged]
    part = part.assign(legend=part["config_id"].map(dict(zip(panel.part["config_id"], panel.part["legend"]))))
    tasks = _tasks(part)
    # One colour per head, the same in every panel; one head is drawn in DIVERSED's own colour.
    heads = list(dict.fromkeys(part["legend"]))
    own = method_styles(panel.part).get(str(part["method"].iloc[0]), {}).get("color", HEAD_COLOURS[0])
    colours = dict(zip(heads, itertools.cycle([own, *HEAD_COLOURS])))
    fig, axes = _grid(len(tasks))
    for ax, task in zip(axes, tasks):
        for label, g in part[part["task"] == task].groupby("legend", sort=False):
            w = np.concatenate([np.asarray(x, float) for x in g["weights"]])
            ax.hist(w, bins=np.linspace(0, 1, 41).tolist(), alpha=0.6, color=colours[label], label=label)
            # each panel's own mean, on the panel: a figure-wide legend entry would show one task's
            mean = float(w.mean())
            if len(heads) == 1:
                ax.axvline(mean, color="black", ls="--", lw=0.9, label="mean weight")
            else:
                ax.axvline(
                    mean, color=colours[label], ls="--", lw=0.9, label="mean weight, in its head's colour"
                )
            ax.annotate(
                f"mean {mean:.2f}",
                (mean, 1),
                xycoords=("data", "axes fraction"),
                xytext=(3 if mean < 0.75 else -3, -12),
                textcoords="offset points",
                ha="left" if mean < 0.75 else "right",
                fontsize=8,
            )
        ax.set_title(task_facts(task).title, fontsize=10)
        ax.set_xlabel("weight on the target, w_t")
        ax.set_ylabel("verified positions")
    _legend(fig, axes)
    fig.suptitle(f"DIVERSED weights ({panel.slug})", fontsize=11)
    caption = (
        "Histogram of the per-token target weight w_t that the DIVERSED head gave each verified "
        f"position; dashed: its mean. Settings: {panel.title}."
    )
    return _save(fig, out, f"diversed_weights_{panel.slug}", caption, formats)


def _legend(fig: plt.Figure, axes: list[plt.Axes], order: list[str] | None = None) -> None:
    """One legend for the figure, below the panels, with each drawn label once, in ``order``
    (labels as drawn) where given: matplotlib lists lines before error-bar points otherwise."""
    seen: dict[str, Artist] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            # an error-bar point is keyed by its marker alone: the bars would clutter the key
            seen.setdefault(label, handle[0] if isinstance(handle, ErrorbarContainer) else handle)
    if order:
        rank = {label: i for i, label in enumerate(order)}
        seen = dict(sorted(seen.items(), key=lambda item: rank.get(item[0], len(rank))))
    if seen:
        fig.legend(
            seen.values(),
            seen.keys(),
            loc="outside lower center",
            ncol=min(2, len(seen)),
            fontsize=8,
            frameon=False,
        )


def write_plots(
    results: Path, out: Path, formats: Sequence[str] = FORMATS, read: Summarised | None = None
) -> list[Path]:
    """Every figure of every panel of a results directory, in ``formats`` (`run` writes PNG only:
    PDF's font subsetting and SVG's text took most of the demo's plotting time; `plot` writes
    all three); ``read``: its rows and summary, already read. Returns the files written."""
    read = read or summarised(results)
    rows, summary = read.rows, read.summary
    qualities = quality_metrics(summary)
    paths: list[Path] = []
    for panel in panels(summary):
        for x in PARETO_AXES:
            paths += plot_pareto(panel, qualities, out, x, formats=formats)
        for y in FIDELITY_FIGURES:
            paths += plot_pareto(panel, qualities, out, y=y, formats=formats)
        paths += plot_acceptance_vs_weight(rows, panel, out, formats)
        paths += plot_acceptance_per_position(rows, panel, out, formats)
        paths += plot_weights(rows, panel, out, formats)
    return paths
