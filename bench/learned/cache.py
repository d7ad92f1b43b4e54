"""The head cache: a trained head lives in a folder keyed by what made it (bench.learned.recipes'
``head_key``); a run that finds the folder's head uses it, one that finds a checkpoint there resumes
it. A run calls ``provide_heads`` to train the learned families it lacks (``--no-train``: skip
them), lending it the pair and engine it decodes with (``Host``: the runner), so nothing is loaded
or built twice."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Protocol

from bench.config import RunConfig
from bench.drafters import DRAFTERS, canonical_drafter, parse_drafter
from bench.engines import EngineFactory
from bench.learned import Recipe
from bench.learned.recipes import cached_folder, head_key, recipe_of
from bench.learned.train import train_loaded, train_split
from bench.pairs import Pair
from bench.tasks import resolve_task
from bench.verifiers import verifier_class


class Host(Protocol):
    """What a run lends the heads it trains: its engine factory and its pairs, loaded once for
    the training and the decoding (bench.runner.Runner is one)."""

    engine: EngineFactory

    def pair(self, cfg: RunConfig) -> Pair: ...


def is_trained(folder: Path) -> bool:
    """A finished head (its card says so), not a checkpoint a killed run left to resume."""
    card = folder / "card.json"
    return card.is_file() and bool(json.loads(card.read_text()).get("trained"))


def provide_heads(configs: list[RunConfig], host: Host | None, log: Callable[[str], None]) -> list[RunConfig]:
    """Every configuration of a learned method given no head gets its cached head, trained first
    with ``host``'s pair and engine where missing (with no host, `run --no-train`, it is dropped
    instead, with one line saying so)."""
    out, skipped = [], set()
    for cfg in configs:
        cls = verifier_class(cfg.method)
        recipe = recipe_of(cfg.method, cfg.params) if cls.needs_hidden and cfg.head is None else None
        if recipe is None:
            out.append(cfg)
            continue
        settings = _drafts(recipe, cfg)
        recipe = recipe.configure(**settings)
        data = cfg.source()
        folder = cached_folder(head_key(cfg.method, recipe, cfg.task, cfg.pair, data))
        if not is_trained(folder):
            if host is None:
                skipped.add(cls.name)
                continue
            log(f"{cls.name}: no trained head for {cfg.task} on {cfg.pair}; training it into {folder}")
            train_task = train_split(resolve_task(cfg.task), data, recipe, log)
            train_loaded(cfg.method, recipe, train_task, host.pair(cfg), folder, host.engine, log)
        out.append(replace(cfg, head=str(folder)))
    if skipped:
        log(f"--no-train: skipped the learned families {', '.join(sorted(skipped))} (no trained head cached)")
    return out


def _drafts(recipe: Recipe, cfg: RunConfig) -> dict[str, Any]:
    """A judge is asked about the drafts its configuration decodes with: it mines those (the draft
    model's at the decoding temperature, or lookup's); DIVERSED's head reads them in its rounds."""
    known = recipe.takes()
    name, params = parse_drafter(cfg.drafter)
    # A lookup tree's first tokens are lookup's matches: its judge mines lookup's proposals.
    lookup = {k: params[k] for k in ("ngram", "min_ngram", "match")} if name == "lookup_tree" else None
    drafter = canonical_drafter("lookup:" + ",".join(f"{k}={v}" for k, v in lookup.items()) if lookup else cfg.drafter)
    settings: dict[str, Any] = {"drafter": drafter} if "drafter" in known else {}
    if "draft_len" in known:  # DIVERSED's rollouts run the configuration's rounds
        settings["draft_len"] = cfg.draft_len
    if "draft_temperature" in known:
        settings["draft_temperature"] = 0.0 if DRAFTERS[parse_drafter(drafter)[0]].deterministic else cfg.temperature
    return settings

