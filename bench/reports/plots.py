"""Figures from a results directory: the Pareto frontier (the paper's Figure 2), acceptance against
the static-ensemble weight with its theory line, acceptance per draft position, DIVERSED weights."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from bench.reports.summary import (
    METHOD_ORDER,
    TASK_ORDER,
    TASK_TITLES,
    Panel,
    panels,
    quality_metrics,
    summarise,
)  # noqa: E402
from bench.store import load_results  # noqa: E402

STYLE = {
    "ar": dict(marker="s", color="black"),
    "sd": dict(marker="o", color="tab:blue"),
    "lossy": dict(marker="v", color="tab:orange"),
    "cascade": dict(marker="D", color="tab:purple"),
    "ensemble": dict(marker=".", color="tab:green"),
    "diversed": dict(marker="*", color="tab:red", markersize=16, markeredgecolor="black", zorder=5),
    "typical": dict(marker="P", color="tab:brown"),
    "threshold": dict(marker="X", color="tab:pink"),
    "relaxed": dict(marker="h", color="tab:olive"),
}


def _tasks(frame: pd.DataFrame) -> list[str]:
    return sorted(frame["task"].unique(), key=lambda t: TASK_ORDER.index(t) if t in TASK_ORDER else 99)


def _grid(n: int) -> tuple[plt.Figure, list[plt.Axes]]:
    cols = min(n, 2) if n > 1 else 1
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.0 * rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _save(fig: plt.Figure, out: Path, name: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    for p in paths:
        fig.savefig(p, dpi=150, bbox_inches="tight")
    plt.close(fig)
    return paths


def pareto_frontier(points: np.ndarray) -> np.ndarray:
    """Points (time, quality) not beaten by another with less time and more quality, by time."""
    order = points[np.argsort(points[:, 0])]
    keep, best = [], -np.inf
    for t, q in order:
        if q > best:
            keep.append((t, q))
            best = q
    return np.array(keep)


PARETO_AXES = {
    "normalised_time": ("pareto", "Quality vs time", "normalised time (vs ar, same examples)"),
    "acceptance_rate": ("pareto_acceptance", "Quality vs acceptance", "acceptance rate (accepted / drafted)"),
}


def plot_pareto(panel: Panel, qualities: dict[str, str], out: Path, x: str = "normalised_time") -> list[Path]:
    """Quality against ``x`` (normalised time or acceptance rate), the ensemble's weight sweep as a
    line; a method above that line beats the static frontier."""
    part = panel.part
    name, title, x_label = PARETO_AXES[x]
    tasks = _tasks(part)
    fig, axes = _grid(len(tasks))
    for ax, task in zip(axes, tasks):
        rows = part[part["task"] == task]
        ens = rows[rows["method"] == "ensemble"].sort_values("target_weight")
        if len(ens):
            ax.plot(
                ens[x],
                ens["quality"],
                "-o",
                color="tab:green",
                ms=5,
                alpha=0.7,
                label="static ensemble (w sweep)",
            )
            for i, (_, r) in enumerate(ens.iterrows()):
                ax.annotate(
                    f"w={r['target_weight']:g}",
                    (r[x], r["quality"]),
                    fontsize=7,
                    textcoords="offset points",
                    xytext=(4, -11 if i % 2 else 6),
                    color="tab:green",
                )
            pts = ens[[x, "quality"]].dropna().to_numpy(float)
            if x == "acceptance_rate":  # more acceptance is better: mirror to reuse the time frontier
                pts[:, 0] = -pts[:, 0]
            if len(pts) > 1:
                front = pareto_frontier(pts)
                if x == "acceptance_rate":
                    front[:, 0] = -front[:, 0]
                ax.step(
                    front[:, 0],
                    front[:, 1],
                    where="post",
                    ls="--",
                    color="tab:green",
                    lw=1,
                    label="ensemble frontier",
                )
        for method in METHOD_ORDER:
            if method == "ensemble":
                continue
            for _, r in rows[rows["method"] == method].iterrows():
                ax.plot(
                    r[x],
                    r["quality"],
                    ls="none",
                    label=r["label"],
                    **{"markersize": 9, **STYLE[method]},
                )
        ax.set_title(TASK_TITLES.get(task, task))
        ax.set_xlabel(x_label)
        ax.set_ylabel(qualities.get(task, "quality"))
        ax.grid(alpha=0.3)
    _legend(fig, axes)
    fig.suptitle(f"{title}, {panel.title}", y=1.02)
    return _save(fig, out, f"{name}_{panel.slug}")


def plot_acceptance_vs_weight(panel: Panel, out: Path) -> list[Path]:
    part = panel.part
    tasks = [t for t in _tasks(part) if (part[(part["task"] == t)]["method"] == "ensemble").any()]
    if not tasks:
        return []
    fig, axes = _grid(len(tasks))
    for ax, task in zip(axes, tasks):
        rows = part[part["task"] == task]
        ens = rows[rows["method"] == "ensemble"].sort_values("target_weight")
        ax.plot(
            ens["target_weight"],
            ens["per_token_acceptance"],
            "o",
            color="tab:green",
            label="measured (accepted / verified)",
        )
        ax.plot(
            ens["target_weight"], ens["expected_acceptance"], "x", color="black", label="logged 1 - TV(q, pi)"
        )
        sd = rows[rows["method"] == "sd"]
        if len(sd):
            tv = 1 - float(sd["per_token_acceptance"].iloc[0])
            w = np.linspace(0, 1, 50)
            ax.plot(w, 1 - w * tv, "--", color="tab:blue", label="theory 1 - w TV(p, q), TV from sd")
            ax.text(0.03, 0.05, f"TV(p, q) = {tv:.3f}", transform=ax.transAxes, fontsize=8)
        ax.set_xlim(0, 1.02)
        ax.set_ylim(0, 1.02)
        ax.set_title(TASK_TITLES.get(task, task))
        ax.set_xlabel("target weight w")
        ax.set_ylabel("per-token acceptance")
        ax.grid(alpha=0.3)
    _legend(fig, axes)
    fig.suptitle(f"Static ensemble acceptance vs weight, {panel.title}", y=1.02)
    return _save(fig, out, f"acceptance_vs_weight_{panel.slug}")


def _panel_rows(rows: pd.DataFrame, panel: Panel) -> pd.DataFrame:
    return rows[rows["config_id"].isin(panel.part["config_id"])]


def plot_acceptance_per_position(rows: pd.DataFrame, panel: Panel, out: Path) -> list[Path]:
    part = _panel_rows(rows, panel)
    part = part[part["method"] != "ar"]
    tasks = _tasks(part)
    if not tasks:
        return []
    fig, axes = _grid(len(tasks))
    for ax, task in zip(axes, tasks):
        for label, g in part[part["task"] == task].groupby("label", sort=False):
            acc = np.stack(g["accepted_per_position"].to_numpy()).sum(0)
            drafted = np.stack(g["drafted_per_position"].to_numpy()).sum(0)
            rate = acc / np.maximum(drafted, 1)
            style = STYLE.get(g["method"].iloc[0], {"marker": "."})
            ax.plot(
                np.arange(1, len(rate) + 1),
                rate,
                "-",
                label=label,
                marker=style["marker"],
                color=style.get("color"),
            )
        ax.set_title(TASK_TITLES.get(task, task))
        ax.set_xlabel("draft position")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_ylabel("accepted / drafted")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    _legend(fig, axes)
    fig.suptitle(f"Acceptance per draft position, {panel.title}", y=1.02)
    return _save(fig, out, f"acceptance_per_position_{panel.slug}")


def plot_weights(rows: pd.DataFrame, panel: Panel, out: Path) -> list[Path]:
    part = _panel_rows(rows, panel)
    part = part[part["method"] == "diversed"]
    if part.empty:
        return []
    tasks = _tasks(part)
    fig, axes = _grid(len(tasks))
    for ax, task in zip(axes, tasks):
        for label, g in part[part["task"] == task].groupby("label", sort=False):
            w = np.concatenate([np.asarray(x, float) for x in g["weights"]])
            ax.hist(w, bins=np.linspace(0, 1, 41), alpha=0.6, label=f"{label}: mean {w.mean():.2f}")
        ax.set_title(TASK_TITLES.get(task, task))
        ax.set_xlabel("per-token target weight w_t")
        ax.set_ylabel("tokens")
    _legend(fig, axes)
    fig.suptitle(f"DIVERSED weights, {panel.title}", y=1.02)
    return _save(fig, out, f"diversed_weights_{panel.slug}")


def _legend(fig: plt.Figure, axes: list[plt.Axes]) -> None:
    """One legend for the figure, below the panels, with each label once."""
    seen: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    fig.legend(
        seen.values(),
        seen.keys(),
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=min(3, len(seen)),
        fontsize=8,
        frameon=False,
    )
    fig.tight_layout()


def write_plots(results: Path, out: Path) -> list[Path]:
    rows = load_results(results)
    summary = summarise(rows)
    qualities = quality_metrics(summary)
    paths: list[Path] = []
    for panel in panels(summary):
        for x in PARETO_AXES:
            paths += plot_pareto(panel, qualities, out, x)
        paths += plot_acceptance_vs_weight(panel, out)
        paths += plot_acceptance_per_position(rows, panel, out)
        paths += plot_weights(rows, panel, out)
    return paths
