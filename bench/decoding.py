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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from transformers import PreTrainedModel

from bench.context import Context
from bench.distributions import Sampling, pick, process
from bench.drafters import Draft, DraftContext, Drafter, check_draft_policy, make_drafter
from bench.drafters.model import padded
from bench.engines import EagerEngine, EngineFactory, ModelEngine, to_device
from bench.errors import BenchError
from bench.verifiers import Round, Verifier, verify
from bench.verifiers.tree import TreeRound, check_tree_method, verify_tree

@dataclass
class DecodeStats:
    """Counters of one decoded example. Per-position lists have one entry per draft position."""

    prompt_tokens: int
    draft_len: int
    new_tokens: int = 0
    rounds: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    drafting_rounds: int = 0  # rounds that drafted at least one token (a lookup may find none)
    verified_nodes: int = 0  # drafted tokens the target verified (a chain's tokens, a tree's nodes)
    target_logprob_sum: float = 0.0  # sum over emitted tokens of the target's log p at temperature 1
    # sum over emitted tokens of log p_T(y) + H(p_T), p_T the target's law at the sampling temperature
    target_divergence_sum: float = 0.0
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

    def record_round(
        self, drafted: int, accepted: int, expected: Sequence[float], bias: Sequence[float]
    ) -> None:
        """Count one round of ``drafted`` tokens of which the first ``accepted`` were kept, adding
        the verifier's expected acceptance and bias at the positions it reached."""
        self.record_tree_round(drafted, drafted, accepted)  # a chain: a tree one node wide
        for i in range(min(drafted, accepted + 1)):
            self.reached_per_position[i] += 1
            self.expected_acceptance_sum[i] += expected[i]
            self.bias_sum[i] += bias[i]

    def record_tree_round(self, nodes: int, depth: int, accepted: int) -> None:
        """Count one tree round: ``nodes`` verified, the deepest ``depth`` levels down, ``accepted``
        kept along one path. Per position is per depth: a level drafted, a level kept (the tree
        rules report no expected acceptance or bias per node: no position is counted reached)."""
        self.rounds += 1
        self.drafting_rounds += nodes > 0
        self.drafted_tokens += nodes
        self.verified_nodes += nodes
        self.accepted_tokens += accepted
        for i in range(depth):
            self.drafted_per_position[i] += 1
            self.accepted_per_position[i] += i < accepted

    def pool(self, other: DecodeStats) -> None:
        """Add another example's counters to these (per-position lists entry by entry), so that the
        rates below are pooled over both: accepted / drafted over all drafts, not a mean of rates."""
        counts = (
            "new_tokens",
            "rounds",
            "drafted_tokens",
            "verified_nodes",
            "accepted_tokens",
            "target_forwards",
            "draft_forwards",
            "target_logprob_sum",
            "target_divergence_sum",
        )
        for name in counts:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        lists = ("drafted_per_position", "accepted_per_position", "reached_per_position")
        for name in (*lists, "expected_acceptance_sum", "bias_sum"):
            mine, theirs = getattr(self, name), getattr(other, name)
            mine.extend([0] * (len(theirs) - len(mine)))
            for i, v in enumerate(theirs):
                mine[i] += v

    @property
    def acceptance_rate(self) -> float:
        """vLLM's draft acceptance rate: accepted / drafted."""
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else float("nan")

    @property
    def acceptance_length(self) -> float:
        """Tokens emitted per round, bonus included: tokens per target forward (each round is one;
        the prompt's prefill is not counted), Spec-Bench's mean accepted tokens."""
        return self.new_tokens / self.rounds if self.rounds else float("nan")

    @property
    def nodes_per_round(self) -> float:
        """Drafted tokens the target verified per round (its forward's width less one): a tree
        verifies more nodes than it can accept; compare with tokens per forward."""
        return self.verified_nodes / self.rounds if self.rounds else float("nan")

    @property
    def drafting_share(self) -> float:
        """Share of rounds that drafted: below 1 where a drafter found nothing to propose."""
        return self.drafting_rounds / self.rounds if self.rounds else float("nan")

    @property
    def target_loglik(self) -> float:
        """The target's mean log-likelihood per emitted token (log p at temperature 1): a fidelity
        measure that needs no gold answer (a lossless method's expectation is the target's own)."""
        return self.target_logprob_sum / self.new_tokens if self.new_tokens else float("nan")

    @property
    def target_divergence(self) -> float:
        """Mean over emitted tokens of log p_T(y) + H(p_T): E_y~p[log p(y)] = -H(p), so its mean is 0
        when the tokens are drawn from the target's own law (lossless sampling); below 0 where a
        verifier lets through tokens the target finds unlikely. The fidelity axis with a known zero."""
        return self.target_divergence_sum / self.new_tokens if self.new_tokens else float("nan")

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


@dataclass
class Generation:
    """Token ids produced for one prompt (EOS included when it ended the example) and stats;
    ``trace`` holds one tuple of ``TRACE_FIELDS`` per emitted token when the decoder traces."""

    token_ids: list[int]
    stats: DecodeStats
    trace: list[tuple[Any, ...]] | None = None


def _synchronizer(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


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
    trace: list[tuple[Any, ...]] = field(default_factory=list)


@dataclass
class RoundHost:
    """What a round reads on the host, row by row: everything ``_emit`` appends and counts, from
    the round's ONE device->host copy (``_to_host``), taken once the verdicts are on the device."""

    accepted: list[int]  # drafts kept (a tree round: the accepted path's length)
    next_token: list[int]  # the verifier's token after them
    drafts: list[list[int]]  # the row's drafted tokens (a tree round: the tokens along its path)
    logp: list[list[float]]  # the target's temperature-1 log p of each token the row may emit
    excess: list[list[float]]  # log p_T(y) + H(p_T) of each of them (DecodeStats.target_divergence)
    # A chain round's verified rows: [expected acceptance, bias] per position (none drafted: absent).
    sums: dict[int, list[list[float]]] = field(default_factory=dict)
    depth: list[int] | None = None  # a tree round: the levels each row drafted (None: a chain)
    paths: list[list[int]] = field(default_factory=list)  # a tree round: each path's node indices
    probs: dict[str, list[Any]] | None = None  # tracing: p and q of drafted and emitted tokens


def _to_host(parts: dict[str, Tensor]) -> dict[str, list[Any]]:
    """Every tensor of ``parts`` in ONE device->host copy: one wait for the device, not one per
    tensor. Each comes back as its rows' flat lists (a 1-D tensor: its values), an integer tensor
    as ints. float64 holds every integer below 2**53 and every float32 exactly, so the values are
    the ones each tensor's own ``tolist`` gives."""
    flat = torch.cat([t.flatten().double() for t in parts.values()]).tolist()
    out: dict[str, list[Any]] = {}
    at = 0
    for name, t in parts.items():
        values = flat[at : at + t.numel()]
        at += t.numel()
        if not t.is_floating_point():
            values = [int(v) for v in values]
        width = math.prod(t.shape[1:])
        rows = [values[i * width : (i + 1) * width] for i in range(t.shape[0])] if t.dim() > 1 else None
        out[name] = values if rows is None else rows
    return out


def _tree_depth(parents: list[int]) -> int:
    """Levels of a token tree from each node's parent (-1: the root); nodes come after parents."""
    depth = [0] * len(parents)
    for j, up in enumerate(parents):
        depth[j] = 1 + (depth[up] if up >= 0 else 0)
    return max(depth, default=0)


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
        head: torch.nn.Module | None = None,
        engine: EngineFactory = EagerEngine,
        draft_policy: str | None = None,
        trace: bool = False,
        drafter: str | Drafter | None = "model",
    ) -> None:
        if verifier.uses_draft and draft_len < 1:
            raise BenchError(f"draft_len must be >= 1 for {verifier.name}, got {draft_len}")
        if verifier.needs_hidden and head is None:
            raise BenchError(
                f"{verifier.name}: needs a weight head; train one with `diversed-bench train` "
                "and pass --head PATH"
            )
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
            self._check_trees()
        made = engine(target, widths, trees) if trees else engine(target, widths)  # type: ignore[call-arg]
        self.engines = [self._keeping_states(made, target)] + (self.drafter.engines if self.drafter else [])

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
        sync = _synchronizer(self.device)
        rows = self._start(prompts, max_new_tokens, seeds)
        sync()
        start = time.perf_counter()
        self._prefill(rows)
        sync()
        prefill = time.perf_counter() - start
        done, cache_bytes = self._decode(rows, max_new_tokens)
        sync()
        wall = time.perf_counter() - start
        if len(prompts) > 1:
            wall = prefill = math.nan
        return self._generations(done, wall, prefill, cache_bytes)

    def _start(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, seeds: Sequence[int]
    ) -> list[_Row]:
        """One row per prompt, its generator seeded; the engines' caches sized for the longest row
        (prompt, budget and one round's draft) and the drafter told the batch size."""
        n_max = self.draft_len
        rows = [
            _Row(
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
            self.drafter.start(len(rows))
        return rows

    def _prefill(self, rows: list[_Row]) -> None:
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

    def _decode(self, rows: list[_Row], max_new_tokens: int) -> tuple[list[_Row], int]:
        """Rounds until every row finished: each round rolls the caches back to the rows' accepted
        prefixes and drops finished rows from the batch. Returns the finished rows (in the order
        they finished) and the most bytes the caches held."""
        done: list[_Row] = []
        cache_bytes = 0
        while rows:
            finished = self._round(rows) if max_new_tokens > 0 else set(range(len(rows)))
            cache_bytes = max(cache_bytes, sum(e.cache_bytes for e in self.engines))
            for engine in self.engines:
                engine.truncate([len(r.seq) - 1 for r in rows])
            if finished:
                alive = [i for i in range(len(rows)) if i not in finished]
                done += [rows[i] for i in finished]
                for i in sorted(finished) if self.drafter else ():  # it may learn from a response
                    self.drafter.finish(rows[i])  # type: ignore[union-attr]
                rows = [rows[i] for i in alive]
                for engine in self.engines if rows else ():
                    engine.select(alive)
        return done, cache_bytes

    def _generations(
        self, done: list[_Row], wall: float, prefill: float, cache_bytes: int
    ) -> list[Generation]:
        """The finished rows' Generations in prompt order, their stats completed."""
        out: list[Generation | None] = [None] * len(done)
        for row in done:
            s = row.stats
            s.wall_time_s, s.prefill_time_s, s.kv_cache_bytes = wall, prefill, cache_bytes
            s.new_tokens = len(row.out)
            s.weights = torch.cat(row.weights).tolist() if row.weights else []
            out[row.index] = Generation(row.out, s, row.trace if self.trace else None)
        return out  # type: ignore[return-value]

    def _trace_probs(
        self,
        p_logits: Tensor,
        p: Tensor,
        q: Tensor | None,
        drafted: Tensor,
        accepted: Tensor,
        next_token: Tensor,
    ) -> dict[str, Tensor]:
        """Per row: p and q of every drafted token, and of the token emitted after them (only when
        tracing; read with the round's other values)."""
        if p is p_logits:  # greedy without a draft kept the logits: the trace reports probabilities
            p = process(p_logits, self.sampling)
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

    def _record_trace(
        self,
        row: _Row,
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

    def _round(self, rows: list[_Row]) -> set[int]:
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
        accepted, next_token, floats, weights = self._verify(rows, ns, draft, p_logits, p, h_target)
        parts = {
            "accepted": accepted,
            "next_token": next_token,
            "drafted": drafted,
        }
        parts["logp"], parts["excess"] = self._fidelity(p_logits, self._chain_tokens(drafted, accepted, next_token))
        parts.update((f"sums{g}", f.flatten(1)) for g, (_, f) in enumerate(floats))
        if self.trace:
            q = draft.q if draft else None
            parts.update(self._trace_probs(p_logits, p, q, drafted, accepted, next_token))
        host = self._chain_host(_to_host(parts), ns, [idx for idx, _ in floats])  # the round's sync
        if self.drafter:
            self.drafter.observe(rows, ns, host.accepted)
        if self.reads_states:
            self._hand_states(rows, [list(range(acc + 1)) for acc in host.accepted])
        return self._emit_all(rows, ns, host, weights)

    def _chain_host(self, got: dict[str, list[Any]], ns: list[int], groups: list[list[int]]) -> RoundHost:
        """A chain round's RoundHost from its host copy: ``sums{g}`` holds verified group g's rows'
        expected acceptances then biases (``groups[g]`` names the rows), ``drafted`` is padded to
        the longest draft."""
        sums: dict[int, list[list[float]]] = {}
        for g, idx in enumerate(groups):
            for i, both in zip(idx, got[f"sums{g}"]):
                k = len(both) // 2
                sums[i] = [both[:k], both[k:]]
        trace = ("p_next", "p_draft", "q_draft", "q_next")
        return RoundHost(
            accepted=got["accepted"],
            next_token=got["next_token"],
            drafts=[tokens[:nb] for tokens, nb in zip(got["drafted"], ns)],
            logp=got["logp"],
            excess=got["excess"],
            sums=sums,
            probs={k: got[k] for k in trace if k in got} if self.trace else None,
        )

    def _tree_round(self, rows: list[_Row], draft: Draft, last: Tensor) -> set[int]:
        """A round whose draft is a token tree per row: one target forward over every node
        (``ModelEngine.tree_step``), the rule on trees (``bench.verifiers.tree``) picks one path per
        row, its K/V are committed and its tokens and the verifier's token emitted."""
        self._check_trees()
        ns, nodes = draft.counts, draft.tokens
        target = self.engines[0]
        p_logits = target.tree_step(torch.cat([last, nodes], dim=1), draft.parents, [1 + nb for nb in ns])
        p = process(p_logits, self.sampling)
        on_path, accepted, next_token = self._verify_tree(rows, draft, p_logits, p)
        parts = {
            "next_token": next_token,
            "nodes": nodes,
            "parents": draft.parents,
            "on_path": on_path,
            "accepted": accepted,
        }
        parts["logp"], parts["excess"] = self._fidelity(*self._path_tokens(p_logits, nodes, on_path, accepted, next_token))
        host = self._tree_host(_to_host(parts), ns)  # the round's sync
        target.commit(host.paths)
        if self.reads_states:
            self._hand_states(rows, [[0] + [1 + j for j in path] for path in host.paths])
        if self.drafter:
            self.drafter.observe(rows, ns, host.accepted)
        return self._emit_all(rows, ns, host, {})

    @staticmethod
    def _tree_host(got: dict[str, list[Any]], ns: list[int]) -> RoundHost:
        """A tree round's RoundHost from its host copy: ``on_path`` holds each row's accepted node
        indices (then -1s), ``nodes`` and ``parents`` its tree (padded past its ``ns`` nodes)."""
        paths = [path[:k] for path, k in zip(got["on_path"], got["accepted"])]
        return RoundHost(
            accepted=[len(path) for path in paths],
            next_token=got["next_token"],
            drafts=[[tokens[j] for j in path] for tokens, path in zip(got["nodes"], paths)],
            logp=got["logp"],
            excess=got["excess"],
            depth=[_tree_depth(parents[:nb]) for parents, nb in zip(got["parents"], ns)],
            paths=paths,
        )

    def _emit_all(
        self, rows: list[_Row], ns: list[int], host: RoundHost, weights: dict[int, Tensor]
    ) -> set[int]:
        """Emit every row's share of the round, in row order; returns the rows that finished."""
        finished: set[int] = set()
        for i, (row, nb) in enumerate(zip(rows, ns)):
            if self._emit(row, i, nb, host, weights.get(i)):
                finished.add(i)
        return finished

    def _keeping_states(self, made: ModelEngine, target: PreTrainedModel) -> ModelEngine:
        """The target's engine, told to keep the layer states the drafter reads (EAGLE's), if any.
        Only then does the loop hand them over (``reads_states``): any other drafter's rounds build
        no index lists for them."""
        layers = self.drafter.target_layers(target.config.get_text_config().num_hidden_layers) if self.drafter else ()
        self.reads_states = bool(layers)
        if layers:
            made.keep_states(layers)
        return made

    def _hand_states(self, rows: list[_Row], kept: list[list[int]]) -> None:
        """A drafter that reads the target's layer states (``Drafter.target_layers``) gets those of
        the tokens each row's target cache kept in the step just run: ``kept[b]`` indexes that
        step's tokens (a chain's root and accepted drafts, a tree's root and accepted path).
        Called only where ``reads_states``."""
        states, drafter = self.engines[0].states, self.drafter
        assert states is not None and drafter is not None  # the engine keeps states for a drafter only
        drafter.take_states(rows, [states[b, idx] for b, idx in enumerate(kept)])

    def _check_trees(self) -> None:
        """A method, a weight head or a trace not defined on token trees is refused in one line."""
        check_tree_method(self.verifier)
        if self.verifier.needs_hidden or self.trace:
            what = "a weight head" if self.verifier.needs_hidden else "--trace"
            raise BenchError(f"{self.verifier.name}: {what} is defined on chain drafts only; use a chain drafter")

    def _verify_tree(
        self, rows: list[_Row], draft: Draft, p_logits: Tensor, p: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """On the device, no sync: the accepted path per row ([B, n] node indices, -1 after it), its
        length [B] and the token after it. Rows with as many nodes are verified together, without
        padding (as ``_verify`` groups chains): a row's draws are the ones it makes alone."""
        ns, count, n = draft.counts, len(rows), draft.tokens.shape[1]
        on_path = torch.full((count, n), -1, dtype=torch.long, device=self.device)
        accepted = torch.zeros(count, dtype=torch.long, device=self.device)
        next_token = torch.zeros(count, dtype=torch.long, device=self.device)
        for k in sorted(set(ns)):
            idx = [i for i, nb in enumerate(ns) if nb == k]
            sel = slice(None) if len(idx) == count else to_device(idx, self.device)
            generators = [rows[i].generator for i in idx]
            if k == 0:  # nothing drafted: the target's token, drawn as a chain round draws it
                next_token[sel] = pick(p_logits[sel, 0] if self.sampling.greedy else p[sel, 0], generators, self.sampling.greedy)
                continue
            cut = len(idx) < count or k < draft.tokens.shape[1]
            tokens, parents, q = (
                (t[sel, :k] if cut and t is not None else t) for t in (draft.tokens, draft.parents, draft.q)
            )
            round_ = TreeRound(
                tokens=tokens,
                parents=parents,
                counts=[k] * len(idx),
                p=p[sel, : k + 1] if cut else p,
                p_logits=p_logits[sel, : k + 1] if cut else p_logits,
                q=q,
                sampling=self.sampling,
                greedy_draft=self.greedy_draft and draft.q is not None,
            )
            verdict = verify_tree(self.verifier, round_, generators)
            on_path[sel, :k] = verdict.nodes
            accepted[sel] = verdict.accepted
            next_token[sel] = verdict.next_token
        return on_path, accepted, next_token

    @staticmethod
    def _path_tokens(
        p_logits: Tensor, nodes: Tensor, on_path: Tensor, accepted: Tensor, next_token: Tensor
    ) -> tuple[Tensor, Tensor]:
        """The target's logits [B, n + 1, V] before each token a tree round emits, and those tokens
        [B, n + 1] (the path's nodes, read at their parents' logits, then the verifier's token at the
        path's end; padding after it), from the device's path without a sync."""
        n = nodes.shape[1]
        step = torch.arange(n + 1, device=nodes.device)
        path = torch.cat([on_path, on_path.new_full((on_path.shape[0], 1), -1)], dim=1)
        at = torch.cat([on_path.new_zeros(on_path.shape[0], 1), (on_path + 1).clamp(min=0)], dim=1)
        end = accepted.unsqueeze(1)
        pick_ = torch.where(step < end, path.clamp(min=0), torch.where(step == end, n, 0))
        tokens = torch.cat([nodes, next_token.unsqueeze(1)], dim=1).gather(1, pick_)
        return p_logits.gather(1, at.unsqueeze(-1).expand(-1, -1, p_logits.shape[-1])), tokens

    @staticmethod
    def _chain_tokens(drafted: Tensor, accepted: Tensor, next_token: Tensor) -> Tensor:
        """[B, n + 1]: the token each position of a chain round would emit (the drafts up to the
        accepted count, the verifier's token at it; later positions are unused)."""
        last = next_token.unsqueeze(1)
        return torch.cat([drafted, last], dim=1).scatter(1, accepted.unsqueeze(1), last)

    def _fidelity(self, logits: Tensor, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """[B, k] each, for ``tokens`` [B, k] read at the target's ``logits`` [B, k, V] of the verify
        forward (the fidelity columns cost no forward): the temperature-1 log p (``target_loglik``)
        and log p_T(y) + H(p_T) (``target_divergence``), p_T the softmax of the logits at the sampling
        temperature (1 under greedy decoding, whose point mass has no entropy to weigh; top-k and
        top-p not applied, so a token they exclude stays finite): its mean is 0 when y ~ p_T."""
        logits = logits.float()
        picked = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        law = (logits / (self.sampling.temperature or 1.0)).log_softmax(-1)
        entropy = torch.special.entr(law.exp()).sum(-1)
        return picked - logits.logsumexp(-1), law.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) + entropy

    def _verify(
        self,
        rows: list[_Row],
        ns: list[int],
        draft: Draft | None,
        p_logits: Tensor,
        p: Tensor,
        h_target: Tensor | None,
    ) -> tuple[Tensor, Tensor, list[tuple[list[int], Tensor]], dict[int, Tensor]]:
        """The verdicts of a round: rows that drafted as many tokens are verified together (a
        batch of one is one group). Returns accepted counts and next tokens [B], the per-position
        [expected acceptance, bias] of each verified group, and DIVERSED's weights per row."""
        device, count, n = self.device, len(rows), max(ns)
        verdicts: list[tuple[slice | Tensor, Tensor, Tensor]] = []  # rows, accepted, next token
        floats: list[tuple[list[int], Tensor]] = []  # per verified group: its rows and their floats
        weights: dict[int, Tensor] = {}
        for k in sorted(set(ns)):
            idx = [i for i, nb in enumerate(ns) if nb == k]
            sel = slice(None) if len(idx) == count else to_device(idx, device)
            generators = [rows[i].generator for i in idx]
            if k == 0:
                probs = p_logits[sel, 0] if self.sampling.greedy else p[sel, 0]
                token = pick(probs, generators, self.sampling.greedy)
                verdicts.append((sel, torch.zeros_like(token), token))
                continue
            assert draft is not None
            round_ = self._round_of(draft, sel, k, len(idx) < count or k < n, p_logits, p, h_target)
            verdict = verify(self.verifier, round_, p[sel, k], generators)
            verdicts.append((sel, verdict.accepted, verdict.next_token))
            floats.append((idx, torch.stack([verdict.expected_acceptance, verdict.bias], dim=1)))
            if round_.weights is not None:
                weights.update(zip(idx, round_.weights))
        if len(verdicts) == 1:
            _, accepted, next_token = verdicts[0]
            return accepted, next_token, floats, weights
        accepted = torch.zeros(count, dtype=torch.long, device=device)
        next_token = torch.zeros(count, dtype=torch.long, device=device)
        for sel, acc, token in verdicts:
            accepted[sel], next_token[sel] = acc, token
        return accepted, next_token, floats, weights

    def _round_of(
        self,
        draft: Draft,
        sel: slice | Tensor,
        k: int,
        sliced: bool,
        p_logits: Tensor,
        p: Tensor,
        h_target: Tensor | None,
    ) -> Round:
        """What the verifier reads of the rows ``sel``, which drafted ``k`` tokens each."""
        mine = [draft.tokens, draft.q, draft.q_logits, draft.hidden]
        if sliced:  # only when needed: each slice is a dispatch
            mine = [t[sel, :k] if t is not None else None for t in mine]
        draft_ids, draft_q, draft_logits, draft_h = mine
        target = p[sel, :k]
        if draft_q is None:  # a deterministic drafter: its law is the point mass on its token
            draft_q = torch.zeros_like(target).scatter_(-1, draft_ids.unsqueeze(-1), 1.0)
        return Round(
            draft=draft_ids,
            q=draft_q,
            p=target,
            q_logits=draft_logits,
            p_logits=p_logits[sel, :k],
            sampling=self.sampling,
            weights=self._head_output(draft_h, h_target, sel, k) if self.verifier.needs_hidden else None,
            greedy_draft=self.greedy_draft and draft.q is not None,  # a lookup's q is its proposal
        )

    def _head_output(self, draft_h: Tensor | None, h_target: Tensor | None, sel: slice | Tensor, k: int) -> Tensor:
        """The learned head on the round's states: DIVERSED's reads the target's states that predict
        each drafted token, a judge's (``at_token``) those with the drafted token as input."""
        assert h_target is not None and self.head is not None
        start = 1 if getattr(self.head, "at_token", False) else 0
        return self.head(draft_h, h_target[sel, start : start + k])

    def _emit(self, row: _Row, i: int, nb: int, host: RoundHost, weights: Tensor | None) -> bool:
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
            self._record_trace(row, i, nb, acc, new, drafts, host.probs, weights)
        row.out.extend(new)
        row.seq.extend(new)
        return eos_at is not None or len(row.out) >= row.budget
