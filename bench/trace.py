"""Token traces (``--trace``): per emitted token, its fate and the target's and draft's
probabilities, read from what the chain round already computed, after its one host copy; tracing
draws nothing, so a traced decode emits the tokens an untraced one does. A tree round has no trace
(``bench.tree_round.check_trees`` refuses it).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from bench.distributions import Sampling, process
from bench.rounds import Row

TRACE_FIELDS = (
    "position",  # index of the token in the completion
    "round",
    "token_id",
    "fate",  # accepted (a draft kept), resampled (from the residual after a rejection), bonus (target)
    "p",  # target probability of the emitted token at its position
    "q",  # draft probability of the emitted token there (NaN for a bonus token: nothing drafted;
    # 1 or 0 under prompt lookup, whose law is the point mass on its token)
    "rejected_token_id",  # the draft token rejected at this position (-1 if none)
    "rejected_p",
    "rejected_q",
    "weight",  # the verifier's weight at this position (DIVERSED's w_t; NaN without one)
)


def trace_probs(
    p_logits: Tensor,
    p: Tensor,
    q: Tensor | None,
    drafted: Tensor,
    accepted: Tensor,
    next_token: Tensor,
    sampling: Sampling,
) -> dict[str, Tensor]:
    """Per row: p and q of every drafted token, and of the token emitted after them (only when
    tracing; read with the round's other values)."""
    if p is p_logits:  # greedy without a draft kept the logits: the trace reports probabilities
        p = process(p_logits, sampling)
    rows = torch.arange(p.shape[0], device=p.device)
    n = drafted.shape[1]
    out = {"p_next": p[rows, accepted, next_token]}
    if n:
        out["p_draft"] = p[:, :n].gather(-1, drafted.unsqueeze(-1)).squeeze(-1)
        at = accepted.clamp(max=n - 1)
        if q is None:  # a lookup draft: its law is the point mass on the drafted token
            out["q_draft"] = torch.ones_like(drafted, dtype=p.dtype)
            out["q_next"] = (drafted[rows, at] == next_token).to(p.dtype)
        else:
            out["q_draft"] = q.gather(-1, drafted.unsqueeze(-1)).squeeze(-1)
            out["q_next"] = q[rows, at, next_token]
    return out


def record_trace(
    row: Row,
    i: int,
    nb: int,
    acc: int,
    new: list[int],
    drafts: list[int],
    probs: dict[str, list[Any]],
    weights: Tensor | None,
) -> None:
    """One trace tuple per token the round emitted for row ``i`` (``new``, cut at EOS)."""
    nan = math.nan
    w = weights.tolist() if weights is not None else []
    start, round_ = len(row.out), row.stats.rounds - 1  # counted already: 0-based
    for j, token in enumerate(new):
        weight = w[j] if j < len(w) else nan
        if j < acc:
            entry = ("accepted", probs["p_draft"][i][j], probs["q_draft"][i][j], -1, nan, nan)
        elif j < nb:
            entry = (
                "resampled",
                probs["p_next"][i],
                probs["q_next"][i],
                drafts[j],
                probs["p_draft"][i][j],
                probs["q_draft"][i][j],
            )
        else:
            entry = ("bonus", probs["p_next"][i], nan, -1, nan, nan)
        fate, p_tok, q_tok, rejected, p_rej, q_rej = entry
        row.trace.append((start + j, round_, token, fate, p_tok, q_tok, rejected, p_rej, q_rej, weight))
