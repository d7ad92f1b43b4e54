"""The speculative decoding loop (docs/spec.md §3, the decoding loop), shared by every method and
every batch size.

A batch holds B examples (rows); B = 1 is the latency setting and runs the same code. Each model
has an engine (``bench.engines``) keeping a KV cache of every token of a row but the last. A round
has the drafter (``bench.drafters``: the draft model, or prompt lookup) propose up to
n_b = min(N, remaining_b - 1) tokens per row (so no row overshoots its budget; a lookup may propose
none), verifies all rows with ONE target forward, and rolls each row back to its accepted prefix.
Rows accept different counts and end at different times; finished rows leave the batch. ``ar`` is
the same loop with N = 0 and no drafter. One host sync per round: the verdicts.

Each row draws from its own generator, in the order and shapes it would alone (draft samples per
step, then the verifier's uniforms and its token), so a row's completion does not depend on which
rows share its batch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor
from transformers import PreTrainedModel

from bench.clock import Clock
from bench.context import Context
from bench.decode_stats import DecodeStats, Generation
from bench.distributions import Sampling, process
from bench.drafters import Draft, DraftContext, Drafter, check_draft_policy, make_drafter
from bench.drafters.model import padded
from bench.engines import EagerEngine, EngineFactory, open_engine, to_device
from bench.errors import BenchError
from bench.rounds import RoundHost, Row, round_counts, to_host
from bench.trace import record_trace, trace_probs
from bench.tree_round import check_trees, tree_round
from bench.verifier_heads import VerifierHead
from bench.verifiers import Verifier
from bench.verify_step import chain_host, chain_tokens, fidelity, verify_chain


def draft_context(
    target: PreTrainedModel,
    draft: PreTrainedModel | None,
    verifier: Verifier,
    *,
    draft_len: int,
    sampling: Sampling,
    engine: EngineFactory,
    draft_policy: str | None,
    eos: frozenset[int],
) -> DraftContext:
    """What a decoder's drafter may read (``Drafter.bind``): the same for a decoder that binds it
    and for ``build_decoder``, which binds it first (its refusals come before the head's). Drafts
    are the draft's argmax under greedy decoding or the greedy draft policy: no draws."""
    policy = check_draft_policy(draft_policy or verifier.draft_policy)
    return DraftContext(
        draft=draft, target=target, engine=engine, sampling=sampling, greedy=sampling.greedy or policy == "greedy",
        reads=verifier.reads(), device=target.device, eos=eos, draft_len=draft_len if verifier.uses_draft else 0,
        method=verifier.name,
    )  # fmt: skip


class SpeculativeDecoder:
    """Decode prompts with a target, a drafter (the pair's draft model by default) and a verifier,
    one at a time or in batches."""

    def __init__(
        self,
        target: PreTrainedModel,
        draft: PreTrainedModel | None,
        verifier: Verifier,
        *,
        draft_len: int = 5,
        sampling: Sampling = Sampling(),
        eos_token_ids: Sequence[int] = (),
        head: VerifierHead | None = None,
        engine: EngineFactory = EagerEngine,
        draft_policy: str | None = None,
        trace: bool = False,
        drafter: str | Drafter | None = "model",
    ) -> None:
        if verifier.uses_draft and draft_len < 1:
            raise BenchError(f"draft_len must be >= 1 for {verifier.name}, got {draft_len}")
        verifier.check_head(head is not None)
        if head is not None and not isinstance(head, VerifierHead):  # its at_token says which target states it reads
            raise BenchError(f"{verifier.name}: a verifier head (bench.verifier_heads) is a WeightHead or JudgeHead, got {type(head).__name__}")
        self.target, self.verifier = target, verifier
        self.eos = frozenset(eos_token_ids)
        self.device = target.device  # a model's .device walks its parameters: read it once
        ctx = draft_context(target, draft, verifier, draft_len=draft_len, sampling=sampling, engine=engine,
                            draft_policy=draft_policy, eos=self.eos)  # fmt: skip
        self.draft_len = ctx.draft_len
        self.sampling = sampling
        self.draft_policy = check_draft_policy(draft_policy or verifier.draft_policy)
        self.greedy_draft = ctx.greedy
        self.head = head
        # Tracing reads probabilities the round already computed, after its sync; it draws nothing.
        self.trace = trace
        self.drafter: Drafter | None = None
        if self.draft_len:  # a drafter built by the caller (build_decoder binds its own), or a spec
            self.drafter = drafter if isinstance(drafter, Drafter) else make_drafter(drafter, ctx)
        # Step widths after the prompt: the target verifies up to N + 1 tokens (fewer near the
        # budget, and where a drafter proposes fewer).
        widths = self.drafter.target_widths(self.draft_len) if self.drafter else (1,)
        # A tree drafter's rounds are token trees of these widths (root and nodes).
        trees = self.drafter.tree_widths(self.draft_len) if self.drafter else ()
        if trees:  # refused before anything decodes, not at the first tree round
            check_trees(self.verifier, self.trace)
        # The target's layer states the drafter reads (EAGLE's), if any: only then does the loop
        # hand them over (``reads_states``); any other drafter's rounds build no index lists.
        layers = self.drafter.target_layers(target.config.get_text_config().num_hidden_layers) if self.drafter else ()
        self.reads_states = bool(layers)
        self.engines = [open_engine(engine, target, widths, trees, layers)] + (self.drafter.engines if self.drafter else [])

    @property
    def context(self) -> Context:
        """The context a prompt plus its budget must fit: the smaller of the target's and that of
        the model the drafter steps (the draft model for model and model_tree; none for lookup,
        lookup_tree, suffix, or a method that drafts nothing). `run`, `generate` and the lm-eval
        backend all ask the decoder that will decode, so a prompt is checked against exactly the
        models it feeds."""
        drafts = [engine.model for engine in self.drafter.engines] if self.drafter else []
        return Context.of(self.target, drafts[0] if drafts else None)

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
        clock = Clock(self.device)
        rows = self._start(prompts, max_new_tokens, seeds)
        start = clock.read()
        self._prefill(rows)
        prefill = clock.read() - start
        done, cache_bytes = self._decode(rows, max_new_tokens)
        wall = clock.read() - start
        if len(prompts) > 1:
            wall = prefill = math.nan
        return self._generations(done, wall, prefill, cache_bytes)

    def _start(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, seeds: Sequence[int]
    ) -> list[Row]:
        """One row per prompt, its generator seeded; the engines' caches sized for the longest row
        (prompt, budget and one round's draft) and the drafter told the batch size."""
        n_max = self.draft_len
        rows = [
            Row(
                index=i,
                seq=list(p),
                budget=max_new_tokens,
                generator=torch.Generator(device=self.device).manual_seed(seed),
                stats=DecodeStats(
                    prompt_tokens=len(p),
                    draft_len=n_max,
                    batch_size=len(prompts),
                    drafted_per_position=[0] * n_max,
                    accepted_per_position=[0] * n_max,
                    reached_per_position=[0] * n_max,
                    expected_acceptance_sum=[0.0] * n_max,
                    bias_sum=[0.0] * n_max,
                ),
            )
            for i, (p, seed) in enumerate(zip(prompts, seeds))
        ]
        longest = max(len(p) for p in prompts) + max(max_new_tokens, 0) + n_max + 1
        for engine in self.engines:
            engine.start(len(rows), longest)
        if self.drafter:
            self.drafter.start(len(rows), longest)
        return rows

    def _prefill(self, rows: list[Row]) -> None:
        """Every model reads each prompt but its last token (which the first round steps on), in
        one forward per model; a one-token prompt has nothing to prefill."""
        held = [len(r.seq) - 1 for r in rows]
        if not max(held):
            return
        ids = padded([r.seq[:-1] for r in rows], self.device)
        for engine in self.engines:
            engine.step(ids, held, keep=1, hidden=False)
        if self.reads_states:
            self._hand_states(rows, [list(range(h)) for h in held])
        for row in rows:
            row.stats.target_forwards += len(row.seq) > 1
            row.stats.draft_forwards += (len(self.engines) - 1) * (len(row.seq) > 1)

    def _decode(self, rows: list[Row], max_new_tokens: int) -> tuple[list[Row], int]:
        """Rounds until every row finished: each round rolls the caches back to the rows' accepted
        prefixes and drops finished rows from the batch. Returns the finished rows (in the order
        they finished) and the most bytes the caches held."""
        done: list[Row] = []
        cache_bytes = 0
        while rows:
            finished = self._round(rows) if max_new_tokens > 0 else set(range(len(rows)))
            cache_bytes = max(cache_bytes, sum(e.cache_bytes for e in self.engines))
            for engine in self.engines:
                engine.truncate([len(r.seq) - 1 for r in rows])
            if finished:
                alive = [i for i in range(len(rows)) if i not in finished]
                done += [rows[i] for i in finished]
                if self.drafter:  # it may learn from a response
                    for i in sorted(finished):
                        self.drafter.finish(rows[i])
                rows = [rows[i] for i in alive]
                for engine in self.engines if rows else ():
                    engine.select(alive)
        return done, cache_bytes

    def _generations(
        self, done: list[Row], wall: float, prefill: float, cache_bytes: int
    ) -> list[Generation]:
        """The finished rows' Generations in prompt order, their stats completed."""
        out: dict[int, Generation] = {}
        for row in done:
            s = row.stats
            s.wall_time_s, s.prefill_time_s, s.kv_cache_bytes = wall, prefill, cache_bytes
            s.new_tokens = len(row.out)
            s.weights = torch.cat(row.weights).tolist() if row.weights else []
            out[row.index] = Generation(row.out, s, row.trace if self.trace else None)
        return [out[i] for i in range(len(done))]

    def _round(self, rows: list[Row]) -> set[int]:
        """One round over the batch: draft, one target forward, verify, one host read, emit, count.
        Returns the rows that finished."""
        caps = [min(self.draft_len, r.budget - len(r.out) - 1) for r in rows]
        draft = self.drafter.draft(rows, caps) if self.drafter and max(caps) > 0 else None
        for row, ran in zip(rows, draft.forwards if draft and draft.forwards else ()):
            row.stats.draft_forwards += ran  # what the drafter reports it ran (Draft.forwards)
        last = to_device([[r.seq[-1]] for r in rows], self.device)
        if draft is not None and draft.parents is not None:
            return self._tree_round(rows, draft, last)
        drafted = draft.tokens if draft else last.new_empty(len(rows), 0)
        ns = draft.counts if draft else [0] * len(rows)
        n = drafted.shape[1]
        hidden = self.verifier.needs_hidden
        target_in = torch.cat([last, drafted], dim=1)
        p_logits, h_target = self.engines[0].step(target_in, [1 + nb for nb in ns], keep=n + 1, hidden=hidden)
        # Nothing to verify and greedy: the argmax of the logits suffices.
        p = p_logits if not n and self.sampling.greedy else process(p_logits, self.sampling)
        accepted, next_token, floats, weights = verify_chain(
            self.verifier, draft, ns, p_logits, p, h_target, [r.generator for r in rows],
            sampling=self.sampling, greedy_draft=self.greedy_draft, head=self.head,
        )  # fmt: skip
        parts = {
            "accepted": accepted,
            "next_token": next_token,
            "drafted": drafted,
        }
        tokens = chain_tokens(drafted, accepted, next_token)
        parts["logp"], parts["excess"] = fidelity(p_logits, tokens, self.sampling.temperature)
        parts.update((f"sums{g}", f.flatten(1)) for g, (_, f) in enumerate(floats))
        if self.trace:
            q = draft.q if draft else None
            parts.update(trace_probs(p_logits, p, q, drafted, accepted, next_token, self.sampling))
        host = chain_host(to_host(parts), ns, [idx for idx, _ in floats], self.trace)  # the round's sync
        if self.drafter:
            self.drafter.observe(rows, ns, host.accepted)
        if self.reads_states:
            self._hand_states(rows, [list(range(acc + 1)) for acc in host.accepted])
        return self._emit_all(rows, ns, host, weights)

    def _tree_round(self, rows: list[Row], draft: Draft, last: Tensor) -> set[int]:
        """A round whose draft is a token tree per row (``bench.tree_round``): the target's states
        along each accepted path go to a drafter that reads them, the verdicts to the drafter, and
        each row's path and the verifier's token are emitted."""
        check_trees(self.verifier, self.trace)
        host = tree_round(self.engines[0], self.verifier, draft, last, [r.generator for r in rows], self.sampling,
                          self.greedy_draft)  # fmt: skip
        if self.reads_states:
            self._hand_states(rows, [[0] + [1 + j for j in path] for path in host.paths])
        if self.drafter:
            self.drafter.observe(rows, draft.counts, host.accepted)
        return self._emit_all(rows, draft.counts, host, {})

    def _emit_all(
        self, rows: list[Row], ns: list[int], host: RoundHost, weights: dict[int, Tensor]
    ) -> set[int]:
        """Emit every row's share of the round, in row order; returns the rows that finished."""
        finished: set[int] = set()
        for i, (row, nb) in enumerate(zip(rows, ns)):
            if self._emit(row, i, nb, host, weights.get(i)):
                finished.add(i)
        return finished

    def _hand_states(self, rows: list[Row], kept: list[list[int]]) -> None:
        """A drafter that reads the target's layer states (``Drafter.target_layers``) gets those of
        the tokens each row's target cache kept in the step just run: ``kept[b]`` indexes that
        step's tokens (a chain's root and accepted drafts, a tree's root and accepted path).
        Called only where ``reads_states``."""
        states, drafter = self.engines[0].states, self.drafter
        assert states is not None and drafter is not None  # the engine keeps states for a drafter only
        drafter.take_states(rows, [states[b, idx] for b, idx in enumerate(kept)])

    def _emit(self, row: Row, i: int, nb: int, host: RoundHost, weights: Tensor | None) -> bool:
        """Append what row ``i`` (``nb`` drafted) emitted this round (its kept drafts, then the
        verifier's token, cut at an EOS) and count it; a tree round's drafts are its accepted path.
        Returns whether the row finished."""
        acc, drafts = host.accepted[i], host.drafts[i]
        new = drafts[:acc] + [host.next_token[i]]
        eos_at = next((j for j, t in enumerate(new) if t in self.eos), None)
        counted, kept = round_counts(nb, acc, eos_at)
        if host.depth is not None:  # all nodes were verified; a path past an accepted EOS was not emitted
            row.stats.record_tree_round(nb, host.depth[i], kept)
        else:
            row.stats.record_round(counted, kept, *host.sums.get(i, ([], [])))
        emitted = len(new) if eos_at is None else eos_at + 1
        row.stats.target_logprob_sum += sum(host.logp[i][:emitted])
        row.stats.target_divergence_sum += sum(host.excess[i][:emitted])
        row.stats.target_forwards += 1
        if weights is not None:
            row.weights.append(weights[: min(kept + 1, counted)])
        if eos_at is not None:
            new = new[: eos_at + 1]
        if host.probs is not None:
            record_trace(row, i, nb, acc, new, drafts, host.probs, weights)
        row.out.extend(new)
        row.seq.extend(new)
        return eos_at is not None or len(row.out) >= row.budget
