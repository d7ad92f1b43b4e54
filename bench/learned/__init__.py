"""Learned verifiers: what trains a verifier's head, behind one small interface.

A verifier that learns returns a ``Recipe`` from ``Verifier.recipe()``; `diversed-bench train
--method M` and ``--grid baselines`` (bench.learned.cache) call ``recipe.train(job)`` and read the
head it wrote into ``job.folder``. One file each: ``reinforce`` (DIVERSED's REINFORCE with the
acceptance regulariser, bench.train), ``classifier`` (mined labels + the judges' logistic fit),
``features`` (hidden states at a drafted token), ``logistic`` (the fit), ``miners/`` (label
recipes), ``heads`` (the judge head) and ``cache`` (heads keyed by what made them).
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

    @abstractmethod
    def settings(self) -> dict[str, Any]:
        """Every setting that changes the head, as plain data."""

    @abstractmethod
    def configure(self, **settings: Any) -> Recipe:
        """This recipe with `train`'s flags applied; a flag it does not take is refused."""

    @abstractmethod
    def plan(self, job: TrainJob) -> str:
        """One line saying how much work training is (printed before it starts)."""

    @abstractmethod
    def train(self, job: TrainJob) -> dict[str, Any]:
        """Train (resuming what ``job.folder`` holds) and write the head there; returns its card."""
