"""The drafter interface: what proposes a round's tokens, apart from the loop that verifies them.

A drafter sees the rows in flight (their tokens so far and their generators) and a cap per row
(how many tokens the row may still draft without overshooting its budget), and returns a ``Draft``:
per row up to its cap tokens, and, when it is a model, the distributions they were drawn from.
What a drafter can give a verifier beyond the tokens is declared in ``supplies``: ``q`` (the law
the tokens came from; a deterministic drafter's is the point mass on its token), ``q_logits`` (a
draft model's scores) and ``hidden`` (its last hidden states). A verifier declares what it reads
(``Verifier.draft_reads``), and a pairing that cannot be served is refused before anything decodes.

The contract (docs/methods.md, adding a drafter): a drafter is a dataclass whose fields are its
spec's parameters (``NAME[:key=value,...]``), whose class attributes say what it is (``name``,
``help``, ``supplies``, ``models``, ``deterministic``, ``serves``, ``speed``), and whose one
``bind(ctx)`` takes what it may read of the run (``DraftContext``). Nothing else names it: the
registry, ``--drafter file.py:Class``, ``list``, head checks and ``speed`` read these.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, TypeVar

import torch
from torch import Tensor
from transformers import PreTrainedModel

from bench.distributions import Sampling
from bench.engines import EagerEngine, EngineFactory, ModelEngine, to_device
from bench.errors import BenchError

# What a drafter may supply besides its tokens (Verifier.draft_reads names the same).
DRAFT_OUTPUTS = ("q", "q_logits", "hidden")
# How a draft model picks its tokens: draws from its law q, or q's argmax (a verifier's default
# is its ``draft_policy``; a run may override it).
DRAFT_POLICIES = ("sample", "greedy")
# The models a drafter may read of its context (``Drafter.models``).
DRAFT_MODELS = ("draft", "target")
# How `speed` times a drafter (``Drafter.speed``): against transformers' assisted generation (the
# draft model), by its head's steps against the target's (EAGLE), or on a task's prompts against
# ar and transformers' prompt lookup (any other drafter).
SPEED_PAGES = ("assisted", "head", "task")


def check_draft_policy(policy: str) -> str:
    """``policy`` if it is one of ``DRAFT_POLICIES``; refused in one line otherwise."""
    if policy not in DRAFT_POLICIES:
        raise BenchError(f"--draft-policy takes {' or '.join(DRAFT_POLICIES)}, got {policy!r}")
    return policy


class DraftRow(Protocol):
    """What a drafter reads of a row in flight."""

    index: int  # the row's place in the batch it started in (stable while rows leave)
    seq: list[int]  # prompt and emitted tokens
    out: list[int]  # the emitted tokens (the response so far)
    generator: torch.Generator


@dataclass
class Draft:
    """One round's proposals for B rows: ``tokens`` [B, n] with row b's first ``counts[b]`` real
    (the rest padding, never verified); the model's laws [B, n, V] and hidden states when it has
    them (None from a deterministic drafter: its law is the point mass on the token)."""

    tokens: Tensor
    counts: list[int]
    q: Tensor | None = None
    q_logits: Tensor | None = None
    hidden: Tensor | None = None
    parents: Tensor | None = None  # [B, n] long: node j's parent, an earlier node index (0..j-1), or -1 for a child of the root (the row's last emitted token); None: a chain (parents[j] = j - 1). Nodes in topological order; row b's nodes j >= counts[b] are padding (parent -1), never verified.
    # Row b's draft forwards this round (docs/results-schema.md, ``draft_forwards``): the drafter
    # reports what it ran and the loop adds it to the row's counters. None: it ran no model (a
    # deterministic drafter's draft is free).
    forwards: list[int] | None = None


def packed(drafts: Sequence[tuple[list[int], list[int]]], device: torch.device) -> Draft:
    """One round's Draft from each row's (tokens, parents) of a deterministic drafter: right-padded
    to the widest row, parents None when every row is a chain (parents[j] = j - 1)."""
    width = max(len(tokens) for tokens, _ in drafts)
    tokens = to_device([t + [0] * (width - len(t)) for t, _ in drafts], device).view(len(drafts), width)
    counts = [len(t) for t, _ in drafts]
    if all(p == list(range(-1, len(p) - 1)) for _, p in drafts):
        return Draft(tokens=tokens, counts=counts)
    parents = to_device([p + [-1] * (width - len(p)) for _, p in drafts], device).view(len(drafts), width)
    return Draft(tokens=tokens, counts=counts, parents=parents)


@dataclass(frozen=True)
class DraftContext:
    """Everything a drafter may read of the run it drafts for, handed to ``Drafter.bind`` once:
    frozen, so that what a drafter depends on is this list and nothing else. A model it does not
    declare in ``Drafter.models`` may be None (a lookup runs on a pair without a draft model)."""

    draft: PreTrainedModel | None = None  # the pair's draft model
    target: PreTrainedModel | None = None  # the target (its layer states feed an EAGLE head)
    engine: EngineFactory = EagerEngine  # how the models it steps run (bench/engines)
    sampling: Sampling = Sampling()
    greedy: bool = False  # draft the argmax (greedy decoding, or the greedy draft policy)
    reads: frozenset[str] = frozenset()  # what the verifier reads of the draft (DRAFT_OUTPUTS)
    device: torch.device = torch.device("cpu")  # where the target reads its drafts
    eos: frozenset[int] = frozenset()  # the tokens that end an example
    draft_len: int = 1  # N, --draft-len: the most tokens (nodes) a round drafts
    method: str = ""  # the verifier's name, for refusals


D = TypeVar("D", bound="Drafter")


class Drafter(ABC):
    """Proposes tokens for a batch of rows; stateless across calls of ``generate_batch`` unless
    ``start`` resets per-row state. Subclasses are dataclasses of their spec's parameters."""

    name: ClassVar[str]
    # One line for `diversed-bench list` (its parameters and defaults are listed from its fields).
    help: ClassVar[str] = ""
    supplies: ClassVar[frozenset[str]] = frozenset()
    # The models of its context it reads (DRAFT_MODELS): bound without one, it is refused in one line.
    models: ClassVar[frozenset[str]] = frozenset()
    # The drafted tokens are a function of the tokens so far: no draws, a point-mass proposal.
    deterministic: ClassVar[bool] = False
    # Other drafters whose drafts a head trained on this one's drafts may be asked about (lookup's
    # judge serves the model-free drafters: their first tokens are lookup-like matches).
    serves: ClassVar[tuple[str, ...]] = ()
    # How `speed` times it (SPEED_PAGES).
    speed: ClassVar[str] = "task"

    def bind(self: D, ctx: DraftContext) -> D:
        """Take what it reads of the run (its models, engine, sampling, ...) before the first
        round; the default reads nothing (a drafter of the row's own tokens)."""
        return self

    @property
    def engines(self) -> list[ModelEngine]:
        """The engines of the models it steps: the loop starts, prefills, rolls back and selects them."""
        return []

    def target_widths(self, cap: int) -> tuple[int, ...]:
        """The target step widths the loop will use with drafts of at most ``cap`` tokens."""
        return (cap + 1,)

    def tree_widths(self, cap: int) -> tuple[int, ...]:
        """The token-tree widths (root and nodes) of its rounds with at most ``cap`` nodes, for a
        drafter whose drafts carry ``parents``; a chain drafter has none."""
        return ()

    def target_layers(self, num_layers: int) -> tuple[int, ...]:
        """The target's layer states it reads (transformers' ``hidden_states`` indices of a target
        with ``num_layers`` layers): the loop then hands it those of every token the target's cache
        keeps (``take_states``). None by default: a drafter that asks for none pays nothing."""
        return ()

    def take_states(self, rows: Sequence[DraftRow], states: Sequence[Tensor]) -> None:
        """``states[b]`` [k, len(target_layers) * H]: the target's states at the ``k`` tokens row
        b's target cache kept in the step just run (the prompt but its last token, then each
        round's last token and accepted drafts, in order), so that after each round the drafter has
        the states of every token of ``row.seq`` but the last."""

    def start(self, rows: int, max_len: int) -> None:
        """A new batch of ``rows`` rows begins, each at most ``max_len`` positions long (prompt,
        budget and a round's draft: what a drafter's own static buffers must hold)."""

    @abstractmethod
    def draft(self, rows: Sequence[DraftRow], caps: Sequence[int]) -> Draft:
        """Up to ``caps[b]`` tokens for row b (at least one cap is positive)."""

    def observe(self, rows: Sequence[DraftRow], drafted: Sequence[int], accepted: Sequence[int]) -> None:
        """The verdicts of the round just drafted (a schedule adapts its length to them)."""

    def finish(self, row: DraftRow) -> None:
        """Row ``row`` finished (``row.out`` is its whole response; called after the round it
        finished in, rows of one round in batch order): a drafter that learns across examples
        (SuffixDecoding's global tree) takes the response here."""
