"""Speed of the real smollm2 pair against the memory-bandwidth floor and against transformers.

For a quiet machine (the numbers are meaningless on a shared one). In one process:

1. **Bandwidth**: a large tensor copy on the device (bytes read + written / time), the median of
   repeats: the floor of a batch-1 decode step is the bytes of weights it reads / this bandwidth.
2. **Latency at batch 1**, per dtype (fp32, bf16) and engine (eager, compiled): ``ar`` ms/token
   beside transformers' ``generate()`` and the floor; ``sd`` (the early-exit draft, N tokens)
   beside transformers' assisted generation with the same draft (``assistant_model=``, a fixed
   N), and the floor ``ar`` floor / S(alpha, N, c) with alpha the measured acceptance and c the
   draft/target weight bytes. Greedy; outputs are compared token for token. Every measurement of
   a dtype is taken once per repeat, all interleaved (``bench.speed.paired``), and reported as the
   median and the [min, max] over repeats.
3. **Throughput**, rows/s of ``ar`` and ``sd`` at batch 1, 8, 32 (``bench.speed.throughput``: batch
   sizes interleaved per repeat, T = 1, each row's output checked against batch 1's).

Writes ``OUT/real_speed.json`` and ``OUT/real_speed.md`` and prints the tables. A GPU run:

    python scripts/real_speed.py --device cuda --repeats 7 --out results/real_speed

A smoke run (checks the plumbing in a minute or two on a CPU; its times mean nothing):

    python scripts/real_speed.py --device cpu --dtypes float32 --engines eager --prompts 1 \\
        --max-new 4 --repeats 1 --batch-sizes 1,2 --throughput-prompts 2 --out /tmp/real_speed
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from bench.engines import make_engine
from bench.pairs import Pair, load_pair, pick_device
from bench.speed import Timed, ideal_speedup, paired, run_harness, run_transformers, throughput
from bench.tasks import Task, resolve_task

TASKS = ("gsm8k", "cnndm", "xsum", "mbpp")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bandwidth(device: torch.device, mib: int, repeats: int) -> dict[str, float]:
    """GB/s of a ``mib`` MiB device-to-device copy (each byte read once and written once)."""
    src = torch.ones(mib << 20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # first touch of the pages
    rates = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        dst.copy_(src)
        sync(device)
        rates.append(2 * src.numel() / (time.perf_counter() - start) / 1e9)
    return {"gb_per_s": statistics.median(rates), "min": min(rates), "max": max(rates), "mib": mib}


def step_bytes(model: torch.nn.Module) -> int:
    """Bytes of weights one decode step reads: every parameter once (tied or shared tensors
    once); the embedding table is read whole by a tied output layer, else one row (ignored)."""
    seen: dict[int, int] = {}
    embed = model.get_input_embeddings().weight
    tied = model.get_output_embeddings().weight is embed
    for p in model.parameters():
        if p is embed and not tied:
            continue
        seen[p.data_ptr()] = p.numel() * p.element_size()
    return sum(seen.values())


def prompts(pair: Pair, split: str, count: int) -> list[list[int]]:
    """``count`` fixture prompts, the tasks taken in turn, under the chat template as the tests
    decode them."""
    tok = pair.tokenizer
    per_task = [Task(resolve_task(t), "fixture", split=split).examples() for t in TASKS]
    texts = [e.prompt for group in zip(*per_task) for e in group][:count]
    if len(texts) < count:
        raise SystemExit(f"only {len(texts)} fixture prompts in the {split} split; ask for fewer")
    out = []
    for text in texts:
        chat = tok.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
        )
        out.append(list(tok(chat, add_special_tokens=False).input_ids))
    return out


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def per_token_ms(runs: list[Timed]) -> dict[str, float]:
    tokens = sum(map(len, runs[0].outputs))
    return spread([1e3 * t.seconds / tokens for t in runs])


def latency(
    pair: Pair, engines: list[str], ids: list[list[int]], n: int, max_new: int, repeats: int, gbps: float
) -> list[dict[str, Any]]:
    """Batch-1 rows of one dtype: per engine ar and sd, beside transformers, all interleaved."""
    factories = {name: make_engine(name) for name in engines}
    for name, factory in factories.items():  # compile and warm up before any clock
        run_harness(pair, "sd", ids[:1], n, 8, factory)
        run_harness(pair, "ar", ids[:1], n, 8, factory)
        print(f"  {name}: ready (compile {getattr(factory, 'compile_s', 0.0):.1f} s)", flush=True)
    run_transformers(pair, ids[:1], n, 8, assisted=True)
    run_transformers(pair, ids[:1], n, 8, assisted=False)
    runs: dict[str, Any] = {
        "hf": lambda: run_transformers(pair, ids, n, max_new, assisted=False),
        "hf_assisted": lambda: run_transformers(pair, ids, n, max_new, assisted=True),
    }
    for name, factory in factories.items():
        runs[f"ar@{name}"] = lambda f=factory: run_harness(pair, "ar", ids, n, max_new, f)
        runs[f"sd@{name}"] = lambda f=factory: run_harness(pair, "sd", ids, n, max_new, f)
    got = paired(repeats, **runs)
    target_bytes, draft_bytes = step_bytes(pair.target), step_bytes(pair.draft)
    floor_ms = 1e3 * target_bytes / (gbps * 1e9)
    c = draft_bytes / target_bytes
    rows = []
    for name in engines:
        ar, sd = got[f"ar@{name}"], got[f"sd@{name}"]
        alpha = sd[0].accepted / sd[0].verified if sd[0].verified else 0.0
        rows.append(
            {
                "dtype": str(pair.target.dtype).replace("torch.", ""),
                "engine": name,
                "ar_ms_per_token": per_token_ms(ar),
                "hf_ms_per_token": per_token_ms(got["hf"]),
                "ar_floor_ms": floor_ms,
                "ar_equals_hf": ar[0].outputs == got["hf"][0].outputs,
                "sd_ms_per_token": per_token_ms(sd),
                "hf_assisted_ms_per_token": per_token_ms(got["hf_assisted"]),
                "sd_floor_ms": floor_ms / ideal_speedup(alpha, n, c),
                "sd_equals_hf_assisted": sd[0].outputs == got["hf_assisted"][0].outputs,
                "alpha": alpha,
                "c_bytes": c,
                "target_mb": target_bytes / 1e6,
                "draft_mb": draft_bytes / 1e6,
            }
        )
    return rows


def fmt(s: dict[str, float]) -> str:
    return f"{s['median']:.2f} [{s['min']:.2f}, {s['max']:.2f}]"


def markdown(result: dict[str, Any]) -> str:
    bw = result["bandwidth"]
    lines = [
        f"# smollm2 speed on {result['device']} ({result['threads']} CPU threads)",
        "",
        f"`{result['command']}`",
        "",
        f"Copy bandwidth: **{bw['gb_per_s']:.1f} GB/s** [{bw['min']:.1f}, {bw['max']:.1f}] ({bw['mib']} MiB copy). "
        f"Batch 1, greedy, {result['prompts']} prompts x {result['max_new_tokens']} new tokens, N = "
        f"{result['draft_len']}; ms/token as median [min, max] over {result['repeats']} interleaved repeats.",
        "",
        "| dtype | engine | ar ms/tok | HF generate | floor | = HF | sd ms/tok | HF assisted | sd floor | = HF "
        "| alpha | c (bytes) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["latency"]:
        lines.append(
            f"| {r['dtype']} | {r['engine']} | {fmt(r['ar_ms_per_token'])} | {fmt(r['hf_ms_per_token'])} | "
            f"{r['ar_floor_ms']:.2f} | {r['ar_equals_hf']} | {fmt(r['sd_ms_per_token'])} | "
            f"{fmt(r['hf_assisted_ms_per_token'])} | {r['sd_floor_ms']:.2f} | {r['sd_equals_hf_assisted']} | "
            f"{r['alpha']:.3f} | {r['c_bytes']:.3f} |"
        )
    lines += [
        "",
        "ms/tok: wall time / new tokens, the prompts' prefill included (in both implementations); floor: "
        "weight bytes a step reads / copy bandwidth (ar), ar floor / S(alpha, N, c) (sd); = HF: the same "
        "tokens as transformers.",
        "",
    ]
    for t in result["throughput"]:
        lines += [
            f"## Throughput, {t['dtype']}, {t['engine']} engine, T = {t['temperature']:g}, "
            f"{t['examples']} prompts x {t['max_new_tokens']} tokens, outputs equal batch 1's: "
            f"{t['outputs_equal']}",
            "",
            "| method | batch | rows/s | tokens/s | x batch 1 |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['method']} | {r['batch_size']} | {r['examples_per_s']:.2f} | {r['tokens_per_s']:.0f} | "
            f"{r['vs_first']:.2f} |"
            for r in t["rows"]
        ]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--engines", default="eager,compiled")
    parser.add_argument("--prompts", type=int, default=4, help="batch-1 prompts (fixture test split)")
    parser.add_argument("--max-new", type=int, default=64)
    parser.add_argument("--draft-len", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-sizes", default="1,8,32")
    parser.add_argument("--throughput-prompts", type=int, default=32, help="fixture test prompts, <= 32")
    parser.add_argument("--copy-mib", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    parser.add_argument("--out", type=Path, default=Path("results/real_speed"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    engines = args.engines.split(",")
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    result: dict[str, Any] = {
        "command": " ".join(["python", *sys.argv]),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
        "prompts": args.prompts,
        "max_new_tokens": args.max_new,
        "draft_len": args.draft_len,
        "repeats": args.repeats,
        "bandwidth": bandwidth(device, args.copy_mib, max(args.repeats, 5)),
        "latency": [],
        "throughput": [],
    }
    print(f"copy bandwidth {result['bandwidth']['gb_per_s']:.1f} GB/s", flush=True)
    for dtype in args.dtypes.split(","):
        pair = load_pair("smollm2", device=str(device), dtype=dtype)
        print(f"{dtype}: batch 1", flush=True)
        ids = prompts(pair, "test", args.prompts)
        result["latency"] += latency(
            pair, engines, ids, args.draft_len, args.max_new, args.repeats, result["bandwidth"]["gb_per_s"]
        )
        for name in engines:
            print(f"{dtype}: throughput, {name}", flush=True)
            rows = throughput(
                pair,
                prompts(pair, "test", args.throughput_prompts),
                sizes,
                args.draft_len,
                args.max_new,
                args.repeats,
                engine=make_engine(name),
            )
            result["throughput"].append({**rows, "dtype": dtype, "engine": name})
        del pair
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "real_speed.json").write_text(json.dumps(result, indent=2))
    text = markdown(result)
    (args.out / "real_speed.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
