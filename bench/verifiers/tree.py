"""Verification of a token tree: which root-to-node path of drafted tokens to keep, and the token after it.

A round's draft may be a tree instead of a chain: several candidate children per node, all verified
by one target forward. ``verify_tree`` walks it with the rule the verifier class names in its
``tree_rule`` (docs/spec.md §10, token trees):

- ``lossless`` (``sd``): per node, try the children in order with the residual ``r`` (first ``p``):
  keep child x with probability ``min(1, r(x) / q_x(x))``, else ``r <- norm(max(0, r - q_x))``,
  where ``q_x`` is the law x was drawn from. For a deterministic draft ``q_x`` is the point mass,
  so x is kept with probability ``r(x) / sum r`` and then removed from ``r``; for sampled children
  it is SpecInfer's multi-step speculative sampling (Miao et al. 2024, Algorithm 2). All rejected:
  sample ``norm(r)``; a leaf: the bonus from ``p``.
- ``sglang`` (``threshold``): SGLang's ``TreeSpeculativeSamplingTargetOnly`` kernel.
- ``target_only`` (``typical``, ``relaxed``): deterministic per-node tests on ``p``; the longest
  path of kept nodes wins, the next token as the chain rule emits it.

Temperature 0, every rule: a node is kept iff its token is the argmax of the rule's greedy target;
the longest kept path wins; the next token is that argmax (``argmax p`` at a leaf).

Batched over B rows, each with its own tree; python loops run over the n nodes only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import torch
from torch import Tensor

from bench.distributions import Generators, Sampling, normalise, sample, uniform
from bench.errors import BenchError
from bench.verifiers.base import VERIFIERS, Round, Verifier
from bench.verifiers.engines import SGLANG_MIN_THRESHOLD_ACC, ThresholdAcceptance


@dataclass(frozen=True)
class TreeRound:
    """One round's token tree, batched over B rows (each row its own tree, padded to n nodes).

    Node j's parent is an earlier node (``0..j-1``) or -1, the root (the row's last emitted token);
    a chain has ``parents[j] = j - 1``. ``p[:, 0]`` is the target's law at the root (the law of its
    children), ``p[:, j + 1]`` the law at node j (of node j's children): the verify forward's row
    at that node. ``q[:, j]`` is the law node j was drawn from given everything drawn before it
    (its parent's path; its earlier siblings too where the drafter draws them without
    replacement: ``without_earlier_siblings``). ``q`` None: a deterministic drafter (lookup,
    suffix trees), each node's law the point mass on its token; ``greedy_draft`` likewise
    (a draft model's top-k tree).
    """

    tokens: Tensor  # [B, n] node tokens; a row's nodes j >= counts[b] are padding, never verified
    parents: Tensor  # [B, n] long
    counts: list[int]  # real nodes per row
    p: Tensor  # [B, n + 1, V] processed target law at the root and at each node
    p_logits: Tensor  # [B, n + 1, V]
    q: Tensor | None  # [B, n, V] or None (point masses)
    sampling: Sampling
    greedy_draft: bool = False

    def __post_init__(self) -> None:
        batch, n = self.tokens.shape
        if self.parents.shape != (batch, n) or len(self.counts) != batch:
            raise BenchError(f"tree round: tokens {tuple(self.tokens.shape)}, parents "
                             f"{tuple(self.parents.shape)} and {len(self.counts)} counts must agree")
        if self.p.shape[:2] != (batch, n + 1) or self.p_logits.shape != self.p.shape:
            raise BenchError(f"tree round: p and p_logits must be [B, n + 1, V] = [{batch}, {n + 1}, V], "
                             f"got {tuple(self.p.shape)} and {tuple(self.p_logits.shape)}")
        if self.q is not None and self.q.shape != (batch, n, self.p.shape[-1]):
            raise BenchError(f"tree round: q must be [B, n, V] = [{batch}, {n}, {self.p.shape[-1]}], "
                             f"got {tuple(self.q.shape)}")
        vocab = self.p.shape[-1]
        if any(not 0 <= c <= n for c in self.counts):
            raise BenchError(f"tree round: counts must lie in [0, {n}], got {self.counts}")
        later = self.parents >= torch.arange(n, device=self.parents.device)
        bad = self.valid & ((self.parents < -1) | later)
        if bool(bad.any()):
            row, node = (int(i) for i in bad.nonzero()[0])
            raise BenchError(f"tree round: row {row} node {node} has parent {int(self.parents[row, node])}; "
                             "a parent must be an earlier node or -1 (the root)")
        if bool((self.valid & ((self.tokens < 0) | (self.tokens >= vocab))).any()):
            raise BenchError(f"tree round: a node's token lies outside the vocabulary [0, {vocab})")

    @cached_property
    def valid(self) -> Tensor:
        """[B, n] bool: real nodes."""
        counts = torch.as_tensor(self.counts, device=self.tokens.device)
        return torch.arange(self.tokens.shape[1], device=self.tokens.device) < counts.unsqueeze(1)

    @property
    def deterministic(self) -> bool:
        """Every node's law is the point mass on its token."""
        return self.q is None or self.greedy_draft

    def at_parents(self, x: Tensor) -> Tensor:
        """[B, n + 1, ...] per node's law -> [B, n, ...]: the row of each node's parent."""
        index = self.links + 1
        return x.gather(1, index.view(*index.shape, *([1] * (x.dim() - 2))).expand(-1, -1, *x.shape[2:]))

    def proposal(self, j: int) -> Tensor:
        """[B, V]: the law node j was drawn from."""
        if self.deterministic:
            return torch.zeros_like(self.p[:, 0]).scatter_(-1, self.ids[:, j : j + 1], 1.0)
        assert self.q is not None  # a drafter that samples supplies its law
        return self.q[:, j]

    @cached_property
    def links(self) -> Tensor:
        """[B, n] the parents, padding's set to -1 (a padded row may hold any value there)."""
        return torch.where(self.valid, self.parents, -1)

    @cached_property
    def ids(self) -> Tensor:
        """[B, n] the tokens, padding replaced by token 0 (a padded row may hold any value there)."""
        return torch.where(self.valid, self.tokens, 0)

    def node_round(self) -> Round:
        """The nodes as a chain rule sees them: node j a fixed draft (``greedy_draft``: the proposal
        is the point mass on its token) against the target's law at its parent. The rules that run
        on it (the greedy targets, the target-only tests) read the token and p, never q."""
        q = self.q if self.q is not None else torch.zeros_like(self.p[:, 1:])
        return Round(self.ids, q, self.at_parents(self.p), None, self.at_parents(self.p_logits),
                     self.sampling, greedy_draft=True)


@dataclass(frozen=True)
class TreeVerdict:
    """Outcome of one tree round, batched over B."""

    nodes: Tensor  # [B, D] long: the accepted node indices from the root down, -1 after the path
    accepted: Tensor  # [B] the path's length
    next_token: Tensor  # [B] the token emitted after the path (residual sample or bonus)

    @cached_property
    def path(self) -> list[list[int]]:
        """Per row: the accepted node indices from the root down."""
        return [row[:k] for row, k in zip(self.nodes.tolist(), self.accepted.tolist())]


def without_earlier_siblings(q: Tensor, tokens: Tensor, parents: Tensor) -> Tensor:
    """[B, n, V] per-node draft law -> the law each node has when siblings are drawn WITHOUT
    replacement: q with the earlier siblings' tokens removed, renormalised (Yang et al. 2024,
    multi-candidate speculative decoding). A drafter that draws so passes this as ``q``."""
    out = q.clone()
    for j in range(1, q.shape[1]):
        earlier = (parents[:, :j] == parents[:, j : j + 1]).to(q.dtype)  # [B, j]
        hits = torch.zeros_like(q[:, j]).scatter_add_(-1, tokens[:, :j], earlier)
        out[:, j] = normalise(q[:, j].masked_fill(hits > 0, 0.0), q[:, j])
    return out


# ---------------------------------------------------------------------------------------------
# The rules


def _walk(r: TreeRound, step: Callable[[int, Tensor], Tensor]) -> Tensor:
    """Try nodes in order, each in the rows where its parent is the current node; ``step(j, tried)``
    returns the rows that keep node j (only ``tried`` rows count, the steps mask the rest). The end
    node per row (-1: the root). No host sync: every node is stepped, untried rows left unchanged."""
    cur = torch.full((r.tokens.shape[0],), -1, dtype=torch.long, device=r.tokens.device)
    valid = r.valid
    for j in range(r.tokens.shape[1]):
        tried = valid[:, j] & (r.links[:, j] == cur)
        cur = torch.where(step(j, tried) & tried, j, cur)
    return cur


def _lossless(verifier: Verifier, r: TreeRound, generators: Generators) -> tuple[Tensor, Tensor]:
    """Keep x with probability min(1, r(x) / q_x(x)); else r <- norm(max(0, r - q_x)) (SpecInfer)."""
    u = uniform(r.tokens.shape[0], r.tokens.shape[1], generators, r.tokens.device)
    residual = r.p[:, 0].clone()

    def step(j: int, tried: Tensor) -> Tensor:
        nonlocal residual
        x, q = r.ids[:, j : j + 1], r.proposal(j)
        rx, qx = residual.gather(-1, x).squeeze(-1), q.gather(-1, x).squeeze(-1)
        accept = torch.where(qx > 0, rx / qx.clamp_min(torch.finfo(qx.dtype).tiny), 0.0).clamp(max=1)
        keep = u[:, j] < accept
        rest = normalise((residual - q).clamp_min(0), residual)
        residual = torch.where((tried & ~keep).unsqueeze(-1), rest, residual)
        residual = torch.where((tried & keep).unsqueeze(-1), r.p[:, j + 1], residual)
        return keep

    end = _walk(r, step)
    return end, sample(normalise(residual, _at(r.p, end)), generators)


def _sglang(verifier: Verifier, r: TreeRound, generators: Generators) -> tuple[Tensor, Tensor]:
    """SGLang's TreeSpeculativeSamplingTargetOnly (sgl-kernel/csrc/speculative/speculative_sampling.cuh):
    one coin per parent; child x kept iff coin <= prob_acc / acc or p(x) >= single, prob_acc the
    summed p of the children tried so far; a rejected child's p copied into draft_probs, so the
    last token is drawn from relu(p - draft_probs) (draft_probs zeros in target-only mode)."""
    if not isinstance(verifier, ThresholdAcceptance):
        raise BenchError(f"{verifier.name}: tree rule 'sglang' reads ThresholdAcceptance's thresholds; subclass it")
    single = verifier.speculative_accept_threshold_single
    acc = max(verifier.speculative_accept_threshold_acc, SGLANG_MIN_THRESHOLD_ACC)
    batch = r.tokens.shape[0]
    coins = uniform(batch, r.tokens.shape[1] + 1, generators, r.tokens.device)
    coin, prob_acc = coins[:, 0], torch.zeros(batch, device=r.p.device)
    target, draft_probs = r.p[:, 0], torch.zeros_like(r.p[:, 0])

    def step(j: int, tried: Tensor) -> Tensor:
        nonlocal coin, prob_acc, target, draft_probs
        x = r.ids[:, j : j + 1]
        px = target.gather(-1, x).squeeze(-1)
        prob_acc = torch.where(tried, prob_acc + px, prob_acc)
        keep = tried & ((coin <= prob_acc / acc) | (px >= single))
        rejected = tried & ~keep
        hit = torch.zeros_like(draft_probs, dtype=torch.bool).scatter_(-1, x, rejected.unsqueeze(-1))
        draft_probs = torch.where(hit, target, draft_probs)  # the kernel's draft_probs[x] = p(x)
        prob_acc = torch.where(keep, 0.0, prob_acc)
        coin = torch.where(keep, coins[:, j + 1], coin)
        target = torch.where(keep.unsqueeze(-1), r.p[:, j + 1], target)
        draft_probs = torch.where(keep.unsqueeze(-1), 0.0, draft_probs)
        return keep

    end = _walk(r, step)
    return end, sample(normalise((target - draft_probs).clamp_min(0), target), generators)


def _longest(r: TreeRound, keep: Tensor) -> Tensor:
    """End node of the longest path of kept nodes from the root (ties: the lowest node index)."""
    batch, n = r.tokens.shape
    if n == 0:
        return torch.full((batch,), -1, dtype=torch.long, device=keep.device)
    ok = torch.zeros(batch, n, dtype=torch.bool, device=keep.device)
    depth = torch.zeros(batch, n, dtype=torch.long, device=keep.device)
    valid = r.valid
    for j in range(n):
        parent = r.links[:, j]
        root = parent < 0
        at = parent.clamp(min=0).unsqueeze(1)
        ok[:, j] = valid[:, j] & keep[:, j] & (root | ok.gather(1, at).squeeze(1))
        depth[:, j] = torch.where(root, 1, depth.gather(1, at).squeeze(1) + 1)
    key = torch.where(ok, depth * (n + 1) + (n - torch.arange(n, device=keep.device)), -1)
    best, end = key.max(-1)
    return torch.where(best > 0, end, -1)


def _first_child(r: TreeRound, node: Tensor) -> Tensor:
    """[B]: the first real child of ``node`` (-1: the root), or -1 where it has none."""
    n = r.tokens.shape[1]
    if n == 0:
        return torch.full_like(node, -1)
    children = r.valid & (r.links == node.unsqueeze(1))
    index = torch.where(children, torch.arange(n, device=node.device), n).min(-1).values
    return torch.where(index < n, index, -1)


def _at(x: Tensor, node: Tensor) -> Tensor:
    """[B, n + 1, V] -> [B, V]: the row at ``node`` (-1: the root)."""
    return x[torch.arange(x.shape[0], device=x.device), node + 1]


def _at_child(per_node: Tensor, child: Tensor, fallback: Tensor) -> Tensor:
    """[B, n, V] at ``child`` per row, ``fallback`` [B, V] where child is -1."""
    if per_node.shape[1] == 0:
        return fallback
    picked = per_node[torch.arange(per_node.shape[0], device=per_node.device), child.clamp(min=0)]
    return torch.where((child >= 0).unsqueeze(-1), picked, fallback)


def _target_only(verifier: Verifier, r: TreeRound, generators: Generators) -> tuple[Tensor, Tensor]:
    """Deterministic tests on p per node (the chain rule's accepted mass is 0 or q(x)); the longest
    kept path; then the chain rule's replacement after a rejection, the bonus from p at a leaf."""
    node = r.node_round()
    mass, residual = verifier.rule(node)
    keep = mass.gather(-1, r.ids.unsqueeze(-1)).squeeze(-1) > 0
    end = _longest(r, keep)
    bonus = _at(r.p, end)
    law = _at_child(normalise(residual, node.p), _first_child(r, end), bonus)
    return end, sample(law, generators)


def _greedy(verifier: Verifier, r: TreeRound) -> tuple[Tensor, Tensor]:
    """Temperature 0: keep a node iff its token is the argmax of the rule's greedy target."""
    choice = verifier.greedy_target(r.node_round()).argmax(-1)
    end = _longest(r, r.ids == choice)
    bonus = _at(r.p, end).argmax(-1)
    if r.tokens.shape[1] == 0:
        return end, bonus
    child = _first_child(r, end)
    return end, torch.where(child >= 0, choice.gather(1, child.clamp(min=0).unsqueeze(1)).squeeze(1), bonus)


TREE_RULES: dict[str, Callable[[Verifier, TreeRound, Generators], tuple[Tensor, Tensor]]] = {
    "lossless": _lossless,
    "sglang": _sglang,
    "target_only": _target_only,
}


def tree_methods() -> list[str]:
    """The registered methods that run on token trees."""
    return [name for name, cls in VERIFIERS.items() if cls.tree_rule is not None]


def check_tree_method(verifier: Verifier | type[Verifier]) -> str:
    """The tree rule a method runs with; a method without one is refused in one line."""
    rule = verifier.tree_rule
    if rule is None:
        raise BenchError(
            f"{verifier.name} is not defined on token trees; use {', '.join(tree_methods())} "
            "or a chain draft (--tree-width 1 / a chain drafter)"
        )
    if rule not in TREE_RULES:
        raise BenchError(
            f"{verifier.name}: unknown tree_rule {rule!r}; choose one of {', '.join(TREE_RULES)}"
        )
    return rule


def verify_tree(verifier: Verifier, r: TreeRound, generators: Generators = None) -> TreeVerdict:
    """Verify one round's token tree: the accepted path per row and the token emitted after it.

    ``generators`` may be one per row: row b then draws exactly what it would draw alone."""
    rule = check_tree_method(verifier)
    if r.sampling.greedy:
        end, next_token = _greedy(verifier, r)
    else:
        end, next_token = TREE_RULES[rule](verifier, r, generators)
    return TreeVerdict(*_paths(r.links, end), next_token)


def _paths(parents: Tensor, end: Tensor) -> tuple[Tensor, Tensor]:
    """[B, n] the root-to-``end`` node indices per row (-1 after a path), and their lengths. A path
    is at most n long, so n steps up reach the root without a host sync (D = n, not the depth)."""
    chain, node = [], end
    for _ in range(parents.shape[1]):
        chain.append(node)
        node = torch.where(node >= 0, parents.gather(1, node.clamp(min=0).unsqueeze(1)).squeeze(1), -1)
    if not chain:
        return end.new_full((end.shape[0], 0), -1), torch.zeros_like(end)
    up = torch.stack(chain[::-1], 1)  # -1 BEFORE a shorter path starts
    depth = up.shape[1]
    accepted = (up >= 0).sum(1)
    shift = torch.arange(depth, device=end.device) + (depth - accepted).unsqueeze(1)
    nodes = up.gather(1, shift.clamp(max=depth - 1))
    return torch.where(shift < depth, nodes, -1), accepted
