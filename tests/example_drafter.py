"""A user's own drafter, as docs/methods.md shows it: one dataclass in one file, no edit elsewhere.

Bigram chain: from a row's last token, follow the token that most recently came after each token
of the row so far (prompt and response), up to ``limit`` tokens, stopping before an EOS. No model:
its draft is a function of the row's tokens (``deterministic``), so its law is the point mass on
its token (``supplies`` q). Used as ``--drafter tests/example_drafter.py:BigramChain[:limit=4]``;
the contract tests (tests/decoding/test_contracts.py) run it under every rule, like a built-in.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from bench.drafters import Draft, DraftContext, Drafter, DraftRow
from bench.drafters.base import packed
from bench.errors import BenchError


@dataclass
class BigramChain(Drafter):
    name: ClassVar[str] = "bigram"
    help: ClassVar[str] = "follows each token's latest successor in the row, no model: limit tokens at most"
    supplies: ClassVar[frozenset[str]] = frozenset({"q"})  # the point mass on its token
    deterministic: ClassVar[bool] = True
    limit: int = 8  # most tokens a round drafts (and at most N = --draft-len)

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise BenchError(f"bigram: limit must be an integer >= 1, got {self.limit!r}")

    def bind(self, ctx: DraftContext) -> "BigramChain":
        self.device, self.eos = ctx.device, ctx.eos
        return self

    def target_widths(self, cap: int) -> tuple[int, ...]:
        return (1, cap + 1)  # a round where no row has a successor is one target step

    def draft(self, rows: Sequence[DraftRow], caps: Sequence[int]) -> Draft:
        chains = [self.chain(row.seq, min(cap, self.limit)) for row, cap in zip(rows, caps)]
        return packed([(c, list(range(-1, len(c) - 1))) for c in chains], self.device)

    def chain(self, seq: Sequence[int], n: int) -> list[int]:
        after = dict(zip(seq, seq[1:]))  # a later pair overwrites an earlier one
        out: list[int] = []
        token = seq[-1]
        while len(out) < n and token in after and after[token] not in self.eos:
            token = after[token]
            out.append(token)
        return out
