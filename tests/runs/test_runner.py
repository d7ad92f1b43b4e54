"""The runner end to end on the tiny pair: all methods x all tasks, reports, resume, determinism."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
from conftest import bench_cli, cli_error
from small_runs import cli

from bench.config import RunSettings
from bench.grid import configs_from_flags, load_grid
from bench.reports.summary import summarise
from bench.reports.table import write_table
from bench.runner import Runner
from bench.store import ResultStore, load_results

TIMING = ["wall_time_s", "wall_times_s", "prefill_time_s"]
REQUIRED = [
    "task",
    "pair",
    "method",
    "draft_len",
    "temperature",
    "head",
    "seed",
    "example_id",
    "prompt_tokens",
    "new_tokens",
    "rounds",
    "drafted_tokens",
    "accepted_tokens",
    "accepted_per_position",
    "acceptance_rate",
    "acceptance_length",
    "expected_acceptance",
    "bias",
    "wall_time_s",
    "prefill_time_s",
    "params",
    "method_info",
    "completion",
    "completion_cut",
    "quality",
]


def configs(tasks, methods, **kw):
    weights = {"target_weight": [0.3, 0.9]} if "ensemble" in methods else {}
    settings = RunSettings(**{"draft_len": 4, "max_new_tokens": 32, **kw})
    return configs_from_flags(tasks=tasks, pairs=["tiny"], methods=methods, heads=["init"], params=weights,
                              settings=settings, device="cpu")  # fmt: skip


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    Runner(out, limit=3, progress=False, log=lambda m: None).run(
        configs(["gsm8k", "cnndm", "xsum", "mbpp"], ["ar", "sd", "lossy", "cascade", "ensemble", "diversed"])
    )
    return out


@pytest.mark.slow
def test_all_methods_on_all_tasks(full_run):
    rows = load_results(full_run)
    assert set(REQUIRED) <= set(rows.columns)
    assert set(rows["method"]) == {"ar", "sd", "lossy", "cascade", "ensemble", "diversed"}
    assert set(rows["task"]) == {"gsm8k", "cnndm", "xsum", "mbpp"}
    assert len(rows) == 4 * 7 * 3  # 7 configurations (two ensemble weights), 3 examples
    assert not rows.duplicated(["config_id", "example_id"]).any()
    assert {"exact_strict", "rouge1", "rouge2", "rougeL", "pass@1"} <= set(rows.columns)
    spec = rows[rows["method"] != "ar"]
    assert spec["acceptance_rate"].between(0, 1).all()
    assert (rows["new_tokens"] <= 32).all()
    assert rows[rows["method"] == "diversed"]["weight_mean"].eq(0.5).all()


@pytest.mark.slow
def test_table_is_sane(full_run):
    summary = summarise(load_results(full_run))
    ar = summary[summary["method"] == "ar"]
    assert np.allclose(ar["normalised_time"], 1.0)
    ens = summary[summary["method"] == "ensemble"]
    for task, g in ens.groupby("task"):
        by_w = dict(zip([p["target_weight"] for p in g["params"]], g["acceptance_rate"]))
        assert by_w[0.3] > by_w[0.9], f"{task}: acceptance must rise as the weight falls"
    spec = summary[summary["method"] != "ar"]
    assert spec["acceptance_rate"].between(0, 1).all()
    assert (spec["acceptance_length"] >= 1).all()
    for fmt, needle in (
        ("markdown", "| method |"),
        ("latex", "\\begin{tabular}"),
        ("csv", "acceptance_rate"),
    ):
        text, path = write_table(full_run, fmt)
        assert needle in text and path.exists()
    text, _ = write_table(full_run, "markdown")
    assert "GSM8K accept rate" in text and "MBPP pass@1" in text and "ensemble (w=0.3)" in text


@pytest.mark.slow
def test_plots_are_written(full_run, tmp_path):
    from bench.reports.plots import write_plots

    paths = write_plots(full_run, tmp_path)
    names = {p.name for p in paths}
    for stem in (
        "pareto_tiny",
        "pareto_acceptance_tiny",
        "acceptance_vs_weight_tiny",
        "acceptance_per_position_tiny",
        "diversed_weights_tiny",
    ):
        assert {f"{stem}.png", f"{stem}.pdf", f"{stem}.svg", f"{stem}.txt"} <= names
    assert all(p.stat().st_size > 1000 for p in paths if p.suffix != ".txt")
    # axes in words with units, not column names; the settings in the caption, not the title
    svg = (tmp_path / "pareto_acceptance_tiny.svg").read_text()
    assert "acceptance rate (%)" in svg and "accuracy (%)" in svg and "ROUGE-2 F1" in svg
    assert "acceptance_rate" not in svg and "temperature" not in svg
    assert "temperature 1" in (tmp_path / "pareto_acceptance_tiny.txt").read_text()


@pytest.mark.slow
def test_finished_configurations_are_skipped(full_run):
    before = {p: p.stat().st_mtime_ns for p in full_run.glob("*.parquet")}
    messages = []
    Runner(full_run, limit=3, progress=False, log=messages.append).run(configs(["gsm8k"], ["sd"]))
    assert messages and "skipped" in messages[0]
    assert {p: p.stat().st_mtime_ns for p in full_run.glob("*.parquet")} == before


@pytest.mark.slow
def test_same_seed_twice_gives_identical_rows(tmp_path):
    frames = []
    for name in ("a", "b"):
        Runner(tmp_path / name, limit=2, progress=False, log=lambda m: None).run(
            configs(["gsm8k", "xsum"], ["sd", "ensemble", "cascade"])
        )
        rows = load_results(tmp_path / name).drop(columns=TIMING)
        frames.append(rows.sort_values(["config_id", "example_id"]).reset_index(drop=True))
    pd.testing.assert_frame_equal(frames[0], frames[1])


def test_a_batch_is_written_in_one_file(tmp_path):
    """A kill lands between files, never inside a batch, so a resumed run decodes the batches an
    uninterrupted run decodes (and records the same batch sizes)."""
    store = ResultStore(tmp_path)
    store.append_batch([{"config_id": "c", "example_id": str(i), "x": i} for i in range(3)])
    assert len(list(tmp_path.glob("parts/c/*/*.parquet"))) == 1
    assert store.done_ids("c") == {"0", "1", "2"}
    store.compact("c")
    assert store.done_ids("c") == {"0", "1", "2"} and not list(tmp_path.glob("parts/c/*/*.parquet"))


@pytest.mark.slow
def test_kill_and_resume(tmp_path):
    args = [
        sys.executable,
        "-m",
        "bench",
        "run",
        "--task",
        "gsm8k,xsum",
        "--method",
        "ar,sd",
        "--limit",
        "6",
        "--max-new-tokens",
        "48",
        "--no-report",
        "--no-progress",
        "--no-accept-all",  # 24 rows: ar and sd only
        "--device",
        "cpu",
        "--output-dir",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        args + [str(killed)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    # The kill waits for 9 of the 24 rows however slow the machine is; the deadline only ends a
    # run that never writes them (it would fail the assert below, as a run that exits early does).
    deadline = time.monotonic() + 300
    while (
        proc.poll() is None
        and time.monotonic() < deadline
        and len(list(killed.glob("parts/*/*/*.parquet"))) + 6 * len(list(killed.glob("*.parquet"))) < 9
    ):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = load_results(killed)
    assert 0 < len(partial) < 24, "the kill should land mid-run"
    subprocess.run(args + [str(killed)], env=env, check=True, capture_output=True, timeout=300)
    resumed = load_results(killed)
    assert len(resumed) == 24 and not resumed.duplicated(["config_id", "example_id"]).any()
    assert not list(killed.glob("parts/*/*/*.parquet"))
    clean = tmp_path / "clean"
    subprocess.run(args + [str(clean)], env=env, check=True, capture_output=True, timeout=300)
    key = ["config_id", "example_id"]
    a = resumed.drop(columns=TIMING).sort_values(key).reset_index(drop=True)
    b = load_results(clean).drop(columns=TIMING).sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)


def test_paper_grid_ships_and_expands():
    grid = load_grid("paper")
    assert grid["pairs"] == ["llama3", "qwen3", "gemma3"] and grid["limit"] == 200
    from bench.grid import configs_from_grid

    cfgs, limit = configs_from_grid("paper", device="cuda")
    # per task and pair: ar, sd, lossy, cascade, 5 ensemble weights, diversed
    assert len(cfgs) == 3 * 4 * 10 and limit == 200
    assert {c.head for c in cfgs if c.method == "diversed"} >= {"heads/gsm8k-llama3"}


def test_diversed_without_head_is_loud(tmp_path, capsys):
    """In this process (test_bad_cli_input_is_one_line runs the command as a user does)."""
    code, stderr = cli(
        capsys,
        "run",
        "--task",
        "gsm8k",
        "--method",
        "ar,diversed",
        "--limit",
        "1",
        "--max-new-tokens",
        "8",
        "--no-report",
        "--no-progress",
        "--output-dir",
        str(tmp_path),
    )
    assert code == 0, stderr
    said = "\n".join(stderr)
    assert "diversed: skipped, no --head given" in said and "diversed-bench train" in said
    assert set(load_results(tmp_path)["method"]) == {"ar"}


@pytest.mark.slow
def test_bad_cli_input_is_one_line(tmp_path):
    run = ["run", "--limit", "1", "--no-report", "--no-progress"]
    cases = (
        (["--pair", "mistral"], "unknown pair"),
        (["--method", "ensemble", "--target-weight", "1.5"], "(0, 1]"),
        (["--method", "diversed", "--head", str(tmp_path / "nohead")], "no head at"),
        (["--grid", "tiny", "--seed", "3"], "drop --seed"),
        (["--grid", "demo", "--target-weight", "0.7"], "drop --target-weight"),
        (["--task", "gsm8k", "--method", "ar", "--chat-template"], "no chat template"),
    )
    for i, (argv, needle) in enumerate(cases):
        assert needle in cli_error(*run, "--output-dir", str(tmp_path / f"out{i}"), *argv)
    # the command itself, as a user runs it: one line on stderr, exit status 2
    out = bench_cli(*run, "--output-dir", str(tmp_path / "cli"), "--task", "squad")
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "unknown task" in out.stderr.strip().splitlines()[-1]


def test_a_configurations_pairing_is_checked_once(tmp_path, monkeypatch):
    """`run` holds a configuration's drafter against what its method reads once, when the
    configuration resolves, not again when its decoder binds the drafter."""
    import bench.config
    import bench.drafters

    original, calls = bench.drafters.drafter_for, []

    def counted(spec, method, reads):
        calls.append(method)
        return original(spec, method, reads)

    monkeypatch.setattr(bench.drafters, "drafter_for", counted)
    monkeypatch.setattr(bench.config, "drafter_for", counted)
    found = configs(["gsm8k"], ["sd", "lossy"], max_new_tokens=8) + configs(
        ["gsm8k"], ["sd"], max_new_tokens=8, drafter="lookup"
    )
    Runner(tmp_path, limit=1, timing_examples=0, progress=False, log=lambda m: None).run(found)
    assert sorted(calls) == ["lossy", "sd", "sd"]  # one per configuration: three decoders
