"""The six methods of the paper's comparison: ar, sd, lossy SD, SpecCascade, static ensemble, DIVERSED."""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor

from bench.distributions import Sampling, process, tv
from bench.errors import BenchError
from bench.verifiers.base import Calibration, MixtureVerifier, Round, Verifier


def check_unit(method: str, param: str, value: float, *, closed_low: bool = False) -> None:
    lo_ok = value >= 0 if closed_low else value > 0
    if not (lo_ok and value <= 1):
        interval = "[0, 1]" if closed_low else "(0, 1]"
        raise BenchError(f"{method}: {param} must be in {interval}, got {value}")


def mixture(r: Round, w: Tensor | float, mix: str) -> Tensor:
    """Ensemble of target and draft with target weight ``w`` (a float or [B, N]).

    ``prob`` is the paper's rule ``w*p + (1-w)*q`` on the processed distributions; with a drafter
    that has no model (prompt lookup) q is the point mass on the drafted token x, so x is kept with
    probability ``w*p(x) + (1-w)`` and a rejection resamples from p without x. ``logit``
    reproduces the authors' experiment code: it mixes the temperature-scaled logits, applying the
    temperature to the draft part twice (``w*l_p/T + (1-w)*l_q/T^2``), and only then applies
    top-k/top-p to the mixed scores. Truncating p and q before mixing would give another policy
    (TV up to 1 between the two).
    """
    if isinstance(w, Tensor):
        w = w.unsqueeze(-1)
    elif w == 1:
        return r.p
    if mix == "prob":
        return w * r.p + (1 - w) * r.q
    s = r.sampling
    assert r.p_logits is not None and r.q_logits is not None  # this mix reads logits: reads() declares them
    if s.greedy:
        return (w * r.p_logits.float() + (1 - w) * r.q_logits.float()).softmax(-1)
    t = s.temperature
    mixed = w * r.p_logits.float() / t + (1 - w) * r.q_logits.float() / t**2
    return process(mixed, Sampling(1.0, s.top_k, s.top_p))


MIX_MODES = ("prob", "logit")


def _check_mix(method: str, mix: str) -> None:
    if mix not in MIX_MODES:
        raise BenchError(f"{method}: mix must be one of {', '.join(MIX_MODES)}, got {mix!r}")


@dataclass(frozen=True)
class Autoregressive(MixtureVerifier):
    """The target alone: every round drafts nothing and emits one token from p."""

    name: ClassVar[str] = "ar"
    shipped_in: ClassVar[str | None] = "target_alone"
    default_run: ClassVar[bool] = True
    uses_draft: ClassVar[bool] = False
    style: ClassVar[Mapping[str, Any]] = {"marker": "s", "color": "#000000"}
    order: ClassVar[int] = 0

    def pi(self, r: Round) -> Tensor:
        return r.p


@dataclass(frozen=True)
class SpeculativeDecoding(MixtureVerifier):
    """Lossless speculative decoding (Leviathan et al. 2023): pi = p."""

    name: ClassVar[str] = "sd"
    shipped_in: ClassVar[str | None] = "lossless"
    default_run: ClassVar[bool] = True
    tree_rule: ClassVar[str | None] = "lossless"
    style: ClassVar[Mapping[str, Any]] = {"marker": "o", "color": "#0072B2"}
    order: ClassVar[int] = 1

    def pi(self, r: Round) -> Tensor:
        return r.p


@dataclass(frozen=True)
class LossySD(Verifier):
    """Leviathan's lenience: accept with min(1, p / (l q)), residual norm(max(0, p - q))."""

    name: ClassVar[str] = "lossy"
    aliases: ClassVar[tuple[str, ...]] = ("lenience",)
    default_run: ClassVar[bool] = True
    sweep: ClassVar[Mapping[str, Sequence[Any]]] = {"lenience": (0.1, 0.3, 0.6, 0.9)}
    shorthand: ClassVar[Mapping[str, str]] = {"lenience": "l"}
    style: ClassVar[Mapping[str, Any]] = {"marker": "v", "color": "#E69F00"}
    baseline: ClassVar[bool] = True
    # l = 1 is SD; acceptance rises as l falls (min(1, p / (l q)) -> 1).
    calibration: ClassVar[Calibration] = Calibration("lenience", 0.01, 1.0, rising=False, lossless=1.0)
    order: ClassVar[int] = 2
    lenience: float = 0.5

    def __post_init__(self) -> None:
        check_unit("lossy", "lenience", self.lenience)

    def rule(self, r: Round) -> tuple[Tensor, Tensor]:
        q = r.proposal
        return torch.minimum(q, r.p / self.lenience), (r.p - q).clamp_min(0)

    def greedy_target(self, r: Round) -> Tensor:
        return r.p


CASCADE_RULES = ("chow", "diff", "opt", "token")


@dataclass(frozen=True)
class SpecCascade(MixtureVerifier):
    """SpecCascade (Narasimhan et al., ICLR 2025): keep the draft's distribution or defer to p.

    Deferral reads temperature-1 probabilities; the mixture uses the processed ones.
    """

    name: ClassVar[str] = "cascade"
    aliases: ClassVar[tuple[str, ...]] = ("cascade_rule", "cascade_alpha")
    default_run: ClassVar[bool] = True
    # Deferral reads max q at temperature 1: always 1 for a point mass, so the draft would always be kept.
    draft_reads: ClassVar[frozenset[str]] = frozenset({"q", "q_logits"})
    sweep: ClassVar[Mapping[str, Sequence[Any]]] = {"cascade_alpha": (0.1, 0.3, 0.5, 0.7, 0.9)}
    shorthand: ClassVar[Mapping[str, str]] = {"cascade_rule": "", "cascade_alpha": "a"}
    style: ClassVar[Mapping[str, Any]] = {"marker": "D", "color": "#CC79A7"}
    baseline: ClassVar[bool] = True
    # alpha in [0, 1] is the paper's range; below 0 the same formula defers more, down to SD at -1
    # (opt at alpha = 0 still keeps the draft wherever it is more confident than the target).
    calibration: ClassVar[Calibration] = Calibration("cascade_alpha", -1.0, 1.0, rising=True, lossless=-1.0)
    order: ClassVar[int] = 3
    cascade_rule: str = "opt"
    cascade_alpha: float = 0.5

    def __post_init__(self) -> None:
        if self.cascade_rule not in CASCADE_RULES:
            raise BenchError(
                f"cascade: cascade_rule must be one of {', '.join(CASCADE_RULES)}, got {self.cascade_rule!r}"
            )
        if not -1 <= self.cascade_alpha <= 1:
            raise BenchError(f"cascade: cascade_alpha must be in [-1, 1], got {self.cascade_alpha}")

    def keep_draft(self, p1: Tensor, q1: Tensor) -> Tensor:
        """[B, N] bool: True where the deferral rule keeps the draft (chow, diff, opt)."""
        max_q, max_p = q1.max(-1).values, p1.max(-1).values
        if self.cascade_rule == "chow":
            return max_q >= 1 - self.cascade_alpha
        if self.cascade_rule == "diff":
            return max_q >= max_p - self.cascade_alpha
        return max_q >= max_p - self.cascade_alpha * tv(p1, q1)

    def reads(self) -> frozenset[str]:
        """The token rule reads only q (a point mass is kept iff its token is in A)."""
        return frozenset({"q"}) if self.cascade_rule == "token" else self.draft_reads

    def token_accept_set(self, p1: Tensor) -> Tensor:
        """[B, N, V] bool: the token rule's set A = {v : p(v) >= (1 - alpha) max p}."""
        return p1 >= (1 - self.cascade_alpha) * p1.max(-1, keepdim=True).values

    def pi(self, r: Round) -> Tensor:
        if self.cascade_rule == "token":
            a = self.token_accept_set(r.p1)
            kept = r.q * a
            return kept + (1 - kept.sum(-1, keepdim=True)) * r.p
        return torch.where(self.keep_draft(r.p1, r.q1).unsqueeze(-1), r.q, r.p)


@dataclass(frozen=True)
class StaticEnsemble(MixtureVerifier):
    """Static ensemble: pi = w p + (1 - w) q. Acceptance 1 - w TV(p, q), bias (1 - w) TV(p, q)."""

    name: ClassVar[str] = "ensemble"
    aliases: ClassVar[tuple[str, ...]] = ("target_weight", "mix")
    shipped_in: ClassVar[str | None] = "transformers_ensemble"
    default_run: ClassVar[bool] = True
    shade: ClassVar[str | None] = "target_weight"
    mixes_target: ClassVar[str | None] = "target_weight"
    draft_reads: ClassVar[frozenset[str]] = frozenset({"q"})  # mix=logit reads q_logits as well
    sweep: ClassVar[Mapping[str, Sequence[Any]]] = {"target_weight": (0.1, 0.3, 0.5, 0.7, 0.9)}
    shorthand: ClassVar[Mapping[str, str]] = {"target_weight": "w"}
    style: ClassVar[Mapping[str, Any]] = {"marker": "^", "color": "#009E73"}
    baseline: ClassVar[bool] = True
    # w = 1 is SD; w -> 0 accepts every draft (pi = q).
    calibration: ClassVar[Calibration] = Calibration("target_weight", 0.01, 1.0, rising=False, lossless=1.0)
    order: ClassVar[int] = 4
    target_weight: float = 0.7
    mix: str = "prob"

    def __post_init__(self) -> None:
        check_unit("ensemble", "target_weight", self.target_weight)
        _check_mix("ensemble", self.mix)

    def reads(self) -> frozenset[str]:
        return self.draft_reads | ({"q_logits"} if self.mix == "logit" else set())

    def pi(self, r: Round) -> Tensor:
        return mixture(r, self.target_weight, self.mix)


@dataclass(frozen=True)
class Diversed(MixtureVerifier):
    """DIVERSED: pi = w_t p + (1 - w_t) q with a per-token weight w_t from a trained head.

    Only the probability mixture: the head is trained on it (the reinforce recipe, docs/spec.md
    §4), so a logit-mixed policy would run weights learned for another policy.
    """

    name: ClassVar[str] = "diversed"
    default_run: ClassVar[bool] = True
    trains_in_run: ClassVar[bool] = False
    # The paper's method is a baseline family (issue 45): a plug-in is judged against its frontier.
    baseline: ClassVar[bool] = True
    needs_hidden: ClassVar[bool] = True
    draft_reads: ClassVar[frozenset[str]] = frozenset({"q", "hidden"})  # its head reads the draft's states
    style: ClassVar[Mapping[str, Any]] = {
        "marker": "*",
        "color": "#D55E00",
        "markersize": 15,
        "markeredgecolor": "black",
        "zorder": 5,
    }
    order: ClassVar[int] = 5
    # The knob: a shift of the head's logit, w = sigmoid(logit + shift). It moves every token's
    # weight the same way while keeping the head's ranking of which tokens need the target (what
    # training learned), costs no training per point (one head per regulariser weight would), and
    # spans the family from accepting every draft (w -> 0) to SD (w -> 1); shift 0 is the head as
    # trained. Acceptance 1 - w TV(p, q) falls as the shift rises.
    calibration: ClassVar[Calibration] = Calibration("shift", -8.0, 8.0, rising=False)
    sweep: ClassVar[Mapping[str, Sequence[Any]]] = {"shift": (-4.0, -2.0, -1.0, 0.0, 1.0, 2.0)}
    shorthand: ClassVar[Mapping[str, str]] = {"shift": "shift"}
    neutral: ClassVar[Mapping[str, Any]] = {"shift": 0.0}
    mix: str = "prob"
    shift: float = 0.0

    def recipe(self) -> tuple[str, dict[str, Any]]:
        """REINFORCE on this ensemble policy with the acceptance regulariser, at its defaults."""
        return ("reinforce", {})

    def __post_init__(self) -> None:
        _check_mix("diversed", self.mix)
        if self.mix != "prob":
            raise BenchError(
                "diversed: mix=logit is refused, the weight head is trained on the probability mixture "
                "w*p + (1-w)*q and would run a policy it was not trained for; use --mix prob"
            )

    def pi(self, r: Round) -> Tensor:
        if r.weights is None:
            raise BenchError("diversed: no per-token weights; pass a weight head (--head PATH)")
        w = r.weights
        if self.shift:
            w = torch.sigmoid(torch.logit(w.double(), eps=1e-12) + self.shift).to(w.dtype)
        return mixture(r, w, self.mix)
