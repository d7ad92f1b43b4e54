"""Verify cost per token-tree size: a target tree step of n nodes (1 to 64) against a plain step,
on a real prompt, for the lead to run on a quiet machine (issue 46, item 4).

    python scripts/tree_verify_cost.py --pair smollm2 --dtype bfloat16 --engine eager
    python scripts/tree_verify_cost.py --pair smollm2 --dtype bfloat16 --engine compiled --sizes 1,3,7,15,31,63

Prints one row per size: ms of the tree step (``ModelEngine.tree_step`` + ``commit``), ms of a chain
step of the same width, and both over the width-1 step: the price of verifying n nodes, which a
tree must repay in tokens per forward. The prompt is the first CNN/DM article under the chat
template (as ``run --task cnndm --data cnndm_test.jsonl --num-fewshot 0 --chat-template``).
"""

from __future__ import annotations

import argparse
import json

import torch

from bench.pairs import encode_prompt
from bench.engines import make_engine
from bench.pairs import load_pair
from bench.speed.lookup import TREE_SHAPES, tree_costs
from bench.tasks import Task, resolve_task

SIZES = "1,2,3,4,5,6,8,10,12,16,20,24,32,40,48,64"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pair", default="smollm2")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--engine", default="eager", choices=("eager", "compiled"))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--sizes", default=SIZES, help="tree sizes in nodes, comma separated")
    parser.add_argument("--shape", default="binary", choices=TREE_SHAPES)
    parser.add_argument("--data", default="../shared/data/cnndm_test.jsonl")
    parser.add_argument("--chat-template", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", help="also write the figures here")
    a = parser.parse_args()
    pair = load_pair(a.pair, device=a.device, dtype=a.dtype)
    text = Task(resolve_task("cnndm"), a.data, num_fewshot=0).examples(1)[0].prompt
    prompt = encode_prompt(pair, text, chat_template=a.chat_template)
    sizes = [int(s) for s in a.sizes.split(",")]
    engine = make_engine(a.engine, log=print)
    costs = tree_costs(pair, engine, prompt, sizes, a.shape, a.repeats)
    step = costs.pop(0)["chain_ms"]
    print(f"{a.pair} {a.dtype} {a.engine}, {len(prompt)}-token prompt, {a.shape} trees, {torch.get_num_threads()} threads")
    print(f"width-1 step: {step:.2f} ms")
    print("nodes | tree step ms | chain step ms (same width) | tree / width-1 step")
    for n, c in costs.items():
        print(f"{n:5d} | {c['tree_ms']:12.2f} | {c['chain_ms']:26.2f} | {c['tree_ms'] / step:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"pair": a.pair, "dtype": a.dtype, "engine": a.engine, "width1_ms": step, "costs": costs}, f, indent=1)


if __name__ == "__main__":
    main()
