"""A round whose draft is a token tree per row (``Draft.parents``): one target forward over every
node (``ModelEngine.tree_step``), the rule on trees (``bench.verifiers.tree``) picks one path per
row, and one host copy reads the paths. The loop (``bench.decoding``) hands the target's states
and the verdicts on and emits; everything here is tensors in, tensors and lists out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from bench.distributions import Sampling, pick, process
from bench.drafters import Draft
from bench.engines import ModelEngine, to_device
from bench.errors import BenchError
from bench.rounds import RoundHost, to_host
from bench.verify_step import fidelity
from bench.verifiers import Verifier
from bench.verifiers.tree import TreeRound, check_tree_method, verify_tree


def tree_round(
    target: ModelEngine,
    verifier: Verifier,
    draft: Draft,
    last: Tensor,
    generators: Sequence[torch.Generator],
    sampling: Sampling,
    greedy_draft: bool,
) -> RoundHost:
    """The target's forward over each row's last token and tree, the verdicts, the round's one
    host copy, and the accepted paths' K/V committed in ``target``'s cache."""
    ns, nodes, parents = draft.counts, draft.tokens, draft.parents
    assert parents is not None  # a tree drafter's draft holds each node's parent
    p_logits = target.tree_step(torch.cat([last, nodes], dim=1), parents, [1 + nb for nb in ns])
    p = process(p_logits, sampling)
    on_path, accepted, next_token = verify_trees(verifier, draft, p_logits, p, generators, sampling, greedy_draft)
    parts = {
        "next_token": next_token,
        "nodes": nodes,
        "parents": parents,
        "on_path": on_path,
        "accepted": accepted,
    }
    parts["logp"], parts["excess"] = fidelity(*path_tokens(p_logits, nodes, on_path, accepted, next_token), sampling.temperature)
    host = tree_host(to_host(parts), ns)  # the round's sync
    target.commit(host.paths)
    return host


def tree_host(got: dict[str, list[Any]], ns: list[int]) -> RoundHost:
    """A tree round's RoundHost from its host copy: ``on_path`` holds each row's accepted node
    indices (then -1s), ``nodes`` and ``parents`` its tree (padded past its ``ns`` nodes)."""
    paths = [path[:k] for path, k in zip(got["on_path"], got["accepted"])]
    return RoundHost(
        accepted=[len(path) for path in paths],
        next_token=got["next_token"],
        drafts=[[tokens[j] for j in path] for tokens, path in zip(got["nodes"], paths)],
        logp=got["logp"],
        excess=got["excess"],
        depth=[tree_depth(parents[:nb]) for parents, nb in zip(got["parents"], ns)],
        paths=paths,
    )


def tree_depth(parents: list[int]) -> int:
    """Levels of a token tree from each node's parent (-1: the root); nodes come after parents."""
    depth = [0] * len(parents)
    for j, up in enumerate(parents):
        depth[j] = 1 + (depth[up] if up >= 0 else 0)
    return max(depth, default=0)


def check_trees(verifier: Verifier, trace: bool) -> None:
    """A method, a weight head or a trace not defined on token trees is refused in one line."""
    check_tree_method(verifier)
    if verifier.needs_hidden or trace:
        what = "a weight head" if verifier.needs_hidden else "--trace"
        raise BenchError(f"{verifier.name}: {what} is defined on chain drafts only; use a chain drafter")


def verify_trees(
    verifier: Verifier,
    draft: Draft,
    p_logits: Tensor,
    p: Tensor,
    generators: Sequence[torch.Generator],
    sampling: Sampling,
    greedy_draft: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """On the device, no sync: the accepted path per row ([B, n] node indices, -1 after it), its
    length [B] and the token after it. Rows with as many nodes are verified together, without
    padding (as ``bench.verify_step.verify_chain`` groups chains): a row's draws are the ones it
    makes alone."""
    ns, count, n, device = draft.counts, len(generators), draft.tokens.shape[1], p_logits.device
    on_path = torch.full((count, n), -1, dtype=torch.long, device=device)
    accepted = torch.zeros(count, dtype=torch.long, device=device)
    next_token = torch.zeros(count, dtype=torch.long, device=device)
    for k in sorted(set(ns)):
        idx = [i for i, nb in enumerate(ns) if nb == k]
        sel = slice(None) if len(idx) == count else to_device(idx, device)
        mine = [generators[i] for i in idx]
        if k == 0:  # nothing drafted: the target's token, drawn as a chain round draws it
            next_token[sel] = pick(p_logits[sel, 0] if sampling.greedy else p[sel, 0], mine, sampling.greedy)
            continue
        cut = len(idx) < count or k < draft.tokens.shape[1]
        tokens, parents, q = draft.tokens, draft.parents, draft.q
        assert parents is not None  # a tree drafter's draft holds each node's parent
        if cut:
            tokens, parents = tokens[sel, :k], parents[sel, :k]
            q = q[sel, :k] if q is not None else None
        round_ = TreeRound(
            tokens=tokens,
            parents=parents,
            counts=[k] * len(idx),
            p=p[sel, : k + 1] if cut else p,
            p_logits=p_logits[sel, : k + 1] if cut else p_logits,
            q=q,
            sampling=sampling,
            greedy_draft=greedy_draft and draft.q is not None,
        )
        verdict = verify_tree(verifier, round_, mine)
        on_path[sel, :k] = verdict.nodes
        accepted[sel] = verdict.accepted
        next_token[sel] = verdict.next_token
    return on_path, accepted, next_token


def path_tokens(p_logits: Tensor, nodes: Tensor, on_path: Tensor, accepted: Tensor, next_token: Tensor) -> tuple[Tensor, Tensor]:
    """The target's logits [B, n + 1, V] before each token a tree round emits, and those tokens
    [B, n + 1] (the path's nodes, read at their parents' logits, then the verifier's token at the
    path's end; padding after it), from the device's path without a sync."""
    n = nodes.shape[1]
    step = torch.arange(n + 1, device=nodes.device)
    path = torch.cat([on_path, on_path.new_full((on_path.shape[0], 1), -1)], dim=1)
    at = torch.cat([on_path.new_zeros(on_path.shape[0], 1), (on_path + 1).clamp(min=0)], dim=1)
    end = accepted.unsqueeze(1)
    pick_ = torch.where(step < end, path.clamp(min=0), torch.where(step == end, n, 0))
    tokens = torch.cat([nodes, next_token.unsqueeze(1)], dim=1).gather(1, pick_)
    return p_logits.gather(1, at.unsqueeze(-1).expand(-1, -1, p_logits.shape[-1])), tokens
