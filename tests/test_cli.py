"""The command line: every command documents itself with an example; `list` shows the registries."""

import pytest
from typer.testing import CliRunner

from bench.cli import app

COMMANDS = ["run", "list", "table", "plot", "score", "train", "speed", "merge", "generate"]


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
