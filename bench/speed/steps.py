"""Step timing (``speed``): the decoding loop against transformers' generate() and assisted
generation, and against the ideal bound.

Everything is measured in one process on the same prompts, and reported as ratios (these machines
are noisy): harness time / transformers time per method, measured speedup of ``sd`` over ``ar``,
the ideal speedup S(alpha, N, c) of docs/spec.md §7, the speed bound, from the measured acceptance
and step-cost ratio, and efficiency = measured / ideal. Greedy outputs of the two implementations
are compared token for token.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from bench.build import build_decoder
from bench.clock import Clock
from bench.engines import CompiledEngine, EagerEngine, EngineFactory, ModelEngine
from bench.engines.base import weight_bytes
from bench.pairs import Pair
from bench.speed.runs import GREEDY, Timed, median_seconds, paired, ratio, run_harness, timed_generate

Log = Callable[[str], None]


def ideal_speedup(alpha: float, n: int, c: float) -> float:
    """S = (1 - alpha^(N+1)) / ((1 - alpha)(N c + 1)); the limit N + 1 over (N c + 1) at alpha = 1."""
    tokens = n + 1 if alpha >= 1 else (1 - alpha ** (n + 1)) / (1 - alpha)
    return tokens / (n * c + 1)


def memory_bandwidth(device: torch.device, megabytes: int = 512, repeats: int = 7) -> float:
    """Bytes per second a copy of a buffer much larger than any cache moves (read + write), median
    of ``repeats``, with this process's thread count: what a batch-1 decode step, which reads every
    weight once, can be bounded by on this machine."""
    n = megabytes * 2**20 // 4
    src, dst = torch.ones(n, device=device), torch.empty(n, device=device)
    return 2 * n * 4 / median_seconds(lambda: dst.copy_(src), device, repeats)


def read_bandwidth(device: torch.device, megabytes: int = 512, repeats: int = 7) -> float:
    """Bytes per second read by a max over a buffer much larger than any cache, median of
    ``repeats``: one read stream with next to no arithmetic, which is what a batch-1 step does to
    the weights. The floor divides by this, not by the copy: on a CPU a read-only stream moves more
    (33-34 GB/s against a copy's 28-32 on a 2-core AMD EPYC with AVX-512 BF16), and a compiled
    step reached it."""
    buf = torch.ones(megabytes * 2**20 // 4, device=device).view(-1, 1024)
    return buf.numel() * 4 / median_seconds(lambda: buf.amax(-1), device, repeats)


@torch.inference_mode()
def run_transformers(
    pair: Pair,
    prompts: list[list[int]],
    n: int,
    max_new: int,
    assisted: bool,
    ensemble_weight: float | None = None,
) -> Timed:
    """transformers' generate(), assisted with a fixed draft length when ``assisted``."""
    config = pair.draft.generation_config
    config.num_assistant_tokens, config.num_assistant_tokens_schedule = n, "constant"
    config.assistant_confidence_threshold = 0.0
    kwargs: dict[str, Any] = {"assistant_model": pair.draft} if assisted else {}
    if ensemble_weight is not None:
        kwargs["assistant_ensemble_weight"] = ensemble_weight
    return timed_generate(pair, prompts, max_new, do_sample=False, **kwargs)


class StepClock:
    """Times every engine step of the two models (CUDA-synchronised), whatever the engine: model
    hooks would not fire inside a compiled graph, and a step's own work (masks, positions, padding)
    belongs to its cost.

    Used on dedicated runs only: the syncs slow a run slightly, so timed runs carry no clock.
    """

    def __init__(self, pair: Pair) -> None:
        self.pair = pair
        self.seconds: dict[str, list[float]] = {"target": [], "draft": []}
        self.saved: dict[type[EagerEngine], Any] = {}

    def __enter__(self) -> StepClock:
        roles = {id(self.pair.target): "target", id(self.pair.draft): "draft"}
        clock = Clock(self.pair.device)

        def timed(original: Callable[..., Any]) -> Callable[..., Any]:
            def step(engine: ModelEngine, *args: Any, **kwargs: Any) -> Any:
                out, seconds = clock.timed(lambda: original(engine, *args, **kwargs))
                self.seconds[roles[id(engine.model)]].append(seconds)
                return out

            return step

        for cls in (EagerEngine, CompiledEngine):
            self.saved[cls] = cls.__dict__["step"]
            cls.step = timed(cls.__dict__["step"])  # type: ignore[method-assign]  # patched for the block
        return self

    def __exit__(self, *exc: Any) -> None:
        for cls, step in self.saved.items():
            cls.step = step  # type: ignore[method-assign]  # restored


def clocked(
    pair: Pair, method: str, prompts: list[list[int]], n: int, max_new: int, engine: EngineFactory
) -> Timed:
    """``run_harness`` with every engine step timed, where caches and memory behave as they do in
    the timed runs (which carry no clock: its syncs would slow them slightly)."""
    with StepClock(pair) as clock:
        timed = run_harness(pair, method, prompts, n, max_new, engine)
    timed.steps = clock.seconds
    return timed


def host_syncs(
    pair: Pair, method: str, prompt: list[int], n: int, max_new: int, engine: EngineFactory
) -> dict[str, float] | None:
    """Host-device synchronisations in one greedy decode of ``prompt`` (after an untimed decode
    that compiles and allocates), counted by CUDA's sync debug mode, which warns at every blocking
    call: the loop's contract is about one wait per round (tests/decoding/test_decoding.py). None off CUDA,
    where the host never waits for a device."""
    if pair.device.type != "cuda":
        return None
    decoder = build_decoder(pair, method, draft_len=n, sampling=GREEDY, engine=engine)
    decoder.generate(prompt, max_new)
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gen = decoder.generate(prompt, max_new)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    syncs = sum("synchroniz" in str(w.message) for w in caught)
    rounds = gen.stats.rounds
    return {"syncs": syncs, "rounds": rounds, "per_round": syncs / rounds if rounds else float("nan")}


def per_token_ratio(got: dict[str, list[Timed]], a: str, b: str) -> float:
    """Median over repeats of (time(a) / tokens(a)) / (time(b) / tokens(b))."""
    tokens = sum(map(len, got[b][0].outputs)) / sum(map(len, got[a][0].outputs))
    return ratio(got, a, b) * tokens


def per_token_ms(runs: list[Timed]) -> float:
    """Median over repeats of wall time per emitted token, prompts' prefill included."""
    return statistics.median(1e3 * t.seconds / max(sum(map(len, t.outputs)), 1) for t in runs)


def bound(sd_clock: Timed, ar_clock: Timed, alpha: float, n: int) -> dict[str, float]:
    """One repeat's step costs (median draft step of ``sd``, median single-token target step of
    ``ar``, median verification of ``sd``), c, the ideal speedup S and the share of the ``sd`` time
    inside model steps."""
    t_draft = statistics.median(sd_clock.steps["draft"])
    t_target = statistics.median(ar_clock.steps["target"])
    return {
        "t_draft_ms": t_draft * 1e3,
        "t_target_ms": t_target * 1e3,
        "t_verify_ms": statistics.median(sd_clock.steps["target"]) * 1e3,
        "c": t_draft / t_target,
        "ideal_speedup": ideal_speedup(alpha, n, t_draft / t_target),
        "forward_share": sum(map(sum, sd_clock.steps.values())) / sd_clock.seconds,
    }


def _warm_up(
    pair: Pair, prompts: list[list[int]], draft_lens: list[int], engines: dict[str, EngineFactory], log: Log
) -> dict[str, dict[str, float]]:
    """Compile and warm every engine (and transformers' assisted generation) in untimed runs; each
    engine's setup seconds, reported on their own."""
    setups: dict[str, dict[str, float]] = {}
    for name, engine in engines.items():
        tick = time.perf_counter()
        for n in draft_lens:  # warm-up (and compilation)
            run_harness(pair, "sd", prompts[:1], n, 8, engine)
        run_harness(pair, "ar", prompts[:1], 1, 8, engine)
        setups[name] = {"setup_s": time.perf_counter() - tick}
        log(
            f"{name}: ready in {setups[name]['setup_s']:.1f} s (compile {getattr(engine, 'compile_s', 0.0):.1f} s, "
            f"warm-up {getattr(engine, 'warmup_s', 0.0):.1f} s)"
        )
    run_transformers(pair, prompts[:1], draft_lens[0], 8, assisted=True)
    return setups


def _runs(
    pair: Pair, prompts: list[list[int]], n: int, max_new: int, engines: dict[str, EngineFactory],
    ensemble_weight: float | None,
) -> dict[str, Callable[[], Timed]]:  # fmt: skip
    """The runs of one repeat at draft length ``n``: each engine's ``ar`` and ``sd``, timed and
    clocked, transformers' assisted generation, and the ensemble on both sides when weighted."""
    first = engines[next(iter(engines))]
    runs: dict[str, Callable[[], Timed]] = {}
    for name, engine in engines.items():  # engines alternate within each repeat
        runs[f"ar@{name}"] = partial(run_harness, pair, "ar", prompts, 1, max_new, engine)
        runs[f"sd@{name}"] = partial(run_harness, pair, "sd", prompts, n, max_new, engine)
        runs[f"ar-clock@{name}"] = partial(clocked, pair, "ar", prompts, 1, max_new, engine)
        runs[f"sd-clock@{name}"] = partial(clocked, pair, "sd", prompts, n, max_new, engine)
    runs["hf_sd"] = lambda: run_transformers(pair, prompts, n, max_new, assisted=True)
    if ensemble_weight is not None:
        runs["ens"] = lambda: run_harness(
            pair, "ensemble", prompts, n, max_new, first, target_weight=ensemble_weight
        )
        runs["hf_ens"] = lambda: run_transformers(pair, prompts, n, max_new, True, ensemble_weight)
    return runs


def _row(
    got: dict[str, list[Timed]], name: str, first: str, n: int
) -> tuple[dict[str, Any], list[dict[str, float]]]:
    """Engine ``name``'s row at draft length ``n`` from one set of paired runs, and the bound of
    each repeat (the engine's step costs are medians over all of them)."""
    sd, ar = got[f"sd@{name}"][0], got[f"ar@{name}"][0]
    alpha = sd.accepted / sd.verified if sd.verified else 0.0
    per_repeat = [bound(s, a, alpha, n) for s, a in zip(got[f"sd-clock@{name}"], got[f"ar-clock@{name}"])]
    pairs = list(zip(got[f"ar@{name}"], got[f"sd@{name}"]))
    # S prices the rounds, not the prompts: efficiency compares it with the rounds' speedup.
    decode = [(a.seconds - a.prefill) / (s.seconds - s.prefill) for a, s in pairs]
    row = {
        "engine": name,
        "draft_len": n,
        "alpha": alpha,
        "acceptance_rate": sd.accepted / max(sd.drafted, 1),
        **{k: statistics.median(b[k] for b in per_repeat) for k in per_repeat[0]},
        "sd_s": statistics.median(t.seconds for t in got[f"sd@{name}"]),
        "hf_assisted_s": statistics.median(t.seconds for t in got["hf_sd"]),
        "sd_vs_hf": ratio(got, f"sd@{name}", "hf_sd"),
        "sd_equals_hf": sd.outputs == got["hf_sd"][0].outputs,
        "sd_equals_ar": sd.outputs == ar.outputs,
        "speedup": statistics.median(a.seconds / s.seconds for a, s in pairs),
        "decode_speedup": statistics.median(decode),
        "hf_speedup": ratio(got, f"ar@{name}", "hf_sd"),
        "efficiency": statistics.median(x / b["ideal_speedup"] for x, b in zip(decode, per_repeat)),
        # Time per emitted token against the reference engine's, same prompts, same repeat.
        "sd_vs_first": per_token_ratio(got, f"sd@{name}", f"sd@{first}"),
        "ar_vs_first": per_token_ratio(got, f"ar@{name}", f"ar@{first}"),
        "equals_first": sd.outputs == got[f"sd@{first}"][0].outputs,
    }
    return row, per_repeat


def _add_syncs(
    row: dict[str, Any], pair: Pair, prompt: list[int], max_new: int, engine: EngineFactory
) -> None:
    """The row's host syncs per round of ``sd`` and per step of ``ar`` (CUDA only), counted in a
    run of their own on one prompt: the debug mode's warnings cost time."""
    syncs = {m: host_syncs(pair, m, prompt, row["draft_len"], max_new, engine) for m in ("sd", "ar")}
    if syncs["sd"] is not None:
        row.update(
            host_syncs_per_round=syncs["sd"]["per_round"], host_syncs=syncs["sd"], ar_host_syncs=syncs["ar"]
        )


def _add_ensemble(row: dict[str, Any], got: dict[str, list[Timed]], first: str) -> None:
    """The ensemble's columns, on the reference engine's row only (the ensemble runs there), when
    the runs weighted it."""
    if "ens" in got and row["engine"] == first:
        row.update(
            ensemble_vs_hf=ratio(got, "ens", "hf_ens"),
            ensemble_speedup=ratio(got, f"ar@{first}", "ens"),
            ensemble_equals_hf=got["ens"][0].outputs == got["hf_ens"][0].outputs,
        )


def _rows(
    pair: Pair, prompts: list[list[int]], draft_lens: list[int], max_new: int, repeats: int,
    engines: dict[str, EngineFactory], ensemble_weight: float | None, log: Log,
) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, float]]]]:  # fmt: skip
    """A row per draft length and engine, each from the runs of its draft length made back to back
    (engines alternating within a repeat), and every repeat's bound per engine."""
    first = next(iter(engines))
    rows = []
    bounds: dict[str, list[dict[str, float]]] = {name: [] for name in engines}
    for n in draft_lens:
        got = paired(repeats, **_runs(pair, prompts, n, max_new, engines, ensemble_weight))
        for name in engines:
            row, per_repeat = _row(got, name, first, n)
            bounds[name] += per_repeat
            _add_syncs(row, pair, prompts[0], max_new, engines[name])
            _add_ensemble(row, got, first)
            log(_line(row, first))
            rows.append(row)
    return rows, bounds


def _line(row: dict[str, Any], first: str) -> str:
    """The log line of one row."""
    return (
        f"{row['engine']} N={row['draft_len']}: alpha {row['alpha']:.3f}, sd/hf {row['sd_vs_hf']:.2f}, "
        f"speedup {row['speedup']:.2f}, of the rounds {row['decode_speedup']:.2f} "
        f"(ideal {row['ideal_speedup']:.2f}, efficiency {row['efficiency']:.2f}), "
        f"{100 * row['forward_share']:.0f}% of the time in model steps, verify step {row['t_verify_ms']:.2f} ms"
        + (f", sd time per token vs {first} {row['sd_vs_first']:.2f}" if row["engine"] != first else "")
        + (
            f", host syncs per round {row['host_syncs_per_round']:.2f} (ar: per step "
            f"{row['ar_host_syncs']['per_round']:.2f})"
            if "host_syncs" in row
            else ""
        )
    )


def _engine_costs(
    setups: dict[str, dict[str, float]], engines: dict[str, EngineFactory],
    bounds: dict[str, list[dict[str, float]]], floor_ms: float,
) -> None:  # fmt: skip
    """Each engine's step costs (medians over every repeat and draft length) and its target step
    against the floor, beside its setup seconds; read after the runs, as graphs for longer
    examples compile in later untimed starts."""
    for name, engine in engines.items():
        t_draft = statistics.median(b["t_draft_ms"] for b in bounds[name])
        t_target = statistics.median(b["t_target_ms"] for b in bounds[name])
        setups[name].update(
            target_vs_floor=t_target / floor_ms,
            t_draft_ms=t_draft,
            t_target_ms=t_target,
            c=t_draft / t_target,
            compile_s=getattr(engine, "compile_s", 0.0),
            warmup_s=getattr(engine, "warmup_s", 0.0),
        )


def measure(
    pair: Pair,
    prompts: list[list[int]],
    draft_lens: list[int],
    max_new: int,
    repeats: int,
    ensemble_weight: float | None,
    log: Log = print,
    engines: dict[str, EngineFactory] | None = None,
) -> dict[str, Any]:
    """All measurements for one pair and each engine (the first is the reference the others are
    compared with). Every value comes from runs made back to back within a repeat: a speedup and
    the bound S it is compared with (from that repeat's clocked runs) share the machine's state,
    and each reported figure is a median over repeats. Compilation and warm-up happen in a first
    untimed run per engine and are reported on their own."""
    engines = engines or {"eager": EagerEngine}
    first = next(iter(engines))
    # Measured again at the end: the machine drifts.
    bandwidth, reads = [memory_bandwidth(pair.device)], [read_bandwidth(pair.device)]
    setups = _warm_up(pair, prompts, draft_lens, engines, log)
    base = paired(
        repeats,
        ar=lambda: run_harness(pair, "ar", prompts, 1, max_new, engines[first]),
        hf=lambda: run_transformers(pair, prompts, 1, max_new, assisted=False),
    )
    rows, bounds = _rows(pair, prompts, draft_lens, max_new, repeats, engines, ensemble_weight, log)
    bandwidth.append(memory_bandwidth(pair.device))
    reads.append(read_bandwidth(pair.device))
    weights = weight_bytes(pair.target)
    floor_ms = 1e3 * weights / statistics.mean(reads)
    _engine_costs(setups, engines, bounds, floor_ms)
    return {
        "pair": pair.spec.name,
        "device": str(pair.device),
        "dtype": str(pair.target.dtype).replace("torch.", ""),
        "threads": torch.get_num_threads(),
        "prompts": len(prompts),
        "max_new_tokens": max_new,
        "repeats": repeats,
        **setups[first],
        "engines": setups,
        "ar_vs_hf": ratio(base, "ar", "hf"),
        "ar_equals_hf": base["ar"][0].outputs == base["hf"][0].outputs,
        "ar_ms_per_token": per_token_ms(base["ar"]),
        "hf_ms_per_token": per_token_ms(base["hf"]),
        "bandwidth_gb_s": [b / 1e9 for b in bandwidth],
        "read_bandwidth_gb_s": [b / 1e9 for b in reads],
        "target_weight_bytes": weights,
        "floor_ms": floor_ms,
        "rows": rows,
    }
