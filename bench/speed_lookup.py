"""Speed of prompt lookup (``speed --drafter lookup``): the harness's lookup ``sd`` (and relaxed
verifiers on the same drafts) against its own ``ar`` and against transformers' prompt-lookup
``generate()`` on the same prompts, greedy, and the target's verify cost per step width.

What decides a lookup's speed is the price of a wider verify step (a lookup costs nothing to
draft): ``width_costs`` times a target step of every width 1 .. N + 1 after a real prompt, on the
engine being measured. Every figure is a median over repeats of runs made back to back.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from bench.build import build_decoder
from bench.drafters import canonical_drafter, parse_drafter
from bench.engines import CompiledEngines, EngineFactory, ModelEngine
from bench.pairs import Pair
from bench.distributions import Sampling
from bench.speed import Timed, _sync, paired, ratio, run_harness


@torch.inference_mode()
def run_transformers_lookup(
    pair: Pair, prompts: list[list[int]], n: int, ngram: int, max_new: int, temperature: float = 0.0
) -> Timed:
    """transformers' ``generate(prompt_lookup_num_tokens=n, max_matching_ngram_size=ngram)``, greedy
    or sampled at ``temperature`` from the plain softmax (its default top-k 50 turned off, as the
    harness samples)."""
    sampled = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if temperature else {"do_sample": False}
    outputs, total = [], 0.0
    for prompt in prompts:
        ids = torch.tensor([prompt], device=pair.device)
        _sync(pair.device)
        start = time.perf_counter()
        out = pair.target.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new, **sampled,
            prompt_lookup_num_tokens=n, max_matching_ngram_size=ngram,
            eos_token_id=pair.eos_token_ids or None, pad_token_id=pair.tokenizer.pad_token_id,
        )  # fmt: skip
        _sync(pair.device)
        total += time.perf_counter() - start
        outputs.append(out[0, len(prompt) :].tolist())
    return Timed(outputs, total)


def width_costs(
    pair: Pair, engine: EngineFactory, prompt: list[int], draft_lens: list[int], repeats: int
) -> dict[int, float]:
    """Median ms of one target step of each width after ``prompt``: every width 1 .. N + 1 on an
    engine that runs any width (eager); on a compiled one the widths the lookup runs compiled (1
    and each N + 1; more draft lengths measure more widths, a graph per width costs minutes)."""
    if isinstance(engine, CompiledEngines):
        sets = [(1, n + 1) for n in draft_lens]
    else:
        sets = [tuple(range(1, max(draft_lens) + 2))]
    out: dict[int, float] = {}
    for widths in sets:
        out |= _step_costs(pair, engine(pair.target, widths), prompt, [w for w in widths if w not in out], repeats)
    return dict(sorted(out.items()))


@torch.inference_mode()
def _step_costs(pair: Pair, eng: ModelEngine, prompt: list[int], widths: list[int], repeats: int) -> dict[int, float]:
    """Each step writes past the row's length and is rolled back: every step sees the same context."""
    eng.start(1, len(prompt) + max(widths, default=1) + 1)
    eng.step(torch.tensor([prompt[:-1]], device=pair.device), [len(prompt) - 1], keep=1, hidden=False)
    out = {}
    for w in widths:
        ids = torch.tensor([prompt[-1:] * w], device=pair.device)
        times = []
        for _ in range(repeats + 1):  # the first is a warm-up
            _sync(pair.device)
            tick = time.perf_counter()
            eng.step(ids, [0], keep=w, hidden=False)
            _sync(pair.device)
            times.append(time.perf_counter() - tick)
        out[w] = 1e3 * statistics.median(times[1:])
    return out


def _stats(
    pair: Pair, method: str, prompt: list[int], n: int, max_new: int, engine: EngineFactory, drafter: str,
    params: dict, sampling: Sampling,
) -> Any:  # fmt: skip
    decoder = build_decoder(pair, method, params, draft_len=n, sampling=sampling, engine=engine, drafter=drafter)
    return decoder.generate(prompt, max_new).stats


def _row(m: str, n: int, got: dict[str, list[Timed]], stats: list[Any], greedy: bool) -> dict[str, Any]:
    """One method at one N: time ratios over the repeats, counters over the prompts."""
    rounds = sum(s.rounds for s in stats)
    speedups = [a.seconds / x.seconds for a, x in zip(got["ar"], got[m])]
    return {
        "method": m, "draft_len": n,
        "speedup": statistics.median(speedups), "speedup_range": [min(speedups), max(speedups)],
        "vs_hf": ratio(got, "hf", m),  # transformers' time / ours: above 1 is faster
        "hf_speedup": ratio(got, "ar", "hf"),
        "tokens_per_forward": sum(s.new_tokens for s in stats) / rounds,
        "drafting_share": sum(s.drafting_rounds for s in stats) / rounds,
        "acceptance_rate": sum(s.accepted_tokens for s in stats) / max(sum(s.drafted_tokens for s in stats), 1),
        "target_loglik": sum(s.target_logprob_sum for s in stats) / sum(s.new_tokens for s in stats),
        "equals_ar": got[m][0].outputs == got["ar"][0].outputs if greedy else None,
        "equals_hf": got[m][0].outputs == got["hf"][0].outputs if greedy else None,
    }  # fmt: skip


def measure_lookup(
    pair: Pair,
    prompts: list[list[int]],
    draft_lens: list[int],
    max_new: int,
    repeats: int,
    drafter: str,
    methods: dict[str, tuple[str, dict[str, Any]]],
    engine: EngineFactory,
    log: Callable[[str], None] = print,
    temperature: float = 0.0,
) -> dict[str, Any]:
    """Per N: ``ar``, each method (label -> (method, params)) with the lookup drafter and
    transformers' prompt lookup, in one repeat back to back; medians of the time ratios and their
    range over repeats. Greedy, or sampled at ``temperature`` (outputs then differ by their draws:
    equality is checked greedy only)."""
    spec, sampling = canonical_drafter(drafter), Sampling(temperature)
    ngram = int(parse_drafter(spec)[1]["ngram"])
    tick = time.perf_counter()
    for n in draft_lens:  # compile and warm up, untimed
        for m, params in methods.values():
            run_harness(pair, m, prompts[:1], n, 8, engine, spec, sampling, **params)
    run_harness(pair, "ar", prompts[:1], 1, 8, engine, sampling=sampling)
    run_transformers_lookup(pair, prompts[:1], draft_lens[0], ngram, 8, temperature)
    setup = time.perf_counter() - tick
    costs = width_costs(pair, engine, prompts[0], draft_lens, max(repeats, 5))
    log("verify cost per width (ms): " + ", ".join(f"{w}: {c:.2f}" for w, c in costs.items()))
    rows = []
    for n in draft_lens:
        runs: dict[str, Callable[[], Timed]] = {
            "ar": lambda: run_harness(pair, "ar", prompts, 1, max_new, engine, sampling=sampling),
            "hf": lambda: run_transformers_lookup(pair, prompts, n, ngram, max_new, temperature),
        }
        for label, (m, params) in methods.items():
            runs[label] = lambda m=m, params=params: run_harness(
                pair, m, prompts, n, max_new, engine, spec, sampling, **params
            )
        got = paired(repeats, **runs)
        for m, (method, params) in methods.items():
            stats = [_stats(pair, method, p, n, max_new, engine, spec, params, sampling) for p in prompts]
            rows.append(_row(m, n, got, stats, greedy=not temperature))
            r = rows[-1]
            log(
                f"{m} lookup N={n}: speedup over ar {r['speedup']:.2f} ({r['speedup_range'][0]:.2f}-"
                f"{r['speedup_range'][1]:.2f}), vs transformers' lookup {r['vs_hf']:.2f}, "
                f"{r['tokens_per_forward']:.2f} tokens/forward, {100 * r['drafting_share']:.0f}% rounds drafted"
            )
    return {
        "pair": pair.spec.name, "device": str(pair.device), "threads": torch.get_num_threads(),
        "drafter": spec, "prompts": len(prompts), "max_new_tokens": max_new, "repeats": repeats,
        "temperature": temperature,
        "setup_s": setup, "width_ms": costs, "rows": rows,
    }  # fmt: skip


def _shown(equal: bool | None) -> str:
    return "n/a (sampled)" if equal is None else str(equal)


def lookup_markdown(result: dict[str, Any], command: str) -> str:
    r = result
    lines = [
        f"# Prompt lookup speed: pair {r['pair']} on {r['device']} (CPU threads: {r['threads']})",
        "",
        f"Command: `{command}`",
        "",
        f"Drafter `{r['drafter']}`; {r['prompts']} prompts of {r.get('task', 'cnndm')} ({r.get('data', 'fixture')}"
        f"{', chat template' if r.get('chat_template') else ''}) x {r['max_new_tokens']} new tokens, "
        f"{'greedy' if not r['temperature'] else 'temperature %g' % r['temperature']}; medians "
        f"over {r['repeats']} repeats of runs made back to back (range in brackets); setup {r['setup_s']:.0f} s.",
        "",
        "Target step cost per width (ms, median): "
        + ", ".join(f"{w}: {c:.2f}" for w, c in r["width_ms"].items()),
        "",
        "| method | N | speedup over ar | vs transformers' lookup | transformers' lookup over ar | tokens/forward "
        "| rounds drafted | accept rate | target log p/token | equal ar | equal transformers |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for x in r["rows"]:
        lo, hi = x["speedup_range"]
        lines.append(
            f"| {x['method']} | {x['draft_len']} | {x['speedup']:.2f} [{lo:.2f}, {hi:.2f}] | {x['vs_hf']:.2f} | "
            f"{x['hf_speedup']:.2f} | {x['tokens_per_forward']:.2f} | {100 * x['drafting_share']:.0f}% | "
            f"{100 * x['acceptance_rate']:.1f}% | {x['target_loglik']:.3f} | {_shown(x['equals_ar'])} | {_shown(x['equals_hf'])} |"
        )
    lines += [
        "",
        "vs transformers' lookup: transformers' time / the harness's on the same prompts (above 1: the harness is "
        "faster). A lossless method's outputs equal ar's and transformers'; a relaxed one's need not.",
    ]
    return "\n".join(lines) + "\n"
