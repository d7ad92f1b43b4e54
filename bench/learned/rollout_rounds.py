"""Where each row of a DIVERSED training rollout stands in decoding's rounds (docs/spec.md §3):
the position of the next token in its round, so that the draft side reads the states decoding
would hand the weight head there (an EAGLE head feeds its own output back after a round's first
draft), and, in the decoding-matched rollout, where decoding emits a token from p instead of pi.

A rollout draws every head position's token y from pi = w p + (1 - w) q, which is the law of the
token decoding emits there. Whether decoding would have accepted the draft at that position is then
drawn given y: accepted with probability min(q(y), pi(y)) / pi(y). The pair (y, accepted) has
decoding's joint law (accepted with y: min(q, pi)(y); rejected with y: pi(y) - min(q, pi)(y), the
residual's mass), so the round ends where decoding's would. An accepted token is one the draft
could propose (q(y) > 0): the token an EAGLE head feeds back is always in its vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from bench.errors import BenchError

# authors: every token from pi (comeusr/diversed's rollouts); decoding: decoding's rounds, the
# token after a round whose drafts were all accepted from p (the bonus), as `run` emits it.
ROLLOUTS = ("authors", "decoding")
BONUS = 0  # a row's position when its next token is decoding's bonus token, drawn from p


def check_rollout(rollout: str) -> None:
    if rollout not in ROLLOUTS:
        raise BenchError(f"--rollout must be one of {', '.join(ROLLOUTS)}, got {rollout!r}")


def accept(pi_y: Tensor, q_y: Tensor, generators: list[torch.Generator]) -> Tensor:
    """[B] bool: whether decoding accepted the draft at a position whose emitted token y has
    probabilities ``pi_y`` and ``q_y``; one uniform from each row's generator."""
    u = torch.cat([torch.rand(1, generator=g, device=g.device) for g in generators])
    return u * pi_y < torch.minimum(q_y, pi_y)


@dataclass
class Rounds:
    """Each row's position in its round: 1 at a round's first draft, k at its k-th, ``BONUS``
    where decoding draws from p. ``tracked`` False (the authors' rollout on a draft model, whose q
    and states do not depend on the round): every token is a round's first, and nothing is drawn,
    so such rollouts are the ones this harness drew before rounds existed."""

    draft_len: int
    bonus: bool  # the decoding-matched rollout
    tracked: bool
    budget: int  # the rollout's token budget: decoding drafts at most budget - emitted - 1 tokens
    pos: dict[int, int] = field(default_factory=dict)
    cap: dict[int, int] = field(default_factory=dict)

    def positions(self, alive: list[int], emitted: list[list[int]]) -> list[int]:
        """The live rows' positions for their next token (a row not seen yet opens a round)."""
        for b in alive:
            if b not in self.pos:
                self._open(b, len(emitted[b]))
        return [self.pos[b] for b in alive]

    def verdicts(
        self, positions: list[int], pi_y: Tensor, q_y: Tensor, generators: list[torch.Generator]
    ) -> list[bool]:
        """Whether decoding accepted each live row's draft (``accept``), drawn only where rounds
        are tracked and only at drafted positions (a bonus row's is not read)."""
        kept = [True] * len(positions)
        rows = [j for j, k in enumerate(positions) if k != BONUS] if self.tracked else []
        if rows:
            drawn = accept(pi_y[rows], q_y[rows], [generators[j] for j in rows]).tolist()
            for j, verdict in zip(rows, drawn):
                kept[j] = verdict
        return kept

    def advance(self, alive: list[int], accepted: list[bool], emitted: list[list[int]]) -> None:
        """After the live rows' tokens (``emitted`` already holds them): the next position."""
        for b, kept in zip(alive, accepted):
            k = self.pos[b]
            if k != BONUS and kept and k < self.cap[b]:
                self.pos[b] = k + 1
            elif k != BONUS and kept and self.bonus:
                self.pos[b] = BONUS
            else:  # a rejection, a bonus token, or (the authors' rollout) a round's last draft
                self._open(b, len(emitted[b]))

    def _open(self, b: int, emitted: int) -> None:
        if not self.tracked:
            self.pos[b], self.cap[b] = 1, 1
            return
        cap = min(self.draft_len, self.budget - emitted - 1) if self.bonus else self.draft_len
        self.pos[b], self.cap[b] = (1, cap) if cap > 0 else (BONUS, 0)
