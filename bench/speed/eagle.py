"""Timing EAGLE's draft head (``speed --drafter eagle``): what one head forward costs as a share of
a target step, and the speed bound those costs give beside the speedup measured on the same prompts.

A chain round of k tokens (``EagleDrafter.chain``) runs the **catch-up** (one head forward over the
m target states the last round confirmed, then the law at its last output: the first token) and
k - 1 **head steps** (the law, then one head forward of one token over the row's head cache): k
draft forwards, as ``draft_forwards`` counts them (docs/results-schema.md). Each is timed as the
drafter runs it (its own ``catch_up``, ``propose`` and ``advance``) after a real prompt, beside
the target steps of width 1 (``ar``'s step: the unit) and N + 1 (the verify step) on the decoder's
own target engine, which keeps the head's layer states as it does in a run. The steps are timed
round-robin: a pass calls each once, back to back, every share is taken within a pass, and the
median over passes is reported.

The bound: a round emits T tokens (tokens per forward) and costs the verify step, the catch-up of
about T states and F - 1 head steps (F: the draft forwards per round counted in the same decodes),
where ``ar`` pays T width-1 steps for as many tokens:
``bound = T / (verify + catch-up(T) + (F - 1) x head step)``, each in width-1 target steps. It
leaves out the loop's own work (verifying, the round's host read), so the rounds' measured speedup
falls somewhat under it; efficiency = measured / bound.
"""

from __future__ import annotations

import statistics
import time
import types
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from bench.build import build_decoder
from bench.clock import Clock
from bench.decoding import SpeculativeDecoder
from bench.distributions import Sampling
from bench.drafters.eagle import EagleDrafter, RowState
from bench.engines import EngineFactory, ModelEngine, open_engine
from bench.errors import BenchError
from bench.pairs import Pair
from bench.speed.runs import Timed, paired, run_harness

PASSES_PER_REPEAT = 10  # round-robin passes over the steps per --repeats


def timing_target(decoder: SpeculativeDecoder, engine: EngineFactory, draft_lens: list[int]) -> ModelEngine:
    """The target's engine for the timed steps: every width timed (on a compiled engine a graph
    each: ``ar``'s width 1 and each verify width), keeping the head's layer states as the
    decoder's engine does."""
    widths = [1, *(n + 1 for n in draft_lens)]
    return open_engine(engine, decoder.target, widths, states=decoder.engines[0].states_at)


@torch.inference_mode()  # as the steps run: a compiled engine's graphs are compiled here
def chain_steps(
    decoder: SpeculativeDecoder, target: ModelEngine, prompt: list[int], draft_lens: list[int]
) -> dict[str, Callable[[], object]]:
    """Each step to time after ``prompt``, by name: ``target_1``, ``verify_W`` (W = N + 1 per N),
    ``head_step`` and ``catch_up_M`` (M = 1 .. max N + 1 states), the target's on ``target``
    (``timing_target``). Every call sees the same context: target steps keep none of their
    tokens, head steps leave the prompt's head cache as it is, and each catch-up starts from it
    again."""
    drafter = decoder.drafter
    if not isinstance(drafter, EagleDrafter) or drafter.tree:
        raise BenchError(
            "speed --drafter eagle times the head's chain steps: give an eagle drafter without tree=1"
        )
    if len(prompt) < 2:
        raise BenchError(
            "speed --drafter eagle: the first prompt has one token, so no state for the head; use a longer prompt"
        )
    device, widest = decoder.device, max(draft_lens) + 1
    target.start(1, len(prompt) + widest + 1)
    target.step(torch.tensor([prompt[:-1]], device=device), [len(prompt) - 1], keep=1, hidden=False)
    assert target.states is not None  # the drafter's layers: bind made the engine keep them
    states = target.states[0]  # the prompt's, as the loop's prefill hands them
    # Room after the prompt: a catch-up reads the tokens after the states it is fed.
    row = types.SimpleNamespace(
        index=0, seq=prompt + prompt[-1:] * widest, generator=torch.Generator(device).manual_seed(0)
    )
    drafter.start(1, len(prompt) + widest + 1)
    drafter.take_states([row], [states])
    base = drafter.catch_up(row)  # the head's cache over the prompt
    last = base.last
    assert last is not None  # a prompt of two tokens or more (checked above) leaves the head a state

    def head_step() -> None:
        token = drafter.propose(last, row.generator)[0]
        drafter.advance(row, last, token, base.cache)

    def catch_up(m: int) -> Callable[[], object]:
        def run() -> None:
            drafter.rows[0] = RowState(cache=base.cache, fed=base.fed, pending=[states[-m:]], last=base.last)
            caught = drafter.catch_up(row).last
            assert caught is not None  # it caught up over the states it was given
            drafter.propose(caught, row.generator)

        return run

    def target_step(width: int) -> Callable[[], object]:
        ids = torch.tensor([prompt[-1:] * width], device=device)
        return lambda: target.step(ids, [0], keep=width, hidden=False)

    steps: dict[str, Callable[[], object]] = {"target_1": target_step(1)}
    steps |= {f"verify_{n + 1}": target_step(n + 1) for n in draft_lens}
    steps["head_step"] = head_step
    return steps | {f"catch_up_{m}": catch_up(m) for m in range(1, widest + 1)}


@torch.inference_mode()
def round_robin(
    steps: dict[str, Callable[[], object]], device: torch.device, passes: int
) -> dict[str, list[float]]:
    """Seconds of each step in each of ``passes`` passes (a pass calls every step once, back to
    back, the device synchronised around each call), after one untimed pass (first touch of
    memory, lazy initialisation)."""
    for fn in steps.values():
        fn()
    got: dict[str, list[float]] = {name: [] for name in steps}
    clock = Clock(device)
    for _ in range(passes):
        for name, fn in steps.items():
            got[name].append(clock.timed(fn)[1])
    return got


def shares(seconds: dict[str, list[float]], unit: str) -> dict[str, float]:
    """Each step's median over passes of its time over ``unit``'s in the same pass."""
    return {
        name: statistics.median(x / u for x, u in zip(times, seconds[unit]))
        for name, times in seconds.items()
    }


def cost_rows(seconds: dict[str, list[float]], draft_lens: list[int]) -> list[dict[str, Any]]:
    """A row per step: its tokens, median ms, share of the width-1 target step and of each N's
    verify step."""
    per_target = shares(seconds, "target_1")
    per_verify = {n: shares(seconds, f"verify_{n + 1}") for n in draft_lens}
    rows = []
    for name, times in seconds.items():
        kind, _, width = name.rpartition("_") if name != "head_step" else ("head_step", "", "1")
        rows.append({
            "step": kind, "tokens": int(width), "ms": 1e3 * statistics.median(times),
            "per_target": per_target[name], "per_verify": {str(n): per_verify[n][name] for n in draft_lens},
        })  # fmt: skip
    return rows


def bound(per_target: dict[str, float], n: int, tokens: float, forwards: float) -> dict[str, float]:
    """The verify and draft costs of a round at draft length ``n`` in width-1 target steps, and
    the bound T / (their sum) with T = ``tokens`` per round and F = ``forwards`` head forwards per
    round (one of them the catch-up, of T states rounded into 1 .. N + 1)."""
    m = min(max(round(tokens), 1), n + 1)
    draft = per_target[f"catch_up_{m}"] + max(forwards - 1, 0.0) * per_target["head_step"]
    verify = per_target[f"verify_{n + 1}"]
    return {
        "verify_cost": verify, "catch_up_tokens": m, "draft_cost": draft,
        "bound": tokens / (verify + draft), "break_even_tokens": verify + draft,
    }  # fmt: skip


def decode_row(got: dict[str, list[Timed]], n: int, greedy: bool) -> dict[str, Any]:
    """What the paired ``ar`` and ``sd`` runs at draft length ``n`` measured: the counters of the
    first repeat (greedy: every repeat decodes the same tokens) and the speedups' medians."""
    stats = got["sd"][0].stats
    rounds = sum(s.rounds for s in stats)
    pairs = list(zip(got["ar"], got["sd"]))
    speedups = [a.seconds / s.seconds for a, s in pairs]
    return {
        "draft_len": n,
        "tokens_per_forward": sum(s.new_tokens for s in stats) / rounds,
        "draft_forwards_per_round": sum(s.draft_forwards for s in stats) / rounds,
        "acceptance_rate": sum(s.accepted_tokens for s in stats) / max(sum(s.drafted_tokens for s in stats), 1),
        "speedup": statistics.median(speedups), "speedup_range": [min(speedups), max(speedups)],
        # The bound prices the rounds: compare it with the rounds' speedup (the prompts' prefill out).
        "decode_speedup": statistics.median((a.seconds - a.prefill) / (s.seconds - s.prefill) for a, s in pairs),
        "equals_ar": got["sd"][0].outputs == got["ar"][0].outputs if greedy else None,  # sampled: draws differ
    }  # fmt: skip


def measure_eagle(
    pair: Pair, prompts: list[list[int]], draft_lens: list[int], max_new: int, repeats: int, spec: str,
    engine: EngineFactory, sampling: Sampling, log: Callable[[str], None] = print,
) -> dict[str, Any]:  # fmt: skip
    """The head's step costs after the first prompt (round-robin passes), then per N ``ar`` and
    ``sd`` on EAGLE drafts over every prompt back to back in each repeat, and the bound from the
    costs and the counted tokens and forwards per round beside the measured speedup."""
    tick = time.perf_counter()
    for n in draft_lens:  # untimed: first loads, allocations
        run_harness(pair, "sd", prompts[:1], n, 8, engine, spec, sampling)
    run_harness(pair, "ar", prompts[:1], 1, 8, engine, sampling=sampling)
    setup = time.perf_counter() - tick
    decoder = build_decoder(
        pair, "sd", draft_len=max(draft_lens), sampling=sampling, engine=engine, drafter=spec
    )
    seconds = round_robin(
        chain_steps(decoder, timing_target(decoder, engine, draft_lens), prompts[0], draft_lens),
        pair.device,
        PASSES_PER_REPEAT * repeats,
    )
    steps = cost_rows(seconds, draft_lens)
    log("step ms: " + ", ".join(f"{s['step']}({s['tokens']}) {s['ms']:.3f}" for s in steps))
    per_target = shares(seconds, "target_1")
    rows = []
    for n in draft_lens:
        got = paired(
            repeats,
            ar=lambda: run_harness(pair, "ar", prompts, 1, max_new, engine, sampling=sampling),
            sd=partial(run_harness, pair, "sd", prompts, n, max_new, engine, spec, sampling),
        )
        row = decode_row(got, n, sampling.greedy)
        row |= bound(per_target, n, row["tokens_per_forward"], row["draft_forwards_per_round"])
        row["efficiency"] = row["decode_speedup"] / row["bound"]
        log(
            f"N={n}: {row['tokens_per_forward']:.2f} tokens/forward, bound {row['bound']:.2f}, rounds' speedup {row['decode_speedup']:.2f}"
        )
        rows.append(row)
    drafter = decoder.drafter
    assert isinstance(drafter, EagleDrafter)  # chain_steps refused any other
    return {
        "pair": pair.spec.name, "device": str(pair.device), "dtype": str(pair.target.dtype).replace("torch.", ""),
        "threads": torch.get_num_threads(), "drafter": spec, "head": drafter.path,
        "prompts": len(prompts), "prompt_tokens": len(prompts[0]), "max_new_tokens": max_new, "repeats": repeats,
        "passes": PASSES_PER_REPEAT * repeats, "temperature": sampling.temperature, "setup_s": setup,
        "steps": steps, "rows": rows,
    }  # fmt: skip
