"""Timing prompt lookup (``speed --drafter lookup``): the harness's lookup ``sd`` (and relaxed
verifiers on the same drafts) against its own ``ar`` and against transformers' prompt-lookup
``generate()`` on the same prompts, greedy or sampled, and the target's verify cost per step width.

What decides a lookup's speed is the price of a wider verify step (a lookup costs nothing to
draft): ``width_costs`` times a target step of every width 1 .. N + 1 after a real prompt, on the
engine being measured. Every figure is a median over repeats of runs made back to back; what the
outputs are worth (quality, log-likelihood, agreement with ``ar``) is measured on the first repeat's.
"""

from __future__ import annotations

from functools import partial
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from bench.decode_stats import DecodeStats
from bench.distributions import Sampling
from bench.drafters import canonical_drafter, parse_drafter
from bench.engines import CompiledEngines, EngineFactory, ModelEngine
from bench.pairs import Pair
from bench.speed.runs import Timed, median_seconds, paired, ratio, run_harness, timed_generate
from bench.speed.fidelity import Fidelity

AR, HF = "ar", "transformers' lookup"  # the two baselines' labels in the rows


def run_transformers_lookup(
    pair: Pair, prompts: list[list[int]], n: int, ngram: int, max_new: int, temperature: float = 0.0
) -> Timed:
    """transformers' ``generate(prompt_lookup_num_tokens=n, max_matching_ngram_size=ngram)``, greedy
    or sampled at ``temperature`` from the plain softmax (its default top-k 50 turned off, as the
    harness samples)."""
    sampled = (
        {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
        if temperature
        else {"do_sample": False}
    )
    return timed_generate(
        pair, prompts, max_new, prompt_lookup_num_tokens=n, max_matching_ngram_size=ngram, **sampled
    )


def width_costs(
    pair: Pair, engine: EngineFactory, prompt: list[int], draft_lens: list[int], repeats: int
) -> dict[int, float]:
    """Median ms of one target step of each width after ``prompt``: every width 1 .. N + 1 on an
    engine that runs any width (eager); on a compiled one the widths the lookup runs compiled (1
    and each N + 1; more draft lengths measure more widths, a graph per width costs minutes)."""
    if isinstance(engine, CompiledEngines):
        sets: list[tuple[int, ...]] = [(1, n + 1) for n in draft_lens]
    else:
        sets = [tuple(range(1, max(draft_lens) + 2))]
    out: dict[int, float] = {}
    for widths in sets:
        out |= _step_costs(
            pair, engine(pair.target, widths), prompt, [w for w in widths if w not in out], repeats
        )
    return dict(sorted(out.items()))


@torch.inference_mode()
def _step_costs(
    pair: Pair, eng: ModelEngine, prompt: list[int], widths: list[int], repeats: int
) -> dict[int, float]:
    """Each step writes past the row's length and is rolled back: every step sees the same context."""
    _prefill(pair, eng, prompt, max(widths, default=1))
    out = {}
    for w in widths:
        ids = torch.tensor([prompt[-1:] * w], device=pair.device)
        out[w] = 1e3 * median_seconds(lambda: eng.step(ids, [0], keep=w, hidden=False), pair.device, repeats)
    return out


def _prefill(pair: Pair, eng: ModelEngine, prompt: list[int], width: int) -> None:
    """One row with room for a step of ``width`` after ``prompt``, holding all of it but its last
    token: the context every timed step sees (the step's first token is the prompt's last)."""
    eng.start(1, len(prompt) + width + 1)
    eng.step(torch.tensor([prompt[:-1]], device=pair.device), [len(prompt) - 1], keep=1, hidden=False)


TREE_SHAPES = ("chain", "wide", "binary")


def tree_parents(nodes: int, shape: str) -> list[int]:
    """Parents of a tree of ``nodes`` nodes: ``chain`` (each under the last), ``wide`` (all under
    the root) or ``binary`` (node j under (j - 1) // 2: the complete binary tree, log depth)."""
    if shape == "chain":
        return list(range(-1, nodes - 1))
    if shape == "wide":
        return [-1] * nodes
    return [(j - 1) // 2 if j else -1 for j in range(nodes)]


@torch.inference_mode()
def tree_costs(
    pair: Pair, engine: EngineFactory, prompt: list[int], sizes: list[int], shape: str, repeats: int
) -> dict[int, dict[str, float]]:
    """Per tree size n: median ms of a target tree step of n nodes (``tree_step``, then ``commit``
    of an empty path: every step sees the same context) and of a chain step of the same width
    n + 1, after ``prompt``; under 0 the width-1 step's. On a compiled engine each size is a graph
    of its own (minutes each)."""
    widths = [n + 1 for n in sizes]
    eng = engine(pair.target, [1, *widths], widths)
    _prefill(pair, eng, prompt, max(widths))
    held = list(eng.lengths)

    def tree(ids: torch.Tensor, parents: torch.Tensor) -> None:
        eng.tree_step(ids, parents, [0])
        eng.commit([[]])
        eng.truncate(held)

    def chain(ids: torch.Tensor, parents: torch.Tensor) -> None:
        eng.step(ids, [0], keep=ids.shape[1], hidden=False)

    out: dict[int, dict[str, float]] = {}
    for n in [0, *sizes]:  # 0: the plain width-1 step, the unit of the others
        ids = torch.tensor([prompt[-1:] + prompt[-n - 1 : -1]], device=pair.device)[:, : n + 1]
        parents = torch.tensor([tree_parents(n, shape)], device=pair.device)
        out[n] = {}
        for name, run in (("tree_ms", tree), ("chain_ms", chain)) if n else (("chain_ms", chain),):
            out[n][name] = 1e3 * median_seconds(lambda: run(ids, parents), pair.device, repeats)
    return out


def _counters(stats: list[DecodeStats]) -> dict[str, float | None]:
    """The harness's counters over the prompts; None for transformers, which reports none."""
    if not stats:
        return dict.fromkeys(("tokens_per_forward", "drafting_share", "acceptance_rate"))
    rounds, drafted = sum(s.rounds for s in stats), sum(s.drafted_tokens for s in stats)
    return {
        "tokens_per_forward": sum(s.new_tokens for s in stats) / rounds,
        "drafting_share": sum(s.drafting_rounds for s in stats) / rounds,
        "acceptance_rate": sum(s.accepted_tokens for s in stats) / drafted if drafted else None,
    }


def _row(label: str, n: int, got: dict[str, list[Timed]], fidelity: Fidelity, greedy: bool) -> dict[str, Any]:
    """One method (or baseline) at one N: time ratios over the repeats, counters, and what its
    first repeat's outputs are worth against ``ar``'s."""
    first = got[label][0]
    speedups = [a.seconds / x.seconds for a, x in zip(got[AR], got[label])]
    return {
        "method": label, "draft_len": n,
        "speedup": statistics.median(speedups), "speedup_range": [min(speedups), max(speedups)],
        "vs_hf": ratio(got, HF, label),  # transformers' time / this one's: above 1 is faster
        **_counters(first.stats),
        **fidelity(first.outputs, got[AR][0].outputs, greedy),
        "equals_hf": first.outputs == got[HF][0].outputs if greedy else None,
    }  # fmt: skip


def _deltas(rows: list[dict[str, Any]]) -> None:
    """Each row's log-likelihood and quality minus ``ar``'s at the same N: the cost of its rule."""
    ar = {r["draft_len"]: r for r in rows if r["method"] == AR}
    for r in rows:
        base = ar[r["draft_len"]]
        r["loglik_vs_ar"] = r["target_loglik"] - base["target_loglik"]
        known = r["quality"] is not None and base["quality"] is not None
        r["quality_vs_ar"] = r["quality"] - base["quality"] if known else None


def _warm_up(
    pair: Pair, prompt: list[int], draft_lens: list[int], methods: dict[str, tuple[str, dict[str, Any]]],
    engine: EngineFactory, spec: str, ngram: int, sampling: Sampling,
) -> float:  # fmt: skip
    """Compile and warm every run once, untimed; its seconds."""
    tick = time.perf_counter()
    for n in draft_lens:
        for m, params in methods.values():
            run_harness(pair, m, [prompt], n, 8, engine, spec, sampling, **params)
    run_harness(pair, "ar", [prompt], 1, 8, engine, sampling=sampling)
    run_transformers_lookup(pair, [prompt], draft_lens[0], ngram, 8, sampling.temperature)
    return time.perf_counter() - tick


def measure_lookup(
    pair: Pair,
    fidelity: Fidelity,
    draft_lens: list[int],
    max_new: int,
    repeats: int,
    drafter: str,
    methods: dict[str, tuple[str, dict[str, Any]]],
    engine: EngineFactory,
    log: Callable[[str], None] = print,
    temperature: float = 0.0,
) -> dict[str, Any]:
    """Per N: ``ar``, transformers' prompt lookup and each method (label -> (method, params)) with
    the lookup drafter on ``fidelity``'s prompts, in one repeat back to back; medians of the time
    ratios and their range over repeats; a row each, the baselines included. Greedy, or sampled at
    ``temperature`` (outputs then differ by their draws: agreement is judged greedy only)."""
    prompts, spec, sampling = fidelity.prompts, canonical_drafter(drafter), Sampling(temperature)
    # transformers' lookup matches the drafter's n-gram size; transformers' own default (2) beside a
    # drafter without one (suffix).
    ngram = int(parse_drafter(spec)[1].get("ngram", 2))
    setup = _warm_up(pair, prompts[0], draft_lens, methods, engine, spec, ngram, sampling)
    costs = width_costs(pair, engine, prompts[0], draft_lens, max(repeats, 5))
    log("verify cost per width (ms): " + ", ".join(f"{w}: {c:.2f}" for w, c in costs.items()))
    rows = []
    for n in draft_lens:
        runs: dict[str, Callable[[], Timed]] = {
            AR: lambda: run_harness(pair, "ar", prompts, 1, max_new, engine, sampling=sampling),
            HF: lambda: run_transformers_lookup(pair, prompts, n, ngram, max_new, temperature),
        }
        for label, (m, params) in methods.items():
            runs[label] = partial(run_harness, pair, m, prompts, n, max_new, engine, spec, sampling, **params)
        got = paired(repeats, **runs)
        for label in runs:
            rows.append(_row(label, n, got, fidelity, greedy=not temperature))
            log(_line(rows[-1]))
    _deltas(rows)
    return {
        "pair": pair.spec.name, "device": str(pair.device), "threads": torch.get_num_threads(),
        "dtype": str(pair.target.dtype).replace("torch.", ""),
        "drafter": spec, "prompts": len(prompts), "max_new_tokens": max_new, "repeats": repeats,
        "temperature": temperature, "setup_s": setup, "width_ms": costs, "rows": rows,
    }  # fmt: skip


def _line(r: dict[str, Any]) -> str:
    """The log line of one row."""
    lo, hi = r["speedup_range"]
    counted = "" if r["tokens_per_forward"] is None else f", {r['tokens_per_forward']:.2f} tokens/forward"
    return (
        f"{r['method']} N={r['draft_len']}: speedup over ar {r['speedup']:.2f} ({lo:.2f}-{hi:.2f}), vs "
        f"transformers' lookup {r['vs_hf']:.2f}{counted}, target log p/token {r['target_loglik']:.3f}"
    )
