"""The speculative decoding loop (SPEC section 3), shared by every method.

Batch size 1. Both models keep a KV cache holding every token of the sequence but the last. A
round drafts N tokens (clipped so the round cannot overshoot ``max_new_tokens``), verifies them
with ONE target forward, and crops both caches back to the accepted prefix. ``ar`` is the same
loop with N = 0 and no draft model. One host sync per round: the verdict.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor
from transformers import DynamicCache, PreTrainedModel

from bench.distributions import Sampling, process, sample
from bench.errors import BenchError
from bench.head import WeightHead
from bench.verifiers import Round, Verifier, verify


@dataclass
class DecodeStats:
    """Counters of one decoded example. Per-position lists have one entry per draft position."""

    prompt_tokens: int
    draft_len: int
    new_tokens: int = 0
    rounds: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    target_forwards: int = 0
    draft_forwards: int = 0
    wall_time_s: float = 0.0
    prefill_time_s: float = 0.0
    drafted_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)
    # Positions the verifier actually reached (up to and including the first rejection), and the
    # sums over them of expected acceptance 1 - TV(q, pi) and bias TV(pi, p).
    reached_per_position: list[int] = field(default_factory=list)
    expected_acceptance_sum: list[float] = field(default_factory=list)
    bias_sum: list[float] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)

    def record_round(self, drafted: int, accepted: int) -> None:
        """Count one round of ``drafted`` tokens of which the first ``accepted`` were kept."""
        self.rounds += 1
        self.drafted_tokens += drafted
        self.accepted_tokens += accepted
        for i in range(drafted):
            self.drafted_per_position[i] += 1
            self.accepted_per_position[i] += i < accepted
            self.reached_per_position[i] += i <= accepted

    @property
    def acceptance_rate(self) -> float:
        """vLLM's draft acceptance rate: accepted / drafted."""
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else float("nan")

    @property
    def acceptance_length(self) -> float:
        """Tokens emitted per round, bonus included."""
        return self.new_tokens / self.rounds if self.rounds else float("nan")

    @property
    def expected_acceptance(self) -> float:
        """Mean 1 - TV(q, pi) over reached positions; compare with accepted / reached."""
        reached = sum(self.reached_per_position)
        return sum(self.expected_acceptance_sum) / reached if reached else float("nan")

    @property
    def bias(self) -> float:
        """Mean TV(pi, p) over reached positions."""
        reached = sum(self.reached_per_position)
        return sum(self.bias_sum) / reached if reached else float("nan")


@dataclass
class Generation:
    """Token ids produced for one prompt (EOS included when it ended the example) and stats."""

    token_ids: list[int]
    stats: DecodeStats


def _synchronizer(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def model_step(
    model: PreTrainedModel, ids: Tensor, cache: DynamicCache, keep: int, hidden: bool
) -> tuple[Tensor, Tensor | None]:
    """Logits of the last ``keep`` positions and, when asked, their last-layer hidden states."""
    out = model(
        input_ids=ids,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=keep,
        output_hidden_states=hidden,
    )
    return out.logits, out.hidden_states[-1][:, -keep:] if hidden else None


class SpeculativeDecoder:
    """Decode one prompt at a time with a draft/target pair and a verifier."""

    def __init__(
        self,
        target: PreTrainedModel,
        draft: PreTrainedModel | None,
        verifier: Verifier,
        *,
        draft_len: int = 5,
        sampling: Sampling = Sampling(),
        eos_token_ids: Sequence[int] = (),
        head: WeightHead | None = None,
    ) -> None:
        if verifier.uses_draft and draft is None:
            raise BenchError(f"{verifier.name}: needs a draft model")
        if verifier.uses_draft and draft_len < 1:
            raise BenchError(f"draft_len must be >= 1 for {verifier.name}, got {draft_len}")
        if verifier.needs_hidden and head is None:
            raise BenchError(
                f"{verifier.name}: needs a weight head; train one with `diversed-bench train` "
                "and pass --head PATH"
            )
        self.target, self.draft, self.verifier = target, draft, verifier
        self.draft_len = draft_len if verifier.uses_draft else 0
        self.sampling = sampling
        self.eos = frozenset(eos_token_ids)
        self.head = head

    def _pick(self, probs: Tensor, generator: torch.Generator) -> Tensor:
        return probs.argmax(-1) if self.sampling.greedy else sample(probs, generator)

    def _draft(
        self, draft_in: Tensor, cache: DynamicCache, n: int, generator: torch.Generator
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """Draft n >= 1 tokens: (tokens [1, n], q [1, n, V], q logits, draft hidden states or None)."""
        hidden = self.verifier.needs_hidden
        xs, qs, q_logits, states = [], [], [], []
        for _ in range(n):
            logits, h = model_step(self.draft, draft_in, cache, keep=1, hidden=hidden)
            q_logits.append(logits[:, -1])
            qs.append(process(logits[:, -1], self.sampling))
            draft_in = self._pick(qs[-1], generator).view(1, 1)
            xs.append(draft_in)
            states.append(h)
        h_draft = torch.cat(states, dim=1) if hidden else None
        return torch.cat(xs, dim=1), torch.stack(qs, dim=1), torch.stack(q_logits, dim=1), h_draft

    @torch.inference_mode()
    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int, seed: int = 0) -> Generation:
        """Decode up to ``max_new_tokens`` tokens; EOS ends generation wherever it lands."""
        if not prompt_ids:
            raise BenchError("empty prompt: nothing to condition on")
        device = self.target.device
        sync = _synchronizer(device)
        generator = torch.Generator(device=device).manual_seed(seed)
        hidden = self.verifier.needs_hidden
        n_max = self.draft_len
        stats = DecodeStats(
            prompt_tokens=len(prompt_ids),
            draft_len=n_max,
            drafted_per_position=[0] * n_max,
            accepted_per_position=[0] * n_max,
            reached_per_position=[0] * n_max,
        )
        expected_sum = torch.zeros(n_max, device=device)
        bias_sum = torch.zeros(n_max, device=device)
        weights: list[Tensor] = []

        seq = torch.tensor([list(prompt_ids)], device=device)
        models = [self.target] + ([self.draft] if n_max else [])
        caches = [DynamicCache(config=m.config) for m in models]
        sync()
        start = time.perf_counter()
        if seq.shape[1] > 1:
            for model, cache in zip(models, caches):
                model_step(model, seq[:, :-1], cache, keep=1, hidden=False)
            stats.target_forwards += 1
            stats.draft_forwards += len(models) - 1
        for cache in caches:
            cache.activate_past_recording()
        cached = [seq.shape[1] - 1] * len(models)  # tokens held by each cache
        sync()
        stats.prefill_time_s = time.perf_counter() - start

        out: list[int] = []
        while len(out) < max_new_tokens:
            n = min(n_max, max_new_tokens - len(out) - 1)
            drafted = seq.new_empty(1, 0)
            if n:
                draft_in = seq[:, cached[1] :]
                cached[1] += draft_in.shape[1] + n - 1  # the last drafted token is not fed back
                drafted, q, q_logits, h_draft = self._draft(draft_in, caches[1], n, generator)
                stats.draft_forwards += n

            target_in = torch.cat([seq[:, cached[0] :], drafted], dim=1)
            p_logits, h_target = model_step(self.target, target_in, caches[0], keep=n + 1, hidden=hidden)
            cached[0] += target_in.shape[1]
            stats.target_forwards += 1
            if not n and self.sampling.greedy:  # nothing to verify: the argmax of the logits suffices
                p = p_logits
            else:
                p = process(p_logits, self.sampling)

            if n:
                round_ = Round(
                    draft=drafted,
                    q=q,
                    p=p[:, :n],
                    q_logits=q_logits,
                    p_logits=p_logits[:, :n],
                    sampling=self.sampling,
                    weights=self.head(h_draft, h_target[:, :n]) if hidden else None,
                )
                verdict = verify(self.verifier, round_, p[:, n], generator)
                reached = (torch.arange(n, device=device) <= verdict.accepted).float()
                expected_sum[:n] += verdict.expected_acceptance[0] * reached
                bias_sum[:n] += verdict.bias[0] * reached
                if round_.weights is not None:
                    weights.append(round_.weights[0])
                accepted_t, next_t = verdict.accepted, verdict.next_token
            else:
                accepted_t = torch.zeros(1, dtype=torch.long, device=device)
                next_t = self._pick(p[:, 0], generator)
            host = torch.cat([accepted_t, next_t, drafted[0]]).tolist()
            accepted, new = host[0], host[2 : 2 + host[0]] + [host[1]]

            stats.record_round(n, accepted)
            eos_at = next((i for i, t in enumerate(new) if t in self.eos), None)
            if eos_at is not None:
                out.extend(new[: eos_at + 1])
                break
            out.extend(new)
            seq = torch.cat([seq, drafted[:, :accepted], next_t.view(1, 1)], dim=1)
            keep = seq.shape[1] - 1
            for i, cache in enumerate(caches):
                cache.crop(-max(0, cached[i] - keep))
                cached[i] = min(cached[i], keep)

        sync()
        stats.wall_time_s = time.perf_counter() - start
        stats.new_tokens = len(out)
        stats.expected_acceptance_sum = expected_sum.tolist()
        stats.bias_sum = bias_sum.tolist()
        stats.weights = torch.cat(weights).tolist() if weights else []
        return Generation(out, stats)

    def generate_batch(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, seeds: Sequence[int]
    ) -> list[Generation]:
        """One ``generate`` per prompt; stands in for the batched decoder until it lands."""
        if len(prompts) != len(seeds):
            raise BenchError(f"generate_batch: {len(prompts)} prompts but {len(seeds)} seeds")
        return [self.generate(p, max_new_tokens, seed=s) for p, s in zip(prompts, seeds)]
