"""The registry folders ``tasks/`` and ``pairs/``, installed as ``bench.registry.tasks`` and
``bench.registry.pairs``. In a source checkout they live at the repository root, so that root
joins this package's search path."""

from pathlib import Path

_here = Path(__file__).resolve().parent
_root = _here.parents[1]
if not (_here / "tasks").is_dir() and (_root / "tasks" / "__init__.py").is_file():
    __path__.append(str(_root))
