"""Accepting every draft: the top anchor of every frontier (bench/lossless.py).

Not a method anyone proposes: the trivial rule at acceptance 1, open to every verifier on the same
drafts as lossless SD is at the bottom (a per-request mix with it is attainable whatever the rule).
With it every family's frontier spans the same acceptance range, [SD's, 1], so two families are
compared over one range, not over the ranges their sweeps happened to reach (docs/compare.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from bench.verifiers.base import Round, Verifier


@dataclass(frozen=True)
class AcceptAll(Verifier):
    """Keep every drafted token: m = the proposal the drafts came from, r = 0. The emitted law is
    the proposal's, the bonus token after a round is the target's; acceptance is 1."""

    name: ClassVar[str] = "accept_all"
    style: ClassVar[Mapping[str, Any]] = {"marker": "x", "color": "#999999"}
    order: ClassVar[int] = 90

    def rule(self, r: Round) -> tuple[Tensor, Tensor]:
        return r.proposal, torch.zeros_like(r.proposal)

    def greedy_target(self, r: Round) -> Tensor:
        # The drafted token itself, whatever drafted it (a model's argmax or a lookup's match).
        return torch.zeros_like(r.p).scatter_(-1, r.draft.unsqueeze(-1), 1.0)
