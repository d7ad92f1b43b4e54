"""The installed package (not the source tree) carries its registries, fixtures and grids, and the
lm-eval extra installs as documented."""

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHECK = """
import bench
from bench.data import fixture_dir
from bench.grid import load_grid
from bench.pairs import pair_names
from bench.tasks import task_names
assert task_names() == ["arith", "cnndm", "gsm8k", "humaneval", "mbpp", "spec_bench", "xsum"], task_names()
assert "tiny" in pair_names() and "llama3" in pair_names() and "ref" in pair_names()
from bench.head import head_folder
from bench.reference import DRAFT_DIR, TARGET_DIR, TOKENIZER_DIR
for folder in (TARGET_DIR, DRAFT_DIR):
    assert (folder / "model.safetensors").is_file() and (folder / "config.json").is_file(), folder
assert (TOKENIZER_DIR / "tokenizer.json").is_file()
assert (head_folder(load_grid("demo")["head"]) / "head.safetensors").is_file()
assert (fixture_dir("spec_bench") / "test.jsonl").is_file()
for task in ("gsm8k", "cnndm", "xsum", "mbpp"):
    assert (fixture_dir(task) / "test.jsonl").is_file() and (fixture_dir(task) / "train.jsonl").is_file()
assert load_grid("paper")["pairs"] == ["llama3", "qwen3", "gemma3"]
print(bench.__file__)
"""


# Then what `python -m bench list` runs, in the same interpreter (one start-up of torch, not two).
LIST = """
import runpy, sys
sys.argv = ["diversed-bench", "list"]
runpy.run_module("bench", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
def test_installed_package_has_its_data_files(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", CHECK + LIST],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "humaneval" in out.stdout, out.stdout


REPO = Path(__file__).resolve().parent.parent


def test_lm_eval_extra_installs_as_documented():
    meta = importlib.metadata.metadata("diversed-bench")
    assert "lm-eval" in meta.get_all("Provides-Extra")
    assert any(r.startswith("lm-eval") and 'extra == "lm-eval"' in r for r in meta.get_all("Requires-Dist"))
    assert 'pip install ".[lm-eval]"' in (REPO / "docs" / "lm-eval.md").read_text()


def test_every_package_folder_is_declared_in_pyproject():
    """pyproject lists packages by hand: a new folder of bench/ left out installs without it, and
    only an installed copy (CI's) fails, on import."""
    import tomllib

    repo = Path(__file__).resolve().parents[1]
    declared = set(tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(repo).parts)
        for init in (repo / "bench").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert found - {"bench.registry"} <= declared, sorted(found - declared)
