"""What a timed run's outputs are worth, beside its speed: the task's own quality against the
reference, the target's log-likelihood per token, and agreement with ``ar``'s outputs.

Every method, ``ar`` and transformers' prompt lookup included, is measured the same way on the first
repeat's outputs: the log-likelihood by one target forward over prompt + output (transformers
reports none of its own), the quality by the task's scorer (``Task.score``, as ``run`` scores a
row), agreement as the per-category report defines it (``prefix_share``: the share of ``ar``'s
text before the first difference).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import torch

from bench.pairs import Pair
from bench.reports.categories import prefix_share
from bench.tasks import Example, Task


@torch.inference_mode()
def target_loglik(pair: Pair, prompt: list[int], output: list[int]) -> float:
    """Sum over ``output`` of the target's temperature-1 log p of each token given the prompt and
    the output before it: the decoder's own ``target_logprob_sum``, computed in one forward."""
    if not output:
        return 0.0
    ids = torch.tensor([prompt + output], device=pair.device)
    logits = pair.target(ids).logits[0, len(prompt) - 1 : -1].float()
    picked = logits.gather(-1, ids[0, len(prompt) :].unsqueeze(-1)).squeeze(-1)
    return float((picked - logits.logsumexp(-1)).sum())


class Fidelity:
    """The task's quality of each output of the timed prompts, and the target's log-likelihood."""

    def __init__(self, pair: Pair, task: Task, examples: list[Example], prompts: list[list[int]]) -> None:
        self.pair, self.task, self.examples, self.prompts = pair, task, examples, prompts

    def texts(self, outputs: list[list[int]]) -> list[str]:
        return [self.pair.text(o) for o in outputs]

    def quality(self, texts: list[str]) -> tuple[float | None, str]:
        """Mean of the task's primary score over the prompts that have one (a Spec-Bench category
        without a reference scores NaN; None when none has), and its name: the task file's
        ``quality``, or the score a Spec-Bench category reads (``reference_metric``)."""
        scores = [self.task.score(e.doc, t) for e, t in zip(self.examples, texts)]
        known = [s["quality"] for s in scores if not math.isnan(s["quality"])]
        names = sorted({str(s["reference_metric"]) for s in scores if s.get("reference_metric")})
        return (statistics.mean(known) if known else None), "+".join(names) or self.task.spec.quality

    def __call__(self, outputs: list[list[int]], ar: list[list[int]], greedy: bool) -> dict[str, Any]:
        """Quality, log p per emitted token and (greedy) agreement with ``ar``'s outputs."""
        texts, ar_texts = self.texts(outputs), self.texts(ar)
        logp = sum(target_loglik(self.pair, p, o) for p, o in zip(self.prompts, outputs))
        quality, metric = self.quality(texts)
        out: dict[str, Any] = {
            "quality": quality,
            "quality_metric": metric,
            "target_loglik": logp / max(sum(map(len, outputs)), 1),
            "prefix_agreement": None,
            "same_as_ar": None,
        }
        if greedy:
            out["prefix_agreement"] = statistics.mean(prefix_share(t, a) for t, a in zip(texts, ar_texts))
            out["same_as_ar"] = statistics.mean(float(o == a) for o, a in zip(outputs, ar))
        return out
