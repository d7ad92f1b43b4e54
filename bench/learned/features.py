"""The hidden states a judge head reads at a drafted token, computed on a whole sequence for
training exactly as the decoder reads them while verifying: the target's last hidden state with
the token as input (the verify forward's) and the draft's where it predicted the token."""

from __future__ import annotations

import torch
from torch import Tensor

from bench.learned.heads import feature_vector
from bench.pairs import Pair


@torch.no_grad()
def token_features(pair: Pair, features: str, context: list[int], token: int) -> Tensor:
    """[F] the features of ``token`` drafted after ``context``."""
    ids = torch.tensor([context + [token]], device=pair.device)
    h_target = pair.target(input_ids=ids, output_hidden_states=True).hidden_states[-1][0, -1]
    h_draft = None
    if features == "draft+target":
        h_draft = pair.draft(input_ids=ids[:, :-1], output_hidden_states=True).hidden_states[-1][0, -1]
    return feature_vector(features, h_draft, h_target).cpu()


class PairOracle:
    """A loaded pair as the miners' ``Oracle``: greedy and teacher-forced target, draft argmax."""

    def __init__(self, pair: Pair) -> None:
        self.pair, self.eos = pair, frozenset(pair.eos_token_ids)

    @torch.no_grad()
    def greedy(self, ids: list[int], max_new: int) -> list[int]:
        seq, out = torch.tensor([ids], device=self.pair.device), []
        past = None
        step = seq
        for _ in range(max_new):  # one token a step on the model's own cache: no generate() defaults
            result = self.pair.target(input_ids=step, cache=past, use_cache=True)
            past, token = result.cache, int(result.logits[0, -1].argmax())
            out.append(token)
            if token in self.eos:
                break
            step = torch.tensor([[token]], device=self.pair.device)
        return out

    @torch.no_grad()
    def draft_argmax(self, ids: list[int]) -> list[int]:
        return self.pair.draft(input_ids=torch.tensor([ids], device=self.pair.device)).logits[0].argmax(-1).tolist()

    @torch.no_grad()
    def target_logprobs(self, ids: list[int]) -> Tensor:
        logits = self.pair.target(input_ids=torch.tensor([ids], device=self.pair.device)).logits[0]
        return logits.float().log_softmax(-1).cpu()
