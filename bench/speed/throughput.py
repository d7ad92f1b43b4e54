"""Throughput (``speed --throughput``): examples/s and tokens/s of ``ar`` and ``sd`` decoding
batches, each batch size checked against batch 1's outputs.

Each example keeps its own seed, so its tokens must not depend on the batch it is decoded in: a
batch size whose outputs differ from the first's is reported as such, beside its speed.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch

from bench.build import build_decoder
from bench.clock import Clock
from bench.decoding import SpeculativeDecoder
from bench.distributions import Sampling
from bench.engines import EagerEngine, EngineFactory
from bench.pairs import Pair


def _time_batches(
    pair: Pair, decoder: SpeculativeDecoder, prompts: list[list[int]], batch_sizes: list[int], max_new: int,
    repeats: int,
) -> tuple[dict[int, list[float]], dict[int, list[list[int]]], dict[int, int]]:  # fmt: skip
    """Every prompt decoded at each batch size, the batch sizes alternated within each repeat: the
    seconds of every repeat, the last repeat's outputs and the largest KV cache, per batch size."""
    seeds = list(range(len(prompts)))
    seconds: dict[int, list[float]] = {b: [] for b in batch_sizes}
    outputs: dict[int, list[list[int]]] = {}
    cache: dict[int, int] = {}
    clock = Clock(pair.device)  # the runner's (bench.clock)
    for _ in range(repeats):
        for b in batch_sizes:
            gens, took = clock.timed(
                lambda: [
                    g
                    for i in range(0, len(prompts), b)
                    for g in decoder.generate_batch(prompts[i : i + b], max_new, seeds[i : i + b])
                ]
            )
            seconds[b].append(took)
            outputs[b] = [g.token_ids for g in gens]
            cache[b] = max(g.stats.kv_cache_bytes for g in gens)
    return seconds, outputs, cache


def _method_rows(
    method: str, prompts: list[list[int]], batch_sizes: list[int],
    timed: tuple[dict[int, list[float]], dict[int, list[list[int]]], dict[int, int]], log: Callable[[str], None],
) -> list[dict[str, Any]]:  # fmt: skip
    """A row per batch size of one method: medians, and the ratio to and agreement with the first
    batch size."""
    seconds, outputs, cache = timed
    base = statistics.median(seconds[batch_sizes[0]])
    rows = []
    for b in batch_sizes:
        t = statistics.median(seconds[b])
        equal = outputs[b] == outputs[batch_sizes[0]]
        tokens = sum(map(len, outputs[b]))
        rows.append(
            {
                "method": method,
                "batch_size": b,
                "examples_per_s": len(prompts) / t,
                "tokens_per_s": tokens / t,
                "vs_first": base / t,
                "outputs_equal_first": equal,
                "kv_cache_mib": cache[b] / 2**20,
            }
        )
        log(f"{method} B={b}: {len(prompts) / t:.2f} examples/s, {tokens / t:.0f} tokens/s, equal {equal}")
    return rows


def measure_throughput(
    pair: Pair,
    prompts: list[list[int]],
    batch_sizes: list[int],
    draft_len: int,
    max_new: int,
    repeats: int,
    temperature: float = 1.0,
    log: Callable[[str], None] = print,
    engine: EngineFactory = EagerEngine,
) -> dict[str, Any]:
    """Examples/s and tokens/s of ``ar`` and ``sd`` decoding all prompts at each batch size, the
    batch sizes alternated within each repeat (median reported). Each example keeps its own seed,
    so its tokens must not depend on the batch size: every output is compared with batch 1's."""
    rows = []
    for method in ("ar", "sd"):
        decoder = build_decoder(
            pair, method, draft_len=draft_len, sampling=Sampling(temperature), engine=engine
        )
        decoder.generate_batch(prompts[:2], 8, list(range(len(prompts[:2]))))  # warm-up, seeds as timed
        timed = _time_batches(pair, decoder, prompts, batch_sizes, max_new, repeats)
        rows += _method_rows(method, prompts, batch_sizes, timed, log)
    return {
        "pair": pair.spec.name,
        "device": str(pair.device),
        "threads": torch.get_num_threads(),
        "examples": len(prompts),
        "draft_len": draft_len,
        "max_new_tokens": max_new,
        "temperature": temperature,
        "repeats": repeats,
        "outputs_equal": all(r["outputs_equal_first"] for r in rows),
        "rows": rows,
    }
