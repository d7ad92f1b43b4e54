"""Two training-free lossy rules newer than the paper's baselines, in the same template.

- ``fuzzy``: Fuzzy Speculative Decoding (Holsman, Huang and Dhingra, "Fuzzy Speculative Decoding
  for a Tunable Accuracy-Runtime Tradeoff", Findings of ACL 2025, arXiv 2502.20704), in the form
  its authors proposed for TensorRT-LLM (NVIDIA/TensorRT-LLM PR #12853, issue #10481): SD's test
  first, and a token SD rejects is still kept when the divergence between the two models' next-token
  distributions is at most T, so T = 0 is SD.
- ``mentored``: mentored decoding (Tran-Thien, "An optimal lossy variant of speculative decoding",
  2023; proof and code in github.com/vivien000/mentored_decoding, ``proof.pdf``): per position, the
  acceptance that maximises the acceptance rate under a budget D on KL(p || emitted), so D = 0 is SD.

docs/spec.md §2 states both rules exactly; docs/methods.md and docs/DESIGN.md say which sources
were read and what the harness decides where the authors leave it open.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from bench.errors import BenchError
from bench.verifiers.base import Calibration, MixtureVerifier, Round, Verifier

# Bisection steps for mentored decoding's alpha on [0, 1]: 2^-60 is below float64's resolution of 1.
MENTORED_STEPS = 60


def _check_param(method: str, param: str, value: float, low: float, high: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and low <= value <= high):
        interval = f"[{low:g}, {high:g}]" if math.isfinite(high) else f">= {low:g}"
        raise BenchError(f"{method}: {param} must be {interval}, got {value!r}")


def js_divergence_bits(p: Tensor, q: Tensor) -> Tensor:
    """[..., V] x 2 -> [...]: the Jensen-Shannon divergence in bits, normalised to [0, 1].

    JS(p, q) = (KL(p || m) + KL(q || m)) / 2 with m = (p + q) / 2, log base 2 (1 for disjoint
    supports). Zero-probability tokens contribute nothing (0 log 0 = 0)."""
    p, q = p.double(), q.double()
    m = 0.5 * (p + q)
    tiny = torch.finfo(m.dtype).tiny
    half = lambda a: torch.xlogy(a, a / m.clamp_min(tiny)).sum(-1)  # noqa: E731
    return (0.5 * (half(p) + half(q)) / math.log(2)).clamp(0.0, 1.0)


@dataclass(frozen=True)
class FuzzySD(MixtureVerifier):
    """Fuzzy SD (Holsman et al. 2025), SD's test first: keep a drafted token if SD keeps it or
    JS(p1, q1) <= T, where p1, q1 are the two models' temperature-1 distributions.

    At a position with JS <= T every drafted token is kept, so the emitted token follows the
    proposal; elsewhere SD runs unchanged (its residual norm(max(0, p - q)) after a rejection), so
    the emitted token follows p. The rule is therefore the mixture pi = q if JS <= T else p
    (docs/spec.md §2), which the template's m = min(q, pi), r = max(0, pi - q) implements exactly.
    Under greedy decoding a drafted token is kept iff it is argmax p or JS <= T.
    """

    name: ClassVar[str] = "fuzzy"
    # The divergence reads the draft model's temperature-1 distribution: a lookup's point mass is no
    # model's distribution, and its JS to p would only restate p(x), so prompt lookup is refused.
    draft_reads: ClassVar[frozenset[str]] = frozenset({"q", "q_logits"})
    sweep: ClassVar[Mapping[str, Sequence[Any]]] = {"threshold": (0.05, 0.1, 0.2, 0.4)}
    shorthand: ClassVar[Mapping[str, str]] = {"threshold": "T"}
    style: ClassVar[Mapping[str, Any]] = {"marker": "p", "color": "#882255"}
    baseline: ClassVar[bool] = True
    # T = 0 is SD; JS in bits never exceeds 1, so T = 1 keeps every drafted token.
    calibration: ClassVar[Calibration] = Calibration("threshold", 0.0, 1.0, rising=True, lossless=0.0)
    order: ClassVar[int] = 9
    threshold: float = 0.2

    def __post_init__(self) -> None:
        _check_param("fuzzy", "threshold", self.threshold, 0.0, 1.0)

    def fuzzy_keep(self, r: Round) -> Tensor:
        """[B, N] bool: positions where every drafted token is kept (JS(p1, q1) <= T)."""
        if self.threshold == 0:  # JS <= 0 only where p = q, where SD keeps everything anyway
            return torch.zeros(r.draft.shape, dtype=torch.bool, device=r.draft.device)
        return js_divergence_bits(r.p1, r.q1) <= self.threshold

    def pi(self, r: Round) -> Tensor:
        return torch.where(self.fuzzy_keep(r).unsqueeze(-1), r.proposal, r.p)


@dataclass(frozen=True)
class _MentoredSolution:
    """Mentored decoding's optimum at one alpha per position: the acceptance threshold alpha, the
    residual's beta and KL(p || emitted), each [B, N] (float64)."""

    alpha: Tensor
    beta: Tensor
    kl: Tensor


class _MentoredSolver:
    """The proof's closed forms (Tran-Thien 2023, proof.pdf §4), on tokens sorted by rho = p / q.

    The author writes p for the draft and q for the target; here p is the target and q the
    proposal, so the author's q_i / p_i is rho_i = p_i / q_i (infinite where q_i = 0 < p_i; 0 where
    p_i = 0). For alpha in (0, 1]:
      1 - R = sum_{rho <= alpha} q - sum_{rho <= alpha} p / alpha          (eq. 24)
      beta solves 1 - R = sum_i relu(p_i / beta - q_i)                     (eq. 27, 28)
      KL(p || pi) = ln(alpha) P(rho <= alpha) + sum_{alpha < rho < beta} p ln(p / q)
                    + ln(beta) P(rho >= beta)                              (summary of §4)
    """

    def __init__(self, p: Tensor, q: Tensor) -> None:
        p, q = p.double(), q.double()
        rho = torch.where(p > 0, p / q, torch.zeros_like(p))  # p / 0 = inf
        self.rho, order = rho.sort(-1)
        sp, sq = p.gather(-1, order), q.gather(-1, order)
        finite = torch.isfinite(self.rho) & (sp > 0)
        plogr = torch.where(finite, sp * self.rho.clamp_min(torch.finfo(p.dtype).tiny).log(), 0.0)
        pad = lambda x: torch.cat([torch.zeros_like(x[..., :1]), x.cumsum(-1)], -1)  # noqa: E731
        self.cum_p, self.cum_q, self.cum_plogr = pad(sp), pad(sq), pad(plogr)  # [..., V + 1], from the left
        self.tail_p = self.cum_p[..., -1:] - self.cum_p[..., :-1]  # sum over rho_i >= rho_j, [..., V]
        self.tail_q = self.cum_q[..., -1:] - self.cum_q[..., :-1]
        # g(rho_j) = sum_i relu(p_i / rho_j - q_i): 1 - R at beta = rho_j, non-increasing in j
        self.g = torch.where(self.rho > 0, self.tail_p / self.rho - self.tail_q, torch.inf)
        # KL(p || q), what keeping every drafted token costs: infinite where q misses p's support
        missing = torch.isinf(self.rho).any(-1)
        self.full_kl = torch.where(missing, torch.inf, self.cum_plogr[..., -1])

    def at(self, alpha: Tensor) -> _MentoredSolution:
        """The optimum's beta and KL at ``alpha`` [B, N] (every alpha in (0, 1])."""
        a = alpha.unsqueeze(-1)
        k = torch.searchsorted(self.rho.contiguous(), a.contiguous(), right=True)  # tokens with rho <= alpha
        p_low, q_low = self.cum_p.gather(-1, k), self.cum_q.gather(-1, k)
        rest = (q_low - p_low / a).clamp_min(0)  # 1 - R, eq. 24
        n = (self.g > rest).sum(-1, keepdim=True).clamp(max=self.rho.shape[-1] - 1)  # first of rho >= beta
        n = torch.maximum(n, k.clamp(max=self.rho.shape[-1] - 1))  # ties at alpha = beta = 1 only
        top_p, top_q = self.tail_p.gather(-1, n), self.tail_q.gather(-1, n)
        beta = top_p / (rest + top_q)  # eq. 27
        middle = self.cum_plogr.gather(-1, n) - self.cum_plogr.gather(-1, k)
        kl = p_low * a.log() + middle + torch.where(top_p > 0, top_p * beta.log(), 0.0)
        return _MentoredSolution(alpha, beta.squeeze(-1), kl.squeeze(-1))

    def solve(self, budget: float) -> _MentoredSolution:
        """The smallest alpha (most acceptance) whose KL is within ``budget``, by bisection on
        [0, 1]: KL falls as alpha rises (proof §6) and alpha = 1 (SD) costs nothing."""
        shape = self.rho.shape[:-1]
        low = torch.zeros(shape, dtype=torch.float64, device=self.rho.device)
        high = torch.ones_like(low)
        for _ in range(MENTORED_STEPS):
            mid = 0.5 * (low + high)
            ok = self.at(mid).kl <= budget
            high, low = torch.where(ok, mid, high), torch.where(ok, low, mid)
        return self.at(high)


@dataclass(frozen=True)
class MentoredDecoding(Verifier):
    """Mentored decoding (Tran-Thien 2023): per position, the acceptance probabilities r and
    residual s that maximise sum_x q(x) r(x) subject to KL(p || pi) <= D (proof.pdf eq. 1-4).

    The optimum (eq. 23, 26) accepts x with min(1, p(x) / (alpha q(x))) and resamples from
    norm(max(0, p / beta - q)), with alpha <= 1 <= beta set by D; so m = min(q, p / alpha) and
    r = max(0, p / beta - q), and the emitted token follows p / alpha where p / q <= alpha, q
    between, p / beta where p / q >= beta. Where KL(p || q) <= D every drafted token is kept.
    D = 0 gives alpha = beta = 1: SD. Under greedy decoding it is SD (exact match): the budget
    bounds a distribution, and greedy decoding emits none.
    """

    name: ClassVar[str] = "mentored"
    sweep: ClassVar[Mapping[str, Sequence[Any]]] = {"budget": (0.05, 0.1, 0.2, 0.5)}
    shorthand: ClassVar[Mapping[str, str]] = {"budget": "D"}
    style: ClassVar[Mapping[str, Any]] = {"marker": "d", "color": "#44AA99", "markeredgecolor": "black"}
    baseline: ClassVar[bool] = True
    # D = 0 is SD; acceptance rises with D until D >= KL(p || q) keeps everything (never, where q
    # misses tokens p can emit: KL(p || q) is then infinite).
    calibration: ClassVar[Calibration] = Calibration("budget", 0.0, 4.0, rising=True, lossless=0.0)
    order: ClassVar[int] = 10
    budget: float = 0.1

    def __post_init__(self) -> None:
        _check_param("mentored", "budget", self.budget, 0.0, math.inf)

    def solve(self, r: Round) -> tuple[_MentoredSolution, Tensor]:
        """The optimum per position and where KL(p || q) <= D keeps every drafted token."""
        solver = _MentoredSolver(r.p, r.proposal)
        return solver.solve(self.budget), solver.full_kl <= self.budget

    def rule(self, r: Round) -> tuple[Tensor, Tensor]:
        q, p = r.proposal, r.p
        if self.budget == 0:
            return torch.minimum(q, p), (p - q).clamp_min(0)
        best, keep_all = self.solve(r)
        a, b = best.alpha.unsqueeze(-1), best.beta.unsqueeze(-1)
        mass = torch.minimum(q.double(), p.double() / a)
        residual = (p.double() / b - q.double()).clamp_min(0)
        mass = torch.where(keep_all.unsqueeze(-1), q.double(), mass)
        residual = torch.where(keep_all.unsqueeze(-1), (p - q).clamp_min(0).double(), residual)
        return mass.to(p.dtype), residual.to(p.dtype)

    def greedy_target(self, r: Round) -> Tensor:
        return r.p
