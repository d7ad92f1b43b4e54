"""The one registry of recipes: a verifier names how its head is trained (``Verifier.recipe()``
returns ``(NAME, settings)``, or a plug-in's own ``Recipe``) and this file turns the name into the
recipe, so verifiers import nothing of training. Also the key a trained head is cached under: the
method, its recipe and settings, the task, the pair, the data and the harness's version."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from bench import __version__
from bench.errors import BenchError
from bench.fetch import cache_root
from bench.learned import Recipe
from bench.learned.classifier import ClassifierRecipe
from bench.learned.reinforce import ReinforceRecipe
from bench.plugins import Registry
from bench.verifiers import CALIBRATED, make_verifier, verifier_class

RECIPES: Registry[Recipe] = Registry("recipe", ReinforceRecipe, ClassifierRecipe)

# Raise when a recipe's output changes for the same settings (it keys every cached head).
HEAD_FORMAT = 3


def resolve_recipe(declared: Any, method: str) -> Recipe | None:
    """The recipe ``method``'s ``Verifier.recipe()`` declared: None, a Recipe object (a plug-in's
    own), or a registered name with its settings."""
    if declared is None or isinstance(declared, Recipe):
        return declared
    if not (isinstance(declared, tuple) and len(declared) == 2 and isinstance(declared[1], dict)):
        raise BenchError(f"{method}: recipe() must return (NAME, settings), a Recipe or None, got {declared!r}")
    name, settings = declared
    if name not in RECIPES:
        raise BenchError(f"{method}: recipe() names {name!r}; the recipes are {', '.join(sorted(RECIPES))}")
    try:
        return RECIPES[name].of(**settings)
    except TypeError as exc:
        raise BenchError(f"{method}: the {name} recipe refuses the settings {settings} ({exc})") from None


def recipe_of(method: str, params: dict[str, Any] | None = None) -> Recipe | None:
    """The recipe a method's configuration trains its head with (None: it learns nothing)."""
    return resolve_recipe(make_verifier(method, **fixed(params or {})).recipe(), method)


def fixed(params: dict[str, Any]) -> dict[str, Any]:
    """The parameters that name a head: everything but values a calibration has yet to choose."""
    return {k: v for k, v in params.items() if v is not CALIBRATED}


def head_key(method: str, recipe: Recipe, task: str, pair: str, data: str) -> dict[str, Any]:
    """What made a head, as plain data: two heads with the same key are the same head."""
    return {
        "method": verifier_class(method).name,
        "recipe": recipe.name,
        "settings": recipe.settings(),
        "task": Path(task).stem,
        "pair": Path(pair).stem,
        "data": data,
        "harness": f"{__version__}/{HEAD_FORMAT}",
    }


def cached_folder(key: dict[str, Any]) -> Path:
    """The head cache's folder for a key (under the cache root, named so a person can read it)."""
    digest = hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return cache_root() / "heads" / f"{key['method']}-{key['task']}-{key['pair']}-{digest}"
