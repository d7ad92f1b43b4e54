"""Prompt lookup: drafts copied from the row's own text, no model (Saxena 2023; transformers'
``prompt_lookup_num_tokens``, vLLM's ``ngram``).

The row's last n tokens (n from ``ngram`` down to 1, the longest that matches first) are looked up
in its prompt and emitted tokens; the tokens that followed an earlier occurrence, up to N, are the
draft. ``match=first`` takes the earliest occurrence with a continuation, as transformers'
``PromptLookupCandidateGenerator`` does; ``match=recent`` the latest. A continuation is cut before
its first EOS, as transformers cuts it; ``min_ngram`` (vLLM's ``prompt_lookup_min``) ignores shorter
matches. A row whose lookup finds nothing drafts nothing: its
round is a plain target step of width 1. ``schedule=heuristic`` adapts each row's N as transformers'
assistant schedule does (+2 after a round that kept every draft, -1 otherwise, never below 1),
capped at --draft-len, the widths a compiled engine declared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from bench.drafters.base import Draft, Drafter, DraftRow
from bench.engines import to_device
from bench.errors import BenchError

MATCHES = ("first", "recent")
SCHEDULES = ("constant", "heuristic")


def lookup(
    ids: Sequence[int],
    ngram: int,
    tokens: int,
    match: str = "first",
    eos: frozenset[int] = frozenset(),
    min_ngram: int = 1,
) -> list[int]:
    """The draft for one row whose tokens so far are ``ids``: transformers' rule (the longest
    n-gram <= ``ngram`` that occurs earlier, its first occurrence with a continuation), or the most
    recent occurrence with ``match='recent'``; n-grams shorter than ``min_ngram`` do not count
    (vLLM's ``prompt_lookup_min``). Empty when nothing matches, or when the continuation starts
    with an EOS (transformers then drafts nothing too)."""
    a = np.asarray(ids, dtype=np.int64)
    length = len(a)
    for size in range(min(ngram, length - 1), min_ngram - 1, -1):
        windows = np.lib.stride_tricks.sliding_window_view(a[: length - 1], size)  # each has a successor
        found = np.flatnonzero((windows == a[length - size :]).all(axis=1))
        if not len(found):
            continue
        start = int(found[0] if match == "first" else found[-1]) + size
        chosen = a[start : min(start + tokens, length)].tolist()
        cut = next((j for j, t in enumerate(chosen) if t in eos), len(chosen))
        return chosen[:cut]
    return []


@dataclass
class PromptLookup(Drafter):
    """Drafts by prompt lookup; deterministic, so its law is the point mass on its token."""

    name: ClassVar[str] = "lookup"
    supplies: ClassVar[frozenset[str]] = frozenset({"q"})
    deterministic: ClassVar[bool] = True
    ngram: int = 2  # transformers' max_matching_ngram_size default (generate's `or 2`)
    min_ngram: int = 1  # vLLM's prompt_lookup_min; transformers matches down to 1
    match: str = "first"
    schedule: str = "constant"

    def __post_init__(self) -> None:
        if isinstance(self.ngram, bool) or not isinstance(self.ngram, int) or self.ngram < 1:
            raise BenchError(f"lookup: ngram must be an integer >= 1, got {self.ngram!r}")
        if isinstance(self.min_ngram, bool) or not isinstance(self.min_ngram, int) or not 1 <= self.min_ngram <= self.ngram:
            raise BenchError(f"lookup: min_ngram must be an integer in [1, ngram={self.ngram}], got {self.min_ngram!r}")
        if self.match not in MATCHES:
            raise BenchError(f"lookup: match must be one of {', '.join(MATCHES)}, got {self.match!r}")
        if self.schedule not in SCHEDULES:
            raise BenchError(f"lookup: schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        self.device = torch.device("cpu")
        self.eos: frozenset[int] = frozenset()
        self.lengths: dict[int, int] = {}  # a row's current N under the heuristic schedule
        self.most = 1  # --draft-len: the widest draft the target's widths allow

    def bind(self, device: torch.device, eos: frozenset[int], draft_len: int) -> PromptLookup:
        """Where its tokens go, which tokens end an example, and N (a schedule's ceiling)."""
        self.device, self.eos, self.most = device, eos, draft_len
        return self

    def target_widths(self, cap: int) -> tuple[int, ...]:
        """A round in which no row found a continuation is a width-1 step; others are at most
        N + 1 wide (a compiled engine pads a shorter draft to it)."""
        return (1, cap + 1)

    def start(self, rows: int) -> None:
        self.lengths = {}

    def draft(self, rows: Sequence[DraftRow], caps: Sequence[int]) -> Draft:
        found = [
            lookup(r.seq, self.ngram, min(cap, self.lengths.get(r.index, cap)), self.match, self.eos, self.min_ngram)
            if cap
            else []
            for r, cap in zip(rows, caps)
        ]
        width = max(map(len, found))
        tokens = to_device([f + [0] * (width - len(f)) for f in found], self.device)
        return Draft(tokens=tokens.view(len(rows), width), counts=[len(f) for f in found])

    def observe(self, rows: Sequence[DraftRow], drafted: Sequence[int], accepted: Sequence[int]) -> None:
        if self.schedule != "heuristic":
            return
        for r, n, acc in zip(rows, drafted, accepted):
            if n:  # transformers' rule, on rounds that drafted
                current = self.lengths.get(r.index, self.most)
                self.lengths[r.index] = min(self.most, current + 2) if acc == n else max(1, current - 1)
