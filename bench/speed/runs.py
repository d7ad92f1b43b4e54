"""The timed runs every speed measurement is made of: the harness's decoder on a list of prompts,
the target's own ``generate()`` on the same prompts, and the pairing of runs into repeats.

Every measurement reports ratios of runs made back to back (these machines are noisy): ``paired``
runs each named measurement once per repeat, ``ratio`` takes the median over repeats.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from bench.build import build_decoder
from bench.clock import Clock
from bench.decode_stats import DecodeStats
from bench.distributions import Sampling
from bench.engines import EagerEngine, EngineFactory
from bench.pairs import Pair
from bench.tasks import Task, resolve_task

GREEDY = Sampling(temperature=0.0)


def fixture_prompts(pair: Pair) -> list[list[int]]:
    """The shipped CNN/DM fixture's articles in ``pair``'s tokens: the prompts the draft-model
    comparison and the throughput are timed on (lookup times a task's own prompts)."""
    texts = [e.doc["article"] for e in Task(resolve_task("cnndm"), "fixture").examples()]
    return [list(pair.tokenizer(t).input_ids) for t in texts]


def median_seconds(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Median seconds of ``repeats`` calls of ``fn`` after one untimed call (warm-up, first touch of
    memory), timed with the runner's clock (bench.clock)."""
    fn()
    clock = Clock(device)
    return statistics.median(clock.timed(fn)[1] for _ in range(repeats))


@dataclass
class Timed:
    """One run over the prompts: their outputs, wall time and counters (summed over the prompts),
    and each model's step times when the run was clocked."""

    outputs: list[list[int]]
    seconds: float
    drafted: int = 0
    accepted: int = 0
    verified: int = 0
    prefill: float = 0.0  # seconds of it spent on the prompts (both models' prefill)
    steps: dict[str, list[float]] = field(default_factory=dict)  # each model's step times, when clocked
    stats: list[DecodeStats] = field(default_factory=list)  # the harness's counters, one per prompt


def run_harness(
    pair: Pair,
    method: str,
    prompts: list[list[int]],
    n: int,
    max_new: int,
    engine: EngineFactory = EagerEngine,
    drafter: str = "model",
    sampling: Sampling = GREEDY,
    **params: Any,
) -> Timed:
    """The harness's ``method`` on each prompt alone, its wall time and counters summed over them."""
    decoder = build_decoder(
        pair, method, params, draft_len=n, sampling=sampling, engine=engine, drafter=drafter
    )
    timed = Timed([], 0.0)
    for prompt in prompts:
        gen = decoder.generate(prompt, max_new)
        timed.outputs.append(gen.token_ids)
        timed.seconds += gen.stats.wall_time_s
        timed.prefill += gen.stats.prefill_time_s
        timed.drafted += gen.stats.drafted_tokens
        timed.accepted += gen.stats.accepted_tokens
        timed.verified += sum(gen.stats.reached_per_position)
        timed.stats.append(gen.stats)
    return timed


@torch.inference_mode()
def timed_generate(pair: Pair, prompts: list[list[int]], max_new: int, **kwargs: Any) -> Timed:
    """The target's ``generate(**kwargs)`` on each prompt alone, the device synchronised around
    each call: the transformers side of every comparison, timed with the runner's clock."""
    outputs, total, clock = [], 0.0, Clock(pair.device)
    for prompt in prompts:
        ids = torch.tensor([prompt], device=pair.device)
        out, seconds = clock.timed(
            lambda: pair.generating_target.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new,
                eos_token_id=pair.eos_token_ids or None,
                pad_token_id=pair.tokenizer.pad_token_id,
                **kwargs,
            )
        )
        total += seconds
        outputs.append(out[0, len(prompt) :].tolist())
    return Timed(outputs, total)


def paired(repeats: int, **runs: Callable[[], Timed]) -> dict[str, list[Timed]]:
    """Run every named measurement once per repeat, back to back, so that the values taken from one
    repeat share the machine's state. Returns each measurement's runs in repeat order."""
    got: dict[str, list[Timed]] = {k: [] for k in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            got[name].append(fn())
    return got


def ratio(got: dict[str, list[Timed]], a: str, b: str) -> float:
    """Median over repeats of time(a) / time(b)."""
    return statistics.median(x.seconds / y.seconds for x, y in zip(got[a], got[b]))
