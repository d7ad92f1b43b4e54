"""A learned verifier as a plug-in (tests/learned/test_learned.py, docs/methods.md): a judge whose labels
come from this file's own recipe. A drafted token is important where the target was confident of
its own token there (max p > ``cut``); the shared classifier and judge head do the rest.

    diversed-bench train --method tests/learned_verifier.py:ConfidentJudge --task arith --pair ref
"""

from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar

import torch

from bench.pairs import encode_prompt
from bench.learned import Recipe, TrainJob
from bench.learned.features import PairOracle, token_features
from bench.verifier_heads import JudgeHead
from bench.learned.logistic import fit_judge
from bench.learned.miners import Drafted, Greedy, Likelihood, mismatches
from bench.verifiers import Judge


@dataclass(frozen=True)
class ConfidenceRecipe(Recipe):
    name: ClassVar[str] = "confidence"
    questions: int = 8
    cut: float = 0.85

    def settings(self) -> dict[str, Any]:
        return asdict(self)

    def configure(self, **settings: Any) -> "ConfidenceRecipe":
        return replace(self, questions=settings.get("num_prompts", self.questions))

    def plan(self, job: TrainJob) -> str:
        return f"confidence labels on {self.questions} train questions"

    def train(self, job: TrainJob) -> dict[str, Any]:
        oracle, sites, y, group = PairOracle(job.pair), [], [], []
        for q, example in enumerate(job.task.examples(self.questions, 0)):
            prompt = encode_prompt(job.pair, example.prompt, False)
            (seq,) = oracle.greedy([Greedy(prompt, job.task.spec.max_new_tokens)])
            # The target's greedy token is its argmax: its log p there is the max log p.
            sure, proposed = oracle.likelihood([Likelihood(prompt + seq)])[0].exp(), oracle.drafted([Drafted(prompt + seq)])[0]
            for t, token in mismatches(proposed, prompt, seq, 0):
                sites.append((prompt + seq[:t], token))
                y.append(int(sure[len(prompt) - 1 + t] > self.cut))
                group.append(q)
        x = torch.stack(token_features(job.pair, "target", sites))
        fit = fit_judge(x, torch.tensor(y), torch.tensor(group))
        head = JudgeHead("target", *job.pair.hidden_sizes)
        head.mean.copy_(fit.mean), head.scale.copy_(fit.scale), head.weight.copy_(fit.weight)
        head.bias.fill_(fit.bias)
        card = {"pair": job.pair.spec.name, "task": job.task.name, "labels": len(y), "trained": True}
        head.save(job.folder, card)
        return card


@dataclass(frozen=True)
class ConfidentJudge(Judge):
    name: ClassVar[str] = "confident-judge"

    def recipe(self) -> Recipe:
        return ConfidenceRecipe()
