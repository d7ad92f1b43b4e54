"""Turning logits into the distributions every verifier reads.

Draft and target go through the SAME processing. Only the settings the user passes apply: a
model's own ``generation_config`` (hidden top-k/top-p defaults) is never consulted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from bench.engines.base import to_device
from bench.errors import BenchError


@dataclass(frozen=True)
class Sampling:
    """Temperature 0 means greedy decoding; top_k/top_p are off unless set."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise BenchError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise BenchError(f"top_k must be a positive integer or unset, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise BenchError(f"top_p must be in (0, 1] or unset, got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def process(logits: Tensor, sampling: Sampling) -> Tensor:
    """Probabilities after temperature, top-k and top-p, in float32.

    Under greedy decoding this is the temperature-1 softmax: the verifiers take the argmax of
    their verification distribution, which needs real probabilities to mix.
    """
    logits = logits.float()
    if sampling.greedy:
        return logits.softmax(-1)
    logits = logits / sampling.temperature
    if sampling.top_k is not None and sampling.top_k < logits.shape[-1]:
        kth = logits.topk(sampling.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p is not None and sampling.top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(-1)
        drop_sorted = sorted_probs.cumsum(-1) - sorted_probs > sampling.top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits.softmax(-1)


def tv(a: Tensor, b: Tensor) -> Tensor:
    """Total variation distance over the last dimension: sum_v max(0, a(v) - b(v))."""
    return (a - b).clamp_min(0).sum(-1)


def normalise(f: Tensor, fallback: Tensor) -> Tensor:
    """f / sum f, taking ``fallback`` where f has no mass (the event then has probability 0)."""
    total = f.sum(-1, keepdim=True)
    return torch.where(total > 0, f / total.clamp_min(torch.finfo(f.dtype).tiny), fallback)


# One generator for the whole batch, or one per row (leading dimension) so that a row's draws do not
# depend on which rows share its batch: row b then draws exactly what it would draw alone.
Generators = torch.Generator | Sequence[torch.Generator] | None


def uniform(rows: int, n: int, generator: Generators, device: torch.device) -> Tensor:
    """[rows, n] uniforms on [0, 1)."""
    if generator is None or isinstance(generator, torch.Generator):
        return torch.rand(rows, n, generator=generator, device=device)
    return torch.cat([torch.rand(1, n, generator=g, device=device) for g in generator])


def sample(probs: Tensor, generator: Generators) -> Tensor:
    """One draw per row of ``probs`` [..., V] -> [...]."""
    if generator is None or isinstance(generator, torch.Generator):
        flat = probs.reshape(-1, probs.shape[-1])
        return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])
    return torch.stack([sample(row, g) for row, g in zip(probs, generator, strict=True)])


def pick(probs: Tensor, generators: Sequence[torch.Generator | None], greedy: bool) -> Tensor:
    """A token per row of ``probs`` [B, V]; rows without a generator draw nothing (argmax).
    Under greedy decoding logits do as well: they share the argmax."""
    if greedy:
        return probs.argmax(-1)
    drawing = [i for i, g in enumerate(generators) if g is not None]
    drawn = [g for g in generators if g is not None]  # in the order of ``drawing``
    if len(drawing) == len(generators):
        return sample(probs, drawn)
    tokens = probs.argmax(-1)
    if drawing:
        at = to_device(drawing, probs.device)
        tokens[at] = sample(probs[at], drawn)
    return tokens
