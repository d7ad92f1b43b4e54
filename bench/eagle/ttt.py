"""EAGLE-3 training-time test (TTT): the head unrolled over whole sequences, its loss, and the
held-out acceptance counted from the same unroll.

Why: the head drafts several tokens in a row from its own hidden states, so the authors train it
that way (SafeAILab/EAGLE @ cb7e0841, eagle/traineagle3/cnets.py ``Model.forward``): ``length``
= 7 steps; step j at position t reads token t+1+j (teacher-forced) and step j-1's output
(step 0 reads ``fc`` of the target's fused states), attends causally to step 0's keys and to
its own earlier steps' keys at the same position only (``LlamaAttention.forward``'s
``cache_hidden``: the "diagonal"), with rope at position t+j; it predicts token t+2+j.
The loss of a step is the cross-entropy against the target's softmax restricted to the draft
vocabulary (``target_head[..., t2d]``), at positions whose target argmax is in the draft
vocabulary (``t2d[target_max_token]``) and whose predicted token is a response token, averaged
over every position of the batch; eagle/traineagle3/main.py sums the steps with weights 0.8^j
(``ploss_weight = [0.8 ** i for i in range(len(plosses))]``).

This module runs the parameters of ``bench.eagle.Eagle3Head`` (the published layout), so the
trained state dict is the checkpoint the drafter loads; only the unrolled attention is here.
"""

from __future__ import annotations

import math
import operator
from functools import reduce
from typing import Any

import torch
from torch import Tensor
from torch.nn import functional as F

from bench.eagle.heads import Attention, CacheKV, Eagle1Layer, Eagle3Head, Eagle3Layer, rotary, rotate_half

Batch = dict[str, Tensor]


def ttt_attention(
    attn: Attention, x: Tensor, cache: list[tuple[Tensor, Tensor]], step: int, start: int, first: int
) -> Tensor:
    """One step's attention: causal over step 0's keys, plus the keys of steps 1..step at the same
    position (appended to ``cache``); rope at position t + step. Step 0's ``x`` covers every
    position (all are keys) and queries from index ``first`` on (``start`` in the last layer;
    every position in a layer that feeds another, whose keys need them all); later steps' ``x``
    covers ``start`` on only: before it no step has a loss, so nothing there is computed beyond
    step 0's keys."""
    c, (b, n, _) = attn.config, x.shape
    offset = 0 if step == 0 else start  # the position of x's first row
    pos = (torch.arange(n, device=x.device) + offset + step).expand(b, -1)
    cos, sin = rotary(pos, c.dim, c.rope_theta, x.dtype)
    q = attn.q_proj(x[:, first:]).view(b, n - first, -1, c.dim).transpose(1, 2)
    k = attn.k_proj(x).view(b, n, -1, c.dim).transpose(1, 2)
    v = attn.v_proj(x).view(b, n, -1, c.dim).transpose(1, 2)
    q = q * cos[:, :, first:] + rotate_half(q) * sin[:, :, first:]
    k = k * cos + rotate_half(k) * sin
    groups = q.shape[1] // k.shape[1]
    cache.append((k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)))
    (k0, v0), scale, keys = cache[0], math.sqrt(c.dim), cache[0][0].shape[2]
    causal = torch.full((q.shape[2], keys), float("-inf"), device=x.device, dtype=q.dtype).triu(offset + first + 1)
    scores = [q @ k0.transpose(2, 3) / scale + causal]
    scores += [((q * ki).sum(-1) / scale)[..., None] for ki, _ in cache[1:]]
    w = torch.softmax(torch.cat(scores, dim=-1), dim=-1, dtype=torch.float32).to(q.dtype)
    out = w[..., :keys] @ v0
    for i, (_, vi) in enumerate(cache[1:]):
        out = out + w[..., keys + i, None] * vi
    return attn.o_proj(out.transpose(1, 2).reshape(b, q.shape[2], -1))


def ttt_layer(layer: Eagle3Layer, emb: Tensor, h: Tensor, cache: list[CacheKV], step: int, start: int, first: int) -> Tensor:
    """The midlayer (the authors' LlamaDecoderLayeremb) with the unrolled attention; its output
    covers positions ``first`` on at step 0 and ``start`` on after."""
    normed = layer.hidden_norm(h)
    residual = (normed if layer.before else h)[:, first:]
    x = torch.cat((layer.input_layernorm(emb), normed), dim=-1)
    h = residual + ttt_attention(layer.self_attn, x, cache, step, start, first)
    return h + layer.mlp(layer.post_attention_layernorm(h))


def ttt_later_layer(layer: Eagle1Layer, h: Tensor, cache: list, step: int, start: int, first: int) -> Tensor:
    """A layer after the midlayer (a plain Llama layer) with the unrolled attention, as ``ttt_layer``."""
    x = layer.input_layernorm(h)
    h = h[:, first:] + ttt_attention(layer.self_attn, x, cache, step, start, first)
    return h + layer.mlp(layer.post_attention_layernorm(h))


def shift(x: Tensor, by: int) -> Tensor:
    """x[:, t + by] at t, zero past the end (the authors' ``padding(..., left=False)``, ``by`` times)."""
    if by == 0:
        return x
    pad = [0, 0] * (x.dim() - 2) + [0, by]
    return F.pad(x[:, by:], pad)[:, : x.shape[1]] if by < x.shape[1] else torch.zeros_like(x)


def unroll(head: Eagle3Head, feats: Tensor, tokens: Tensor, steps: int, start: int = 0) -> list[Tensor]:
    """Draft logits [B, T - start, Vd] of each step at positions ``start`` on; ``feats``
    [B, T, 3H] the target's fused states at position t, ``tokens`` [B, T] token t + 1 (so step j
    reads ``shift(tokens, j)``). Each layer keeps its own cache of the steps' keys."""
    later = head.later_layers()
    hidden, out = head.fc(feats), []
    caches: list[list[CacheKV]] = [[] for _ in range(1 + len(later))]
    for j in range(steps):
        emb = head.embed_tokens(shift(tokens, j)[:, 0 if j == 0 else start :]).to(hidden.dtype)
        firsts = [start if j == 0 and i == len(later) else 0 for i in range(1 + len(later))]
        hidden = ttt_layer(head.midlayer, emb, hidden, caches[0], j, start, firsts[0])
        for i, layer in enumerate(later, start=1):
            hidden = ttt_later_layer(layer, hidden, caches[i], j, start, firsts[i])
        out.append(head.lm_head(head.norm(hidden)).float())
    return out


def ttt_losses(
    head: Eagle3Head, batch: Batch, target_w: Tensor, steps: int
) -> tuple[list[Tensor], list[float]]:
    """Each step's loss and top-1 accuracy (the authors' ``plosses`` and ``acces``). ``target_w``
    [Vd, H] is the target's output layer at the draft ids: ``final @ target_w.T`` is
    ``target_head[..., t2d]``; position s of ``final``/``argmax``/``valid`` is about token s + 1."""
    start = max(0, int(batch["prompt_len"].min()) - 1 - steps)  # no step has a loss before it
    logits = unroll(head, batch["feats"], batch["tokens"], steps, start)
    target_p = torch.softmax(batch["final"] @ target_w.T, dim=-1).detach()
    in_vocab = head.t2d[batch["argmax"]] & batch["valid"]
    losses, accs, total = [], [], batch["valid"].numel()
    for j, lg in enumerate(logits):
        p, mask = shift(target_p, 1 + j)[:, start:], shift(in_vocab, 1 + j)[:, start:].float()
        losses.append(-(mask * (p * torch.log_softmax(lg, dim=-1)).sum(-1)).sum() / total)
        hit = (lg.argmax(-1) == p.argmax(-1)).float() * mask
        accs.append(float(hit.sum() / shift(batch["valid"], 1 + j).float().sum().clamp(min=1)))
    return losses, accs


def weighted(losses: list[Tensor]) -> Tensor:
    """eagle/traineagle3/main.py: ``sum(0.8 ** i * plosses[i])``."""
    return reduce(operator.add, (0.8**j * loss for j, loss in enumerate(losses)))  # sum() would start at 0


def collate(records: list[dict[str, Any]]) -> Batch:
    """Records (bench.eagle.train.generate_features) as a right-padded batch: ``tokens`` is
    token t + 1 at position t, ``valid`` marks positions whose next token is a response token.
    Memory-mapped records (bench.eagle.shards) are read here, a batch at a time."""
    from bench.eagle.shards import materialise

    records = [materialise(r) for r in records]
    n = max(len(r["ids"]) - 1 for r in records)

    def pad(x: Tensor) -> Tensor:
        return F.pad(x, [0, 0] * (x.dim() - 1) + [0, n - x.shape[0]])

    valid = [torch.arange(n) >= r["prompt_len"] - 1 for r in records]
    valid = [v & (torch.arange(n) < len(r["ids"]) - 1) for v, r in zip(valid, records, strict=True)]
    return {
        "feats": torch.stack([pad(r["feats"]) for r in records]),
        "final": torch.stack([pad(r["final"]) for r in records]),
        "tokens": torch.stack([pad(r["ids"][1:]) for r in records]),
        "argmax": torch.stack([pad(r["argmax"]) for r in records]),
        "valid": torch.stack(valid),
        "prompt_len": torch.tensor([r["prompt_len"] for r in records]),
    }


@torch.no_grad()
def chain_acceptance(head: Eagle3Head, records: list[dict[str, Any]], depth: int) -> dict[str, Any]:
    """Tokens per round of greedy chain drafting (depth ``depth``) over the target's own greedy
    responses, counted. While a chain is right its inputs are the true tokens, so step j of the
    teacher-forced unroll at position n - 1 is the chain's (j+1)-th draft after token n: a round
    from n accepts the run of leading hits there, plus the target's own token."""
    from bench.eagle.shards import materialise

    tokens = rounds = 0
    hits = [0] * depth
    for r in map(materialise, records):
        ids, p = r["ids"], r["prompt_len"]
        logits = unroll(head, r["feats"][None], ids[None, 1:], depth, p - 1)
        t_len = len(ids) - 1
        hit = torch.zeros(depth, t_len, dtype=torch.bool)
        for j, lg in enumerate(logits):
            pred = head.to_target(lg[0].argmax(-1))  # positions p - 1 on
            span = max(0, t_len - 1 - j - (p - 1))
            hit[j, p - 1 : p - 1 + span] = pred[:span] == ids[p + 1 + j : p + 1 + j + span]
        run = hit.int().cumprod(0).sum(0)
        for j in range(depth):
            hits[j] += int(hit[j, p - 1 : t_len - 1 - j].sum())
        n = p
        while n < t_len:
            made = min(int(run[n - 1]), t_len - n - 1) + 1
            tokens, rounds, n = tokens + made, rounds + 1, n + made
    positions = sum(len(r["ids"]) - r["prompt_len"] - 1 for r in records)
    return {
        "depth": depth,
        "tokens_per_round": tokens / max(rounds, 1),
        "rounds": rounds,
        "tokens": tokens,
        "step_top1": [h / max(positions, 1) for h in hits],
    }


@torch.no_grad()
def first_draft_acceptance(
    head: Eagle3Head, records: list[dict[str, Any]], target_head: Tensor, temperature: float, topk: int
) -> dict[str, Any]:
    """At temperature ``temperature`` > 0, the probability that a round's first draft is accepted,
    exactly (an expectation, not a draw), averaged over the target's own responses: for the sampled
    chain (a draw from q, standard rejection sampling) sum_x min(p(x), q(x)); for the authors' tree
    (the head's ``topk`` children, the q-free rule: child i is accepted with probability p(x_i) after
    x_1..x_{i-1} are zeroed and p renormalised, so some child is accepted with probability
    sum_i p(x_i)) the mass p puts on those children. ``target_head`` [V, H] is the target's output
    layer (p over its whole vocabulary: mass off the draft vocabulary is never accepted)."""
    from bench.eagle.shards import materialise

    chain = tree = 0.0
    positions = 0
    for r in map(materialise, records):
        ids, p = r["ids"], r["prompt_len"]
        if len(ids) - p < 2:
            continue
        logits = unroll(head, r["feats"][None], ids[None, 1:], 1, p - 1)[0][0, : len(ids) - p - 1]  # drafts of ids[p+1:]
        target = torch.softmax(r["final"][p : len(ids) - 1].float() @ target_head.T.float() / temperature, dim=-1)
        q = head.target_probs(torch.softmax(logits / temperature, dim=-1))
        chain += float(torch.minimum(target, q).sum())
        top = head.to_target(logits.topk(topk, dim=-1).indices)
        tree += float(target.gather(-1, top).sum())
        positions += logits.shape[0]
    return {"temperature": temperature, "topk": topk, "positions": positions,
            "sampled_chain": chain / max(positions, 1), "tree_first_level": tree / max(positions, 1)}  # fmt: skip
