"""What one decoded example returns: its tokens and counters (docs/spec.md §3, the decoding loop).

Kept apart from the loop (``bench.decoding``) because records, progress, conversations, the
lm-eval backend and ``speed`` read the counters without decoding anything: they import this
module, not the loop and its models.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class DecodeStats:
    """Counters of one decoded example. Per-position lists have one entry per draft position."""

    prompt_tokens: int
    draft_len: int
    new_tokens: int = 0
    rounds: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    drafting_rounds: int = 0  # rounds that drafted at least one token (a lookup may find none)
    verified_nodes: int = 0  # drafted tokens the target verified (a chain's tokens, a tree's nodes)
    target_logprob_sum: float = 0.0  # sum over emitted tokens of the target's log p at temperature 1
    # sum over emitted tokens of log p_T(y) + H(p_T), p_T the target's law at the sampling temperature
    target_divergence_sum: float = 0.0
    target_forwards: int = 0
    draft_forwards: int = 0
    wall_time_s: float = 0.0  # NaN when decoded in a batch of more than one row
    prefill_time_s: float = 0.0
    batch_size: int = 1
    kv_cache_bytes: int = 0  # KV caches of both models for the whole batch the row was decoded in
    drafted_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)
    # Positions the verifier actually reached (up to and including the first rejection, and never
    # past an EOS that ended the example), the sums over them of expected acceptance 1 - TV(q, pi)
    # and bias TV(pi, p), and DIVERSED's weight at each of them.
    reached_per_position: list[int] = field(default_factory=list)
    expected_acceptance_sum: list[float] = field(default_factory=list)
    bias_sum: list[float] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)

    def record_round(
        self, drafted: int, accepted: int, expected: Sequence[float], bias: Sequence[float]
    ) -> None:
        """Count one round of ``drafted`` tokens of which the first ``accepted`` were kept, adding
        the verifier's expected acceptance and bias at the positions it reached."""
        self.record_tree_round(drafted, drafted, accepted)  # a chain: a tree one node wide
        for i in range(min(drafted, accepted + 1)):
            self.reached_per_position[i] += 1
            self.expected_acceptance_sum[i] += expected[i]
            self.bias_sum[i] += bias[i]

    def record_tree_round(self, nodes: int, depth: int, accepted: int) -> None:
        """Count one tree round: ``nodes`` verified, the deepest ``depth`` levels down, ``accepted``
        kept along one path. Per position is per depth: a level drafted, a level kept (the tree
        rules report no expected acceptance or bias per node: no position is counted reached)."""
        self.rounds += 1
        self.drafting_rounds += nodes > 0
        self.drafted_tokens += nodes
        self.verified_nodes += nodes
        self.accepted_tokens += accepted
        for i in range(depth):
            self.drafted_per_position[i] += 1
            self.accepted_per_position[i] += i < accepted

    def pool(self, other: DecodeStats) -> None:
        """Add another example's counters to these (per-position lists entry by entry), so that the
        rates below are pooled over both: accepted / drafted over all drafts, not a mean of rates."""
        counts = (
            "new_tokens",
            "rounds",
            "drafted_tokens",
            "verified_nodes",
            "accepted_tokens",
            "target_forwards",
            "draft_forwards",
            "target_logprob_sum",
            "target_divergence_sum",
        )
        for name in counts:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        lists = ("drafted_per_position", "accepted_per_position", "reached_per_position")
        for name in (*lists, "expected_acceptance_sum", "bias_sum"):
            mine, theirs = getattr(self, name), getattr(other, name)
            mine.extend([0] * (len(theirs) - len(mine)))
            for i, v in enumerate(theirs):
                mine[i] += v

    @property
    def acceptance_rate(self) -> float:
        """vLLM's draft acceptance rate: accepted / drafted."""
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else float("nan")

    @property
    def acceptance_length(self) -> float:
        """Tokens emitted per round, bonus included: tokens per target forward (each round is one;
        the prompt's prefill is not counted), Spec-Bench's mean accepted tokens."""
        return self.new_tokens / self.rounds if self.rounds else float("nan")

    @property
    def nodes_per_round(self) -> float:
        """Drafted tokens the target verified per round (its forward's width less one): a tree
        verifies more nodes than it can accept; compare with tokens per forward."""
        return self.verified_nodes / self.rounds if self.rounds else float("nan")

    @property
    def drafting_share(self) -> float:
        """Share of rounds that drafted: below 1 where a drafter found nothing to propose."""
        return self.drafting_rounds / self.rounds if self.rounds else float("nan")

    @property
    def target_loglik(self) -> float:
        """The target's mean log-likelihood per emitted token (log p at temperature 1): a fidelity
        measure that needs no gold answer (a lossless method's expectation is the target's own)."""
        return self.target_logprob_sum / self.new_tokens if self.new_tokens else float("nan")

    @property
    def target_divergence(self) -> float:
        """Mean over emitted tokens of log p_T(y) + H(p_T): E_y~p[log p(y)] = -H(p), so its mean is 0
        when the tokens are drawn from the target's own law (lossless sampling); below 0 where a
        verifier lets through tokens the target finds unlikely. The fidelity axis with a known zero."""
        return self.target_divergence_sum / self.new_tokens if self.new_tokens else float("nan")

    @property
    def expected_acceptance(self) -> float:
        """Mean 1 - TV(q, pi) over reached positions; compare with accepted / reached."""
        reached = sum(self.reached_per_position)
        return sum(self.expected_acceptance_sum) / reached if reached else float("nan")

    @property
    def bias(self) -> float:
        """Mean TV(pi, p) over reached positions."""
        reached = sum(self.reached_per_position)
        return sum(self.bias_sum) / reached if reached else float("nan")


@dataclass
class Generation:
    """Token ids produced for one prompt (EOS included when it ended the example) and stats;
    ``trace`` holds one tuple of ``bench.trace.TRACE_FIELDS`` per emitted token when the decoder
    traces."""

    token_ids: list[int]
    stats: DecodeStats
    trace: list[tuple[Any, ...]] | None = None
