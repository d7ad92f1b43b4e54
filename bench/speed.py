"""Speed of the decoding loop against transformers' generate() and against the ideal bound.

Everything is measured in one process on the same prompts, and reported as ratios (these machines
are noisy): harness time / transformers time per method, measured speedup of ``sd`` over ``ar``,
the ideal speedup S(alpha, N, c) of SPEC section 7 from the measured acceptance and step-cost
ratio, and efficiency = measured / ideal. Greedy outputs of the two implementations are compared
token for token.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from bench.decoding import SpeculativeDecoder
from bench.distributions import Sampling
from bench.engines import CompiledEngine, EagerEngine, EngineFactory, ModelEngine
from bench.pairs import Pair
from bench.verifiers import make_verifier

GREEDY = Sampling(temperature=0.0)


def ideal_speedup(alpha: float, n: int, c: float) -> float:
    """S = (1 - alpha^(N+1)) / ((1 - alpha)(N c + 1)); the limit N + 1 over (N c + 1) at alpha = 1."""
    tokens = n + 1 if alpha >= 1 else (1 - alpha ** (n + 1)) / (1 - alpha)
    return tokens / (n * c + 1)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Timed:
    outputs: list[list[int]]
    seconds: float
    drafted: int = 0
    accepted: int = 0
    verified: int = 0


def run_harness(
    pair: Pair,
    method: str,
    prompts: list[list[int]],
    n: int,
    max_new: int,
    engine: EngineFactory = EagerEngine,
    **params: Any,
) -> Timed:
    decoder = SpeculativeDecoder(
        pair.target,
        pair.draft,
        make_verifier(method, **params),
        draft_len=n,
        sampling=GREEDY,
        eos_token_ids=pair.eos_token_ids,
        engine=engine,
    )
    outputs, total, drafted, accepted, verified = [], 0.0, 0, 0, 0
    for prompt in prompts:
        gen = decoder.generate(prompt, max_new)
        outputs.append(gen.token_ids)
        total += gen.stats.wall_time_s
        drafted, accepted = drafted + gen.stats.drafted_tokens, accepted + gen.stats.accepted_tokens
        verified += sum(gen.stats.reached_per_position)
    return Timed(outputs, total, drafted, accepted, verified)


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
    outputs, total = [], 0.0
    for prompt in prompts:
        ids = torch.tensor([prompt], device=pair.device)
        _sync(pair.device)
        start = time.perf_counter()
        out = pair.target.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=max_new,
            eos_token_id=pair.eos_token_ids or None,
            pad_token_id=pair.tokenizer.pad_token_id,
            **kwargs,
        )
        _sync(pair.device)
        total += time.perf_counter() - start
        outputs.append(out[0, len(prompt) :].tolist())
    return Timed(outputs, total)


class StepClock:
    """Times every engine step of the two models (CUDA-synchronised), whatever the engine: model
    hooks would not fire inside a compiled graph, and a step's own work (masks, positions, padding)
    belongs to its cost.

    Used on dedicated runs only: the syncs slow a run slightly, so timed runs carry no clock.
    """

    def __init__(self, pair: Pair) -> None:
        self.pair = pair
        self.seconds: dict[str, list[float]] = {"target": [], "draft": []}
        self.saved: dict[type, Any] = {}

    def __enter__(self) -> StepClock:
        roles = {id(self.pair.target): "target", id(self.pair.draft): "draft"}

        def timed(original: Callable[..., Any]) -> Callable[..., Any]:
            def step(engine: ModelEngine, *args: Any, **kwargs: Any) -> Any:
                _sync(self.pair.device)
                start = time.perf_counter()
                out = original(engine, *args, **kwargs)
                _sync(self.pair.device)
                self.seconds[roles[id(engine.model)]].append(time.perf_counter() - start)
                return out

            return step

        for cls in (EagerEngine, CompiledEngine):
            self.saved[cls] = cls.__dict__["step"]
            cls.step = timed(cls.__dict__["step"])  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        for cls, step in self.saved.items():
            cls.step = step  # type: ignore[method-assign]

    def total(self) -> float:
        return sum(map(sum, self.seconds.values()))


def step_costs(
    pair: Pair, prompts: list[list[int]], n: int, max_new: int, engine: EngineFactory
) -> tuple[float, float]:
    """Median single-token target step (from an ``ar`` run) and median draft step (from ``sd``),
    measured inside the decoding loop, where caches and memory behave as they do when timed."""
    with StepClock(pair) as ar_clock:
        run_harness(pair, "ar", prompts, 1, max_new, engine)
    with StepClock(pair) as sd_clock:
        run_harness(pair, "sd", prompts, n, max_new, engine)
    return statistics.median(sd_clock.seconds["draft"]), statistics.median(ar_clock.seconds["target"])


def forward_share(
    pair: Pair, prompts: list[list[int]], n: int, max_new: int, engine: EngineFactory
) -> tuple[float, float]:
    """Share of an ``sd`` run's wall time spent inside model steps (the rest is loop overhead), and
    its median target step: the verification of N + 1 tokens, which S prices as one token's step."""
    with StepClock(pair) as clock:
        total = run_harness(pair, "sd", prompts, n, max_new, engine).seconds
    return clock.total() / total, statistics.median(clock.seconds["target"])


def paired(repeats: int, **runs: Callable[[], Timed]) -> tuple[dict[str, Timed], dict[str, list[float]]]:
    """Run every named measurement once per repeat, back to back, so ratios taken within a repeat
    share the machine's state. Returns the first run of each and all their times."""
    first: dict[str, Timed] = {}
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            timed = fn()
            first.setdefault(name, timed)
            times[name].append(timed.seconds)
    return first, times


def ratio(times: dict[str, list[float]], a: str, b: str) -> float:
    """Median over repeats of time(a) / time(b)."""
    return statistics.median(x / y for x, y in zip(times[a], times[b]))


def measure(
    pair: Pair,
    prompts: list[list[int]],
    draft_lens: list[int],
    max_new: int,
    repeats: int,
    ensemble_weight: float | None,
    log: Callable[[str], None] = print,
    engines: dict[str, EngineFactory] | None = None,
) -> dict[str, Any]:
    """All measurements for one pair and each engine (the first is the reference the others are
    compared with), each ratio from runs made back to back within a repeat. Compilation and
    warm-up happen in a first untimed run per engine and are reported on their own."""
    engines = engines or {"eager": EagerEngine}
    first = next(iter(engines))
    setups: dict[str, dict[str, float]] = {}
    for name, engine in engines.items():
        tick = time.perf_counter()
        run_harness(pair, "sd", prompts[:1], draft_lens[0], 8, engine)  # warm-up (and compilation)
        run_harness(pair, "ar", prompts[:1], 1, 8, engine)
        for n in draft_lens[1:]:
            run_harness(pair, "sd", prompts[:1], n, 8, engine)
        t_draft, t_target = step_costs(pair, prompts, draft_lens[0], max_new, engine)
        setups[name] = {
            "t_draft_ms": t_draft * 1e3,
            "t_target_ms": t_target * 1e3,
            "c": t_draft / t_target,
            "setup_s": time.perf_counter() - tick,
            "compile_s": getattr(engine, "compile_s", 0.0),
            "warmup_s": getattr(engine, "warmup_s", 0.0),
        }
        log(
            f"{name}: step cost in the loop: draft {t_draft * 1e3:.2f} ms, target {t_target * 1e3:.2f} ms, "
            f"c = {setups[name]['c']:.3f}; compile {setups[name]['compile_s']:.1f} s, "
            f"warm-up {setups[name]['warmup_s']:.1f} s"
        )
    run_transformers(pair, prompts[:1], draft_lens[0], 8, assisted=True)
    base, base_times = paired(
        repeats,
        ar=lambda: run_harness(pair, "ar", prompts, 1, max_new, engines[first]),
        hf=lambda: run_transformers(pair, prompts, 1, max_new, assisted=False),
    )
    rows = []
    for n in draft_lens:
        runs: dict[str, Callable[[], Timed]] = {}
        for name, engine in engines.items():  # engines alternate within each repeat
            runs[f"ar@{name}"] = lambda e=engine: run_harness(pair, "ar", prompts, 1, max_new, e)
            runs[f"sd@{name}"] = lambda e=engine: run_harness(pair, "sd", prompts, n, max_new, e)
        runs["hf_sd"] = lambda: run_transformers(pair, prompts, n, max_new, assisted=True)
        if ensemble_weight is not None:
            runs["ens"] = lambda: run_harness(
                pair, "ensemble", prompts, n, max_new, engines[first], target_weight=ensemble_weight
            )
            runs["hf_ens"] = lambda: run_transformers(pair, prompts, n, max_new, True, ensemble_weight)
        got, times = paired(repeats, **runs)
        for name, engine in engines.items():
            sd, ar = got[f"sd@{name}"], got[f"ar@{name}"]
            alpha = sd.accepted / sd.verified if sd.verified else 0.0
            share, t_verify = forward_share(pair, prompts, n, max_new, engine)
            row = {
                "engine": name,
                "draft_len": n,
                "alpha": alpha,
                "acceptance_rate": sd.accepted / max(sd.drafted, 1),
                "sd_s": statistics.median(times[f"sd@{name}"]),
                "hf_assisted_s": statistics.median(times["hf_sd"]),
                "sd_vs_hf": ratio(times, f"sd@{name}", "hf_sd"),
                "sd_equals_hf": sd.outputs == got["hf_sd"].outputs,
                "sd_equals_ar": sd.outputs == ar.outputs,
                "speedup": ratio(times, f"ar@{name}", f"sd@{name}"),
                "hf_speedup": ratio(times, f"ar@{name}", "hf_sd"),
                "ideal_speedup": ideal_speedup(alpha, n, setups[name]["c"]),
                "forward_share": share,
                "t_verify_ms": t_verify * 1e3,
                # Time per emitted token against the reference engine's, same prompts, same repeat.
                "sd_vs_first": per_token_ratio(times, got, f"sd@{name}", f"sd@{first}"),
                "ar_vs_first": per_token_ratio(times, got, f"ar@{name}", f"ar@{first}"),
                "equals_first": sd.outputs == got[f"sd@{first}"].outputs,
            }
            row["efficiency"] = row["speedup"] / row["ideal_speedup"]
            if ensemble_weight is not None and name == first:
                row.update(
                    ensemble_vs_hf=ratio(times, "ens", "hf_ens"),
                    ensemble_speedup=ratio(times, f"ar@{name}", "ens"),
                    ensemble_equals_hf=got["ens"].outputs == got["hf_ens"].outputs,
                )
            log(
                f"{name} N={n}: alpha {alpha:.3f}, sd/hf {row['sd_vs_hf']:.2f}, speedup {row['speedup']:.2f} "
                f"(ideal {row['ideal_speedup']:.2f}, efficiency {row['efficiency']:.2f}), "
                f"{100 * row['forward_share']:.0f}% of the time in model steps, verify step {row['t_verify_ms']:.2f} ms"
                + (f", sd time per token vs {first} {row['sd_vs_first']:.2f}" if name != first else "")
            )
            rows.append(row)
    for name, engine in engines.items():  # graphs for longer examples compile in later untimed starts
        setups[name].update(
            compile_s=getattr(engine, "compile_s", 0.0), warmup_s=getattr(engine, "warmup_s", 0.0)
        )
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
        "ar_vs_hf": ratio(base_times, "ar", "hf"),
        "ar_equals_hf": base["ar"].outputs == base["hf"].outputs,
        "rows": rows,
    }


def per_token_ratio(times: dict[str, list[float]], got: dict[str, Timed], a: str, b: str) -> float:
    """Median over repeats of (time(a) / tokens(a)) / (time(b) / tokens(b))."""
    tokens = sum(map(len, got[b].outputs)) / sum(map(len, got[a].outputs))
    return ratio(times, a, b) * tokens


def markdown(result: dict[str, Any], command: str) -> str:
    r = result
    ens = "ensemble_vs_hf" in r["rows"][0]
    first = r["rows"][0]["engine"]
    lines = [
        f"# Speed: pair {r['pair']} on {r['device']} ({r['dtype']}, {r['threads']} CPU threads)",
        "",
        f"Command: `{command}`",
        "",
        f"{r['prompts']} prompts x {r['max_new_tokens']} new tokens, greedy. Ratios are medians over {r['repeats']} "
        "repeats of runs made back to back (engines alternating within each repeat).",
        "",
        "| engine | draft step ms | target step ms | c | compile s | warm-up s |",
        "|---|---|---|---|---|---|",
    ]
    for name, e in r["engines"].items():
        lines.append(
            f"| {name} | {e['t_draft_ms']:.3f} | {e['t_target_ms']:.3f} | {e['c']:.3f} | "
            f"{e['compile_s']:.1f} | {e['warmup_s']:.1f} |"
        )
    lines += [
        "",
        f"`ar` ({first}): harness / transformers generate() = **{r['ar_vs_hf']:.2f}** "
        f"(outputs equal: {r['ar_equals_hf']})",
        "",
        "| engine | N | alpha | sd / HF assisted | outputs equal HF | equal ar | speedup | ideal S | efficiency "
        f"| in steps | verify step ms | sd vs {first} | ar vs {first} | equal {first} |"
        + (" ensemble / HF | ensemble equal HF |" if ens else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if ens else ""),
    ]
    for row in r["rows"]:
        line = (
            f"| {row['engine']} | {row['draft_len']} | {row['alpha']:.3f} | {row['sd_vs_hf']:.2f} | "
            f"{row['sd_equals_hf']} | {row['sd_equals_ar']} | {row['speedup']:.2f} | {row['ideal_speedup']:.2f} | "
            f"{row['efficiency']:.2f} | {100 * row['forward_share']:.0f}% | {row['t_verify_ms']:.3f} | "
            f"{row['sd_vs_first']:.2f} | "
            f"{row['ar_vs_first']:.2f} | {row['equals_first']} |"
        )
        if ens:
            line += (
                f" {row['ensemble_vs_hf']:.2f} | {row['ensemble_equals_hf']} |"
                if "ensemble_vs_hf" in row
                else " | |"
            )
        lines.append(line)
    lines += [
        "",
        "Step costs are medians of engine steps inside the loop (target: single-token `ar` steps); compile and "
        "warm-up happen in untimed runs before any measurement. alpha: per-token acceptance (accepted / verified "
        "positions); ideal S = (1 - alpha^(N+1)) / ((1 - alpha)(N c + 1)) with the engine's own c; speedup: "
        "`ar` time / `sd` time in the same engine; efficiency = speedup / S; in steps: share of the sd wall time "
        "spent inside model steps (the rest is the loop's own overhead); verify step: median target step of `sd`, "
        f"N + 1 tokens, which S prices as one single-token step; sd / ar vs {first}: time per emitted "
        f"token in this engine over the {first} engine's.",
    ]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for k, name in enumerate(result["engines"]):
        rows = [r for r in result["rows"] if r["engine"] == name]
        n = [r["draft_len"] for r in rows]
        color = f"C{k}"
        ax.plot(n, [r["speedup"] for r in rows], "o-", color=color, label=f"{name}: measured sd / ar")
        ax.plot(
            n, [r["ideal_speedup"] for r in rows], "s--", color=color, label=f"{name}: ideal S(alpha, N, c)"
        )
    rows = [r for r in result["rows"] if r["engine"] == next(iter(result["engines"]))]
    ax.plot(
        [r["draft_len"] for r in rows],
        [r["hf_speedup"] for r in rows],
        "^:",
        color="grey",
        label="transformers assisted vs harness ar",
    )
    ax.axhline(1, color="grey", lw=0.8)
    ax.set_xlabel("draft length N")
    ax.set_ylabel("speedup over ar")
    costs = ", ".join(f"c = {e['c']:.2f} ({name})" for name, e in result["engines"].items())
    ax.set_title(f"{result['pair']} on {result['device']}, {costs}", fontsize=9)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def throughput(
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
    seeds = list(range(len(prompts)))
    rows, same = [], True
    for method in ("ar", "sd"):
        decoder = SpeculativeDecoder(
            pair.target,
            pair.draft,
            make_verifier(method),
            draft_len=draft_len,
            sampling=Sampling(temperature),
            eos_token_ids=pair.eos_token_ids,
            engine=engine,
        )
        decoder.generate_batch(prompts[:2], 8, seeds[:2])  # warm-up
        seconds: dict[int, list[float]] = {b: [] for b in batch_sizes}
        outputs: dict[int, list[list[int]]] = {}
        cache: dict[int, int] = {}
        for _ in range(repeats):
            for b in batch_sizes:
                _sync(pair.device)
                start = time.perf_counter()
                gens = [
                    g
                    for i in range(0, len(prompts), b)
                    for g in decoder.generate_batch(prompts[i : i + b], max_new, seeds[i : i + b])
                ]
                _sync(pair.device)
                seconds[b].append(time.perf_counter() - start)
                outputs[b] = [g.token_ids for g in gens]
                cache[b] = max(g.stats.kv_cache_bytes for g in gens)
        base = statistics.median(seconds[batch_sizes[0]])
        for b in batch_sizes:
            t = statistics.median(seconds[b])
            equal = outputs[b] == outputs[batch_sizes[0]]
            same &= equal
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
            log(
                f"{method} B={b}: {len(prompts) / t:.2f} examples/s, {tokens / t:.0f} tokens/s, equal {equal}"
            )
    return {
        "pair": pair.spec.name,
        "device": str(pair.device),
        "threads": torch.get_num_threads(),
        "examples": len(prompts),
        "draft_len": draft_len,
        "max_new_tokens": max_new,
        "temperature": temperature,
        "repeats": repeats,
        "outputs_equal": same,
        "rows": rows,
    }


def throughput_markdown(result: dict[str, Any], command: str) -> str:
    """The throughput table: every ratio is against the first batch size of the same method."""
    first = result["rows"][0]["batch_size"]
    lines = [
        f"# Throughput: {result['pair']} on {result['device']} ({result['threads']} CPU threads)",
        "",
        f"`{command}`: {result['examples']} examples, up to {result['max_new_tokens']} new tokens, "
        f"temperature {result['temperature']:g}, N = {result['draft_len']}, median of {result['repeats']} "
        f"repeats (batch sizes alternated within a repeat). Outputs equal batch {first}'s: "
        f"**{result['outputs_equal']}**.",
        "",
        f"| method | batch | examples/s | tokens/s | x batch {first} | same outputs | KV caches MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['method']} | {r['batch_size']} | {r['examples_per_s']:.2f} | {r['tokens_per_s']:.0f} | "
        f"{r['vs_first']:.2f} | {r['outputs_equal_first']} | {r['kv_cache_mib']:.1f} |"
        for r in result["rows"]
    ]
    return "\n".join(lines) + "\n"
