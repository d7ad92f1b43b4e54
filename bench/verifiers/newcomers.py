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

# Bisection steps for mentored decoding's rejected mass on [0, SD's]: 2^-60 of it is below float64's
# resolution.
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
    """Mentored decoding's optimum at one rejected mass 1 - R per position: alpha, beta and
    KL(p || emitted), each [B, N] (float64)."""

    rest: Tensor  # 1 - R: the probability that the drafted token is rejected
    alpha: Tensor
    beta: Tensor
    kl: Tensor


class _MentoredSolver:
    """The proof's closed forms (Tran-Thien 2023, proof.pdf §4), on tokens sorted by rho = p / q.

    The author writes p for the draft and q for the target; here p is the target and q the
    proposal, so the author's q_i / p_i is rho_i = p_i / q_i (infinite where q_i = 0 < p_i; 0 where
    p_i = 0). The optimum is parametrised by its rejected mass 1 - R, which fixes both thresholds:
      1 - R = sum_i relu(q_i - p_i / alpha)                                (eq. 24, 25)
      1 - R = sum_i relu(p_i / beta - q_i)                                 (eq. 27, 28)
      KL(p || pi) = ln(alpha) P(rho <= alpha) + sum_{alpha < rho < beta} p ln(p / q)
                    + ln(beta) P(rho >= beta)                              (summary of §4)
    The proof assumes full supports (its code adds 1e-12 to both laws). Tokens p gives nothing
    (top-k, top-p) are the limit alpha -> 0: once every other drafted token is kept (1 - R below
    their q-mass Z0), the optimum keeps them in proportion 1 - (1 - R) / Z0; where they go is free,
    KL(p || pi) only sees how much mass they take.
    """

    def __init__(self, p: Tensor, q: Tensor) -> None:
        p, q = p.double(), q.double()
        rho = torch.where(p > 0, p / q, torch.zeros_like(p))  # p / 0 = inf
        self.rho, order = rho.sort(-1)
        sp, sq = p.gather(-1, order), q.gather(-1, order)
        finite = torch.isfinite(self.rho) & (sp > 0)
        plogr = torch.where(finite, sp * self.rho.clamp_min(torch.finfo(p.dtype).tiny).log(), 0.0)
        pad = lambda x: torch.cat([torch.zeros_like(x[..., :1]), x.cumsum(-1)], -1)  # noqa: E731
        self.cum_p, self.cum_q, self.cum_plogr = pad(sp), pad(sq), pad(plogr)  # [..., V + 1]: sums over i < j
        self.tail_p = self.cum_p[..., -1:] - self.cum_p[..., :-1]  # sums over i >= j, [..., V]
        self.tail_q = self.cum_q[..., -1:] - self.cum_q[..., :-1]
        positive = self.rho > 0
        # 1 - R at alpha = rho_j (h, non-decreasing in j) and minus it at beta = rho_j (-g, likewise),
        # made monotone against rounding so that a binary search finds each threshold's set
        h = torch.where(positive, self.cum_q[..., :-1] - self.cum_p[..., :-1] / self.rho, 0.0)
        g = torch.where(positive, self.tail_p / self.rho - self.tail_q, torch.inf)
        self.h, self.minus_g = h.cummax(-1).values.contiguous(), (-g).cummax(-1).values.contiguous()
        self.zero_q = torch.where(positive, 0.0, sq).sum(-1)  # Z0: q-mass on tokens p gives nothing
        self.sd_rest = (q - p).clamp_min(0).sum(-1)  # SD's rejected mass: alpha = beta = 1

    def at(self, rest: Tensor) -> _MentoredSolution:
        """The optimum that rejects ``rest`` [B, N] (between 0 and SD's)."""
        last = self.rho.shape[-1] - 1
        r = rest.unsqueeze(-1).contiguous()
        k = torch.searchsorted(self.h, r, right=True)  # the low set rho <= alpha: the first k tokens
        p_low, q_low = self.cum_p.gather(-1, k), self.cum_q.gather(-1, k)
        alpha = torch.where(p_low > 0, p_low / (q_low - r), 0.0)  # eq. 24 on that set
        n = torch.searchsorted(self.minus_g, -r).clamp(max=last)  # tokens with g > 1 - R come first
        n = torch.maximum(n, k.clamp(max=last))
        top_p, top_q = self.tail_p.gather(-1, n), self.tail_q.gather(-1, n)
        beta = top_p / (r + top_q)  # eq. 27 on the high set rho >= beta: tokens n, n + 1, ...
        middle = self.cum_plogr.gather(-1, n) - self.cum_plogr.gather(-1, k)
        low = torch.where(p_low > 0, p_low * alpha.clamp_min(torch.finfo(alpha.dtype).tiny).log(), 0.0)
        kl = low + middle + torch.where(top_p > 0, top_p * beta.log(), 0.0)
        return _MentoredSolution(rest, alpha.squeeze(-1), beta.squeeze(-1), kl.squeeze(-1))

    def solve(self, budget: float) -> _MentoredSolution:
        """The least rejected mass whose KL is within ``budget``: none where KL(p || q) is, else by
        bisection between 0 and SD's (KL falls as 1 - R rises, proof §4-6; SD's costs nothing)."""
        low, high = torch.zeros_like(self.sd_rest), self.sd_rest
        for _ in range(MENTORED_STEPS):
            mid = 0.5 * (low + high)
            ok = self.at(mid).kl <= budget
            high, low = torch.where(ok, mid, high), torch.where(ok, low, mid)
        keep_all = self.at(torch.zeros_like(high)).kl <= budget
        return self.at(torch.where(keep_all, 0.0, high))

    def mass(self, p: Tensor, q: Tensor, best: _MentoredSolution) -> Tensor:
        """m = q min(1, p / (alpha q)) (eq. 23); at alpha = 0 the tokens p gives nothing share
        what is left to accept."""
        p, q = p.double(), q.double()
        a = best.alpha.unsqueeze(-1)
        kept = torch.minimum(q, torch.where(a > 0, p / a.clamp_min(torch.finfo(a.dtype).tiny), torch.inf))
        share = (1 - best.rest / self.zero_q.clamp_min(torch.finfo(a.dtype).tiny)).clamp(0, 1)
        return torch.where(p > 0, kept, q * torch.where(a > 0, 0.0, share.unsqueeze(-1)))


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

    def rule(self, r: Round) -> tuple[Tensor, Tensor]:
        q, p = r.proposal, r.p
        if self.budget == 0:
            return torch.minimum(q, p), (p - q).clamp_min(0)
        solver = _MentoredSolver(p, q)
        best = solver.solve(self.budget)
        residual = (p.double() / best.beta.unsqueeze(-1) - q.double()).clamp_min(0)  # eq. 26
        return solver.mass(p, q, best).to(p.dtype), residual.to(p.dtype)

    def greedy_target(self, r: Round) -> Tensor:
        return r.p
