"""EAGLE-2's dynamic draft tree from an EAGLE head (arXiv 2406.16858; the authors' ``topK_genrate``
in SafeAILab/EAGLE ``eagle/model/cnets.py`` and ``cnets1.py``).

Expansion: the root's top-k children (the head's log-probs at the row's last confirmed position),
then per level the ``topk`` frontier nodes with the best path confidence (the cumulative log-prob
from the root: ``cu_scores = topk_p + scores``) are fed to the head together, each seeing the
row's confirmed positions and its own ancestors, at position (confirmed + level), with its
parent's output state as its feature; each frontier node proposes its top-k children. Rerank:
of every candidate (k at the first level, k * k per later one) the ``total`` with the best path
confidence are kept, in candidate order (parents before children). A child's confidence never
exceeds its parent's, so the kept set is a tree; ties go to the earlier candidate, which keeps it
one (the authors' ``topk`` leaves ties to the kernel).

``depth`` counts levels: the authors' ``depth`` d expands d times after the root's children, so
their default d = 5 is ``depth=6`` here. The children are the head's top-k, not draws: the tree is
a function of the head's state, a deterministic draft whose nodes carry no law (``Draft.q`` None).
The loop's ``lossless`` tree rule on such a tree keeps child x with probability r(x) / sum(r) and
otherwise zeroes x and renormalises: exactly EAGLE's q-free rule (``evaluate_posterior`` in
``eagle/model/utils.py``: accept with p(x), else ``gtp[xi] = 0; gtp = gtp / gtp.sum()``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch
from torch import Tensor

from bench.drafters.base import Draft, DraftRow
from bench.eagle.heads import EagleHead


class TreeSource(Protocol):
    """What growing a tree reads of the EAGLE drafter (bench/drafters/eagle.py): its head, its
    budget, and a row's head state caught up with the target's confirmed positions."""

    head: EagleHead
    device: torch.device
    topk: int
    depth: int
    total: int

    def catch_up(self, row: DraftRow) -> Any: ...

    def run(
        self, row: DraftRow, hidden: Tensor, tokens: Tensor, cache: Any, positions: Tensor | None = None, mask: Tensor | None = None
    ) -> tuple[Tensor, Any]: ...


def draft_tree(drafter: TreeSource, rows: Sequence[DraftRow], caps: Sequence[int]) -> Draft:
    """Each row's tree of at most min(cap, total) nodes, right-padded (padding: parent -1)."""
    trees = [grow(drafter, row, min(cap, drafter.total)) if cap else ([], []) for row, cap in zip(rows, caps)]
    width = max(len(tokens) for tokens, _ in trees)
    tokens = torch.zeros(len(rows), width, dtype=torch.long, device=drafter.device)
    parents = torch.full((len(rows), width), -1, dtype=torch.long, device=drafter.device)
    for b, (ids, ups) in enumerate(trees):
        if ids:
            tokens[b, : len(ids)] = torch.stack(ids)
            parents[b, : len(ups)] = torch.tensor(ups, device=drafter.device)
    return Draft(tokens=tokens, counts=[len(ids) for ids, _ in trees], parents=parents)


def grow(drafter: TreeSource, row: DraftRow, budget: int) -> tuple[list[Tensor], list[int]]:
    """One row's tree: (node tokens in the target's vocabulary, node parents), topological."""
    state = drafter.catch_up(row)
    if state.last is None or budget < 1:
        return [], []
    head = drafter.head
    logp = head.logits(state.last).float().log_softmax(-1)[0]
    k = min(drafter.topk, logp.shape[-1])
    top = logp.topk(k)
    ids, scores, ups = [top.indices], [top.values], [torch.full((k,), -1, device=logp.device)]
    frontier = torch.arange(k, device=logp.device)  # candidate indices of the nodes fed next
    hidden, cache = state.last.expand(k, -1), state.cache
    ancestry = torch.zeros(0, 0, dtype=torch.bool, device=logp.device)  # fed tree entries' ancestors
    parent_entry = torch.full((k,), -1, device=logp.device)  # each frontier node's parent's entry
    for level in range(1, drafter.depth):
        tokens = head.to_target(torch.cat(ids)[frontier])
        mask, ancestry = tree_mask(ancestry, parent_entry, state.fed, hidden.dtype)
        positions = torch.full((1, k), state.fed + level - 1, device=logp.device)
        out, cache = drafter.run(row, hidden.unsqueeze(0), tokens.unsqueeze(0), cache, positions, mask)
        state.ran += 1  # one head forward per level, over its k frontier nodes together
        child = head.logits(out[0]).float().log_softmax(-1).topk(k)
        cu = (child.values + torch.cat(scores)[frontier].unsqueeze(1)).flatten()
        first = sum(len(s) for s in scores)
        ids.append(child.indices.flatten())
        scores.append(cu)
        ups.append(frontier.repeat_interleave(k))
        best = cu.topk(k).indices
        entries = ancestry.shape[0] - k  # the entries just fed: this level's frontier
        frontier, hidden, parent_entry = first + best, out[0, best // k], entries + best // k
    return select(head.to_target(torch.cat(ids)), torch.cat(scores), torch.cat(ups), budget)


def tree_mask(ancestry: Tensor, parent_entry: Tensor, confirmed: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """The additive mask [1, 1, k, confirmed + E + k] of k new tree entries (each sees the row's
    confirmed positions, its ancestors among the E entries fed before, and itself), and the
    ancestry [E + k, E + k] grown by them."""
    k, fed = parent_entry.shape[0], ancestry.shape[0]
    grown = torch.zeros(fed + k, fed + k, dtype=torch.bool, device=ancestry.device)
    grown[:fed, :fed] = ancestry
    has = parent_entry >= 0
    if fed:
        grown[fed:, :fed] = torch.where(has.unsqueeze(1), ancestry[parent_entry.clamp(min=0)], False)
    grown[fed + torch.arange(k), fed + torch.arange(k)] = True
    allowed = torch.cat([torch.ones(k, confirmed, dtype=torch.bool, device=grown.device), grown[fed:]], dim=1)
    low = torch.finfo(dtype).min
    return torch.zeros((), dtype=dtype, device=grown.device).where(allowed, low)[None, None], grown


def select(tokens: Tensor, scores: Tensor, ups: Tensor, budget: int) -> tuple[list[Tensor], list[int]]:
    """The ``budget`` candidates of best path confidence (ties: the earlier), in candidate order,
    with parents renumbered among them (-1: the root)."""
    values, links = scores.tolist(), ups.tolist()
    kept = sorted(sorted(range(len(values)), key=lambda i: (-values[i], i))[:budget])
    at = {c: j for j, c in enumerate(kept)}
    parents = [int(links[c]) for c in kept]
    return [tokens[c] for c in kept], [at[p] if p >= 0 else -1 for p in parents]
