"""Speed of the decoding loop against transformers' generate() and against the ideal bound.

Everything is measured in one process on the same prompts, and reported as ratios (these machines
are noisy): harness time / transformers time per method, measured speedup of ``sd`` over ``ar``,
the ideal speedup S(alpha, N, c) of docs/spec.md §7, the speed bound, from the measured acceptance
and step-cost ratio, and efficiency = measured / ideal. Greedy outputs of the two implementations are compared
token for token.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bench.build import build_decoder
from bench.decoding import DecodeStats
from bench.distributions import Sampling
from bench.engines import CompiledEngine, EagerEngine, EngineFactory, ModelEngine
from bench.engines.base import weight_bytes
from bench.pairs import Pair

GREEDY = Sampling(temperature=0.0)


def ideal_speedup(alpha: float, n: int, c: float) -> float:
    """S = (1 - alpha^(N+1)) / ((1 - alpha)(N c + 1)); the limit N + 1 over (N c + 1) at alpha = 1."""
    tokens = n + 1 if alpha >= 1 else (1 - alpha ** (n + 1)) / (1 - alpha)
    return tokens / (n * c + 1)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def memory_bandwidth(device: torch.device, megabytes: int = 512, repeats: int = 7) -> float:
    """Bytes per second a copy of a buffer much larger than any cache moves (read + write), median
    of ``repeats``, with this process's thread count: what a batch-1 decode step, which reads every
    weight once, can be bounded by on this machine."""
    n = megabytes * 2**20 // 4
    src, dst = torch.ones(n, device=device), torch.empty(n, device=device)
    dst.copy_(src)  # first touch of the pages, untimed
    times = []
    for _ in range(repeats):
        _sync(device)
        tick = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        times.append(time.perf_counter() - tick)
    return 2 * n * 4 / statistics.median(times)


def read_bandwidth(device: torch.device, megabytes: int = 512, repeats: int = 7) -> float:
    """Bytes per second read by a max over a buffer much larger than any cache, median of
    ``repeats``: one read stream with next to no arithmetic, which is what a batch-1 step does to
    the weights. The floor divides by this, not by the copy: on a CPU a read-only stream moves more
    (33-34 GB/s against a copy's 28-32 on this 2-core machine), and a compiled step reached it."""
    buf = torch.ones(megabytes * 2**20 // 4, device=device).view(-1, 1024)
    buf.amax(-1)  # first touch, untimed
    times = []
    for _ in range(repeats):
        _sync(device)
        tick = time.perf_counter()
        buf.amax(-1)
        _sync(device)
        times.append(time.perf_counter() - tick)
    return buf.numel() * 4 / statistics.median(times)


@dataclass
class Timed:
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
    decoder = build_decoder(pair, method, params, draft_len=n, sampling=sampling, engine=engine, drafter=drafter)
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


@torch.inference_mode()
def timed_generate(pair: Pair, prompts: list[list[int]], max_new: int, **kwargs: Any) -> Timed:
    """The target's ``generate(**kwargs)`` on each prompt alone, the device synchronised around
    each call: the transformers side of every comparison, timed as the harness's runs are."""
    outputs, total = [], 0.0
    for prompt in prompts:
        ids = torch.tensor([prompt], device=pair.device)
        _sync(pair.device)
        start = time.perf_counter()
        out = pair.target.generate(
            ids,
            attention_mask=torch.ones_like(ids),
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
    call: the loop's contract is about one wait per round (tests/test_decoding.py). None off CUDA,
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
    compared with). Every value comes from runs made back to back within a repeat: a speedup and
    the bound S it is compared with (from that repeat's clocked runs) share the machine's state,
    and each reported figure is a median over repeats. Compilation and warm-up happen in a first
    untimed run per engine and are reported on their own."""
    engines = engines or {"eager": EagerEngine}
    first = next(iter(engines))
    # Measured again at the end: the machine drifts.
    bandwidth, reads = [memory_bandwidth(pair.device)], [read_bandwidth(pair.device)]
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
    base = paired(
        repeats,
        ar=lambda: run_harness(pair, "ar", prompts, 1, max_new, engines[first]),
        hf=lambda: run_transformers(pair, prompts, 1, max_new, assisted=False),
    )
    rows = []
    bounds: dict[str, list[dict[str, float]]] = {name: [] for name in engines}
    for n in draft_lens:
        runs: dict[str, Callable[[], Timed]] = {}
        for name, engine in engines.items():  # engines alternate within each repeat
            runs[f"ar@{name}"] = lambda e=engine: run_harness(pair, "ar", prompts, 1, max_new, e)
            runs[f"sd@{name}"] = lambda e=engine: run_harness(pair, "sd", prompts, n, max_new, e)
            runs[f"ar-clock@{name}"] = lambda e=engine: clocked(pair, "ar", prompts, 1, max_new, e)
            runs[f"sd-clock@{name}"] = lambda e=engine: clocked(pair, "sd", prompts, n, max_new, e)
        runs["hf_sd"] = lambda: run_transformers(pair, prompts, n, max_new, assisted=True)
        if ensemble_weight is not None:
            runs["ens"] = lambda: run_harness(
                pair, "ensemble", prompts, n, max_new, engines[first], target_weight=ensemble_weight
            )
            runs["hf_ens"] = lambda: run_transformers(pair, prompts, n, max_new, True, ensemble_weight)
        got = paired(repeats, **runs)
        for name in engines:
            sd, ar = got[f"sd@{name}"][0], got[f"ar@{name}"][0]
            alpha = sd.accepted / sd.verified if sd.verified else 0.0
            per_repeat = [
                bound(s, a, alpha, n) for s, a in zip(got[f"sd-clock@{name}"], got[f"ar-clock@{name}"])
            ]
            bounds[name] += per_repeat
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
            # Counted in a run of their own (the debug mode's warnings cost time): one prompt.
            syncs = {m: host_syncs(pair, m, prompts[0], n, max_new, engines[name]) for m in ("sd", "ar")}
            if syncs["sd"] is not None:
                row.update(host_syncs_per_round=syncs["sd"]["per_round"], host_syncs=syncs["sd"],
                           ar_host_syncs=syncs["ar"])  # fmt: skip
            if ensemble_weight is not None and name == first:
                row.update(
                    ensemble_vs_hf=ratio(got, "ens", "hf_ens"),
                    ensemble_speedup=ratio(got, f"ar@{name}", "ens"),
                    ensemble_equals_hf=got["ens"][0].outputs == got["hf_ens"][0].outputs,
                )
            log(
                f"{name} N={n}: alpha {alpha:.3f}, sd/hf {row['sd_vs_hf']:.2f}, speedup {row['speedup']:.2f}, "
                f"of the rounds {row['decode_speedup']:.2f} "
                f"(ideal {row['ideal_speedup']:.2f}, efficiency {row['efficiency']:.2f}), "
                f"{100 * row['forward_share']:.0f}% of the time in model steps, verify step {row['t_verify_ms']:.2f} ms"
                + (f", sd time per token vs {first} {row['sd_vs_first']:.2f}" if name != first else "")
                + (
                    f", host syncs per round {row['host_syncs_per_round']:.2f} (ar: per step "
                    f"{row['ar_host_syncs']['per_round']:.2f})"
                    if "host_syncs" in row
                    else ""
                )
            )
            rows.append(row)
    bandwidth.append(memory_bandwidth(pair.device))
    reads.append(read_bandwidth(pair.device))
    weights = weight_bytes(pair.target)
    floor_ms = 1e3 * weights / statistics.mean(reads)
    for name, engine in engines.items():  # graphs for longer examples compile in later untimed starts
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


def markdown(result: dict[str, Any], command: str) -> str:
    r = result
    ens = "ensemble_vs_hf" in r["rows"][0]
    first = r["rows"][0]["engine"]
    lines = [
        f"# Speed: pair {r['pair']} on {r['device']} ({r['dtype']}, CPU threads: {r['threads']})",
        "",
        f"Command: `{command}`",
        "",
        f"{r['prompts']} prompts x {r['max_new_tokens']} new tokens, greedy. Ratios are medians over {r['repeats']} "
        "repeats of runs made back to back (engines alternating within each repeat).",
        "",
        f"Memory bandwidth ({r['threads']} threads, before and after): read "
        + ", ".join(f"{b:.1f}" for b in r["read_bandwidth_gb_s"])
        + " GB/s (a max over a large buffer); copy "
        + ", ".join(f"{b:.1f}" for b in r["bandwidth_gb_s"])
        + f" GB/s (read + write). Target weights {r['target_weight_bytes'] / 1e6:.0f} MB: the floor of a batch-1 "
        f"target step (weights / read bandwidth) is **{r['floor_ms']:.2f} ms**.",
        "",
        "| engine | draft step ms | target step ms | target step / floor | c | compile s | warm-up s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, e in r["engines"].items():
        lines.append(
            f"| {name} | {e['t_draft_ms']:.3f} | {e['t_target_ms']:.3f} | {e['target_vs_floor']:.2f} | {e['c']:.3f} | "
            f"{e['compile_s']:.1f} | {e['warmup_s']:.1f} |"
        )
    lines += [
        "",
        f"`ar` ({first}): harness / transformers generate() = **{r['ar_vs_hf']:.2f}** "
        f"(outputs equal: {r['ar_equals_hf']}); {r['ar_ms_per_token']:.2f} vs {r['hf_ms_per_token']:.2f} ms per "
        f"token, prompts included ({r['ar_ms_per_token'] / r['floor_ms']:.2f}x the floor)",
        "",
        "| engine | N | alpha | c | sd / HF assisted | outputs equal HF | equal ar | speedup | rounds' speedup | ideal S "
        "| efficiency "
        f"| in steps | verify step ms | sd vs {first} | ar vs {first} | equal {first} |"
        + (" ensemble / HF | ensemble equal HF |" if ens else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if ens else ""),
    ]
    for row in r["rows"]:
        line = (
            f"| {row['engine']} | {row['draft_len']} | {row['alpha']:.3f} | {row['c']:.3f} | {row['sd_vs_hf']:.2f} | "
            f"{row['sd_equals_hf']} | {row['sd_equals_ar']} | {row['speedup']:.2f} | {row['decode_speedup']:.2f} | "
            f"{row['ideal_speedup']:.2f} | "
            f"{row['efficiency']:.2f} | {100 * row['forward_share']:.0f}% | {row['t_verify_ms']:.3f} | "
            f"{row['sd_vs_first']:.2f} | {row['ar_vs_first']:.2f} | {row['equals_first']} |"
        )
        if ens:
            line += (
                f" {row['ensemble_vs_hf']:.2f} | {row['ensemble_equals_hf']} |"
                if "ensemble_vs_hf" in row
                else " | |"
            )
        lines.append(line)
    synced = [row for row in r["rows"] if "host_syncs" in row]
    if synced:
        lines += [
            "",
            "Host-device synchronisations (CUDA's sync debug mode, one greedy decode of the first prompt, "
            "prefill and clock included):",
            "",
            "| engine | N | sd syncs | sd rounds | sd syncs / round | ar syncs | ar steps | ar syncs / step |",
            "|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {row['engine']} | {row['draft_len']} | {s['syncs']} | {s['rounds']} | {s['per_round']:.2f} | "
            f"{a['syncs']} | {a['rounds']} | {a['per_round']:.2f} |"
            for row in synced
            for s, a in [(row["host_syncs"], row["ar_host_syncs"])]
        ]
    lines += [
        "",
        "Step costs are medians of engine steps inside the loop, timed in clocked runs made in every repeat "
        "(draft: `sd`'s steps; target: single-token `ar` steps); compile and warm-up happen in untimed runs before "
        "any measurement. alpha: per-token acceptance (accepted / verified positions); ideal S = (1 - alpha^(N+1)) "
        "/ ((1 - alpha)(N c + 1)) with the c of the same repeat; speedup: `ar` time / `sd` time in the same engine; "
        "rounds' speedup: the same without the prompts' prefill (S models the rounds only); efficiency = rounds' "
        "speedup / S, per repeat; every figure is a median over repeats; in steps: share of the sd wall time "
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
        ax.plot(n, [r["decode_speedup"] for r in rows], "o-", color=color, label=f"{name}: sd / ar, rounds")
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
    lengths = sorted({r["draft_len"] for r in result["rows"]})
    ax.set_xticks(lengths)  # only the lengths measured: one N must not get fractional ticks
    ax.set_xlim(lengths[0] - 0.5, lengths[-1] + 0.5)
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
        decoder = build_decoder(pair, method, draft_len=draft_len, sampling=Sampling(temperature), engine=engine)
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
        f"# Throughput: {result['pair']} on {result['device']} (CPU threads: {result['threads']})",
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
