"""A chain round's verifier step, a function over tensors: the target's logits and probabilities
for the drafted positions, the draft's tokens and laws (``Draft``), the rows' generators in, the
verdicts (accepted counts, next tokens, expected acceptance and bias, a head's weights) out, all
on the device. Drafters and the verifier meet only here and only through these tensors (as vLLM's
rejection sampler meets its proposers), so the loop (``bench.decoding``) keeps only the order of
a round's steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from bench.distributions import Sampling, pick
from bench.drafters import Draft
from bench.engines import to_device
from bench.verifier_heads import VerifierHead
from bench.rounds import RoundHost
from bench.verifiers import Round, Verifier, verify

# Per verified group: its rows, and their [expected acceptance, bias] per position [rows, 2, k].
GroupSums = list[tuple[list[int], Tensor]]


def verify_chain(
    verifier: Verifier,
    draft: Draft | None,
    ns: list[int],
    p_logits: Tensor,
    p: Tensor,
    h_target: Tensor | None,
    generators: Sequence[torch.Generator],
    *,
    sampling: Sampling,
    greedy_draft: bool,
    head: VerifierHead | None,
) -> tuple[Tensor, Tensor, GroupSums, dict[int, Tensor]]:
    """The verdicts of a round: rows that drafted as many tokens are verified together (a
    batch of one is one group). Returns accepted counts and next tokens [B], the per-position
    [expected acceptance, bias] of each verified group, and DIVERSED's weights per row."""
    device, count, n = p_logits.device, len(generators), max(ns)
    verdicts: list[tuple[slice | Tensor, Tensor, Tensor]] = []  # rows, accepted, next token
    floats: GroupSums = []
    weights: dict[int, Tensor] = {}
    for k in sorted(set(ns)):
        idx = [i for i, nb in enumerate(ns) if nb == k]
        sel = slice(None) if len(idx) == count else to_device(idx, device)
        mine = [generators[i] for i in idx]
        if k == 0:
            probs = p_logits[sel, 0] if sampling.greedy else p[sel, 0]
            token = pick(probs, mine, sampling.greedy)
            verdicts.append((sel, torch.zeros_like(token), token))
            continue
        assert draft is not None
        sliced = len(idx) < count or k < n
        w = _weights(verifier, head, draft, h_target, sel, k, sliced)
        round_ = chain_round(draft, sel, k, sliced, p_logits, p, sampling=sampling, greedy_draft=greedy_draft, weights=w)
        verdict = verify(verifier, round_, p[sel, k], mine)
        verdicts.append((sel, verdict.accepted, verdict.next_token))
        floats.append((idx, torch.stack([verdict.expected_acceptance, verdict.bias], dim=1)))
        if round_.weights is not None:
            weights.update(zip(idx, round_.weights))
    if len(verdicts) == 1:
        _, accepted, next_token = verdicts[0]
        return accepted, next_token, floats, weights
    accepted = torch.zeros(count, dtype=torch.long, device=device)
    next_token = torch.zeros(count, dtype=torch.long, device=device)
    for sel, acc, token in verdicts:
        accepted[sel], next_token[sel] = acc, token
    return accepted, next_token, floats, weights


def chain_round(
    draft: Draft,
    sel: slice | Tensor,
    k: int,
    sliced: bool,
    p_logits: Tensor,
    p: Tensor,
    *,
    sampling: Sampling,
    greedy_draft: bool,
    weights: Tensor | None,
) -> Round:
    """What the verifier reads of the rows ``sel``, which drafted ``k`` tokens each."""
    draft_ids, draft_q, draft_logits = draft.tokens, draft.q, draft.q_logits
    if sliced:  # only when needed: each slice is a dispatch
        draft_ids = draft_ids[sel, :k]
        draft_q = draft_q[sel, :k] if draft_q is not None else None
        draft_logits = draft_logits[sel, :k] if draft_logits is not None else None
    target = p[sel, :k]
    if draft_q is None:  # a deterministic drafter: its law is the point mass on its token
        draft_q = torch.zeros_like(target).scatter_(-1, draft_ids.unsqueeze(-1), 1.0)
    return Round(
        draft=draft_ids,
        q=draft_q,
        p=target,
        q_logits=draft_logits,
        p_logits=p_logits[sel, :k],
        sampling=sampling,
        weights=weights,
        greedy_draft=greedy_draft and draft.q is not None,  # a lookup's q is its proposal
    )


def _weights(
    verifier: Verifier,
    head: VerifierHead | None,
    draft: Draft,
    h_target: Tensor | None,
    sel: slice | Tensor,
    k: int,
    sliced: bool,
) -> Tensor | None:
    """The learned head on the round's states, for a verifier that reads one: DIVERSED's reads the
    target's states that predict each drafted token, a judge's (``at_token``) those with the
    drafted token as input."""
    if not verifier.needs_hidden:
        return None
    assert h_target is not None and head is not None
    draft_h = draft.hidden[sel, :k] if sliced and draft.hidden is not None else draft.hidden
    start = 1 if head.at_token else 0
    return head(draft_h, h_target[sel, start : start + k])


def chain_tokens(drafted: Tensor, accepted: Tensor, next_token: Tensor) -> Tensor:
    """[B, n + 1]: the token each position of a chain round would emit (the drafts up to the
    accepted count, the verifier's token at it; later positions are unused)."""
    last = next_token.unsqueeze(1)
    return torch.cat([drafted, last], dim=1).scatter(1, accepted.unsqueeze(1), last)


def fidelity(logits: Tensor, tokens: Tensor, temperature: float) -> tuple[Tensor, Tensor]:
    """[B, k] each, for ``tokens`` [B, k] read at the target's ``logits`` [B, k, V] of the verify
    forward (the fidelity columns cost no forward): the temperature-1 log p (``target_loglik``)
    and log p_T(y) + H(p_T) (``target_divergence``), p_T the softmax of the logits at the sampling
    temperature (1 under greedy decoding, whose point mass has no entropy to weigh; top-k and
    top-p not applied, so a token they exclude stays finite): its mean is 0 when y ~ p_T."""
    logits = logits.float()
    picked = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    law = (logits / (temperature or 1.0)).log_softmax(-1)
    entropy = torch.special.entr(law.exp()).sum(-1)
    return picked - logits.logsumexp(-1), law.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) + entropy


def chain_host(got: dict[str, list[Any]], ns: list[int], groups: list[list[int]], trace: bool) -> RoundHost:
    """A chain round's RoundHost from its host copy: ``sums{g}`` holds verified group g's rows'
    expected acceptances then biases (``groups[g]`` names the rows), ``drafted`` is padded to
    the longest draft; ``trace``: the copy holds the trace's probabilities too."""
    sums: dict[int, list[list[float]]] = {}
    for g, idx in enumerate(groups):
        for i, both in zip(idx, got[f"sums{g}"]):
            k = len(both) // 2
            sums[i] = [both[:k], both[k:]]
    names = ("p_next", "p_draft", "q_draft", "q_next")
    return RoundHost(
        accepted=got["accepted"],
        next_token=got["next_token"],
        drafts=[tokens[:nb] for tokens, nb in zip(got["drafted"], ns)],
        logp=got["logp"],
        excess=got["excess"],
        sums=sums,
        probs={k: got[k] for k in names if k in got} if trace else None,
    )
