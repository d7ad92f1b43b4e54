"""Sequences that share their first tokens, run through a model with the shared part once.

Mining asks about ~50 tokens of one completion, each a copy of a ~1,000-token prompt and
completion with one token swapped; a forward per copy repeats the prompt 50 times. Here the
common prefix is prefilled once and the rest of every sequence, merged into a token trie, goes in
one token-tree forward (bench.engines.tree on the eager engine: each node sees the prefix and its
ancestors, at the position of its depth), whose outputs equal a full forward of each sequence
(tested against transformers' full forward of every sequence, tests/engines/test_fidelity.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from transformers import PreTrainedModel

from bench.engines import EagerEngine

TOKENS = 16384  # prefix tokens per prefill
LOGITS = 1 << 27  # tree logits per forward (tokens x vocabulary)


@dataclass(frozen=True)
class Shared:
    """Sequences as one prefix (positions below ``root``), a root token at ``root`` and a trie of
    the rest (``tokens``, ``parents``: -1 a child of the root). ``node[i][k - root]`` is the
    output row of sequence i's position k (row 0 the root, row j + 1 node j), for k >= root."""

    prefix: list[int]
    root_token: int
    tokens: list[int]
    parents: list[int]
    node: list[list[int]]

    @property
    def root(self) -> int:
        return len(self.prefix)

    def row(self, i: int, k: int) -> int:
        """The output row of sequence i's position k (k >= root)."""
        return self.node[i][k - self.root]


def share(seqs: Sequence[Sequence[int]], first: int) -> Shared:
    """``seqs`` (each non-empty) as a prefix and a trie; ``first`` the earliest position whose
    output is read, so the prefix stops before it."""
    shortest = min(len(s) for s in seqs)
    common = 0
    while common < shortest and all(s[common] == seqs[0][common] for s in seqs):
        common += 1
    root = max(0, min(common - 1, first))
    tokens: list[int] = []
    parents: list[int] = []
    children: dict[tuple[int, int], int] = {}
    node: list[list[int]] = []
    for s in seqs:
        rows, parent = [0], -1
        for token in s[root + 1 :]:
            if (parent, token) not in children:
                children[parent, token] = len(tokens)
                tokens.append(token)
                parents.append(parent)
            parent = children[parent, token]
            rows.append(parent + 1)
        node.append(rows)
    return Shared(list(seqs[0][:root]), seqs[0][root], tokens, parents, node)


@torch.no_grad()
def forward_shared(model: PreTrainedModel, groups: Sequence[Shared], hidden: bool = False) -> list[tuple[Tensor, Tensor | None]]:
    """Per group, the logits [n + 1, V] of its root and nodes (and their last-layer hidden states
    [n + 1, H] when ``hidden``), groups batched as ragged rows within the budgets."""
    out: list[tuple[Tensor, Tensor | None]] = []
    vocab = model.config.get_text_config().vocab_size
    batch: list[Shared] = []
    for g in groups:
        grown = batch + [g]
        rows, widest = len(grown), max(1 + len(x.tokens) for x in grown)
        if batch and (rows * max(x.root for x in grown) > TOKENS or rows * widest * vocab > LOGITS):
            out += _forward(model, batch, hidden)
            grown = [g]
        batch = grown
    return out + (_forward(model, batch, hidden) if batch else [])


def _forward(model: PreTrainedModel, groups: Sequence[Shared], hidden: bool) -> list[tuple[Tensor, Tensor | None]]:
    device, count = model.device, len(groups)
    width = max(len(g.tokens) for g in groups)
    engine = EagerEngine(model)
    engine.start(count, max(g.root + 1 + width for g in groups))
    longest = max(g.root for g in groups)
    if longest:
        ids = torch.zeros(count, longest, dtype=torch.long)
        for b, g in enumerate(groups):
            ids[b, : g.root] = torch.tensor(g.prefix, dtype=torch.long)
        engine.step(ids.to(device), [g.root for g in groups], keep=1, hidden=False)
    ids = torch.zeros(count, 1 + width, dtype=torch.long)
    parents = torch.full((count, width), -1, dtype=torch.long)
    for b, g in enumerate(groups):
        ids[b, : 1 + len(g.tokens)] = torch.tensor([g.root_token, *g.tokens], dtype=torch.long)
        parents[b, : len(g.tokens)] = torch.tensor(g.parents, dtype=torch.long)
    logits, states = engine.tree_states(ids.to(device), parents.to(device), [1 + len(g.tokens) for g in groups], hidden)
    return [
        (logits[b, : 1 + len(g.tokens)], None if states is None else states[b, : 1 + len(g.tokens)])
        for b, g in enumerate(groups)
    ]
