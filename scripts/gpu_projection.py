"""Project a grid's GPU time and memory from `speed` measurements (scripts/gpu_check.sh's output).

    python scripts/gpu_projection.py OUTDIR [--grid paper] [--accept-len 3] [--timing-examples 20]

Reads every speed JSON in OUTDIR (`speed --pair llama3-shapes` writes them; gpu_check.sh names them
speed_eager.json, speed_compiled.json, throughput.json) and prints, per engine, the paper grid's
decode time with every step of the arithmetic shown:

- step costs: the measured batch-1 target step, draft step and verify step (N + 1 tokens) of the
  measured pair, scaled to each grid pair by weight bytes (a step reads every weight once: exact at
  the bandwidth floor, optimistic for a pair with more layers where launches dominate, i.e. eager);
- per example: `ar` = T x target step; a speculative method = T / L rounds of N draft steps + one
  verify step, T the task's token budget (an upper bound: EOS ends most answers sooner) and L the
  tokens per round (--accept-len; the measured pair's random weights say nothing of real acceptance);
- per configuration: --timing-examples decoded alone, the rest batched at --batch-size, priced at the
  measured throughput gain of that batch size when a throughput JSON is there (else at batch 1);
- prefill: 2 x parameters x prompt tokens at --prefill-tflops.

Then each pair's memory: bf16 weights + the KV cache at --batch-size rows of each task's positions.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

# Parameters (model cards) and KV layout (layers, kv heads, head dim) from docs/pairs.md and
# docs/speed.md. Gemma 3's counts include its vision tower, which a text step does not read.
PAIRS = {
    "llama3": {"target": (8.03e9, 32, 8, 128), "draft": (1.24e9, 16, 8, 64)},
    "qwen3": {"target": (8.19e9, 36, 8, 128), "draft": (0.60e9, 28, 8, 128)},
    "gemma3": {"target": (12.2e9, 48, 8, 256), "draft": (4.3e9, 34, 4, 256)},
}
# Median prompt tokens per task with its exemplars: characters / 4 of the ../shared/data slices
# (GSM8K 4-shot ~2,100 chars, CNN/DM 1-shot ~8,000, XSum 2-shot ~5,500, MBPP 0-shot ~600). CNN/DM's
# agrees with docs/pairs.md. Assumptions, not tokenizer counts.
PROMPT_TOKENS = {"gsm8k": 550, "cnndm": 2000, "xsum": 1400, "mbpp": 150, "humaneval": 150, "arith": 30}


def measured_bytes(pair: str, dtype: str) -> tuple[float, float]:
    """Weight bytes (target, draft) of the measured pair as it ran, built without its weights where
    it is synthetic (on the meta device) and in a second where it is tiny."""
    import torch

    from bench.pairs import load_pair, resolve_pair
    from bench.engines.base import weight_bytes
    from bench.tiny import build_synthetic_pair

    spec, torch_dtype = resolve_pair(pair), getattr(torch, dtype)
    if spec.kind == "synthetic":
        s = dict(spec.synthetic)
        target, draft = build_synthetic_pair(
            s.pop("target_config"), s.pop("draft_config"), device=torch.device("meta"), dtype=torch_dtype, **s
        )
    else:
        loaded = load_pair(pair, device="cpu", dtype=dtype)
        target, draft = loaded.target, loaded.draft
    return float(weight_bytes(target)), float(weight_bytes(draft))


def gb(x: float) -> str:
    return f"{x / 1e9:.3g} GB"


def load_results(folder: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    speeds, throughputs = [], []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "engines" in data and "rows" in data:
            speeds.append({**data, "file": path.name})
        elif isinstance(data, dict) and data.get("rows") and "examples_per_s" in data["rows"][0]:
            throughputs.append({**data, "file": path.name})
    return speeds, throughputs


def step_costs(speeds: list[dict[str, Any]], n: int) -> dict[str, dict[str, Any]]:
    """Per engine: target, draft and verify step (ms) from the file whose draft lengths come
    nearest to N = n (a later file on a tie), the verify step at the nearest N measured."""
    out: dict[str, dict[str, Any]] = {}
    for s in speeds:
        for name, e in s["engines"].items():
            rows = [r for r in s["rows"] if r["engine"] == name]
            row = min(rows, key=lambda r: (abs(r["draft_len"] - n), -r["draft_len"]))
            if name in out and abs(out[name]["verify_n"] - n) < abs(row["draft_len"] - n):
                continue
            out[name] = {
                "t_target_ms": e["t_target_ms"],
                "t_draft_ms": e["t_draft_ms"],
                "t_verify_ms": row["t_verify_ms"],
                "verify_n": row["draft_len"],
                "alpha": row["alpha"],
                "pair": s["pair"],
                "device": s["device"],
                "dtype": s["dtype"],
                "file": s["file"],
                "floor_ms": s["floor_ms"],
            }
    return out


def batch_gain(throughputs: list[dict[str, Any]], batch: int) -> dict[str, tuple[int, float]]:
    """Per method (ar, sd): (batch size used, time per example at batch 1 / at that batch)."""
    gains: dict[str, tuple[int, float]] = {}
    for t in throughputs:
        for method in ("ar", "sd"):
            rows = [r for r in t["rows"] if r["method"] == method and r["batch_size"] <= batch]
            if rows:
                r = max(rows, key=lambda r: r["batch_size"])
                gains[method] = (r["batch_size"], r["vs_first"])
    return gains


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--grid", default="paper")
    ap.add_argument("--accept-len", type=float, default=3.0, help="tokens per round L (docs/speed.md: 3)")
    ap.add_argument("--timing-examples", type=int, default=20, help="per configuration, decoded alone")
    ap.add_argument("--batch-size", type=int, default=16, help="run's --batch-size for the rest")
    ap.add_argument("--prefill-tflops", type=float, default=400.0, help="effective bf16 TFLOP/s of a prefill")
    args = ap.parse_args()

    from bench.grid import configs_from_grid
    from bench.tasks import resolve_task

    speeds, throughputs = load_results(args.folder)
    if not speeds:
        raise SystemExit(f"no speed JSON in {args.folder}")
    configs, limit = configs_from_grid(args.grid, device="cuda")
    n = configs[0].draft_len
    examples = limit or 200
    cells: dict[tuple[str, str], list[str]] = {}
    for c in configs:
        cells.setdefault((c.task, c.pair), []).append(c.method)
    tasks = list(dict.fromkeys(t for t, _ in cells))
    budgets = {t: resolve_task(t).max_new_tokens for t in tasks}
    costs = step_costs(speeds, n)
    gains = batch_gain(throughputs, args.batch_size)
    timed = min(args.timing_examples, examples)
    L = args.accept_len
    p = print

    p(f"# Projection of grid '{args.grid}' from {', '.join(s['file'] for s in speeds)}")
    p(f"{len(configs)} configurations = {len(cells)} (task, pair) cells x {len(next(iter(cells.values())))} "
      f"({', '.join(sorted(set(c.method for c in configs)))}); {examples} examples each; N = {n}; "
      f"token budgets {budgets}; L = {L:g} tokens per round (assumed).")  # fmt: skip
    if gains:
        p("batched share: " + "; ".join(f"{m} at batch {b}: {g:.2f}x batch 1's rate" for m, (b, g) in gains.items())
          + f" (from {', '.join(t['file'] for t in throughputs)}, N = {throughputs[-1]['draft_len']}, "
          f"T = {throughputs[-1]['temperature']}); {timed} timed examples per configuration alone")  # fmt: skip
    else:
        p(f"no throughput JSON: every example priced at batch 1 (an upper bound); {timed} timed alone")
    for engine, cst in costs.items():
        t_bytes, d_bytes = measured_bytes(cst["pair"], cst["dtype"])
        p("")
        p(f"## engine {engine}: measured on {cst['pair']} ({cst['device']}, {cst['dtype']}; {cst['file']})")
        p(f"target step {cst['t_target_ms']:.3f} ms for {gb(t_bytes)} of weights (floor there "
          f"{cst['floor_ms']:.3f} ms); draft step {cst['t_draft_ms']:.3f} ms for {gb(d_bytes)}; verify step "
          f"(N + 1 = {cst['verify_n'] + 1} tokens) {cst['t_verify_ms']:.3f} ms"
          + ("" if cst["verify_n"] == n else f" (measured at N = {cst['verify_n']}, used for N = {n})")
          + f"; measured alpha {cst['alpha']:.3f} (random weights: not used)")  # fmt: skip
        total = 0.0
        p("")
        p("| pair | target ms | draft ms | verify ms | round ms = N x draft + verify | " + " | ".join(
          f"{t} h" for t in tasks) + " | pair h |")  # fmt: skip
        p("|---|---|---|---|---|" + "---|" * (len(tasks) + 1))
        lines = []
        for pair, (t_params, *_), (d_params, *_) in ((k, v["target"], v["draft"]) for k, v in PAIRS.items()):
            if not any(pr == pair for _, pr in cells):
                continue
            ts, ds = 2 * t_params / t_bytes, 2 * d_params / d_bytes  # bf16 bytes / measured bytes
            tt, td, tv = cst["t_target_ms"] * ts, cst["t_draft_ms"] * ds, cst["t_verify_ms"] * ts
            rnd = n * td + tv
            hours = []
            for task in tasks:
                methods = cells.get((task, pair), [])
                T = budgets[task]
                prefill_s = (
                    2 * (t_params + d_params) * PROMPT_TOKENS.get(task, 500) / (args.prefill_tflops * 1e12)
                )
                secs = 0.0
                for m in methods:
                    one = T * tt / 1e3 if m == "ar" else T / L * rnd / 1e3
                    g = gains.get("ar" if m == "ar" else "sd", (1, 1.0))[1]
                    secs += timed * (one + prefill_s) + (examples - timed) * (one / g + prefill_s)
                hours.append(secs / 3600)
                if pair == next(iter(PAIRS)) and task == tasks[0]:
                    spec = [m for m in methods if m != "ar"]
                    g_ar, g_sd = gains.get("ar", (1, 1.0))[1], gains.get("sd", (1, 1.0))[1]
                    lines.append(
                        f"e.g. {pair} {task}: ar {T} x {tt:.2f} ms = {T * tt / 1e3:.2f} s/example; "
                        f"speculative {T}/{L:g} x ({n} x {td:.2f} + {tv:.2f}) ms = {T / L * rnd / 1e3:.2f} s/example; "
                        f"prefill 2 x {(t_params + d_params) / 1e9:.2f}e9 x {PROMPT_TOKENS.get(task, 500)} / "
                        f"{args.prefill_tflops:g}e12 = {prefill_s * 1e3:.0f} ms; {len(methods)} configurations "
                        f"(1 ar + {len(spec)}) x ({timed} alone + {examples - timed} at /{g_ar:.2f} (ar), "
                        f"/{g_sd:.2f} (sd)) = {hours[-1]:.3f} h"
                    )
            total += sum(hours)
            p(f"| {pair} | {tt:.2f} | {td:.2f} | {tv:.2f} | {rnd:.2f} | " + " | ".join(f"{h:.2f}" for h in hours)
              + f" | {sum(hours):.2f} |")  # fmt: skip
        p("")
        for line in lines:
            p(line)
        p(f"**grid total, engine {engine}: {total:.1f} GPU-hours** (decode at budget length; DIVERSED heads' "
          "training not included)")  # fmt: skip

    p("")
    p(
        f"## memory per pair (bf16 weights + KV cache at batch {args.batch_size}, positions = prompt + budget + N + 1)"
    )
    p("")
    p("| pair | weights GB | KV KiB/position | " + " | ".join(f"{t} KV GiB ({PROMPT_TOKENS.get(t, 500)} + "
      f"{budgets[t]} + {n + 1})" for t in tasks) + " | max total GiB |")  # fmt: skip
    p("|---|---|---|" + "---|" * (len(tasks) + 1))
    for pair, v in PAIRS.items():
        weights = 2 * (v["target"][0] + v["draft"][0])
        per_pos = sum(layers * kv * hd * 2 * 2 for _, layers, kv, hd in v.values())  # K + V, 2 bytes each
        kv = [
            args.batch_size * (PROMPT_TOKENS.get(t, 500) + budgets[t] + n + 1) * per_pos / 2**30
            for t in tasks
        ]
        p(f"| {pair} | {weights / 1e9:.1f} | {per_pos / 1024:.0f} | " + " | ".join(f"{x:.2f}" for x in kv)
          + f" | {weights / 2**30 + max(kv):.1f} |")  # fmt: skip
    p("")
    p(
        "KV at the median prompt; a batch's cache is sized by its longest row (docs/pairs.md prices CNN/DM at "
        "2,300 positions). Add 2-4 GB for activations and the CUDA context."
    )


if __name__ == "__main__":
    main()
