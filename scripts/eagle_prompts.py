"""Write the prompts the shipped `smollm2` EAGLE-3 head was trained and held out on.

Why a script: the head's card must say exactly which prompts it saw, and the prompts must be
disjoint from everything the harness evaluates (Spec-Bench's 480 questions, CNN/DM, GSM8K, XSum
and MBPP test splits, tasks/fixtures). So they come from two train-side sources, read from their
public repositories at a fixed commit:

- GSM8K **train** split: openai/grade-school-math @ 3101c7d5072418e28b9008a6636bde82a006892c,
  grade_school_math/data/train.jsonl (MIT), the `question` field;
- the 175 self-instruct seed tasks: yizhongw/self-instruct @ 0b26ccaa415992100fa32df62d41b994cf928e23,
  data/seed_tasks.jsonl (Apache-2.0), instruction and, where present, the first instance's input.

Rows 0..TRAIN-1 of each source train the head; the next HELDOUT rows of each are held out for the
acceptance measurement. Usage: python scripts/eagle_prompts.py GSM8K_TRAIN SEED_TASKS OUT.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SPLITS = {"gsm8k_train": (200, 25), "self_instruct_seed": (150, 25)}


def seed_prompt(row: dict) -> str:
    """A seed task as one user turn: the instruction, then its first input when it has one."""
    text = row["instruction"].strip()
    first = (row.get("instances") or [{}])[0].get("input", "").strip()
    return f"{text}\n\n{first}" if first else text


def main(gsm8k: str, seeds: str, out: str) -> None:
    """Write {source, row, split, prompt} lines: the train rows, then the held-out rows."""
    rows = {
        "gsm8k_train": [
            json.loads(x)["question"].strip() for x in Path(gsm8k).read_text().splitlines() if x.strip()
        ],
        "self_instruct_seed": [
            seed_prompt(json.loads(x)) for x in Path(seeds).read_text().splitlines() if x.strip()
        ],
    }
    lines = []
    for split in ("train", "heldout"):
        for source, (n_train, n_held) in SPLITS.items():
            span = range(n_train) if split == "train" else range(n_train, n_train + n_held)
            lines += [
                json.dumps({"source": source, "row": i, "split": split, "prompt": rows[source][i]})
                for i in span
            ]
    Path(out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
