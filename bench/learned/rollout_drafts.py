"""The draft side of DIVERSED's training rollouts (bench.learned.reinforce), one token a step: the
law q and the hidden state h_draft the weight head reads beside the target's p and state.

``ModelDrafts``: the pair's draft model stepped beside the target on the decoding loop's engines.
``EagleDrafts``: an EAGLE head fed the target's layer states as the decoding loop feeds it, through
``bench.drafters.eagle.EagleDrafter`` itself (``take_states``, ``catch_up``, ``advance``, ``law``,
``head_input``): at a round's first draft, the head catches up on the target's states of every
position since the last round, each with the token after it, and its output at the last one gives
q; at a round's k-th draft (k > 1) it feeds that output back with the token accepted before, as
its chain does (``bench.learned.rollout_rounds`` says where the rounds are). So a head trained here
reads, at every drafted position, the q and hidden states that `run --drafter eagle` hands it there.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch
from torch import Tensor
from transformers import PreTrainedModel

from bench.distributions import Sampling, process
from bench.drafters import DraftContext, parse_drafter
from bench.drafters.eagle import EagleDrafter, HeadCache, with_pair_head
from bench.engines import EngineFactory, ModelEngine
from bench.errors import BenchError
from bench.learned.rollout_rounds import BONUS
from bench.pairs import Pair, hidden_size

# The drafters a DIVERSED head trains on: those that supply q and hidden states on chains.
TRAINED_ON = ("model", "eagle")


def drafter_setting(spec: str) -> str:
    """A recipe's drafter as it keys the head: ``model``, or ``eagle:path=P`` (P empty: the pair's
    head); a chain's other parameters (tree, topk, ...) change nothing a rollout reads."""
    name, params = parse_drafter(spec)
    if name not in TRAINED_ON:
        raise BenchError(
            f"DIVERSED's head reads the draft's q and hidden states: it trains on --drafter model or eagle, not {name}"
        )
    return "model" if name == "model" else f"eagle:path={params['path']}"


class RolloutDrafts(ABC):
    """What a rollout reads of the draft at each step; ``open`` starts a batch of rollouts."""

    width: int  # the hidden state's size: the weight head's draft_hidden
    model: PreTrainedModel | None  # the draft model it feeds, whose context a prompt must fit
    positional: bool  # whether q and the states depend on the position in a round
    layers: tuple[int, ...] = ()  # the target's layer states it reads (its engine keeps them)

    @abstractmethod
    def open(self, factory: EngineFactory, target: ModelEngine, prompts: list[list[int]], max_len: int) -> list[ModelEngine]:
        """Start a batch of rows of at most ``max_len`` positions; returns the engines it steps
        (cut to the live rows with the target's)."""

    @abstractmethod
    def law(
        self, target: ModelEngine, ids: Tensor, real: list[int], alive: list[int], positions: list[int], sampling: Sampling
    ) -> tuple[Tensor, Tensor]:
        """q [B, V] and h_draft [B, H] of every live row's next token, after the target's step
        on ``ids`` (each row's tokens not yet read, ``real[j]`` of them for live row ``alive[j]``,
        whose next token is at ``positions[j]`` of its round; a bonus row's values are unused)."""

    def confirm(self, alive: list[int], sampled: list[int]) -> None:
        """The live rows' sampled tokens, before the rows that ended leave."""


class ModelDrafts(RolloutDrafts):
    """The pair's draft model, a token a step (DIVERSED's own training: the authors' setting).
    It reads every token, so its q and states are the same at any position of a round."""

    positional = False

    def __init__(self, pair: Pair) -> None:
        self.pair, self.width, self.model = pair, hidden_size(pair.draft), pair.draft

    def open(self, factory: EngineFactory, target: ModelEngine, prompts: list[list[int]], max_len: int) -> list[ModelEngine]:
        self.engine = factory(self.pair.draft, (1,))
        return [self.engine]

    def law(
        self, target: ModelEngine, ids: Tensor, real: list[int], alive: list[int], positions: list[int], sampling: Sampling
    ) -> tuple[Tensor, Tensor]:
        rows = torch.arange(len(real), device=ids.device)
        last = torch.tensor([n - 1 for n in real], device=ids.device)
        q_logits, hd = self.engine.step(ids, real, keep=ids.shape[1], hidden=True)
        assert hd is not None  # hidden=True
        return process(q_logits[rows, last], sampling), hd[rows, last]


@dataclass
class _Row:
    """A rollout row as EagleDrafter reads it (``DraftRow``): the tokens so far."""

    index: int
    seq: list[int]
    out: list[int] = field(default_factory=list)
    generator: torch.Generator = field(default_factory=torch.Generator)  # the drafter draws nothing here


class EagleDrafts(RolloutDrafts):
    """An EAGLE head reading the target's layer states; its q and hidden as decoding reads them."""

    positional = True

    def __init__(self, pair: Pair, spec: str, temperature: float) -> None:
        params = parse_drafter(with_pair_head(spec, pair.spec.eagle))[1]
        self.drafter = EagleDrafter(**params).bind(DraftContext(target=pair.target, sampling=Sampling(temperature), greedy=False))
        self.width, self.model = self.drafter.head.config.hidden_size, None
        self.layers = self.drafter.target_layers(pair.target.config.get_text_config().num_hidden_layers)
        self.vocab = pair.target.config.get_text_config().vocab_size
        self.dtype = next(self.drafter.head.parameters()).dtype  # of head_input's states

    def open(self, factory: EngineFactory, target: ModelEngine, prompts: list[list[int]], max_len: int) -> list[ModelEngine]:
        self.drafter.start(len(prompts), max_len)
        self.rows = [_Row(b, list(p)) for b, p in enumerate(prompts)]
        self.held: dict[int, Tensor] = {}
        self.chain: dict[int, tuple[Tensor, HeadCache]] = {}  # a row's head output and cache in its round
        return []

    def law(
        self, target: ModelEngine, ids: Tensor, real: list[int], alive: list[int], positions: list[int], sampling: Sampling
    ) -> tuple[Tensor, Tensor]:
        """Every read position's states but the last go to the head's pending states now (the
        token after each is known); the last one's wait for the token sampled at it (``confirm``).
        The head reads them at a round's first draft, as decoding's catch-up does."""
        states = target.states
        assert states is not None  # the target's engine keeps the states at self.layers
        qs, hs = [], []
        for j, (b, k) in enumerate(zip(alive, positions)):
            row, kept = self.rows[b], states[j, : real[j]]
            self.drafter.take_states([row], [kept[:-1]])
            self.held[b] = kept[-1:]
            if k == BONUS:
                qs.append(torch.zeros(1, self.vocab, device=kept.device))
                hs.append(torch.zeros(1, self.width, device=kept.device, dtype=self.dtype))
                continue
            out = self.first(row) if k == 1 else self.fed_back(row)
            qs.append(self.drafter.law(out)[1])
            hs.append(self.drafter.head.head_input(out))
        return torch.cat(qs), torch.cat(hs)

    def first(self, row: _Row) -> Tensor:
        """A round's first draft: the head's output after catching up on the target's states."""
        state = self.drafter.catch_up(row)
        if state.last is None:
            raise BenchError("eagle: a training prompt of one token gives the EAGLE head no state to draft from; use longer prompts")
        self.chain[row.index] = (state.last, state.cache)
        return state.last

    def fed_back(self, row: _Row) -> Tensor:
        """A round's later draft: the previous output fed back with the token accepted after it,
        on a cache the round's drafts extend and the next round drops (``EagleDrafter.chain``)."""
        h, cache = self.chain[row.index]
        token = torch.tensor([row.seq[-1]], device=h.device)
        out, cache = self.drafter.advance(row, h, token, cache)
        self.chain[row.index] = (out, cache)
        return out

    def confirm(self, alive: list[int], sampled: list[int]) -> None:
        for b, token in zip(alive, sampled):
            self.rows[b].seq.append(token)
            self.drafter.take_states([self.rows[b]], [self.held.pop(b)])


def rollout_drafts(pair: Pair, drafter: str, temperature: float) -> RolloutDrafts:
    """The draft side of a recipe's rollouts (``drafter``: its ``drafter_setting``)."""
    return ModelDrafts(pair) if drafter == "model" else EagleDrafts(pair, drafter, temperature)
