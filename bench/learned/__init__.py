"""Learned verifiers: what trains a verifier's head, behind one small interface.

A verifier that learns names its recipe in ``Verifier.recipe()``: a registered name with settings,
``("reinforce", {})`` (a plug-in may return a ``Recipe`` object instead), resolved here through
``recipes.RECIPES``, so a verifier imports nothing of training. `diversed-bench train --method M`
(``train.train_head``) and a run lacking a head (``cache.provide_heads``, with the run's pair and
engine) call ``recipe.train(job)``
and read the head it wrote into ``job.folder``. One file each: ``reinforce`` (DIVERSED's REINFORCE
with the acceptance regulariser), ``classifier`` (mined labels + the judges' logistic fit),
``features`` (hidden states at a drafted token), ``shared`` (a question's prompt run once),
``logistic`` (the fit), ``miners/`` (label recipes), ``recipes`` (the registry, and the key a head
is cached under), ``train`` (one head) and ``cache`` (the heads a run lacks). The heads themselves
run at decode time: bench.verifier_heads.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from bench.engines import EagerEngine, EngineFactory
from bench.pairs import Pair
from bench.tasks import Task


@dataclass
class TrainJob:
    """What a recipe trains on: a loaded pair, the task's train split (never the judged split),
    where the data came from, the head's folder (a checkpoint there is resumed) and a log."""

    pair: Pair
    task: Task
    data: str
    folder: Path
    log: Callable[[str], None] = print
    engine: EngineFactory = EagerEngine


class Recipe(ABC):
    """How a head is trained. Subclasses are frozen dataclasses: their fields are the settings that
    change the head (they key its cache)."""

    name: ClassVar[str]

    @classmethod
    def of(cls, **settings: Any) -> Recipe:
        """The recipe with these settings, as a verifier names them in ``Verifier.recipe()``."""
        return cls(**settings)

    @abstractmethod
    def settings(self) -> dict[str, Any]:
        """Every setting that changes the head, as plain data."""

    def takes(self) -> set[str]:
        """The settings it takes, those a grid fills from a configuration (``drafter``,
        ``draft_temperature``) included even where ``settings`` leaves a default out."""
        return set(self.settings())

    @abstractmethod
    def configure(self, **settings: Any) -> Recipe:
        """This recipe with `train`'s flags applied; a flag it does not take is refused."""

    @abstractmethod
    def plan(self, job: TrainJob) -> str:
        """One line saying how much work training is (printed before it starts)."""

    @abstractmethod
    def train(self, job: TrainJob) -> dict[str, Any]:
        """Train (resuming what ``job.folder`` holds) and write the head there; returns its card."""
