"""The command line: every command documents itself with an example; `list` shows the registries."""

import pytest
from typer.testing import CliRunner

from bench.cli import app

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
