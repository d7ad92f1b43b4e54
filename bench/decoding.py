"""The speculative decoding loop (SPEC section 3), shared by every method and every batch size.

A batch holds B examples (rows); B = 1 is the latency setting and runs the same code. Each model
has an engine (``bench.engines``) keeping a KV cache of every token of a row but the last. A round
drafts n_b = min(N, remaining_b - 1) tokens per row (so no row overshoots its budget), verifies all
rows with ONE target forward, and rolls each row back to its accepted prefix. Rows accept different
counts and end at different times; finished rows leave the batch. ``ar`` is the same loop with
N = 0 and no draft model. One host sync per round: the verdicts.

Each row draws from its own generator, in the order and shapes it would alone (draft samples per
step, then the verifier's uniforms and its token), so a row's completion does not depend on which
rows share its batch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor
from transformers import PreTrainedModel

from bench.distributions import Sampling, process, sample
from bench.engines import EagerEngine, EngineFactory
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
    wall_time_s: float = 0.0  # NaN when decoded in a batch of more than one row
    prefill_time_s: float = 0.0
    batch_size: int = 1
    kv_cache_bytes: int = 0  # KV caches of both models for the whole batch the row was decoded in
    drafted_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)
    # Positions the verifier actually reached (up to and including the first rejection, and never
    # past an EOS that ended the example), the sums over them of expected acceptance 1 - TV(q, pi)
    # and bias TV(pi, p), and DIVERSED's weight at each of them.
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


def _padded(rows: Sequence[Sequence[int]], device: torch.device) -> Tensor:
    """Right-padded [B, max len] token ids; padding is written to slots no real query sees."""
    width = max(len(r) for r in rows)
    return torch.tensor([list(r) + [0] * (width - len(r)) for r in rows], device=device)


def round_counts(drafted: int, accepted: int, eos_at: int | None) -> tuple[int, int]:
    """(drafted, accepted) to count for a round, given where in its emitted tokens (accepted
    drafts, then the verifier's token) an EOS ended the example. Drafted tokens after an accepted
    EOS were never emitted: the round counts as if the draft had stopped at the EOS."""
    if eos_at is not None and eos_at < accepted:
        return eos_at + 1, eos_at + 1
    return drafted, accepted


@dataclass
class _Row:
    """One example in flight: its tokens, budget, generator and counters."""

    index: int
    seq: list[int]
    budget: int
    generator: torch.Generator
    stats: DecodeStats
    out: list[int] = field(default_factory=list)
    weights: list[Tensor] = field(default_factory=list)
    sums: tuple[Tensor, Tensor] | None = None  # expected acceptance and bias sums, once finished


@dataclass
class _Group:
    """Rows of one round that drafted the same number of tokens, verified together."""

    rows: list[int]
    n: int
    expected: Tensor
    bias: Tensor
    weights: Tensor | None


class SpeculativeDecoder:
    """Decode prompts with a draft/target pair and a verifier, one at a time or in batches."""

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
        engine: EngineFactory = EagerEngine,
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
        # Step widths after the prompt: the target verifies N + 1 tokens (fewer near the budget);
        # the draft is fed the last token, or two after a round that accepted every draft.
        self.engines = [engine(target, (self.draft_len + 1,))]
        self.engines += [engine(draft, (1, 2))] if self.draft_len else []

    def _pick(self, probs: Tensor, generators: Sequence[torch.Generator | None]) -> Tensor:
        """A token per row of ``probs`` [B, V]; rows without a generator draw nothing (argmax)."""
        if self.sampling.greedy:
            return probs.argmax(-1)
        drawing = [i for i, g in enumerate(generators) if g is not None]
        if len(drawing) == len(generators):
            return sample(probs, generators)
        tokens = probs.argmax(-1)
        if drawing:
            tokens[drawing] = sample(probs[drawing], [generators[i] for i in drawing])
        return tokens

    def _draft(self, rows: list[_Row], ns: list[int], n: int) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """Draft n >= 1 tokens for every row; row b draws only its first ns[b].

        Returns (tokens [B, n], q [B, n, V], q logits, draft hidden states or None)."""
        engine, hidden = self.engines[1], self.verifier.needs_hidden
        feed = [r.seq[held:] for r, held in zip(rows, engine.lengths)]
        ids = _padded(feed, self.target.device)
        last = torch.tensor([len(f) - 1 for f in feed], device=ids.device)
        every = torch.arange(len(rows), device=ids.device)
        real = [len(f) if nb else 0 for f, nb in zip(feed, ns)]
        xs, qs, q_logits, states = [], [], [], []
        for step in range(n):
            logits, h = engine.step(ids, real, keep=ids.shape[1], hidden=hidden)
            pick = last if step == 0 else torch.zeros_like(last)
            q_logits.append(logits[every, pick])
            qs.append(process(q_logits[-1], self.sampling))
            ids = self._pick(qs[-1], [r.generator if step < nb else None for r, nb in zip(rows, ns)])
            ids = ids.view(-1, 1)
            xs.append(ids)
            states.append(h[every, pick] if hidden else None)
            real = [int(step + 1 < nb) for nb in ns]  # the last drafted token is not fed back
        h_draft = torch.stack(states, dim=1) if hidden else None
        return torch.cat(xs, dim=1), torch.stack(qs, dim=1), torch.stack(q_logits, dim=1), h_draft

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int, seed: int = 0) -> Generation:
        """Decode up to ``max_new_tokens`` tokens; EOS ends generation wherever it lands."""
        return self.generate_batch([prompt_ids], max_new_tokens, [seed])[0]

    @torch.inference_mode()
    def generate_batch(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, seeds: Sequence[int]
    ) -> list[Generation]:
        """Decode all prompts together, one Generation per prompt in order. Row b's completion is
        the one ``generate(prompts[b], max_new_tokens, seeds[b])`` gives; wall times are measured
        only for a batch of one (NaN otherwise: a row's latency in a batch means nothing)."""
        if len(prompts) != len(seeds):
            raise BenchError(f"{len(prompts)} prompts but {len(seeds)} seeds: give one seed per prompt")
        if any(len(p) == 0 for p in prompts):
            raise BenchError("empty prompt: nothing to condition on")
        if not prompts:
            return []
        device = self.target.device
        sync = _synchronizer(device)
        n_max = self.draft_len
        rows = [
            _Row(
                index=i,
                seq=list(p),
                budget=max_new_tokens,
                generator=torch.Generator(device=device).manual_seed(seed),
                stats=DecodeStats(
                    prompt_tokens=len(p),
                    draft_len=n_max,
                    batch_size=len(prompts),
                    drafted_per_position=[0] * n_max,
                    accepted_per_position=[0] * n_max,
                    reached_per_position=[0] * n_max,
                ),
            )
            for i, (p, seed) in enumerate(zip(prompts, seeds))
        ]
        done: list[_Row] = []
        longest = max(len(p) for p in prompts) + max(max_new_tokens, 0) + n_max + 1
        for engine in self.engines:
            engine.start(len(rows), longest)
        sums = torch.zeros(2, len(rows), n_max, device=device)  # expected acceptance, bias

        sync()
        start = time.perf_counter()
        held = [len(p) - 1 for p in prompts]
        if max(held):
            ids = _padded([p[:-1] for p in prompts], device)
            for engine in self.engines:
                engine.step(ids, held, keep=1, hidden=False)
            for row in rows:
                row.stats.target_forwards += len(row.seq) > 1
                row.stats.draft_forwards += (len(self.engines) - 1) * (len(row.seq) > 1)
        sync()
        prefill = time.perf_counter() - start

        cache_bytes = 0
        while rows:
            finished = self._round(rows, sums) if max_new_tokens > 0 else set(range(len(rows)))
            cache_bytes = max(cache_bytes, sum(e.cache_bytes for e in self.engines))
            for engine in self.engines:
                engine.truncate([len(r.seq) - 1 for r in rows])
            if finished:
                alive = [i for i in range(len(rows)) if i not in finished]
                for i in finished:
                    rows[i].sums = (sums[0, i], sums[1, i])
                    done.append(rows[i])
                rows = [rows[i] for i in alive]
                sums = sums[:, alive]
                for engine in self.engines if rows else ():
                    engine.select(alive)

        sync()
        wall = time.perf_counter() - start
        totals = torch.stack([torch.stack(r.sums) for r in done]).tolist()  # type: ignore[arg-type]
        out: list[Generation | None] = [None] * len(done)
        for k, row in enumerate(done):
            s = row.stats
            s.wall_time_s = wall if len(prompts) == 1 else math.nan
            s.prefill_time_s = prefill if len(prompts) == 1 else math.nan
            s.kv_cache_bytes = cache_bytes
            s.new_tokens = len(row.out)
            s.expected_acceptance_sum, s.bias_sum = totals[k]
            s.weights = torch.cat(row.weights).tolist() if row.weights else []
            out[row.index] = Generation(row.out, s)
        return out  # type: ignore[return-value]

    def _round(self, rows: list[_Row], sums: Tensor) -> set[int]:
        """One round over the batch: draft, one target forward, verify, emit; adds to the per-row
        expected acceptance and bias ``sums`` [2, B, N]. Returns the rows that finished."""
        device, hidden, n_max = self.target.device, self.verifier.needs_hidden, self.draft_len
        ns = [min(n_max, r.budget - len(r.out) - 1) for r in rows]
        n, count = max(ns), len(rows)
        last = torch.tensor([[r.seq[-1]] for r in rows], device=device)
        drafted = last.new_empty(count, 0)
        if n:
            drafted, q, q_logits, h_draft = self._draft(rows, ns, n)
        target_in = torch.cat([last, drafted], dim=1)
        p_logits, h_target = self.engines[0].step(target_in, [1 + nb for nb in ns], keep=n + 1, hidden=hidden)
        # Nothing to verify and greedy: the argmax of the logits suffices.
        p = p_logits if not n and self.sampling.greedy else process(p_logits, self.sampling)

        accepted = torch.zeros(count, dtype=torch.long, device=device)
        next_token = torch.zeros(count, dtype=torch.long, device=device)
        groups: list[_Group] = []
        for k in sorted(set(ns)):
            idx = [i for i, nb in enumerate(ns) if nb == k]
            sel = slice(None) if len(idx) == count else torch.tensor(idx, device=device)
            generators = [rows[i].generator for i in idx]
            if k == 0:
                head = p_logits[sel, 0] if self.sampling.greedy else p[sel, 0]
                next_token[sel] = self._pick(head, generators)
                continue
            round_ = Round(
                draft=drafted[sel, :k],
                q=q[sel, :k],
                p=p[sel, :k],
                q_logits=q_logits[sel, :k],
                p_logits=p_logits[sel, :k],
                sampling=self.sampling,
                weights=self.head(h_draft[sel, :k], h_target[sel, :k]) if hidden else None,
            )
            verdict = verify(self.verifier, round_, p[sel, k], generators)
            accepted[sel], next_token[sel] = verdict.accepted, verdict.next_token
            groups.append(_Group(idx, k, verdict.expected_acceptance, verdict.bias, round_.weights))
        host = torch.cat([accepted, next_token, drafted.flatten()]).tolist()

        reach = [0] * count  # positions the verifier reached, per row
        finished: set[int] = set()
        for i, (row, nb) in enumerate(zip(rows, ns)):
            acc, drafts = host[i], host[2 * count + i * n : 2 * count + i * n + nb]
            new = drafts[:acc] + [host[count + i]]
            eos_at = next((j for j, t in enumerate(new) if t in self.eos), None)
            counted, kept = round_counts(nb, acc, eos_at)
            row.stats.record_round(counted, kept)
            row.stats.target_forwards += 1
            row.stats.draft_forwards += nb
            reach[i] = min(kept + 1, counted)
            if eos_at is not None:
                new = new[: eos_at + 1]
                finished.add(i)
            row.out.extend(new)
            row.seq.extend(new)
            if len(row.out) >= row.budget:
                finished.add(i)

        for g in groups:
            limit = torch.tensor([reach[i] for i in g.rows], device=device)
            mask = (torch.arange(g.n, device=device) < limit.unsqueeze(1)).float()
            sel = torch.tensor(g.rows, device=device)
            sums[0, sel, : g.n] += g.expected * mask
            sums[1, sel, : g.n] += g.bias * mask
            if g.weights is not None:
                for j, i in enumerate(g.rows):
                    rows[i].weights.append(g.weights[j, : reach[i]])
        return finished
