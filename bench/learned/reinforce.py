"""DIVERSED's recipe: REINFORCE on the ensemble policy with the acceptance regulariser, exactly
bench.train's Trainer (docs/spec.md §4); this file only puts it behind the Recipe interface."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

from bench.errors import BenchError
from bench.learned import Recipe, TrainJob
from bench.train import TrainConfig, Trainer, describe


@dataclass(frozen=True)
class ReinforceRecipe(Recipe):
    name: ClassVar[str] = "reinforce"
    config: TrainConfig = field(default_factory=TrainConfig)

    def settings(self) -> dict[str, Any]:
        return asdict(self.config)

    def configure(self, **settings: Any) -> ReinforceRecipe:
        if settings.pop("drafter", "model") != "model":
            raise BenchError("DIVERSED's head mixes the draft model's distribution with the target's: it trains on --drafter model only")
        unknown = set(settings) - {f.name for f in fields(TrainConfig)}
        if unknown:
            raise BenchError(f"the reinforce recipe takes no {sorted(unknown)}")
        return ReinforceRecipe(TrainConfig(**{**asdict(self.config), **settings}))

    def steps(self, job: TrainJob) -> int:
        prompts = min(self.config.num_prompts, len(job.task.rows()))
        return math.ceil(prompts / self.config.batch_size) * self.config.epochs

    def plan(self, job: TrainJob) -> str:
        c = self.config
        return (
            f"{self.steps(job)} REINFORCE steps of {c.batch_size} rollouts of up to {c.rollout_tokens} tokens "
            "(both models, a token a step); the first step's time gives the estimate"
        )

    def train(self, job: TrainJob) -> dict[str, Any]:
        trainer = Trainer(
            job.pair, job.task, self.config, job.folder, data=job.data,
            log=lambda r: job.log(describe(r)), engine=job.engine,
        )  # fmt: skip
        if line := trainer.resumed():
            job.log(line)
        return trainer.train()
