"""The hidden states a judge head reads at a drafted token, computed for training exactly as the
decoder reads them while verifying (the target's last hidden state with the token as input, the
draft's where it predicted the token), and the pair as the miners' batched ``Oracle``.

Batches: teacher-forced sequences that share a prompt run it once (bench.learned.shared); draft
rows are right-padded (causal attention: a real position never sees the padding after it); greedy
rows are left-padded with an attention mask and their own positions, so each row decodes as it
would alone. Rows go in chunks of at most ``TOKENS`` tokens.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from bench.errors import BenchError
from bench.head import feature_vector
from bench.learned.miners import Drafted, Greedy, Likelihood, Swapped
from bench.learned.shared import Shared, forward_shared, share
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
    """[F] the features of each ``token`` drafted after its ``context`` (one question's: they share
    its prompt, run once, bench.learned.shared)."""
    rows = [context + [token] for context, token in sites]
    if not rows:
        return []
    first = min(len(context) for context, _ in sites)
    group = share(rows, first)
    ((_, h_target),) = forward_shared(pair.target, [group], hidden=True)
    at = [group.row(i, len(r) - 1) for i, r in enumerate(rows)]
    h_draft = None
    if features == "draft+target":
        before = share(rows, first - 1)
        ((_, states),) = forward_shared(pair.draft, [before], hidden=True)
        h_draft = states[[before.row(i, len(r) - 2) for i, r in enumerate(rows)]]
    h_target = h_target[at]
    return [
        feature_vector(features, None if h_draft is None else h_draft[k], h_target[k]).cpu() for k in range(len(rows))
    ]


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
        model = [i for i, c in enumerate(calls) if c.drafter == "model"]
        for i, c in enumerate(calls):
            if c.drafter != "model":
                out[i] = self._looked_up(c)
        for group in chunks([len(calls[i].ids) for i in model], self._logits_budget()):
            group = [model[k] for k in group]
            logits = self.pair.draft(input_ids=_right_padded([calls[i].ids for i in group], self.pair.device)).logits
            for k, i in enumerate(group):
                c = calls[i]
                row = logits[k, : len(c.ids)].float()
                if c.temperature > 0:  # Gumbel-max: a sample of softmax(row / T) from the call's own seed
                    u = torch.rand(row.shape, generator=torch.Generator().manual_seed(c.seed)).to(row.device)
                    row = row / c.temperature - torch.log(-torch.log(u.clamp(1e-20, 1.0)))
                out[i] = row.argmax(-1).tolist()
        return out

    def _looked_up(self, call: Drafted) -> list[int]:
        from bench.drafters import parse_drafter
        from bench.drafters.lookup import first_proposals

        name, p = parse_drafter(call.drafter)
        if name != "lookup":
            raise BenchError(f"judges mine the proposals of the draft model or of lookup, not {name}; train with --drafter lookup")
        return first_proposals(call.ids, p["ngram"], p["match"], self.eos, p["min_ngram"])

    @torch.no_grad()
    def likelihood(self, calls: Sequence[Likelihood]) -> list[Tensor]:
        """Full forwards, right-padded: teacher-forced log p for a plug-in's recipe (tests/learned_verifier.py)."""
        out: list[Tensor] = [torch.empty(0)] * len(calls)
        for group in chunks([len(c.ids) for c in calls], self._logits_budget()):
            ids = _right_padded([calls[i].ids for i in group], self.pair.device)
            logits = self.pair.target(input_ids=ids).logits[:, :-1].float()
            chosen = logits.gather(-1, ids[:, 1:, None])[..., 0] - logits.logsumexp(-1)
            for k, i in enumerate(group):
                out[i] = chosen[k, : len(calls[i].ids) - 1].cpu()
        return out

    @torch.no_grad()
    def swapped(self, calls: Sequence[Swapped]) -> list[list[tuple[Tensor, Tensor]]]:
        """Each call's sequence and its swapped copies (cut after their window) share its prefix up
        to the position before the first swap: one ``Shared`` group per call, all calls in one
        batched tree forward."""
        live = [c for c in calls if c.sites]
        groups = [share([c.ids] + [c.ids[:pos] + [token] + c.ids[pos + 1 : end] for (pos, token), end in zip(c.sites, _ends(c))],
                        min(pos for pos, _ in c.sites) - 1) for c in live]  # fmt: skip
        scored = {id(c): _scores(c, g, rows) for c, g, (rows, _) in zip(live, groups, forward_shared(self.pair.target, groups))}
        return [scored.get(id(c), []) for c in calls]


def _scores(call: Swapped, group: Shared, logits: Tensor) -> list[tuple[Tensor, Tensor]]:
    """Per site, the target's top log-probabilities from the position before the swap to the end
    of the window, read off the original sequence (row 0) and the copy; the copy's first entry is
    the swapped-in token's own log-probability there (naver-aics/SelfJudge@c97c8e83
    src/compare_important_tokens_gsm8k.py, ``joint_logp_orig_*``/``joint_logp_alter_*``)."""
    logp = logits.float().log_softmax(-1)
    top = logp.max(-1).values
    out = []
    for i, ((pos, token), end) in enumerate(zip(call.sites, _ends(call)), start=1):
        original = top[[group.row(0, k) for k in range(pos - 1, end)]]
        own = logp[group.row(0, pos - 1), token]
        swapped = torch.cat([own[None], top[[group.row(i, k) for k in range(pos, end)]]])
        out.append((original.cpu(), swapped.cpu()))
    return out


def _ends(call: Swapped) -> list[int]:
    """Per site, the position after the last one read (the window, or the sequence's end: the last
    position predicts nothing in it)."""
    return [min(pos + call.window, len(call.ids) - 1) for pos, _ in call.sites]
