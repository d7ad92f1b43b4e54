"""What a round of the loop (``bench.decoding``) holds between its device work and its host work:
the rows in flight, the ONE device->host copy a round takes, and what the host reads of it.

Apart from the loop so that the chain round (``bench.verify_step``), the tree round
(``bench.tree_round``) and tracing (``bench.trace``) share these types without importing the loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from bench.decode_stats import DecodeStats


def round_counts(drafted: int, accepted: int, eos_at: int | None) -> tuple[int, int]:
    """(drafted, accepted) to count for a round, given where in its emitted tokens (accepted
    drafts, then the verifier's token) an EOS ended the example. Drafted tokens after an accepted
    EOS were never emitted: the round counts as if the draft had stopped at the EOS."""
    if eos_at is not None and eos_at < accepted:
        return eos_at + 1, eos_at + 1
    return drafted, accepted


@dataclass
class Row:
    """One example in flight: its tokens, budget, generator and counters."""

    index: int
    seq: list[int]
    budget: int
    generator: torch.Generator
    stats: DecodeStats
    out: list[int] = field(default_factory=list)
    weights: list[Tensor] = field(default_factory=list)
    trace: list[tuple[Any, ...]] = field(default_factory=list)


@dataclass
class RoundHost:
    """What a round reads on the host, row by row: everything the loop's ``_emit`` appends and
    counts, from the round's ONE device->host copy (``to_host``), taken once the verdicts are on the device."""

    accepted: list[int]  # drafts kept (a tree round: the accepted path's length)
    next_token: list[int]  # the verifier's token after them
    drafts: list[list[int]]  # the row's drafted tokens (a tree round: the tokens along its path)
    logp: list[list[float]]  # the target's temperature-1 log p of each token the row may emit
    excess: list[list[float]]  # log p_T(y) + H(p_T) of each of them (DecodeStats.target_divergence)
    # A chain round's verified rows: [expected acceptance, bias] per position (none drafted: absent).
    sums: dict[int, list[list[float]]] = field(default_factory=dict)
    depth: list[int] | None = None  # a tree round: the levels each row drafted (None: a chain)
    paths: list[list[int]] = field(default_factory=list)  # a tree round: each path's node indices
    probs: dict[str, list[Any]] | None = None  # tracing: p and q of drafted and emitted tokens


def to_host(parts: dict[str, Tensor]) -> dict[str, list[Any]]:
    """Every tensor of ``parts`` in ONE device->host copy: one wait for the device, not one per
    tensor. Each comes back as its rows' flat lists (a 1-D tensor: its values), an integer tensor
    as ints. float64 holds every integer below 2**53 and every float32 exactly, so the values are
    the ones each tensor's own ``tolist`` gives."""
    flat = torch.cat([t.flatten().double() for t in parts.values()]).tolist()
    out: dict[str, list[Any]] = {}
    at = 0
    for name, t in parts.items():
        values = flat[at : at + t.numel()]
        at += t.numel()
        if not t.is_floating_point():
            values = [int(v) for v in values]
        width = math.prod(t.shape[1:])
        rows = [values[i * width : (i + 1) * width] for i in range(t.shape[0])] if t.dim() > 1 else None
        out[name] = values if rows is None else rows
    return out
