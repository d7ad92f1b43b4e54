"""Greedy agreement checks on a device, written to a JSON file after every check (a kill keeps
what was done): for each dtype and engine,

- ``sd`` equals ``ar`` token for token, prompt by prompt (with the first differing position and the
  target's top-2 logit margin there, from a plain transformers forward: a margin near 0 is a
  near-tie that rounding decides, a large one is a bug);
- with ``--batch B``: each prompt decoded alone equals its row in a batch of B different prompts
  (``ar`` and ``sd``): whether a row's output depends on its batch neighbours.

Usage (scripts/gpu_check.sh runs it):
  python scripts/gpu_equivalence.py --pair llama3-shapes --device cuda --dtypes bfloat16,float32 \
      --engines eager --prompts 2 --max-new 32 --batch 8 --out $OUT/equivalence_eager.json
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import time
from pathlib import Path
from typing import Any

import torch


def first_diff(a: list[int], b: list[int]) -> int | None:
    """Index of the first position where a and b differ (a length difference counts); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@torch.inference_mode()
def margin_at(pair: Any, prompt: list[int], common: list[int], got: dict[str, int]) -> dict[str, float]:
    """The target's logits after prompt + common prefix (plain transformers forward, the pair's
    dtype): top-1 minus top-2, and each method's token's gap to the top-1."""
    ids = torch.tensor([prompt + common], device=pair.device)
    logits = pair.target(input_ids=ids).logits[0, -1].float()
    top = torch.topk(logits, 2).values
    out = {"top2_margin": float(top[0] - top[1]), "argmax": int(logits.argmax())}
    for name, token in got.items():
        out[f"{name}_gap_to_top"] = float(top[0] - logits[token])
    return out


def compare(
    pair: Any, prompt: list[int], a: list[int], b: list[int], names: tuple[str, str]
) -> dict[str, Any]:
    diff = first_diff(a, b)
    row: dict[str, Any] = {"equal": diff is None, "tokens": [len(a), len(b)], "first_diff": diff}
    if diff is not None and diff < min(len(a), len(b)):
        row.update(margin_at(pair, prompt, a[:diff], {names[0]: a[diff], names[1]: b[diff]}))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="llama3-shapes")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--engines", default="eager")
    ap.add_argument("--draft-len", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=2, help="prompts for sd == ar (each alone)")
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument(
        "--batch", type=int, default=0, help="batch-neighbour check with this many prompts (0: skip)"
    )
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    from bench.build import build_decoder
    from bench.engines import make_engine
    from bench.pairs import load_pair
    from bench.speed.runs import GREEDY
    from bench.tasks import Task, resolve_task

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "args": vars(args),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "builds": [],
        "checks": [],
    }

    def save() -> None:
        out.write_text(json.dumps(result, indent=2))

    def log(check: dict[str, Any]) -> None:
        result["checks"].append(check)
        save()
        print(json.dumps(check), flush=True)

    texts = [e.doc["article"] for e in Task(resolve_task("cnndm"), "fixture").examples()]
    for dtype in args.dtypes.split(","):
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        tick = time.perf_counter()
        pair = load_pair(args.pair, device=args.device, dtype=dtype)
        if pair.device.type == "cuda":
            torch.cuda.synchronize()
        build = {"dtype": dtype, "build_s": time.perf_counter() - tick}
        if pair.device.type == "cuda":
            build["gpu_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
        result["builds"].append(build)
        save()
        print(json.dumps(build), flush=True)
        prompts = [
            list(pair.tokenizer(texts[i % len(texts)]).input_ids)
            for i in range(max(args.prompts, args.batch))
        ]
        for engine_name in args.engines.split(","):
            engine = make_engine(engine_name)  # one factory: compiled graphs shared by ar and sd
            dec = {
                m: build_decoder(pair, m, draft_len=args.draft_len, sampling=GREEDY, engine=engine)
                for m in ("ar", "sd")
            }
            where = {"dtype": dtype, "engine": engine_name, "draft_len": args.draft_len}
            alone: dict[str, list[list[int]]] = {"ar": [], "sd": []}
            for i in range(max(args.prompts, args.batch)):
                tick = time.perf_counter()
                for m in ("ar", "sd"):
                    alone[m].append(dec[m].generate(prompts[i], args.max_new).token_ids)
                if i < args.prompts:
                    log({**where, "check": "sd_equals_ar", "prompt": i, "s": time.perf_counter() - tick,
                         **compare(pair, prompts[i], alone["ar"][i], alone["sd"][i], ("ar", "sd"))})  # fmt: skip
            if args.batch:
                for m in ("ar", "sd"):
                    tick = time.perf_counter()
                    rows = dec[m].generate_batch(prompts[: args.batch], args.max_new, [0] * args.batch)
                    seconds = time.perf_counter() - tick
                    per_row = [
                        compare(pair, prompts[i], alone[m][i], g.token_ids, ("alone", "batched"))
                        for i, g in enumerate(rows)
                    ]
                    log({**where, "check": f"{m}_alone_equals_batch_of_{args.batch}", "batch_s": seconds,
                         "equal": all(r["equal"] for r in per_row), "rows": per_row})  # fmt: skip
        del pair, dec, engine
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    result["all_equal"] = all(c["equal"] for c in result["checks"])
    save()
    print(f"all equal: {result['all_equal']} ({len(result['checks'])} checks) -> {out}")


if __name__ == "__main__":
    main()
