"""Training one head: `diversed-bench train` and ``api.train`` come here by name (``train_head``
resolves the task and pair, loads the pair and builds the engine); a run's missing heads
(``cache.provide_heads``) come with the pair and engine the run decodes with (``train_loaded``).
The recipe is the one the method's verifier names (bench.learned.recipes), with `train`'s flags
applied; it trains on the task's train split."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench.engines import EngineFactory, make_engine
from bench.errors import BenchError
from bench.learned import Recipe, TrainJob
from bench.learned.recipes import cached_folder, head_key, recipe_of
from bench.pairs import Pair, load_pair, resolve_pair
from bench.tasks import Task, TaskSpec, default_data, resolve_task
from bench.verifiers import verifier_class


def train_head(
    *,
    task: str,
    pair: str = "tiny",
    method: str = "diversed",
    params: Mapping[str, Any] | None = None,
    data: str | None = None,
    output_dir: Path | str | None = None,
    device: str = "auto",
    dtype: str | None = None,
    engine: str = "eager",
    verbose: bool = False,
    log: Callable[[str], None] = print,
    **settings: Any,
) -> Path:
    """Train ``method``'s head on ``task``'s train split, ``settings`` (`train`'s flags; None: not
    given, the recipe's own default) applied to its recipe; resumes from the folder's checkpoint.
    The folder defaults to heads/TASK-PAIR (heads/TASK-PAIR-eagle on EAGLE drafts) for DIVERSED
    and to the head cache for other methods.
    Returns the head's folder."""
    recipe = configured(method, params, settings)
    spec = resolve_task(task)
    source = data or default_data(spec.name, resolve_pair(pair).kind)
    train_task = train_split(spec, source, recipe, log)  # refused before the models load
    loaded = load_pair(pair, device=device, dtype=dtype)
    name = verifier_class(method).name
    if output_dir:
        folder = Path(output_dir)
    elif name == "diversed":  # a head on EAGLE drafts gets its own folder: it reads other states
        drafts = recipe.settings().get("drafter", "model").partition(":")[0]
        folder = Path("heads") / "-".join([spec.name, loaded.spec.name] + ([drafts] if drafts != "model" else []))
    else:
        folder = cached_folder(head_key(method, recipe, task, pair, source))
    train_loaded(method, recipe, train_task, loaded, folder, make_engine(engine, verbose, log), log)
    return folder


def configured(method: str, params: Mapping[str, Any] | None, settings: Mapping[str, Any]) -> Recipe:
    """The recipe ``method``'s verifier names, with the ``settings`` given (not None) applied;
    refused for a method that learns nothing."""
    recipe = recipe_of(method, dict(params or {}))
    if recipe is None:
        raise BenchError(f"{verifier_class(method).name} learns nothing: it declares no recipe (Verifier.recipe)")
    return recipe.configure(**{k: v for k, v in settings.items() if v is not None})


def train_split(spec: TaskSpec, source: str, recipe: Recipe, log: Callable[[str], None]) -> Task:
    """``spec``'s train split from ``source`` (a head never trains on the judged split), said in one
    line when it holds fewer prompts than the recipe asks for."""
    if "fewshot_split" not in spec.dataset:
        raise BenchError(f"task {spec.name} has no train split to train a head on; pick another task")
    train_task = Task(spec, source, split=spec.dataset["fewshot_split"])
    available = len(train_task.rows())
    wanted = recipe.settings().get("num_prompts", recipe.settings().get("questions", 0))
    if wanted > available:
        log(
            f"train: {spec.name}'s train split in {source} has {available} prompts, fewer than "
            f"--num-prompts {wanted}: training on all {available}"
        )
    return train_task


def train_loaded(
    method: str, recipe: Recipe, train_task: Task, pair: Pair, folder: Path, engine: EngineFactory,
    log: Callable[[str], None],
) -> None:  # fmt: skip
    """Train ``recipe`` into ``folder`` on ``train_task`` (``train_split``'s), with a pair already
    loaded and an engine factory already built: a run that lacks a head trains it on its own."""
    job = TrainJob(pair, train_task, train_task.data, folder, log, engine)
    log(f"train {verifier_class(method).name} ({recipe.name}) on {train_task.name}, pair {pair.spec.name}: "
        f"{recipe.plan(job)}")
    recipe.train(job)
