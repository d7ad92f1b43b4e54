"""The pair's draft model as a drafter: N autoregressive draft steps per round over its own KV cache."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from bench.distributions import pick, process
from bench.drafters.base import Draft, DraftContext, Drafter, DraftRow
from bench.engines import ModelEngine, to_device


def padded(rows: Sequence[Sequence[int]], device: torch.device) -> Tensor:
    """Right-padded [B, max len] token ids; padding is written to slots no real query sees."""
    width = max(len(r) for r in rows)
    return to_device([list(r) + [0] * (width - len(r)) for r in rows], device)


@dataclass
class ModelDrafter(Drafter):
    """Drafts with a model: its argmax under greedy decoding or the greedy draft policy, else a
    sample of its processed distribution q, one step per token."""

    name: ClassVar[str] = "model"
    help: ClassVar[str] = "the pair's draft model (default)"
    supplies: ClassVar[frozenset[str]] = frozenset({"q", "q_logits", "hidden"})
    models: ClassVar[frozenset[str]] = frozenset({"draft"})
    speed: ClassVar[str] = "assisted"

    def bind(self, ctx: DraftContext) -> ModelDrafter:
        """The draft model and how it steps; its hidden states only when the verifier reads them
        (a target-only judge reads none of the draft's)."""
        model = ctx.draft
        assert model is not None  # make_drafter refuses a context without the models it declares
        self.device = model.device
        self.sampling, self.greedy, self.hidden = ctx.sampling, ctx.greedy, "hidden" in ctx.reads
        # The draft is fed the last token, or two after a round that accepted every draft.
        self.engine = ctx.engine(model, (1, 2))
        return self

    @property
    def engines(self) -> list[ModelEngine]:
        return [self.engine]

    def draft(self, rows: Sequence[DraftRow], caps: Sequence[int]) -> Draft:
        """Draft n = max(caps) tokens for every row; row b draws only its first caps[b]."""
        engine, hidden, n = self.engine, self.hidden, max(caps)
        feed = [r.seq[held:] for r, held in zip(rows, engine.lengths)]
        ids = padded(feed, self.device)
        real = [len(f) if nb else 0 for f, nb in zip(feed, caps)]
        # A row's next token follows its last fed token: the last column when every row is fed as
        # many tokens (always in a batch of one, and after the first step), else gathered per row.
        ragged = len({len(f) for f in feed}) > 1
        if ragged:
            at = (
                torch.arange(len(rows), device=ids.device),
                to_device([len(f) - 1 for f in feed], ids.device),
            )
        xs, qs, q_logits, states = [], [], [], []
        for step in range(n):
            gather = ragged and step == 0
            logits, h = engine.step(ids, real, keep=ids.shape[1] if gather else 1, hidden=hidden)
            q_logits.append(logits[at] if gather else logits[:, -1])
            if h is not None:  # hidden: the step kept them
                states.append(h[at] if gather else h[:, -1])
            # A greedy draft picks the argmax of the logits and processes all steps at once after
            # the loop (every op is a dispatch, and the loop runs N per round); sampling needs each
            # step's q.
            if self.greedy:
                ids = q_logits[-1].argmax(-1)
            else:
                qs.append(process(q_logits[-1], self.sampling))
                generators = [r.generator if step < nb else None for r, nb in zip(rows, caps)]
                ids = pick(qs[-1], generators, self.sampling.greedy)
            ids = ids.view(-1, 1)
            xs.append(ids)
            real = [int(step + 1 < nb) for nb in caps]  # the last drafted token is not fed back
        logits = torch.stack(q_logits, dim=1)
        return Draft(
            tokens=torch.cat(xs, dim=1),
            counts=list(caps),
            q=torch.stack(qs, dim=1) if qs else process(logits, self.sampling),
            q_logits=logits,
            hidden=torch.stack(states, dim=1) if hidden else None,
            forwards=list(caps),  # one step per drafted token (the batch steps max(caps) times)
        )
