"""The command line: every command documents itself with an example; `list` shows the registries;
bad input is one line; folders are spelled --output-dir; Ctrl-C says how to resume; plots follow
the results folder."""

import sys

import pytest
from typer.testing import CliRunner

from bench.cli import app
from bench.runner import Runner
from small_runs import cli, tiny_run

COMMANDS = [
    "run",
    "list",
    "table",
    "plot",
    "compare",
    "report",
    "score",
    "train",
    "speed",
    "merge",
    "fetch",
    "generate",
]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(command):
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "Example: diversed-bench" in result.output


def test_list_shows_tasks_pairs_and_methods_with_defaults():
    out = CliRunner().invoke(app, ["list"]).output
    for name in ("gsm8k", "cnndm", "xsum", "mbpp", "humaneval", "llama3", "qwen3", "gemma3", "tiny"):
        assert name in out
    assert "target_weight=0.7" in out and "lenience=0.5" in out and "cascade_rule=opt" in out
    assert "needs --head" in out


def test_drafter_help_points_to_list_which_names_every_registered_drafter(monkeypatch):
    """--drafter's help names no drafter list of its own to keep up: it points to `list`, which
    reads the registry, so a drafter registered later is listed without an edit of the options."""
    from dataclasses import dataclass

    from bench.drafters import DRAFTERS, Drafter

    @dataclass
    class Later(Drafter):
        name = "later_drafter"
        help = "a drafter registered after the options were written"

        def draft(self, rows, caps):
            raise AssertionError("never drafts here")

    monkeypatch.setitem(DRAFTERS, Later.name, Later)
    out = CliRunner().invoke(app, ["list"]).output
    assert all(name in out for name in DRAFTERS) and "a drafter registered after" in out
    for command in ("run", "generate", "speed"):
        text = " ".join(CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400"}).output.split())
        assert "diversed-bench list" in text and "suffix" not in text and "lookup_tree" not in text, command


def test_generate_refuses_diversed_without_a_head():
    from bench.errors import BenchError

    result = CliRunner().invoke(app, ["generate", "hi", "--method", "diversed", "--device", "cpu"])
    assert isinstance(result.exception, BenchError) and "--head" in str(result.exception)


def test_run_sets_and_records_the_cpu_threads(tmp_path):
    import json

    import torch

    from bench.errors import BenchError

    args = ["run", "--task", "gsm8k", "--pair", "tiny", "--method", "ar", "--limit", "1"]
    args += ["--max-new-tokens", "4", "--no-report", "--no-progress", "--device", "cpu"]
    before = torch.get_num_threads()
    try:
        result = CliRunner().invoke(app, [*args, "--output-dir", str(tmp_path), "--threads", "1"])
        assert result.exit_code == 0, result.output
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    manifest = json.loads(next((tmp_path / "manifests").glob("*.json")).read_text())
    assert manifest["cpu_threads"] == 1
    bad = CliRunner().invoke(app, [*args, "--output-dir", str(tmp_path / "bad"), "--threads", "0"])
    assert isinstance(bad.exception, BenchError) and "--threads" in str(bad.exception)


def test_a_grids_threads_are_set_recorded_and_not_given_twice(tmp_path):
    """The demo grid runs its tiny pair on one thread (its kernels are too small to split); a grid's
    ``threads`` is set and recorded like --threads, and --threads beside it is refused."""
    import json

    import torch

    from bench.errors import BenchError
    from bench.grid import load_grid

    assert load_grid("demo")["threads"] == 1
    grid = tmp_path / "one.yaml"
    grid.write_text("tasks: [gsm8k]\npairs: [tiny]\nmethods: [ar]\nlimit: 1\nmax_new_tokens: 4\nthreads: 1\n")
    args = ["run", "--grid", str(grid), "--no-report", "--no-progress", "--device", "cpu"]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        result = CliRunner().invoke(app, [*args, "--output-dir", str(tmp_path / "r")])
        assert result.exit_code == 0, result.output
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    manifest = json.loads(next((tmp_path / "r" / "manifests").glob("*.json")).read_text())
    assert manifest["cpu_threads"] == 1
    twice = CliRunner().invoke(app, [*args, "--output-dir", str(tmp_path / "t"), "--threads", "2"])
    assert isinstance(twice.exception, BenchError) and "sets threads: 1; drop --threads" in str(twice.exception)
    assert not (tmp_path / "t").exists()  # refused before anything ran
    grid.write_text(grid.read_text().replace("threads: 1", "threads: 0"))
    bad = CliRunner().invoke(app, [*args, "--output-dir", str(tmp_path / "b")])
    assert isinstance(bad.exception, BenchError) and "threads must be a positive integer" in str(bad.exception)


def test_bad_input_is_one_line(tmp_path, capsys):
    results = tmp_path / "results"
    tiny_run(results)
    (results / "notes.parquet").write_text("not parquet")
    broken = tmp_path / "preds.jsonl"
    broken.write_text('{"example_id": "0", "completion": "#### 3"}\n{"example_id": "1", "compl\n')
    head_file = tmp_path / "head" / "head.safetensors"
    head_file.parent.mkdir()
    head_file.write_bytes(b"")
    run_args = [
        "run",
        "--task",
        "gsm8k",
        "--device",
        "cpu",
        "--no-report",
        "--output-dir",
        str(tmp_path / "r"),
    ]
    for args, needle in (
        (["table", str(results)], "notes.parquet is not a readable parquet file"),
        (
            ["score", "--task", "gsm8k", "--data", "fixture", "--predictions", str(broken)],
            "line 2: not valid JSON",
        ),
        ([*run_args, "--method", "sd", "--limit", "-3"], "--limit must be >= 1"),
        ([*run_args, "--method", "sd", "--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
        ([*run_args, "--method", "sd", "--draft-len", "0"], "--draft-len must be >= 1"),
        ([*run_args, "--method", "sd", "--seed", "-1"], "--seed must be >= 0"),
        ([*run_args, "--method", "diversed", "--head", str(head_file)], f"--head {head_file.parent}"),
        (["table", str(broken)], "is a file"),
    ):
        code, err = cli(capsys, *args)
        assert code == 2 and len(err) == 1, (args, err)
        assert needle in err[0], (args, err)


@pytest.mark.parametrize("command", ["train", "merge", "plot", "run", "speed"])
def test_folders_are_spelled_output_dir(command):
    from typer.testing import CliRunner

    from bench.cli import app

    out = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output
    assert "--output-dir" in out and "--output " not in out


def test_ctrl_c_prints_what_was_saved_and_the_command_that_resumes(tmp_path, monkeypatch):
    def interrupted(self, configs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Runner, "run", interrupted)
    argv = ["run", "--task", "arith", "--pair", "ref", "--method", "ar", "--output-dir", str(tmp_path / "r")]
    monkeypatch.setattr(sys, "argv", ["diversed-bench", *argv])
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 130
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "interrupted" in lines[0] and str(tmp_path / "r") in lines[0]
    assert lines[0].endswith("resume with: diversed-bench " + " ".join(argv))


def test_plots_follow_the_results_folder(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr("bench.reports.plots.write_plots", lambda results, out, **formats: seen.append(out) or [])
    CliRunner().invoke(app, ["plot", str(tmp_path / "mine")])
    assert seen == [tmp_path / "mine" / "plots"]


def test_run_flags_reach_the_api_by_name(monkeypatch):
    """`run` calls api.run with each flag under a name a reader can follow: the run settings in one
    RunSettings, --no-train as train_missing_heads (a parameter named `train` would hide api.train)."""
    import inspect

    from bench import api

    seen = {}
    monkeypatch.setattr(api, "run", lambda **kw: seen.update(kw))
    argv = ["run", "--task", "arith,gsm8k", "--temperature", "0.5", "--max-new-tokens", "9", "--drafter", "lookup",
            "--drafter", "model", "--target-weight", "0.3,0.7", "--shard", "1/2", "--no-train"]  # fmt: skip
    assert CliRunner().invoke(app, argv).exit_code == 0
    assert seen["settings"] == api.RunSettings(temperature=0.5, max_new_tokens=9, drafter=["lookup", "model"])
    assert (seen["tasks"], seen["params"], seen["shard"]) == (["arith", "gsm8k"], {"target_weight": ["0.3", "0.7"]}, (1, 2))
    assert seen["train_missing_heads"] is False and seen["pairs"] is None and seen["calibrate"] is None
    assert "train" not in inspect.signature(api.run).parameters and callable(api.train)
    CliRunner().invoke(app, argv[:-1])
    assert seen["train_missing_heads"] is True
