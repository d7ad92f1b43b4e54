"""The figures (bench/reports/plots.py): every method and sweep point drawn and labelled once, labels
clear of markers and error bars, quality axes without impossible values, hollow markers for
untrustworthy times, 95% intervals, DIVERSED's weights per panel. Hand-made rows, no decoding."""

import json

import pandas as pd
from result_rows import result_rows as _rows

from bench.reports.summary import summarise


def test_pareto_draws_a_users_verifier_and_labels_each_sweep_point_once(tmp_path):
    from bench.reports.plots import _merge_coincident, plot_pareto
    from bench.reports.summary import panels

    rows = _rows({"ar": [1.0] * 4, "confidence": [0.5] * 4, "lossy": [0.6] * 4})
    lossy = rows[rows["method"] == "lossy"]
    swept = [
        lossy.assign(label=f"lossy (l={v})", config_id=f"lossy-{v}", params=json.dumps({"lenience": v}))
        for v in (0.3, 0.6)
    ]
    (panel,) = panels(summarise(pd.concat([rows[rows["method"] != "lossy"], *swept], ignore_index=True)))
    paths = plot_pareto(panel, {"gsm8k": "exact_flexible"}, tmp_path, "acceptance_rate")
    assert {p.suffix for p in paths} == {".png", ".pdf", ".svg", ".txt"}
    svg = (tmp_path / "pareto_acceptance_tiny.svg").read_text()
    assert "confidence" in svg and "lossy, l swept" in svg and "l=0.3, 0.6" in svg  # same point: one label
    assert _merge_coincident([(1.0, 2.0), (3.0, 4.0)], ["a=0.1", "a=0.3"])[1] == ["a=0.1", "a=0.3"]


def test_sweep_labels_cover_no_marker_error_bar_or_other_label():
    import matplotlib.pyplot as plt

    from bench.reports.plots import _obstacles, _place_labels

    fig, ax = plt.subplots(figsize=(4, 3))
    xs, ys = [1.0, 2.0, 3.0], [1.0, 1.0, 1.0]
    ax.plot(xs, ys, "-^")
    for x in xs:  # another method's point and error bars just above and right of every sweep point
        ax.errorbar(x + 0.1, 1.02, xerr=0.4, yerr=0.05, marker="o")
    ax.set_xlim(0, 4)
    ax.set_ylim(0.5, 1.5)
    _place_labels(ax, list(zip(xs, ys)), ["w=0.2", "w=0.5", "w=0.8"], "green")
    renderer = fig.canvas.get_renderer()
    boxes = [text.get_window_extent(renderer) for text in ax.texts]
    markers, lines = _obstacles(ax)
    plt.close(fig)
    assert len(boxes) == 3
    for i, box in enumerate(boxes):
        assert not any(box.overlaps(other) for other in boxes[i + 1 :])
        assert not any(box.overlaps(marker) for marker in markers)
        x, y = lines[:, 0], lines[:, 1]
        assert not ((x >= box.x0) & (x <= box.x1) & (y >= box.y0) & (y <= box.y1)).any()


def test_a_label_with_no_spot_clear_of_every_point_is_left_out_and_labels_wear_a_halo():
    import matplotlib.pyplot as plt
    import numpy as np

    from bench.reports.plots import _place_labels

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.set_xlim(0, 4)
    ax.set_ylim(0, 2)
    grid = np.mgrid[0:4.01:0.1, 0:2.01:0.1].reshape(2, -1)  # other methods' points everywhere
    ax.plot(*grid, "s", markersize=12)
    _place_labels(ax, [(2.0, 1.0)], ["w=0.5"], "green")
    assert not ax.texts  # every spot covers a point: left out (the table names it), never drawn over one
    ax.lines[0].remove()
    _place_labels(ax, [(2.0, 1.0)], ["w=0.5"], "green")
    (label,) = ax.texts
    assert label.get_bbox_patch().get_facecolor()[:3] == (1, 1, 1)  # a line through it does not strike it out
    plt.close(fig)


def test_a_quality_axis_shows_no_impossible_values():
    import matplotlib.pyplot as plt

    from bench.reports.plots import _bound_quality_axis

    fig, (zeros, perfect) = plt.subplots(1, 2)
    zeros.plot([1, 2], [0, 0], "o")  # the tiny pair: quality 0 everywhere
    perfect.plot([1, 2], [100, 100], "o")
    _bound_quality_axis(zeros, "exact_flexible")
    _bound_quality_axis(perfect, "rouge2")
    plt.close(fig)
    low, high = zeros.get_ylim()
    assert -0.5 < low <= 0 and high >= 4  # from 0 up, not -0.05 to 0.05
    low, high = perfect.get_ylim()
    assert 100 <= high < 100.5 and low <= 96


def test_quality_vs_time_explains_hollow_markers_in_its_legend(tmp_path):
    from bench.reports.plots import plot_pareto
    from bench.reports.summary import panels

    for name, times in [("steady", [0.5, 0.55, 0.5, 0.45]), ("noisy", [[0.4, 0.6]] * 4)]:
        (panel,) = panels(summarise(_rows({"ar": [1.0, 1.1, 0.9, 1.0], "sd": times})))
        plot_pareto(panel, {"gsm8k": "exact_flexible"}, tmp_path / name, "normalised_time")
    assert "hollow" not in (tmp_path / "steady" / "pareto_tiny.svg").read_text()
    assert "hollow: repeats disagree &gt; 1.2x" in (tmp_path / "noisy" / "pareto_tiny.svg").read_text()


def test_acceptance_figures_draw_their_95_percent_intervals(tmp_path, monkeypatch):
    from matplotlib.container import ErrorbarContainer

    from bench.reports import plots
    from bench.reports.summary import panels

    rows = _rows({"ar": [1.0] * 4, "sd": [0.5] * 4, "ensemble": [0.5] * 4})
    per_position = [[0] * 5] * 4 + [[2, 2, 1, 1, 1]] * 4  # ar, sd; then the ensemble, varying by example
    per_position += [[2, 2, 1, 1, 0], [2, 1, 1, 0, 0], [2, 2, 2, 1, 1], [1, 1, 1, 1, 0]]
    rows["accepted_per_position"] = per_position
    rows["drafted_per_position"] = [[0] * 5 if m == "ar" else [2] * 5 for m in rows["method"]]
    rows["accepted_tokens"] = [sum(a) for a in per_position]
    rows.loc[rows["method"] == "ensemble", "params"] = '{"mix": "prob", "target_weight": 0.7}'
    (panel,) = panels(summarise(rows))
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, *args: figures.append(fig) or [])
    plots.plot_acceptance_vs_weight(rows, panel, tmp_path)
    plots.plot_acceptance_per_position(rows, panel, tmp_path)
    assert len(figures) == 2
    for fig in figures:
        bars = [
            c for ax in fig.axes for c in ax.containers if isinstance(c, ErrorbarContainer) and c.has_yerr
        ]
        heights = [abs(s[1][1] - s[0][1]) for c in bars for lines in c.lines[2] for s in lines.get_segments()]
        assert max(heights) > 0  # the ensemble's examples disagree: its interval has width


def test_each_weights_panel_shows_its_own_mean(tmp_path, monkeypatch):
    from bench.reports import plots
    from bench.reports.summary import panels

    times = {"ar": [1.0] * 4, "diversed": [0.5] * 4}
    gsm8k = _rows(times).assign(weights=[[]] * 4 + [[0.1, 0.3]] * 4)
    cnndm = _rows(times).assign(task="cnndm", config_id=lambda f: f["config_id"] + "-c")
    cnndm["weights"] = [[]] * 4 + [[0.7, 0.9]] * 4
    rows = pd.concat([gsm8k, cnndm], ignore_index=True)
    (panel,) = panels(summarise(rows))
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, *args: figures.append(fig) or [])
    plots.plot_weights(rows, panel, tmp_path)
    (fig,) = figures
    assert [[t.get_text() for t in ax.texts] for ax in fig.axes] == [["mean 0.20"], ["mean 0.80"]]
    assert not any("mean 0." in t.get_text() for legend in fig.legends for t in legend.get_texts())


def test_two_heads_in_one_weights_panel_have_their_own_colours(tmp_path, monkeypatch):
    from matplotlib.colors import to_hex

    from bench.reports import plots
    from bench.reports.summary import panels

    rows = _rows({"ar": [1.0] * 4, "diversed": [0.5] * 4}).assign(weights=[[]] * 4 + [[0.1, 0.3]] * 4)
    other = rows[rows["method"] == "diversed"].assign(
        label="diversed (head=init)", head="init", config_id="diversed-init", weights=[[0.5]] * 4
    )
    rows = pd.concat([rows, other], ignore_index=True)
    (panel,) = panels(summarise(rows))
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, *args: figures.append(fig) or [])
    plots.plot_weights(rows, panel, tmp_path)
    (ax,) = figures[0].axes
    bars = {to_hex(patch.get_facecolor(), keep_alpha=False) for patch in ax.patches}
    means = {to_hex(line.get_color()) for line in ax.lines}
    assert len(bars) == 2 and means == bars


def test_log_p_per_token_has_its_interval_and_a_figure_against_time(tmp_path):
    """The target's log p per token (the paper's second quality axis) is token-weighted over a
    configuration's examples with a bootstrap interval over them, shown in the table and drawn
    against time; rows without it draw no such figure."""
    from bench.reports.plots import LOGP, plot_pareto
    from bench.reports.summary import panels
    from bench.reports.table import render

    rows = _rows({"ar": [1.0] * 4, "lossy": [0.6] * 4})
    assert plot_pareto(panels(summarise(rows))[0], {"gsm8k": "exact_flexible"}, tmp_path, y=LOGP) == []
    logp = {"ar": [-0.1, -0.2, -0.1, -0.2], "lossy": [-0.5, -1.5, -0.5, -2.0]}
    rows["target_loglik"] = [v for m in rows["method"].unique() for v in logp[m]]
    rows["new_tokens"] = [10, 30, 10, 30] * 2
    summary = summarise(rows)
    lossy = summary[summary["method"] == "lossy"].iloc[0]
    assert lossy["target_loglik"] == (-5 - 45 - 5 - 60) / 80  # token-weighted, not the mean of examples
    low, high = lossy["target_loglik_ci"]
    assert -2.0 <= low < lossy["target_loglik"] < high <= -0.5
    assert f"{lossy['target_loglik']:.3f} [{low:.3f}, {high:.3f}]" in render(summary, {"gsm8k": "exact_flexible"}, "markdown")
    (panel,) = panels(summary)
    paths = plot_pareto(panel, {"gsm8k": "exact_flexible"}, tmp_path, y=LOGP)
    assert (tmp_path / "pareto_logp_tiny.png") in paths
    caption = (tmp_path / "pareto_logp_tiny.txt").read_text()
    assert caption.startswith("Log p vs time.") and "mean log p per emitted token" in caption


def test_the_mixture_and_weights_figures_follow_what_a_method_declares_and_logs(tmp_path, monkeypatch):
    """A plug-in whose class declares ``mixes_target`` gets the acceptance-vs-weight figure, and one
    whose rows log per-token weights gets the weights figure, as the ensemble and DIVERSED do; a
    method that does neither gets neither (no figure is chosen by a method's name)."""
    from bench.reports import plots
    from bench.reports.summary import panels
    from bench.verifiers import MethodInfo

    mix = MethodInfo(name="mymix", defaults={"target_weight": 0.5}, sweep={}, mixes_target="target_weight")
    rows = _rows({"ar": [1.0] * 4, "mymix": [0.5] * 4, "plain": [0.5] * 4})
    rows["method_info"] = [mix.to_json() if m == "mymix" else "" for m in rows["method"]]
    rows["params"] = ['{"target_weight": 0.5}' if m == "mymix" else "{}" for m in rows["method"]]
    rows["accepted_per_position"] = [[0] * 5 if m == "ar" else [2, 1, 1, 1, 1] for m in rows["method"]]
    rows["drafted_per_position"] = [[0] * 5 if m == "ar" else [2] * 5 for m in rows["method"]]
    rows["weights"] = [[0.2, 0.4] if m == "plain" else [] for m in rows["method"]]
    (panel,) = panels(summarise(rows))
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, out, name, *args: figures.append((name, fig)) or [])
    plots.plot_acceptance_vs_weight(rows, panel, tmp_path)
    plots.plot_weights(rows, panel, tmp_path)
    (mixture, mixture_fig), (weights, weights_fig) = figures
    assert mixture.startswith("acceptance_vs_weight") and weights.startswith("diversed_weights")
    assert [t.get_text() for t in weights_fig.axes[0].texts] == ["mean 0.30"]  # plain's logged weights
    no_mix = rows[rows["method"] != "mymix"]
    figures.clear()
    plots.plot_acceptance_vs_weight(no_mix, panels(summarise(no_mix))[0], tmp_path)
    plots.plot_weights(no_mix.assign(weights=[[]] * len(no_mix)), panels(summarise(no_mix))[0], tmp_path)
    assert figures == []
