"""Summaries and the table (bench/reports/summary.py, table.py): ids hold only the method's own
settings, every shared setting is in the rows, normalised time pairs a configuration with the
`ar` run of the same settings, panels and their titles use all of them, intervals are printed as
measured and spread timings are flagged."""

import numpy as np
import pandas as pd
from result_rows import result_rows as _rows

from bench.grid import configs_from_flags
from bench.reports.summary import panels, summarise
from bench.reports.table import render, write_table
from bench.runner import RunConfig, Runner
from bench.store import SHARED_SETTINGS, load_results


def run(out, methods=("ar", "sd"), **kw):
    settings = dict(tasks=["gsm8k"], pairs=["tiny"], device="cpu", max_new_tokens=8)
    configs = configs_from_flags(methods=list(methods), **{**settings, **kw})
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


def test_table_prints_measured_intervals_and_flags_spread_timings():
    metric = {"gsm8k": "exact_flexible"}
    steady = render(
        summarise(_rows({"ar": [1.0, 1.1, 0.9, 1.0], "sd": [0.5, 0.55, 0.5, 0.45]})), metric, "markdown"
    )
    sd_rows = [line for line in steady.splitlines() if line.startswith("| sd |")]
    assert "±" not in steady and not any("not shown" in line for line in sd_rows)
    assert "| 2.00 |" in sd_rows[1]  # the speedup of sd, printed
    assert "| 50.0% [" in sd_rows[0]  # quality with its [low, high] interval
    noisy = render(
        summarise(_rows({"ar": [1.0, 1.1, 0.9, 1.0], "sd": [0.2, 0.55, 0.5, 2.0]})), metric, "markdown"
    )
    sd_speed = [line for line in noisy.splitlines() if line.startswith("| sd |")][1]
    assert "not shown: times vary 10.0x" in sd_speed and "(times vary 10.0x)" in sd_speed


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
