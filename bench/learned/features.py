"""The hidden states a judge head reads at a drafted token, computed for training exactly as the
decoder reads them while verifying (the target's last hidden state with the token as input, the
draft's where it predicted the token), and the pair as the miners' batched ``Oracle``.

Batches: teacher-forced rows are right-padded (causal attention: a real position never sees the
padding after it); greedy rows are left-padded with an attention mask and their own positions, so
each row decodes as it would alone. Rows go in chunks of at most ``TOKENS`` tokens.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from bench.learned.heads import feature_vector
from bench.learned.miners import Drafted, Greedy, Likelihood
from bench.pairs import Pair

TOKENS = 16384  # padded tokens per forward
LOGITS = 1 << 25  # logits per forward that returns them all (tokens x vocabulary)


def chunks(lengths: Sequence[int], budget: int = TOKENS) -> Iterator[list[int]]:
    """Indices of rows in order, grouped so that rows x longest row stays within ``budget``."""
    budget = max(budget, max(lengths, default=1))
    group: list[int] = []
    for i, n in enumerate(lengths):
        if group and (len(group) + 1) * max(n, *(lengths[j] for j in group)) > budget:
            yield group
            group = []
        group.append(i)
    if group:
        yield group


def _right_padded(rows: Sequence[list[int]], device: torch.device) -> Tensor:
    out = torch.zeros(len(rows), max(map(len, rows)), dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out.to(device)


@torch.no_grad()
def token_features(pair: Pair, features: str, sites: Sequence[tuple[list[int], int]]) -> list[Tensor]:
    """[F] the features of each ``token`` drafted after its ``context``."""
    out: list[Tensor] = [torch.empty(0)] * len(sites)
    rows = [context + [token] for context, token in sites]
    for group in chunks([len(r) for r in rows]):
        ids = _right_padded([rows[i] for i in group], pair.device)
        last = torch.tensor([len(rows[i]) - 1 for i in group], device=pair.device)
        at = torch.arange(len(group), device=pair.device)
        h_target = pair.target(input_ids=ids, output_hidden_states=True).hidden_states[-1][at, last]
        h_draft = None
        if features == "draft+target":
            h_draft = pair.draft(input_ids=ids, output_hidden_states=True).hidden_states[-1][at, last - 1]
        for k, i in enumerate(group):
            out[i] = feature_vector(features, None if h_draft is None else h_draft[k], h_target[k]).cpu()
    return out


class PairOracle:
    """A loaded pair as the miners' ``Oracle``: greedy and teacher-forced target, draft proposals."""

    def __init__(self, pair: Pair) -> None:
        self.pair, self.eos = pair, frozenset(pair.eos_token_ids)

    @torch.no_grad()
    def greedy(self, calls: Sequence[Greedy]) -> list[list[int]]:
        out: list[list[int]] = []
        for group in chunks([len(c.ids) + c.max_new for c in calls]):
            out += self._greedy([calls[i] for i in group])
        return out

    def _greedy(self, calls: Sequence[Greedy]) -> list[list[int]]:
        device, width = self.pair.device, max(len(c.ids) for c in calls)
        ids = torch.zeros(len(calls), width, dtype=torch.long)
        mask = torch.zeros(len(calls), width, dtype=torch.long)
        for i, c in enumerate(calls):
            ids[i, width - len(c.ids) :], mask[i, width - len(c.ids) :] = torch.tensor(c.ids), 1
        ids, mask = ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        out: list[list[int]] = [[] for _ in calls]
        live = [c.max_new > 0 for c in calls]
        cache = None
        while any(live):  # one token a step on the model's own cache: no generate() defaults
            result = self.pair.target(
                input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=1
            )
            cache, tokens = result.cache, result.logits[:, -1].argmax(-1)
            for i, token in enumerate(tokens.tolist()):
                if live[i]:
                    out[i].append(token)
                    live[i] = token not in self.eos and len(out[i]) < calls[i].max_new
            ids, positions = tokens[:, None], positions[:, -1:] + 1
            mask = torch.cat([mask, torch.ones_like(ids)], dim=-1)
        return out

    def _logits_budget(self) -> int:
        return min(TOKENS, LOGITS // self.pair.target.config.vocab_size)

    @torch.no_grad()
    def drafted(self, calls: Sequence[Drafted]) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in calls]
        for group in chunks([len(c.ids) for c in calls], self._logits_budget()):
            logits = self.pair.draft(input_ids=_right_padded([calls[i].ids for i in group], self.pair.device)).logits
            for k, i in enumerate(group):
                c = calls[i]
                row = logits[k, : len(c.ids)].float()
                if c.temperature > 0:  # Gumbel-max: a sample of softmax(row / T) from the call's own seed
                    u = torch.rand(row.shape, generator=torch.Generator().manual_seed(c.seed)).to(row.device)
                    row = row / c.temperature - torch.log(-torch.log(u.clamp(1e-20, 1.0)))
                out[i] = row.argmax(-1).tolist()
        return out

    @torch.no_grad()
    def likelihood(self, calls: Sequence[Likelihood]) -> list[Tensor]:
        out: list[Tensor] = [torch.empty(0)] * len(calls)
        for group in chunks([len(c.ids) for c in calls], self._logits_budget()):
            ids = _right_padded([calls[i].ids for i in group], self.pair.device)
            logits = self.pair.target(input_ids=ids).logits[:, :-1].float()
            chosen = logits.gather(-1, ids[:, 1:, None])[..., 0] - logits.logsumexp(-1)
            for k, i in enumerate(group):
                out[i] = chosen[k, : len(calls[i].ids) - 1].cpu()
        return out
