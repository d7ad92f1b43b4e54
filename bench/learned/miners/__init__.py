"""Label recipes for judges: which drafted tokens are important, mined with no annotation.

A miner is a function of an ``Oracle`` (greedy continuations and teacher-forced scores of the
target, the draft's argmax), so that a test can hand it a fake target whose greedy continuation
it controls. It returns ``Mined`` labels: the context, the draft's token there and the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from torch import Tensor


@dataclass(frozen=True)
class Mined:
    context: list[int]  # prompt and completion before the token
    token: int  # the draft's token at that position
    important: bool


class Oracle(Protocol):
    eos: frozenset[int]

    def greedy(self, ids: list[int], max_new: int) -> list[int]:
        """The target's greedy continuation of ``ids``: up to ``max_new`` tokens, ending at an EOS."""

    def draft_argmax(self, ids: list[int]) -> list[int]:
        """The draft's argmax at every position of ``ids`` (entry i predicts ids[i + 1])."""

    def target_logprobs(self, ids: list[int]) -> Tensor:
        """[len(ids), V] the target's log-probabilities at every position, teacher-forced."""


def mismatches(oracle: Oracle, prompt: list[int], completion: list[int], start: int) -> list[tuple[int, int]]:
    """(position in the completion, draft token) wherever the draft's argmax differs, from ``start``."""
    argmax = oracle.draft_argmax(prompt + completion)
    n = len(prompt)
    return [(t, argmax[n - 1 + t]) for t in range(start, len(completion)) if argmax[n - 1 + t] != completion[t]]
