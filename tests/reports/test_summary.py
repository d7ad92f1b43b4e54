"""Summaries and the table (bench/reports/summary.py, table.py): ids hold only the method's own
settings, every shared setting is in the rows, normalised time pairs a configuration with the
`ar` run of the same settings, panels and their titles use all of them, intervals are printed as
measured and timings that repeats show noisy (or that no repeat measured) are flagged, while a
real speedup over unlike examples is shown."""

import numpy as np
import pandas as pd
from result_rows import result_rows as _rows

from bench.config import RunSettings
from bench.grid import configs_from_flags
from bench.reports.summary import panels, summarise
from bench.reports.table import render, write_table
from bench.runner import RunConfig, Runner
from bench.store import SHARED_SETTINGS, load_results


def run(out, methods=("ar", "sd"), **kw):
    settings = RunSettings(**{"max_new_tokens": 8, **kw})
    configs = configs_from_flags(tasks=["gsm8k"], pairs=["tiny"], methods=list(methods), settings=settings, device="cpu")
    Runner(out, limit=2, progress=False, log=lambda m: None).run(configs)
    return load_results(out)


def test_ar_id_ignores_the_draft_length():
    ids = {RunConfig("gsm8k", "tiny", "ar", draft_len=n, device="cpu").resolve().config_id for n in (3, 5)}
    sd = {RunConfig("gsm8k", "tiny", "sd", draft_len=n, device="cpu").resolve().config_id for n in (3, 5)}
    assert len(ids) == 1 and len(sd) == 2


def test_a_draft_length_sweep_in_one_directory(tmp_path):
    run(tmp_path, draft_len=3)
    rows = run(tmp_path, draft_len=5)
    assert rows[rows["method"] == "ar"]["config_id"].nunique() == 1  # ar ran once, not per length
    summary = summarise(rows)
    ar = summary[summary["method"] == "ar"]
    assert len(ar) == 1 and ar["normalised_time"].iloc[0] == 1.0
    found = panels(summary)
    assert sorted(len(p.part) for p in found) == [2, 2]  # each draft length with the one ar
    assert len({p.title for p in found}) == 2 and len({p.slug for p in found}) == 2
    text, _ = write_table(tmp_path, "markdown")
    assert "draft length 3" in text and "draft length 5" in text


def test_two_budgets_are_two_comparisons(tmp_path):
    run(tmp_path, max_new_tokens=6)
    summary = summarise(run(tmp_path, max_new_tokens=8))
    assert (summary[summary["method"] == "ar"]["normalised_time"] == 1.0).all()
    assert {len(p.part) for p in panels(summary)} == {2}
    assert {"6 tokens", "8 tokens"} <= {t for p in panels(summary) for t in p.title.split(", ")}


def test_pairing_needs_the_same_prompt_settings(tmp_path):
    run(tmp_path, methods=["ar"], num_fewshot=0)
    rows = run(tmp_path, methods=["sd"], num_fewshot=4)
    assert set(SHARED_SETTINGS) <= set(rows.columns)
    assert sorted(rows["num_fewshot"].unique()) == [0, 4]
    summary = summarise(rows)
    assert np.isnan(summary[summary["method"] == "sd"]["normalised_time"].iloc[0])  # no ar at 4 shots


def test_table_prints_measured_intervals_and_flags_noisy_timings():
    metric = {"gsm8k": "exact_flexible"}
    steady = render(
        summarise(_rows({"ar": [1.0, 1.1, 0.9, 1.0], "sd": [0.5, 0.55, 0.5, 0.45]})), metric, "markdown"
    )
    sd_rows = [line for line in steady.splitlines() if line.startswith("| sd |")]
    assert "±" not in steady and not any("not shown" in line for line in sd_rows)
    assert "| 2.00 |" in sd_rows[1]  # the speedup of sd, printed
    assert "| 50.0% [" in sd_rows[0]  # quality with its [low, high] interval
    # The same examples timed again: sd's second repeat took 1.5 times its first, ar's did not.
    noisy = _rows({"ar": [[1.0, 1.0]] * 4, "sd": [[0.4, 0.6]] * 4})
    sd_speed = [line for line in render(summarise(noisy), metric, "markdown").splitlines() if line.startswith("| sd |")][1]
    assert "not shown: repeats disagree 1.50x" in sd_speed and "(repeats disagree 1.50x)" in sd_speed
    # Each example timed once: nothing measured the noise, so nothing is called a speedup.
    once = _rows({"ar": [[1.0]] * 4, "sd": [[0.5]] * 4})
    sd_speed = [line for line in render(summarise(once), metric, "markdown").splitlines() if line.startswith("| sd |")][1]
    assert "not shown: noise not measured: 1 repeat" in sd_speed


def test_a_real_speedup_on_unlike_examples_is_shown_and_noise_is_not_called_one():
    """Examples differ for real (prompts of 188 to 1,538 tokens, 1.2 to 4.2 tokens per forward): per
    token they cost 3x apart, which the old between-example rule called noise. The repeats agree,
    so the speedup is shown, with its paired interval above 1. Noise is not called a speedup: a
    disturbance that slows one repeat of the whole set hides it (noise that differs example by
    example is in the bootstrap interval already)."""
    rng = np.random.default_rng(0)
    n, repeats = 10, 3
    cost = rng.uniform(1.0, 3.0, n)  # ar's time per example, 3x apart
    gain = rng.uniform(1.2, 2.1, n)  # sd's speedup per example
    jitter = lambda: 1 + 0.01 * rng.standard_normal((n, repeats))  # noqa: E731  (a quiet machine)
    ar, sd = cost[:, None] * jitter(), (cost / gain)[:, None] * jitter()
    summary = summarise(_rows({"ar": ar.tolist(), "sd": sd.tolist()}).assign(new_tokens=8))
    got = summary[summary["method"] == "sd"].iloc[0]
    assert got["time_spread"] < 1.05 and got["speedup"] > 1.2
    low, high = got["normalised_time_ci"]
    assert high < 1 and low < 1 / got["speedup"] < high
    table = render(summary, {"gsm8k": "exact_flexible"}, "markdown")
    assert f"| {got['speedup']:.2f} |" in [line for line in table.splitlines() if line.startswith("| sd |")][1]
    # sd no faster than ar; the machine was busy through sd's second repeat of every example.
    busy = cost[:, None] * jitter() * np.array([1.0, 1.4, 1.0])
    summary = summarise(_rows({"ar": ar.tolist(), "sd": busy.tolist()}))
    assert summary.query("method == 'sd'")["time_spread"].iloc[0] > 1.3
    table = render(summary, {"gsm8k": "exact_flexible"}, "markdown")
    assert "not shown: repeats disagree" in [line for line in table.splitlines() if line.startswith("| sd |")][1]


def test_the_runner_times_each_example_repeatedly_and_keeps_every_repeat(tmp_path):
    rows = run(tmp_path)  # the default: every timed example twice
    timed = rows[rows["wall_time_s"].notna()]
    assert len(timed) == 4 and all(len(t) == 2 for t in timed["wall_times_s"])
    assert np.allclose(timed["wall_time_s"], [np.median(t) for t in timed["wall_times_s"]])
    summary = summarise(rows)
    assert np.isfinite(summary["time_spread"]).all()  # measured: two repeats of each example
    assert (summary.loc[summary["method"] == "ar", "time_spread"] == 1.0).all()


def test_tasks_with_their_own_exemplar_counts_share_one_panel():
    from bench.reports.summary import panels

    times = {"ar": [1.0, 1.0, 1.0, 1.0], "sd": [0.5, 0.5, 0.5, 0.5]}
    gsm8k = _rows(times).assign(num_fewshot=4)
    cnndm = _rows(times).assign(task="cnndm", num_fewshot=1, config_id=lambda f: f["config_id"] + "-c")
    (panel,) = panels(summarise(pd.concat([gsm8k, cnndm], ignore_index=True)))
    assert set(panel.part["task"]) == {"gsm8k", "cnndm"}
    assert "cnndm test 1-shot, gsm8k test 4-shot" in panel.title
    again = _rows(times).assign(num_fewshot=0, config_id=lambda f: f["config_id"] + "-0")
    split = panels(summarise(pd.concat([gsm8k, again], ignore_index=True)))  # one task, two counts
    assert sorted(len(p.part) for p in split) == [2, 2] and len({p.slug for p in split}) == 2


def test_calibrated_values_read_at_three_digits_and_close_ones_stay_apart():
    """A calibrated value has many digits: labels show 3 significant ones (more only where two points
    of one family would then read the same, in the table's labels, legends and swept values), while
    rows and the summary keep every digit in their structured params."""
    import json

    from bench.records import fixed_columns
    from bench.verifiers import method_info

    cascade = method_info("cascade")
    assert cascade.label({"cascade_alpha": -0.005857}) == "cascade (opt, a=-0.00586)"
    assert cascade.label({"cascade_alpha": 0.2}) == "cascade (opt, a=0.2)"  # short values as they are
    assert method_info("threshold").label({"speculative_accept_threshold_single": 1.0}).endswith("single=1.0)")
    cfg = RunConfig("gsm8k", "tiny", "cascade", {"cascade_alpha": -0.005857}, device="cpu").resolve()
    written = fixed_columns(cfg, "tiny", "gsm8k")
    assert written["label"] == "cascade (opt, a=-0.00586)"  # display only
    assert json.loads(written["params"])["cascade_alpha"] == -0.005857  # the row keeps every digit
    # Two calibrated points 4e-6 apart read the same at 3 digits: their family shows 4.
    alphas = {"close": -0.005857, "closer": -0.005861, "far": 0.2}
    rows = _rows({"ar": [1.0] * 4, **{name: [1.0] * 4 for name in alphas}})
    for name, alpha in alphas.items():
        mine = rows["config_id"] == name
        params = cascade.full({"cascade_alpha": alpha})
        rows.loc[mine, ["method", "params", "label"]] = ["cascade", json.dumps(params), cascade.label(params)]
    summary = summarise(rows).set_index("config_id")
    assert summary.loc["close", "label"] == "cascade (opt, a=-0.005857)"
    assert summary.loc["closer", "label"] == "cascade (opt, a=-0.005861)"
    assert summary.loc["far", "label"] == "cascade (opt, a=0.2)"
    assert summary.loc["closer", "legend"] == "cascade (opt, a=-0.005861)" and summary.loc["close", "swept"] == "a=-0.005857"
    assert summary.loc["close", "params"]["cascade_alpha"] == -0.005857
    # Without the close point, the family's labels stay at 3 digits.
    alone = summarise(rows[rows["config_id"] != "closer"]).set_index("config_id")
    assert alone.loc["close", "label"] == "cascade (opt, a=-0.00586)"


def test_per_token_and_per_example_time_agree_at_equal_lengths(tmp_path):
    """Greedy lossless sd emits ar's tokens, so every paired example has the same length: time per
    token and time per example give the same normalised time (and interval)."""
    rows = run(tmp_path, temperature=0.0)
    sd, ar = (rows[rows["method"] == m].set_index("example_id") for m in ("sd", "ar"))
    assert (sd["new_tokens"] == ar.loc[sd.index, "new_tokens"]).all()
    got = summarise(rows).query("method == 'sd'").iloc[0]
    assert np.isfinite(got["normalised_time"])
    assert np.isclose(got["normalised_time"], got["normalised_time_example"])
    assert np.allclose(got["normalised_time_ci"], got["normalised_time_example_ci"])


def test_a_method_that_stops_early_is_not_called_faster():
    """sd takes ar's time per token but emits half the tokens (it stops early): per example it would
    look twice as fast; per emitted token it is as fast as ar, and its interval holds 1."""
    rows = _rows({"ar": [1.0, 2.0, 1.5, 1.0], "sd": [0.5, 1.0, 0.75, 0.5]})
    rows.loc[rows["method"] == "sd", "new_tokens"] = 4
    got = summarise(rows).query("method == 'sd'").iloc[0]
    assert np.isclose(got["normalised_time_example"], 0.5)  # the confounded estimator
    assert np.isclose(got["normalised_time"], 1.0) and np.isclose(got["speedup"], 1.0)
    low, high = got["normalised_time_ci"]
    assert low <= 1.0 <= high
    table = render(summarise(rows), {"gsm8k": "exact_flexible"}, "markdown")
    speed = [line for line in table.splitlines() if line.startswith("| sd |")][1]
    assert "| 1.00 |" in speed and "0.50" in speed  # the speedup, and time per example beside it


def test_fidelity_sits_beside_quality_and_marks_settings_off_the_targets_distribution():
    """ar is the reference (its TV from itself 0); sd's divergence matches ar's example by example
    (on the distribution); lossy's lies 0.5 nats per token below (off it: below); a setting whose
    few noisy examples straddle the margin is inconclusive, so off it too; rows written before the
    column are off it, saying why."""
    rows = _rows({"ar": [1.0] * 4, "sd": [0.5] * 4, "lossy": [0.5] * 4})
    rows["target_divergence"] = np.tile([0.02, -0.03, 0.01, 0.0], 3) + np.repeat([0.0, 0.0, -0.5], 4)
    got = summarise(rows).set_index("method")
    assert got.loc["ar", "bias"] == 0.0 and got.loc["ar", "fidelity"] == "reference"
    assert got.loc["sd", "fidelity"] == "on-distribution" and not got.loc["sd", "off_distribution"]
    assert got.loc["sd", "fidelity_diff_ci"] == (0.0, 0.0)
    assert got.loc["lossy", "fidelity"] == "off-distribution: below" and got.loc["lossy", "off_distribution"]
    assert np.isclose(got.loc["lossy", "fidelity_diff"], -0.5) and np.isclose(got.loc["lossy", "target_divergence"], -0.5)
    noisy = rows.copy()
    noisy.loc[noisy["method"] == "lossy", "target_divergence"] = [0.3, -0.3, 0.25, -0.25]
    assert summarise(noisy).set_index("method").loc["lossy", "fidelity"] == "off-distribution: inconclusive"
    old = summarise(rows.drop(columns="target_divergence")).set_index("method")
    assert old.loc["sd", "fidelity"].startswith("off-distribution: not recorded") and old.loc["sd", "off_distribution"]
    table = render(summarise(rows), {"gsm8k": "exact_flexible"}, "markdown")
    assert "GSM8K TV to target | GSM8K divergence/token | GSM8K fidelity vs ar |" in table
    lossy = [line for line in table.splitlines() if line.startswith("| lossy |")][0]
    assert "| off-distribution: below (Δ -0.500 [-0.500, -0.500]) |" in lossy


def test_the_divergence_has_mean_zero_under_the_targets_own_law():
    """log p_T(y) + H(p_T) averaged over y ~ p_T is 0 exactly (its per-token column's known zero), at
    any temperature; the temperature-1 log p comes out beside it."""
    import torch

    from bench.verify_step import fidelity

    logits = torch.randn(2, 3, 11, generator=torch.Generator().manual_seed(0)) * 3
    every = torch.arange(11).expand(2, 3, 11).reshape(2, 33)
    for t in (0.0, 0.6, 1.0):
        loglik, excess = fidelity(logits.repeat_interleave(11, dim=1), every, t)
        law = (logits / (t or 1.0)).softmax(-1).reshape(2, 33)
        assert torch.allclose((law * excess).reshape(2, 3, 11).sum(-1), torch.zeros(2, 3), atol=1e-5)
        assert torch.allclose(loglik, logits.log_softmax(-1).reshape(2, 33), atol=1e-5)
