"""Label recipes for judges: which drafted tokens are important, mined with no annotation.

A miner is a generator: it yields the model calls it needs next (``Greedy``, ``Drafted``,
``Likelihood``, ``Swapped``), is sent their answers, and returns its ``Mined`` labels. ``run_many`` drives many
miners in lockstep and answers each round's calls in one batch (``Oracle``: batched target and
draft forwards), ``run`` answers one call at a time; both give the same labels, and a test hands
a miner a fake target whose greedy continuation it controls.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Union

from torch import Tensor


@dataclass(frozen=True)
class Mined:
    context: list[int]  # prompt and completion before the token
    token: int  # the token at that position (the draft's, or the target's own for a negative)
    # None: the recipe labels it later by thresholding ``score`` (SelfJudge's tau may be a quantile
    # of every mined score, bench.learned.classifier).
    important: bool | None
    score: float | None = None  # the statistic a label is thresholded from, where there is one


@dataclass(frozen=True)
class Greedy:
    """The target's greedy continuation of ``ids``: up to ``max_new`` tokens, ending at an EOS."""

    ids: list[int]
    max_new: int


@dataclass(frozen=True)
class Drafted:
    """The drafter's proposal after every prefix of ``ids`` (entry i would follow ids[: i + 1], -1
    where it proposes nothing). ``drafter`` ``model``: the draft model's argmax at temperature 0,
    else a sample at ``temperature`` drawn with its own ``seed``; an ``eagle`` spec: likewise the
    EAGLE head's first drafted token there (none after the first token); a ``lookup`` spec: the
    first token prompt lookup drafts there."""

    ids: list[int]
    temperature: float = 0.0
    seed: int = 0
    drafter: str = "model"


@dataclass(frozen=True)
class Likelihood:
    """[len(ids) - 1] the target's log-probability of each next token, teacher-forced: entry i is
    log p(ids[i + 1] | ids[: i + 1])."""

    ids: list[int]


@dataclass(frozen=True)
class Swapped:
    """For each (position, token) site (position >= 1): a pair of tensors, teacher-forced on
    ``ids`` as it is and with the site's token swapped in, each [w + 1] with w = min(window,
    len(ids) - 1 - position): the target's top log-probability (its max over the vocabulary) at
    positions position - 1 .. position + w - 1, except that the swapped copy's first entry is the
    swapped-in token's own log-probability (its prediction at position - 1). SelfJudge's label
    statistic is the difference of their means (bench.learned.miners.selfjudge)."""

    ids: list[int]
    sites: list[tuple[int, int]]
    window: int


Call = Union[Greedy, Drafted, Likelihood, Swapped]
Steps = Generator[list[Call], list[Any], list[Mined]]


class Oracle(Protocol):
    """Answers a batch of calls of one kind (a test's fake answers them one by one)."""

    def greedy(self, calls: Sequence[Greedy]) -> list[list[int]]: ...

    def drafted(self, calls: Sequence[Drafted]) -> list[list[int]]: ...

    def likelihood(self, calls: Sequence[Likelihood]) -> list[Tensor]: ...

    def swapped(self, calls: Sequence[Swapped]) -> list[list[tuple[Tensor, Tensor]]]: ...


_KINDS = {Greedy: "greedy", Drafted: "drafted", Likelihood: "likelihood", Swapped: "swapped"}


def answer(oracle: Oracle, calls: Sequence[Call]) -> list[Any]:
    """Every call's answer, in order; calls of one kind go to the oracle together."""
    out: list[Any] = [None] * len(calls)
    for kind, method in _KINDS.items():
        where = [i for i, c in enumerate(calls) if isinstance(c, kind)]
        if where:
            for i, result in zip(where, getattr(oracle, method)([calls[i] for i in where])):
                out[i] = result
    return out


def run_many(
    oracle: Oracle, miners: Sequence[Steps], progress: Callable[[int, int], None] | None = None
) -> list[list[Mined]]:
    """Drive every miner to its end, answering each round's calls of all of them in one batch;
    ``progress(rounds, mining)`` after each round: how many rounds ran and how many miners are
    still mining (a miner's rounds are unknown ahead: AutoJudge's grow with its mismatches)."""
    results: list[list[Mined]] = [[] for _ in miners]
    pending: dict[int, list[Call]] = {}
    for i, miner in enumerate(miners):
        _advance(miner, None, i, pending, results)
    rounds = 0
    while pending:
        if progress is not None and rounds:
            progress(rounds, len(pending))
        rounds += 1
        order = [(i, call) for i, calls in pending.items() for call in calls]
        answers = answer(oracle, [call for _, call in order])
        grouped: dict[int, list[Any]] = {i: [] for i in pending}
        for (i, _), result in zip(order, answers):
            grouped[i].append(result)
        pending = {}
        for i, got in grouped.items():
            _advance(miners[i], got, i, pending, results)
    return results


def run(oracle: Oracle, miner: Steps) -> list[Mined]:
    """One miner, each call answered on its own (the reference ``run_many`` is tested against)."""
    try:
        calls = next(miner)
        while True:
            calls = miner.send([answer(oracle, [call])[0] for call in calls])
    except StopIteration as done:
        return done.value


def _advance(miner: Steps, got: list[Any] | None, i: int, pending: dict[int, list[Call]], results: list[list[Mined]]) -> None:
    try:
        pending[i] = next(miner) if got is None else miner.send(got)
    except StopIteration as done:
        results[i] = done.value


def mismatches(proposed: list[int], prompt: list[int], completion: list[int], start: int) -> list[tuple[int, int]]:
    """(position in the completion, draft token) wherever the drafter proposes a token (``Drafted``
    on prompt + completion) other than the completion's, from ``start``."""
    n = len(prompt)
    return [
        (t, proposed[n - 1 + t])
        for t in range(start, len(completion))
        if proposed[n - 1 + t] >= 0 and proposed[n - 1 + t] != completion[t]
    ]
