"""`generate` shows what `run` decodes: an example's task prompt, or the user's text in the task's
template, printed before the completion."""

import pytest
from typer.testing import CliRunner

from bench.api import generate_prompt as _generate_prompt
from bench.cli import app
from bench.errors import BenchError
from bench.tasks import Task, resolve_task


def test_generate_prompt_is_the_task_prompt_of_run():
    text, note = _generate_prompt(None, "gsm8k", "3", None, "tiny")
    first = {e.example_id: e.prompt for e in Task(resolve_task("gsm8k"), "fixture").examples()}
    assert text == first["3"] and "4-shot" in note
    text, note = _generate_prompt("347 + 285", "arith", None, None, "packaged")
    assert text == "Q: 347 + 285\nA: " and "arith" in note
    text, note = _generate_prompt("hello", None, None, None, "tiny")
    assert text == "hello" and "raw" in note and "--task" in note
    with pytest.raises(BenchError, match="--example"):
        _generate_prompt("x", "mbpp", None, None, "tiny")  # two fields: one text cannot fill them


def test_generate_with_a_task_prints_the_prompt_it_decodes():
    result = CliRunner().invoke(
        app,
        [
            "generate",
            "347 + 285",
            "--task",
            "arith",
            "--pair",
            "ref",
            "--max-new-tokens",
            "3",
            "--device",
            "cpu",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "task arith's template" in result.stderr and "Q: 347 + 285\nA: " in result.stderr
    assert "[sd] 3 tokens" in result.stdout
