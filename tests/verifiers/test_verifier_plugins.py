"""A verifier from the user's own file or module: loaded by path without PYTHONPATH, run and labelled
by its name like a built-in (the class is tests/example_verifier.py)."""

import shutil
import sys
from pathlib import Path

from conftest import cli_error

from bench.config import RunSettings
from bench.grid import configs_from_flags
from bench.runner import Runner
from bench.store import load_results
from bench.verifiers import Verifier, verifier_class

HERE = Path(__file__).resolve().parents[1]  # the helpers' folder, tests/


def test_verifier_from_a_file_runs_without_pythonpath(tmp_path, monkeypatch):
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    shutil.copy(HERE / "example_verifier.py", folder / "my_verifier.py")
    monkeypatch.chdir(tmp_path)
    assert str(folder) not in sys.path
    method = "elsewhere/my_verifier.py:ConfidenceEnsemble"
    cls = verifier_class(method)
    assert issubclass(cls, Verifier) and cls.name == "confidence"
    assert verifier_class(method) is cls  # imported once, not once per lookup
    assert verifier_class("example_verifier:ConfidenceEnsemble").name == "confidence"  # module:Class
    out = tmp_path / "results"
    run = configs_from_flags(tasks=["arith"], pairs=["ref"], methods=[method], device="cpu", settings=RunSettings(max_new_tokens=4))
    Runner(out, limit=1, progress=False, log=lambda m: None).run(run)
    rows = load_results(out)
    assert rows["method"].tolist() == ["confidence"] and "/" not in rows["config_id"].iloc[0]
    assert rows["label"].tolist() == ["confidence (floor=0.2)"]  # its name in tables and plots, not its path
    assert "does not exist" in cli_error("run", "--method", "elsewhere/missing.py:X", "--task", "arith")


def test_a_cached_heads_label_names_its_folder_not_the_cache_path():
    from bench.verifiers import method_info

    info = method_info("diversed")
    cached = "/root/.cache/diversed-bench/heads/diversed-arith-ref-3aa2449dd8"
    assert info.label({}, head=cached) == "diversed (head=diversed-arith-ref-3aa2449dd8)"
    assert info.family({}, head="bench:reference/heads/arith-ref") == "diversed (head=bench:reference/heads/arith-ref)"


def test_every_python_registry_is_one_registry_that_refuses_a_shadowing_name():
    """Verifiers, drafters, recipes and sandboxes register the same way (bench.plugins.Registry):
    by the ``name`` a class declares, a second class under a taken name refused in one line."""
    import pytest

    from bench.drafters import DRAFTERS, ModelDrafter
    from bench.errors import BenchError
    from bench.learned.recipes import RECIPES
    from bench.plugins import Registry
    from bench.sandbox import SANDBOXES
    from bench.verifiers import VERIFIERS, SpeculativeDecoding, register

    for registry in (VERIFIERS, DRAFTERS, RECIPES, SANDBOXES):
        assert isinstance(registry, Registry) and all(cls.name == name for name, cls in registry.items())
    assert register(SpeculativeDecoding) is SpeculativeDecoding  # the same class again: a no-op
    shadow = type("Shadow", (ModelDrafter,), {})
    with pytest.raises(BenchError, match="drafter 'model' is registered already"):
        DRAFTERS.add(shadow)
    with pytest.raises(BenchError, match="declare its registry name"):
        Registry("verifier").add(type("Nameless", (), {}))
