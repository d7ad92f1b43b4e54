"""Datasets of the offline lm-eval test tasks: JSONL files beside this one, never the hub."""

import json
from pathlib import Path

from datasets import Dataset, DatasetDict

HERE = Path(__file__).resolve().parent


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (HERE / name).read_text().splitlines() if line.strip()]


def arithmetic(**metadata) -> DatasetDict:
    """GSM8K-style questions (lm-eval passes its metadata, model_args included; unused here)."""
    return DatasetDict(
        {split: Dataset.from_list(_rows(f"arith_{split}.jsonl")) for split in ("test", "train")}
    )


def choices(**metadata) -> DatasetDict:
    return DatasetDict({"test": Dataset.from_list(_rows("choice_test.jsonl"))})
