"""The hidden states a judge head reads at a drafted token, computed for training exactly as the
decoder reads them while verifying (the target's last hidden state with the token as input, the
draft's where it predicted the token), and the pair as the miners' batched ``Oracle``.

EAGLE drafts (``--drafter eagle``): the head the decoder binds (``EagleDrafter.bind``), run
teacher-forced (``eagle_outputs``): one target forward with its layer states and one causal head
forward over a whole sequence give the head's output after every prefix, the state whose law the
decoder's first drafted token comes from (its argmax, or a draw from q) and whose ``head_input``
is the draft hidden state (``Draft.hidden``) a draft+target judge reads.

Batches: teacher-forced sequences that share a prompt run it once (bench.learned.shared); draft
rows are right-padded (causal attention: a real position never sees the padding after it); greedy
rows are left-padded with an attention mask and their own positions, so each row decodes as it
would alone. Rows go in chunks of at most ``TOKENS`` tokens.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor
from transformers import PreTrainedModel

from bench.distributions import Sampling
from bench.drafters.eagle import DraftContext, EagleDrafter
from bench.errors import BenchError
from bench.verifier_heads import feature_vector
from bench.learned.miners import Drafted, Greedy, Likelihood, Swapped
from bench.learned.shared import Shared, forward_shared, share
from bench.pairs import Pair

TOKENS = 16384  # padded tokens per forward
LOGITS = 1 << 25  # logits per forward that returns them all (tokens x vocabulary)
EAGLE_TOKENS = 4096  # padded tokens per target forward that returns every layer's states


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
def token_features(
    pair: Pair, features: str, sites: Sequence[tuple[list[int], int]], eagle: EagleDrafter | None = None
) -> list[Tensor]:
    """[F] the features of each ``token`` drafted after its ``context`` (one question's: they share
    its prompt, run once, bench.learned.shared); ``eagle``: the drafts were that EAGLE head's, whose
    state is the draft hidden state."""
    rows = [context + [token] for context, token in sites]
    if not rows:
        return []
    first = min(len(context) for context, _ in sites)
    group = share(rows, first)
    ((_, h_target),) = forward_shared(pair.target, [group], hidden=True)
    assert h_target is not None  # hidden=True
    at = [group.row(i, len(r) - 1) for i, r in enumerate(rows)]
    h_draft = None
    if features == "draft+target" and eagle is not None:
        h_draft = eagle_states(eagle, pair.target, [context for context, _ in sites])
    elif features == "draft+target":
        before = share(rows, first - 1)
        ((_, states),) = forward_shared(pair.draft, [before], hidden=True)
        assert states is not None  # hidden=True
        h_draft = states[[before.row(i, len(r) - 2) for i, r in enumerate(rows)]]
    h_target = h_target[at]
    return [
        feature_vector(features, None if h_draft is None else h_draft[k], h_target[k]).cpu() for k in range(len(rows))
    ]


def bind_eagle(pair: Pair, spec: str, temperature: float) -> EagleDrafter:
    """The EAGLE drafter ``run --drafter SPEC`` decodes with on this pair (an empty path: the pair
    file's head, as ``build_decoder`` fills it), drafting at ``temperature``."""
    from bench.drafters import parse_drafter
    from bench.drafters.eagle import with_pair_head

    _, params = parse_drafter(with_pair_head(spec, pair.spec.eagle))
    return EagleDrafter(**params).bind(DraftContext(target=pair.target, sampling=Sampling(temperature), greedy=temperature == 0))


@torch.no_grad()
def eagle_outputs(drafter: EagleDrafter, target: PreTrainedModel, rows: Sequence[list[int]]) -> list[Tensor]:
    """Per row [len(row) - 1, H]: the head's output at every position i but the last,
    teacher-forced. Position i reads the target's layer states at i (one forward of the row: what
    the decode loop hands the drafter, ``Drafter.take_states``) with token i + 1, and predicts token
    i + 2: output i is the ``last`` state ``EagleDrafter.catch_up`` holds after the prefix
    row[: i + 2], from which ``chain`` drafts its first token."""
    layers = drafter.target_layers(target.config.get_text_config().num_hidden_layers)
    out: list[Tensor] = [torch.empty(0)] * len(rows)
    for group in chunks([len(row) for row in rows], EAGLE_TOKENS):
        ids = _right_padded([rows[i] for i in group], target.device)  # causal: padding is read by no real position
        states = target(input_ids=ids, output_hidden_states=True, logits_to_keep=1).hidden_states
        feats = torch.cat([states[i].to(drafter.device) for i in layers], dim=-1)[:, :-1]
        hs, _ = drafter.head(feats, ids[:, 1:].to(drafter.device))
        for k, i in enumerate(group):
            out[i] = hs[k, : len(rows[i]) - 1]
    return out


def eagle_states(drafter: EagleDrafter, target: PreTrainedModel, contexts: Sequence[list[int]]) -> Tensor:
    """[N, H] the EAGLE draft state (``head_input``, the decoder's ``Draft.hidden``) where each
    context's next token was drafted: output len(context) - 2. A context that is a prefix of a
    longer one is read off its forward (a question's contexts are prefixes of its last sequence)."""
    if min(map(len, contexts)) < 2:
        raise RuntimeError("eagle: a head drafts after two tokens at least")  # the miners' contract broke
    longest: list[list[int]] = []
    for context in sorted(contexts, key=len, reverse=True):
        if not any(row[: len(context)] == context for row in longest):
            longest.append(context)
    outputs = eagle_outputs(drafter, target, longest)
    picked = []
    for context in contexts:
        k = next(k for k, row in enumerate(longest) if row[: len(context)] == context)
        picked.append(outputs[k][len(context) - 2])
    return drafter.head.head_input(torch.stack(picked))


class PairOracle:
    """A loaded pair as the miners' ``Oracle``: greedy and teacher-forced target, draft proposals."""

    def __init__(self, pair: Pair) -> None:
        self.pair, self.eos = pair, frozenset(pair.eos_token_ids)
        self._eagles: dict[tuple[str, float], EagleDrafter] = {}

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
        kind = [c.drafter.partition(":")[0] for c in calls]
        model, eagle = [i for i, k in enumerate(kind) if k == "model"], [i for i, k in enumerate(kind) if k == "eagle"]
        for i, c in enumerate(calls):
            if kind[i] not in ("model", "eagle"):
                out[i] = self._looked_up(c)
        for i, proposed in zip(eagle, self._eagle_drafted([calls[i] for i in eagle])):
            out[i] = proposed
        for group in chunks([len(calls[i].ids) for i in model], self._logits_budget()):
            group = [model[k] for k in group]
            logits = self.pair.draft(input_ids=_right_padded([calls[i].ids for i in group], self.pair.device)).logits
            for k, i in enumerate(group):
                c = calls[i]
                out[i] = _pick(logits[k, : len(c.ids)].float(), c.temperature, c.seed)
        return out

    def eagle(self, spec: str, temperature: float = 0.0) -> EagleDrafter:
        """The EAGLE drafter of ``spec`` drafting at ``temperature``, bound once (``bind_eagle``)."""
        key = (spec, temperature)
        if key not in self._eagles:
            self._eagles[key] = bind_eagle(self.pair, spec, temperature)
        return self._eagles[key]

    def _eagle_drafted(self, calls: Sequence[Drafted]) -> list[list[int]]:
        """The EAGLE head's first proposal after every prefix (none after the first token: the head
        reads a state and the token after it), teacher-forced: its argmax at temperature 0, else a
        draw from its law q (``EagleDrafter.law``) at the call's temperature and seed."""
        out: list[list[int]] = [[] for _ in calls]
        for key in sorted({(c.drafter, c.temperature) for c in calls}):
            where = [i for i, c in enumerate(calls) if (c.drafter, c.temperature) == key]
            drafter = self.eagle(*key)
            for i, hs in zip(where, eagle_outputs(drafter, self.pair.target, [calls[i].ids for i in where])):
                if calls[i].temperature > 0:  # q is the law at the call's temperature already
                    proposed = _pick(drafter.law(hs)[1].log(), 1.0, calls[i].seed)
                else:
                    proposed = drafter.head.to_target(drafter.head.logits(hs).float().argmax(-1)).tolist()
                out[i] = [-1] + proposed
        return out

    def _looked_up(self, call: Drafted) -> list[int]:
        from bench.drafters import parse_drafter
        from bench.drafters.lookup import first_proposals

        name, p = parse_drafter(call.drafter)
        if name != "lookup":
            raise BenchError(f"judges mine the proposals of the draft model, of lookup or of an EAGLE head, not {name}; train with --drafter lookup")
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


def _pick(scores: Tensor, temperature: float, seed: int) -> list[int]:
    """[T, V] scores (logits, or log q) -> a token per position: the argmax at temperature 0, else
    a sample of softmax(scores / temperature) by Gumbel-max from ``seed``."""
    if temperature > 0:
        u = torch.rand(scores.shape, generator=torch.Generator().manual_seed(seed)).to(scores.device)
        scores = scores / temperature - torch.log(-torch.log(u.clamp(1e-20, 1.0)))
    return scores.argmax(-1).tolist()


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
