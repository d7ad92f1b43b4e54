"""The lossy acceptance rules that serving engines ship, as verifiers of the same template.

- ``typical``: Medusa's typical acceptance (Cai et al. 2024) as vLLM's V0 ``TypicalAcceptanceSampler``.
- ``threshold``: SGLang's ``speculative_accept_threshold_single`` / ``_acc`` rule of its
  ``tree_speculative_sampling_target_only`` kernel, on a chain of drafted tokens.
- ``relaxed``: TensorRT-LLM's relaxed acceptance for MTP (``relaxed_topk``, ``relaxed_delta``).

Each keeps its engine's parameter names and defaults; docs/DESIGN.md cites the source files read
and says what the harness does where an engine defines its rule only for greedy or for sampling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor

from bench.errors import BenchError
from bench.verifiers.base import Calibration, Round, Verifier

# vLLM adds this inside the log of its entropy, so the rule is reproduced with it.
VLLM_ENTROPY_EPS = 1e-5
# SGLang's launcher clamps threshold_acc from below before the kernel divides by it.
SGLANG_MIN_THRESHOLD_ACC = 1e-9


def one_hot_argmax(p: Tensor) -> Tensor:
    """[..., V] -> the one-hot distribution on argmax p (the engines' greedy replacement token)."""
    return torch.zeros_like(p).scatter_(-1, p.argmax(-1, keepdim=True), 1.0)


def _check_finite(method: str, param: str, value: float, low: float, high: float = math.inf) -> None:
    if not (math.isfinite(value) and low <= value <= high):
        interval = f"[{low:g}, {high:g}]" if math.isfinite(high) else f">= {low:g}"
        raise BenchError(
            f"{method}: {param} must be {'in ' if math.isfinite(high) else ''}{interval}, got {value}"
        )


@dataclass(frozen=True)
class TypicalAcceptance(Verifier):
    """Medusa typical acceptance (vLLM V0): keep x iff p(x) > min(eps, alpha*exp(-H(p))), else argmax p."""

    name: ClassVar[str] = "typical"
    shipped_in: ClassVar[str | None] = "vllm_v0_typical"
    tree_rule: ClassVar[str | None] = "target_only"
    sweep: ClassVar[Mapping[str, Sequence[Any]]] = {"posterior_alpha": (0.1, 0.3, 0.5, 0.7)}
    shorthand: ClassVar[Mapping[str, str]] = {"posterior_threshold": "eps", "posterior_alpha": "alpha"}
    style: ClassVar[Mapping[str, Any]] = {"marker": "P", "color": "#56B4E9"}
    baseline: ClassVar[bool] = True
    # eps and alpha together, alpha = sqrt(eps) as Medusa's defaults (0.09, 0.3): alpha alone stops
    # moving once alpha * exp(-H) exceeds eps. eps = 0 keeps every token p gives mass to.
    calibration: ClassVar[Calibration] = Calibration(
        "posterior_threshold", 0.0, 1.0, rising=False, ties={"posterior_alpha": 0.5}
    )
    order: ClassVar[int] = 6
    posterior_threshold: float = 0.09
    posterior_alpha: float = 0.3

    def __post_init__(self) -> None:
        _check_finite("typical", "posterior_threshold", self.posterior_threshold, 0.0)
        _check_finite("typical", "posterior_alpha", self.posterior_alpha, 0.0)

    def accept_set(self, p: Tensor) -> Tensor:
        """[B, N, V] bool: tokens whose target probability clears the entropy-dependent threshold."""
        entropy = -(p * (p + VLLM_ENTROPY_EPS).log()).sum(-1, keepdim=True)
        threshold = (self.posterior_alpha * (-entropy).exp()).clamp(max=self.posterior_threshold)
        return p > threshold

    def rule(self, r: Round) -> tuple[Tensor, Tensor]:
        return r.proposal * self.accept_set(r.p), one_hot_argmax(r.p)

    def greedy_target(self, r: Round) -> Tensor:
        return r.p


@dataclass(frozen=True)
class ThresholdAcceptance(Verifier):
    """SGLang's thresholds: keep x iff p(x) >= single or u <= p(x)/acc; else sample p without x."""

    name: ClassVar[str] = "threshold"
    shipped_in: ClassVar[str | None] = "sglang_threshold"
    tree_rule: ClassVar[str | None] = "sglang"
    sweep: ClassVar[Mapping[str, Sequence[Any]]] = {"speculative_accept_threshold_acc": (0.2, 0.4, 0.6, 0.8)}
    shorthand: ClassVar[Mapping[str, str]] = {
        "speculative_accept_threshold_single": "single",
        "speculative_accept_threshold_acc": "acc",
    }
    style: ClassVar[Mapping[str, Any]] = {"marker": "X", "color": "#999999"}
    baseline: ClassVar[bool] = True
    # acc = 1 (with single = 1) keeps x with probability p(x): SD on a greedy draft.
    calibration: ClassVar[Calibration] = Calibration(
        "speculative_accept_threshold_acc", 0.01, 1.0, rising=False, lossless=1.0
    )
    order: ClassVar[int] = 7
    draft_policy: ClassVar[str] = "greedy"  # EAGLE drafts the top-k of the draft's softmax
    speculative_accept_threshold_single: float = 1.0
    speculative_accept_threshold_acc: float = 1.0

    def __post_init__(self) -> None:
        for param in ("speculative_accept_threshold_single", "speculative_accept_threshold_acc"):
            _check_finite("threshold", param, getattr(self, param), 0.0, 1.0)

    def accept_prob(self, p: Tensor) -> Tensor:
        """[B, N, V]: probability that drafted token v is kept (the coin is uniform on [0, 1))."""
        acc = max(self.speculative_accept_threshold_acc, SGLANG_MIN_THRESHOLD_ACC)
        return torch.where(p >= self.speculative_accept_threshold_single, 1.0, (p / acc).clamp(max=1))

    def rule(self, r: Round) -> tuple[Tensor, Tensor]:
        """SGLang resamples a rejected x from norm(p with x removed). That residual depends on x;
        its average over rejected drafts, r(v) = p(v) * sum_{x != v} q(x)(1 - a(x)) / (1 - p(x)),
        gives every emitted token the same law, which is all a position's output depends on."""
        a, q = self.accept_prob(r.p), r.proposal
        rejected = torch.where(a < 1, q * (1 - a) / (1 - r.p).clamp_min(torch.finfo(r.p.dtype).tiny), 0.0)
        residual = (r.p * (rejected.sum(-1, keepdim=True) - rejected)).clamp_min(0)
        return q * a, residual

    def greedy_target(self, r: Round) -> Tensor:
        return r.p


@dataclass(frozen=True)
class RelaxedAcceptance(Verifier):
    """TensorRT-LLM relaxed acceptance: keep x iff it is among the target's relaxed_topk tokens
    with p(x) >= max p - relaxed_delta (temperature-1 p); else argmax p."""

    name: ClassVar[str] = "relaxed"
    shipped_in: ClassVar[str | None] = "tensorrt_llm_relaxed"
    tree_rule: ClassVar[str | None] = "target_only"
    sweep: ClassVar[Mapping[str, Sequence[Any]]] = {"relaxed_topk": (4,), "relaxed_delta": (0.05, 0.1, 0.2, 0.4)}
    shorthand: ClassVar[Mapping[str, str]] = {"relaxed_topk": "topk", "relaxed_delta": "delta"}
    style: ClassVar[Mapping[str, Any]] = {"marker": "h", "color": "#F0E442", "markeredgecolor": "black"}
    baseline: ClassVar[bool] = True
    # delta = 0 keeps only the target's argmax; delta = 1 every one of the top-k.
    calibration: ClassVar[Calibration] = Calibration("relaxed_delta", 0.0, 1.0, rising=True)
    order: ClassVar[int] = 8
    draft_policy: ClassVar[str] = "greedy"  # MTP drafts the argmax of the draft's logits
    relaxed_topk: int = 1
    relaxed_delta: float = 0.0

    def __post_init__(self) -> None:
        if (
            isinstance(self.relaxed_topk, bool)
            or not isinstance(self.relaxed_topk, int)
            or self.relaxed_topk < 1
        ):
            raise BenchError(f"relaxed: relaxed_topk must be an integer >= 1, got {self.relaxed_topk!r}")
        _check_finite("relaxed", "relaxed_delta", self.relaxed_delta, 0.0)

    def candidates(self, p1: Tensor) -> Tensor:
        """[B, N, V] bool: the top-1 token plus the next of the top relaxed_topk within relaxed_delta of it."""
        values, index = p1.topk(min(self.relaxed_topk, p1.shape[-1]), dim=-1)
        keep = values >= values[..., :1] - self.relaxed_delta
        keep[..., 0] = True
        return torch.zeros_like(p1, dtype=torch.bool).scatter_(-1, index, keep)

    def rule(self, r: Round) -> tuple[Tensor, Tensor]:
        p1 = r.p1
        return r.proposal * self.candidates(p1), one_hot_argmax(p1)

    def greedy_target(self, r: Round) -> Tensor:
        p1 = r.p1
        drafted = r.draft.unsqueeze(-1)
        kept = self.candidates(p1).gather(-1, drafted)
        return torch.where(kept, torch.zeros_like(p1).scatter_(-1, drafted, 1.0), one_hot_argmax(p1))
