"""The judge family: a learned head says which drafted tokens may differ from the target's.

Judge Decoding (Bachmann et al., ICLR 2025, arXiv 2501.19309; no public code): a drafted token is
kept if SD keeps it OR sigmoid(judge) > delta (delta = 1 is SD). AutoJudge (Garipov et al.,
NeurIPS 2025, arXiv 2504.20039; garipovroma/autojudge eval/generation_utils.py, greedy): keep a
drafted token if it equals the target's argmax or the head's p(important) < tau. SelfJudge
(arXiv 2510.02329) runs the same rule with labels from the target's own likelihood. Here the head
outputs p(important) (``Round.weights``; a trained head on the quantile scale of its validation
scores, bench.verifier_heads.JudgeHead, so tau is a quantile level as in AutoJudge's threshold sweep,
src/train_head_gsm8k.py) and tau is the knob: tau = 0 keeps nothing SD would
reject (lossless SD, token for token), tau = 1 keeps every drafted token whose p(important) is
below 1. Judge Decoding's delta is 1 - tau on a head that outputs p(fine) = 1 - p(important).

At temperature > 0 SD's test runs first and the judge only where it rejects: drafted x is kept with
probability min(1, p(x)/q(x)) + (1 - min(1, p(x)/q(x))) * [p(important) < tau], and a rejection
resamples from SD's residual norm(max(0, p - q)).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from bench.errors import BenchError
from bench.verifier_heads import check_features
from bench.verifiers.base import Calibration, Round, Verifier


def judge_keeps(r: Round, tau: float) -> Tensor:
    """[B, N] bool: where the judge calls the drafted token unimportant (p(important) < tau)."""
    if r.weights is None:
        raise BenchError("judge: no per-token scores; it needs its trained head (--head PATH, or --grid baselines trains one)")
    return r.weights < tau


@dataclass(frozen=True)
class Judge(Verifier):
    """The rule with a head trained elsewhere (Judge Decoding's hand labels have no recipe here):
    SD's test, then the judge for the tokens SD rejects."""

    name: ClassVar[str] = "judge"
    needs_hidden: ClassVar[bool] = True
    draft_reads: ClassVar[frozenset[str]] = frozenset({"q"})
    sweep: ClassVar[Mapping[str, Sequence[Any]]] = {"tau": (0.1, 0.3, 0.5, 0.7, 0.9)}
    shorthand: ClassVar[Mapping[str, str]] = {"tau": "tau"}
    style: ClassVar[Mapping[str, Any]] = {"marker": "P", "color": "#56B4E9"}
    # tau = 0 is SD; acceptance rises with tau (more tokens called unimportant).
    calibration: ClassVar[Calibration] = Calibration("tau", 0.0, 1.0, rising=True, lossless=0.0)
    order: ClassVar[int] = 6
    # The miner that labels the tokens its head is trained on; None: trained elsewhere.
    miner: ClassVar[str | None] = None
    tau: float = 0.5
    features: str = "target"

    def __post_init__(self) -> None:
        if not 0 <= self.tau <= 1:
            raise BenchError(f"{self.name}: tau must be in [0, 1], got {self.tau}")
        check_features(self.features)

    def recipe(self) -> tuple[str, dict[str, Any]] | None:
        """The classifier recipe with this judge's miner and features (none for the bare rule)."""
        return ("classifier", {"miner": self.miner, "features": self.features}) if self.miner else None

    def reads(self) -> frozenset[str]:
        """A target-only judge reads nothing of the draft but its law: it runs on prompt lookup."""
        return self.draft_reads | ({"hidden"} if self.features == "draft+target" else set())

    def rule(self, r: Round) -> tuple[Tensor, Tensor]:
        q = r.proposal
        mass = torch.minimum(q, r.p)
        drafted = r.draft.unsqueeze(-1)
        kept = torch.where(judge_keeps(r, self.tau).unsqueeze(-1), q.gather(-1, drafted), mass.gather(-1, drafted))
        return mass.scatter(-1, drafted, kept), (r.p - q).clamp_min(0)

    def greedy_target(self, r: Round) -> Tensor:
        """Exact match with the target's argmax, or the judge keeps the drafted token."""
        own = torch.zeros_like(r.p).scatter_(-1, r.draft.unsqueeze(-1), 1.0)
        return torch.where(judge_keeps(r, self.tau).unsqueeze(-1), own, r.p)


@dataclass(frozen=True)
class AutoJudge(Judge):
    """AutoJudge: labels mined by answer change (the autojudge miner), the authors' logistic
    classifier on the draft's and target's states (their DD-DT)."""

    name: ClassVar[str] = "autojudge"
    baseline: ClassVar[bool] = True
    style: ClassVar[Mapping[str, Any]] = {"marker": "P", "color": "#56B4E9"}
    order: ClassVar[int] = 6
    miner: ClassVar[str | None] = "autojudge"
    features: str = "draft+target"


@dataclass(frozen=True)
class SelfJudge(Judge):
    """SelfJudge: labels from the target's own likelihood (the selfjudge miner), any task, and its
    authors' fit (its head holds their 20 validation-quantile thresholds, so tau picks one of them);
    target states only, so it runs on model-free drafts (prompt lookup)."""

    name: ClassVar[str] = "selfjudge"
    baseline: ClassVar[bool] = True
    style: ClassVar[Mapping[str, Any]] = {"marker": "X", "color": "#997700"}
    order: ClassVar[int] = 7
    miner: ClassVar[str | None] = "selfjudge"
