"""The registry folders ``tasks/`` and ``pairs/``, installed as ``bench.registry.tasks`` and
``bench.registry.pairs``. In a source checkout they live at the repository root, so that root
joins this package's search path."""

from importlib import resources
from pathlib import Path
from typing import Any

from bench.errors import BenchError

_here = Path(__file__).resolve().parent
_root = _here.parents[1]
if not (_here / "tasks").is_dir() and (_root / "tasks" / "__init__.py").is_file():
    __path__.append(str(_root))


def entries(kind: str) -> dict[str, Any]:
    """Registry files of one kind (``tasks`` or ``pairs``) by name."""
    folder = resources.files(f"bench.registry.{kind}")
    return {f.name[: -len(".yaml")]: f for f in folder.iterdir() if f.name.endswith(".yaml")}


def find(kind: str, name_or_path: str) -> Any:
    """A registry entry by name, or a user's YAML file by path."""
    registry = entries(kind)
    if name_or_path in registry:
        return registry[name_or_path]
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    what = kind.rstrip("s")
    if path.suffix in (".yaml", ".yml"):
        raise BenchError(f"{what} file {path} does not exist")
    raise BenchError(
        f"unknown {what} {name_or_path!r}; choose one of {', '.join(sorted(registry))} or give a {what} YAML path"
    )


def load_yaml(path: Any, what: str) -> dict[str, Any]:
    """A registry or user YAML file as a mapping; a syntax error is one line: file, line, problem."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BenchError(f"{what} file {path}{line}: {problem}; fix the YAML there") from None
    if not isinstance(data, dict):
        raise BenchError(
            f"{what} file {path}: expected a mapping of fields (name: ..., ...), got {type(data).__name__}"
        )
    return data
