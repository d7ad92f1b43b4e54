"""The draft model's token tree: a static shape stepped level by level, as EAGLE's trees are
(arXiv 2401.15077; SpecInfer's expansion configurations, arXiv 2305.09781).

The tree's shape is fixed by ``depth`` D, ``topk`` k and ``branch`` b: a node at level d < b has
k children, deeper nodes one, so level d holds k ** min(d, b) nodes (k = 2, b = 1, D = 4: two
chains of four; b = D: the full k-ary tree). Nodes are numbered level by level (topological), and a
row with a smaller budget keeps the first ``caps[b]`` of them, still a tree. The model steps once
per level: the row's missing tokens up to the root, then the root and every node drawn so far as a
token tree (``ModelEngine.tree_step``, the target's tree mask) for the laws at the newest level.
Children are the draft's top-k under greedy decoding or the greedy draft policy (the loop then
verifies point masses), else k draws WITHOUT replacement from the parent's processed law q, whose
laws given the earlier siblings (``without_earlier_siblings``) go to the rule: SpecInfer's
multi-step rule applies. The tree steps write past the row's length and are never kept: the next
round feeds the accepted path from the row's tokens, as a chain draft model's cache catches up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from bench.distributions import pick, process
from bench.drafters.base import Draft, DraftContext, Drafter, DraftRow
from bench.drafters.model import padded
from bench.engines import ModelEngine, to_device
from bench.errors import BenchError
from bench.verifiers.tree import without_earlier_siblings


@dataclass
class ModelTree(Drafter):
    """Drafts a static token tree with the pair's draft model."""

    name: ClassVar[str] = "model_tree"
    help: ClassVar[str] = (
        "the draft model's static token tree: depth levels, topk children per node in the first branch levels "
        "(one below); top-k when greedy, draws without replacement when sampled; at most N = --draft-len nodes"
    )
    supplies: ClassVar[frozenset[str]] = frozenset({"q"})
    models: ClassVar[frozenset[str]] = frozenset({"draft"})
    depth: int = 4
    topk: int = 2
    branch: int = 1

    def __post_init__(self) -> None:
        for key in ("depth", "topk", "branch"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BenchError(f"model_tree: {key} must be an integer >= 1, got {value!r}")
        if self.branch > self.depth:
            raise BenchError(f"model_tree: branch must lie in [1, depth={self.depth}], got {self.branch}")
        # Parent of every node, level by level: the static shape.
        self.parents: list[int] = []
        self.levels: list[list[int]] = []
        above = [-1]
        for d in range(self.depth):
            k = self.topk if d < self.branch else 1
            level = list(range(len(self.parents), len(self.parents) + k * len(above)))
            self.parents += [up for up in above for _ in range(k)]
            self.levels.append(level)
            above = level

    def bind(self, ctx: DraftContext) -> ModelTree:
        """The draft model and how it steps: chain steps of up to D + 2 tokens (the root, an
        accepted path, the next token) and a tree step per level but the last."""
        model = ctx.draft
        assert model is not None  # make_drafter refuses a context without the models it declares
        self.device, self.sampling, self.greedy = model.device, ctx.sampling, ctx.greedy
        trees = tuple(1 + level[-1] + 1 for level in self.levels[:-1])
        self.engine = ctx.engine(model, (1, self.depth + 2), trees) if trees else ctx.engine(model, (1, self.depth + 2))
        return self

    @property
    def nodes(self) -> int:
        return len(self.parents)

    @property
    def engines(self) -> list[ModelEngine]:
        return [self.engine]

    def target_widths(self, cap: int) -> tuple[int, ...]:
        return (1,)  # a chain step only where no row may draft (the budget's last token)

    def tree_widths(self, cap: int) -> tuple[int, ...]:
        return (1 + min(cap, self.nodes),)

    def draft(self, rows: Sequence[DraftRow], caps: Sequence[int]) -> Draft:
        engine, count = self.engine, len(rows)
        feed = [r.seq[held:] for r, held in zip(rows, engine.lengths)]
        logits, _ = engine.step(padded(feed, self.device), [len(f) - 1 for f in feed], keep=max(map(len, feed)), hidden=False)
        at = to_device([len(f) - 1 for f in feed], self.device)
        laws = {-1: logits[torch.arange(count, device=self.device), at]}  # logits at each frontier node
        root = to_device([[r.seq[-1]] for r in rows], self.device)
        generators = [r.generator if cap else None for r, cap in zip(rows, caps)]
        tokens: list[Tensor] = []
        qs: list[Tensor] = []
        for d, level in enumerate(self.levels):
            for up in dict.fromkeys(self.parents[j] for j in level):
                kids = self._children(laws[up], sum(self.parents[j] == up for j in level), generators)
                tokens += kids
                qs += [process(laws[up], self.sampling)] * len(kids)
            if d + 1 < self.depth:
                parents = torch.tensor(self.parents[: len(tokens)], device=self.device).expand(count, -1)
                out = engine.tree_step(torch.cat([root, torch.stack(tokens, 1)], 1), parents, [0] * count)
                laws = {j: out[:, j + 1] for j in level}
        counts = [min(cap, self.nodes) for cap in caps]
        n = max(counts)  # the first n nodes: a tree, as wide as the target's declared tree step
        ids, q = torch.stack(tokens[:n], 1), torch.stack(qs[:n], 1)
        real = torch.arange(n, device=self.device) < to_device(counts, self.device).unsqueeze(1)
        parents = torch.where(real, torch.tensor(self.parents[:n], device=self.device), -1)
        return Draft(
            tokens=ids,
            counts=counts,
            q=q if self.greedy else without_earlier_siblings(q, ids, parents),
            parents=parents,
            # One step per level of the row's tree (its first counts[b] nodes, level by level).
            forwards=[sum(level[0] < c for level in self.levels) for c in counts],
        )

    def _children(self, logits: Tensor, k: int, generators: list[torch.Generator | None]) -> list[Tensor]:
        """k children per row: the top-k of the logits, or k draws without replacement from q."""
        if self.greedy:
            return list(logits.topk(k, dim=-1).indices.unbind(-1))
        left, kids = process(logits, self.sampling), []
        for _ in range(k):
            kids.append(pick(left, generators, False))
            left = left.scatter(-1, kids[-1].unsqueeze(-1), 0.0)
        return kids
