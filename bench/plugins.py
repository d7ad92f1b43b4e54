"""What verifiers and drafters share as plug-ins: one registry (``Registry``: classes by their
``name``; recipes and sandboxes use it too), a class named by its registry name, by
``module:Class`` (an importable module) or by ``path/to/file.py:Class`` (a file, imported without
touching PYTHONPATH), and its parameters typed from the fields it declares.

One registry, one loader and one parser, so that a user's drafter loads, and a misspelt or
mistyped value is refused, exactly as a user's verifier is. Imports nothing of the harness but its
errors.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import typing
from collections.abc import Mapping
from pathlib import Path
from dataclasses import Field, fields, is_dataclass
from typing import Any, Generic, TypeVar

from bench.errors import BenchError

T = TypeVar("T")


class Registry(dict[str, type[T]], Generic[T]):
    """Classes of one kind by the ``name`` each declares: every Python registry of the harness
    (verifiers, drafters, recipes, sandboxes) is one, so a class is registered, listed and looked
    up the same way whatever it is (tasks and pairs are YAML folders: bench.registry)."""

    def __init__(self, kind: str, *classes: type[T]) -> None:
        super().__init__()
        self.kind = kind
        for cls in classes:
            self.add(cls)

    def add(self, cls: type[T]) -> type[T]:
        """Register ``cls`` under its ``name`` (usable as a class decorator); a second class under
        a taken name is refused, not allowed to shadow the first."""
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name:
            raise BenchError(f"{self.kind} {cls.__qualname__}: declare its registry name as a class attribute `name`")
        if self.get(name, cls) is not cls:
            raise BenchError(f"{self.kind} {name!r} is registered already ({self[name].__qualname__}); pick another name")
        self[name] = cls
        return cls


def module_from_file(file: str, kind: str) -> Any:
    """A plug-in's Python file, imported once under a name of its own (no PYTHONPATH needed): a
    file that holds a verifier and a drafter is one module, imported once."""
    path = Path(file).expanduser().resolve()
    if not path.is_file():
        raise BenchError(f"{kind} file {file} does not exist; give path/to/file.py:ClassName")
    module_name = "bench_user_plugin_" + hashlib.sha1(str(path).encode()).hexdigest()[:10]
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise BenchError(f"{kind} file {file} cannot be imported as Python; give path/to/file.py:ClassName")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # dataclasses look their module up while the file runs
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
    return sys.modules[module_name]


def is_reference(name: str) -> bool:
    """Whether ``name`` names a plug-in class (``module:Class`` or ``file.py:Class``), not a
    registry entry."""
    where, sep, attr = name.rpartition(":")
    return bool(sep and where and attr.isidentifier())


def load_class(name: str, base: type[Any], registry: Mapping[str, type[T]], kind: str, unknown: str) -> type[T]:
    """The class ``name`` names: a registry entry, ``module:Class`` or ``path/to/file.py:Class``;
    a subclass of ``base`` (typed ``type[Any]``: the bases, Verifier and Drafter, are abstract, and
    a checker takes ``type[T]`` for a class it can instantiate). ``kind`` names what is loaded in refusals, ``unknown`` is the line that
    refuses a name that is neither."""
    if not is_reference(name):
        if name not in registry:
            raise BenchError(unknown)
        return registry[name]
    module_name, _, attr = name.rpartition(":")
    try:
        if module_name.endswith(".py"):
            cls = getattr(module_from_file(module_name, kind), attr)
        else:
            cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise BenchError(f"cannot import {kind} {name!r} ({exc}); give module:Class or path/to/file.py:Class") from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise BenchError(f"{name!r} is not a subclass of {base.__module__.rsplit('.', 1)[0]}.{base.__name__}")
    return cls


def parameters(owner: type[Any] | object) -> tuple[Field[Any], ...]:
    """A plug-in's parameters: the fields of its dataclass (a verifier's, a drafter's). A class
    that is not a dataclass declares none it could be given, and is refused in one line."""
    if not is_dataclass(owner):
        name = getattr(owner, "__name__", type(owner).__name__)
        raise BenchError(f"{name} is not a dataclass: decorate it with @dataclass (its parameters are its fields)")
    return fields(owner)


_WANTS = {int: "an integer", float: "a number", str: "a string"}


def typed_params(cls: type, owner: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """Parameter values (``--param``'s, a ``--drafter`` spec's, lm-eval's model_args) as the
    fields of ``cls`` declare them: the one parser of verifiers' and drafters' parameters (``typed``
    each). A name that is no field is left for the class to refuse."""
    kinds = typing.get_type_hints(cls)
    return {name: _typed(owner, name, kinds.get(name), value) for name, value in raw.items()}


def _typed(owner: str, name: str, kind: Any, raw: Any) -> Any:
    """A parameter's value as the type its field declares (``kind``): text (a command line's,
    a spec string's, lm-eval's model_args) parsed, an integer widened to a float; a bool, or a
    value of another type, refused in one line naming the owner, the parameter and the type.
    Fields of other types take the value as given (their class checks it)."""
    if kind not in _WANTS:
        return raw
    if isinstance(raw, str):
        text = raw.strip()
        try:
            return text if kind is str else kind(text)
        except ValueError:
            pass
    elif kind is float and isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return float(raw)
    elif isinstance(raw, kind) and not isinstance(raw, bool):
        return raw
    raise BenchError(f"{owner}: {name} takes {_WANTS[kind]}, got {raw!r}")
