"""Token trees for the engine and loop tests: random trees, paths, and the core engine check (each
tree token's logits equal a full forward of the row's sequence and that token's path)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import ClassVar

import torch

from bench.drafters import Draft, Drafter, DraftRow
from bench.engines import ModelEngine


def random_parents(counts: Sequence[int], n: int, generator: torch.Generator) -> torch.Tensor:
    """[B, n]: row b's node j < counts[b] hangs under a uniform earlier node or the root (-1);
    padding nodes under the root."""
    rows = []
    for count in counts:
        row = [int(torch.randint(-1, j, (1,), generator=generator)) if j else -1 for j in range(count)]
        rows.append(row + [-1] * (n - count))
    return torch.tensor(rows, dtype=torch.long)


def path_to(parents: Sequence[int], node: int) -> list[int]:
    """Node indices from the root's child down to ``node`` (empty for the root, node -1)."""
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


def check_tree_steps(
    model: torch.nn.Module,
    engine: ModelEngine,
    seqs: list[list[int]],
    rounds: Sequence[tuple[int, ...]],
    vocab: int,
    generator: torch.Generator,
    **tolerance: float,
) -> None:
    """From ``seqs`` (held by ``engine`` but each row's last token), run one tree step per entry of
    ``rounds`` (per-row node counts), check every real token's logits against transformers' forward
    of its path, commit a random root-to-node path per row and append a random next token."""
    for step, counts in enumerate(rounds):
        n = max(counts)
        nodes = torch.randint(3, vocab, (len(seqs), n), generator=generator)
        parents = random_parents(counts, n, generator)
        ids = torch.cat([torch.tensor([[s[-1]] for s in seqs]), nodes], dim=1)
        logits = engine.tree_step(ids, parents, [1 + c for c in counts])
        paths = []
        for b, (seq, count) in enumerate(zip(seqs, counts)):
            for j in range(-1, count):
                path = path_to(parents[b].tolist(), j)
                want = model(input_ids=torch.tensor([seq + nodes[b, path].tolist()])).logits[0, -1]
                torch.testing.assert_close(logits[b, j + 1], want, **tolerance, msg=f"step {step} row {b} node {j}")
            end = int(torch.randint(-1, count, (1,), generator=generator))
            paths.append(path_to(parents[b].tolist(), end))
        engine.commit(paths)
        assert engine.lengths == [len(s) + len(p) for s, p in zip(seqs, paths)]
        for b, path in enumerate(paths):
            seqs[b] = seqs[b] + nodes[b, path].tolist() + [int(torch.randint(3, vocab, (1,), generator=generator))]


class OracleTree(Drafter):
    """A test-only tree drafter: knows each row's greedy continuation (``truth[row.index]`` after
    ``prompt_len[row.index]`` tokens) and hides a random prefix of it, sometimes corrupted at one
    depth, among random distractor nodes in a random topological order, so greedy verification
    must walk (and commit) paths through later siblings and stop inside the tree."""

    name: ClassVar[str] = "oracle-tree"
    deterministic: ClassVar[bool] = True

    def __init__(self, prompt_len: Sequence[int], truth: Sequence[Sequence[int]], vocab: int, seed: int = 0) -> None:
        self.prompt_len, self.truth, self.vocab = prompt_len, truth, vocab
        # One stream per row, keyed by its continuation: a row gets the same trees in any batch.
        self.randoms = [random.Random(f"{seed} {list(t)}") for t in truth]

    def tree(self, rnd: random.Random, known: Sequence[int], cap: int) -> tuple[list[int], list[int]]:
        """(tokens, parents) of ``cap`` nodes hiding a prefix of ``known``."""
        chain = list(known[: rnd.randint(0, min(cap, len(known)))])
        if chain and rnd.random() < 0.3:
            chain[rnd.randrange(len(chain))] = rnd.randrange(3, self.vocab)
        at = sorted(rnd.sample(range(cap), len(chain)))
        tokens, parents, previous = [], [], -1
        for j in range(cap):
            if at and at[0] == j:
                tokens.append(chain[len(chain) - len(at)])
                parents.append(previous)
                previous = j
                at.pop(0)
            else:
                tokens.append(rnd.randrange(3, self.vocab))
                parents.append(rnd.randint(-1, j - 1))
        return tokens, parents

    def target_widths(self, cap: int) -> tuple[int, ...]:
        return (1,)  # a chain step only where no row may draft (the budget's last token)

    def tree_widths(self, cap: int) -> tuple[int, ...]:
        return (cap + 1,)

    def draft(self, rows: Sequence[DraftRow], caps: Sequence[int]) -> Draft:
        trees = []
        for r, cap in zip(rows, caps):
            done = len(r.seq) - self.prompt_len[r.index]
            trees.append(self.tree(self.randoms[r.index], self.truth[r.index][done:], cap))
        n = max(caps)
        pad = [(t + [0] * (n - len(t)), p + [-1] * (n - len(p))) for t, p in trees]
        return Draft(
            tokens=torch.tensor([t for t, _ in pad]),
            counts=list(caps),
            parents=torch.tensor([p for _, p in pad]),
        )
