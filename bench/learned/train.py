"""Training one head: `diversed-bench train` and ``api.train`` (and ``--grid baselines`` through
``cache.provide_heads``) come here. The recipe is the one the method's verifier names
(bench.learned.recipes), with `train`'s flags applied; it trains on the task's train split."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench.engines import make_engine
from bench.errors import BenchError
from bench.learned import TrainJob
from bench.learned.recipes import cached_folder, head_key, recipe_of
from bench.pairs import load_pair, resolve_pair
from bench.tasks import Task, default_data, resolve_task
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
    recipe = recipe_of(method, dict(params or {}))
    if recipe is None:
        raise BenchError(f"{verifier_class(method).name} learns nothing: it declares no recipe (Verifier.recipe)")
    recipe = recipe.configure(**{k: v for k, v in settings.items() if v is not None})
    factory = make_engine(engine, verbose, log)
    spec = resolve_task(task)
    if "fewshot_split" not in spec.dataset:
        raise BenchError(f"task {spec.name} has no train split to train a head on; pick another task")
    source = data or default_data(spec.name, resolve_pair(pair).kind)
    train_task = Task(spec, source, split=spec.dataset["fewshot_split"])
    available = len(train_task.rows())
    wanted = recipe.settings().get("num_prompts", recipe.settings().get("questions", 0))
    if wanted > available:
        log(
            f"train: {spec.name}'s train split in {source} has {available} prompts, fewer than "
            f"--num-prompts {wanted}: training on all {available}"
        )
    loaded = load_pair(pair, device=device, dtype=dtype)
    name = verifier_class(method).name
    if output_dir:
        folder = Path(output_dir)
    elif name == "diversed":  # a head on EAGLE drafts gets its own folder: it reads other states
        drafts = recipe.settings().get("drafter", "model").partition(":")[0]
        folder = Path("heads") / "-".join([spec.name, loaded.spec.name] + ([drafts] if drafts != "model" else []))
    else:
        folder = cached_folder(head_key(method, recipe, task, pair, source))
    job = TrainJob(loaded, train_task, source, folder, log, factory)
    log(f"train {name} ({recipe.name}) on {spec.name}, pair {loaded.spec.name}: {recipe.plan(job)}")
    recipe.train(job)
    return folder
