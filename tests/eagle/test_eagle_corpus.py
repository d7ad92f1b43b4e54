"""The EAGLE head's training prompts never hold a row that any command here evaluates.

The shipped prompts file (scripts/eagle_prompts.py) against every evaluated text: the shared
slices (CNN/DM, XSum, GSM8K, MBPP and Spec-Bench's 480 questions) and every task fixture. Prompts
shipped as text are checked by substring (an evaluated text's normalised words inside a prompt's);
the CNN/DM and XSum prompts, shipped without their text, by their word-window hashes, which catch
any shared run of 35 words. Both checks are shown to fire on a planted overlap.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = ROOT / "bench" / "reference" / "smollm2-eagle" / "prompts.jsonl"


def _script():
    spec = importlib.util.spec_from_file_location("eagle_prompts", ROOT / "scripts" / "eagle_prompts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def evaluated_files(shared: Path) -> list[Path]:
    """Every file a command here evaluates: the shared slices and every task fixture."""
    return sorted(shared.glob("*.jsonl")) + sorted((ROOT / "tasks" / "fixtures").glob("*/*.jsonl"))


@pytest.fixture(scope="module")
def lines() -> list[dict]:
    return [json.loads(x) for x in PROMPTS.read_text().splitlines() if x.strip()]


def test_no_training_prompt_holds_an_evaluated_row(lines, shared_data):
    ep = _script()
    texts = ep.evaluated_texts(evaluated_files(shared_data))
    assert len(texts) > 480 + 200 + 200 + 500  # Spec-Bench's turns and the slices are all read
    assert ep.overlaps(lines, texts) == []


def test_the_checks_fire_on_a_planted_overlap(lines, shared_data):
    """A redacted prompt built around an XSum test document, and a text prompt holding a GSM8K
    test question, are both caught: the checks above could fail."""
    ep = _script()
    doc = json.loads((shared_data / "xsum_test.jsonl").read_text().splitlines()[7])["document"]
    question = json.loads((shared_data / "gsm8k_test.jsonl").read_text().splitlines()[3])["question"]
    planted = [
        {"source": "t0:xsum_x", "row": 1, "shingles": ep.shingles("Summarize: " + doc[40:] + " That is all.")},
        {"source": "gsm8k_train", "row": 2, "prompt": f"Question: {question}\nAnswer:"},
    ]
    assert sorted(set(ep.overlaps(planted, [doc, question]))) == [("gsm8k_train", 2), ("t0:xsum_x", 1)]


def test_redacted_sources_ship_no_text_and_every_split_is_named(lines):
    """CNN/DM and XSum state no licence: their prompts ship as hashes only. Every line names its
    source, row, domain and split, and the held-out rows are disjoint from the train rows."""
    ep = _script()
    for x in lines:
        assert {"source", "row", "split", "domain"} <= set(x) and x["split"] in ("train", "valid", "heldout")
        assert ("prompt" in x) != x["source"].startswith(ep.UNLICENSED), x["source"]
    rows = {s: {(x["source"], x["row"]) for x in lines if x["split"] == s} for s in ("train", "valid", "heldout")}
    assert not rows["train"] & rows["heldout"] and not rows["valid"] & rows["heldout"]
    assert {x["domain"] for x in lines if x["split"] == "heldout"} == {"math", "code", "instructions", "qa", "cnndm", "xsum"}
