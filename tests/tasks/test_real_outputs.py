"""A real model's text through the harness's answer extraction, code extraction, sandbox and ROUGE.

``tests/data/real_outputs`` holds SmolLM2-135M-Instruct's greedy, chat-templated completions of 20
examples each of GSM8K, MBPP, HumanEval and XSum (``scripts/make_real_outputs.py``), the dataset row
each needs (gold answer, tests, reference), a score checked by hand for every output
(``hand_checks.jsonl``) and hand-written variants of real outputs for the extraction paths the real
ones miss (``edited.jsonl``, each naming its edit). See docs/real-outputs.md. No model and no
``../shared`` are needed: everything is in those files.
"""

from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from rouge_score import rouge_scorer, tokenizers

from bench.errors import BenchError
from bench.metrics import extract_code, extract_flexible, extract_strict
from bench.sandbox.bwrap import BwrapJail
from bench.tasks import Task, resolve_task

DATA = Path(__file__).parents[1] / "data" / "real_outputs"
TASKS = ("gsm8k", "mbpp", "humaneval", "xsum")
CODE_CASES = {
    "fenced",
    "prose-then-fenced",
    "unfenced",
    "code-then-closing-fence",
    "own-asserts",
    "prompt-repeated",
    "no-code",
}


def _lines(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines()]


def _real(task: str) -> list[dict[str, Any]]:
    """The model's outputs of one task, each with its hand check merged in."""
    checks = {(c["task"], c["example_id"]): c for c in _lines("hand_checks.jsonl")}
    return [{**r, **checks[(task, r["example_id"])]} for r in _lines(f"{task}.jsonl")]


def _records(task: str) -> list[dict[str, Any]]:
    """Real outputs, then the edited variants of that task."""
    return _real(task) + [r for r in _lines("edited.jsonl") if r["task"] == task]


def _task(name: str) -> Task:
    return Task(resolve_task(name), "hub")  # scoring reads the task file and each record's own row


def _label(r: dict[str, Any]) -> str:
    return f"{r['task']} {r['example_id']}"


@pytest.fixture(scope="module")
def bwrap() -> None:
    """Code outputs run in the bwrap jail, as the harness runs them; none runs without it."""
    try:
        BwrapJail().check()
    except BenchError as exc:
        pytest.skip(f"the bwrap sandbox cannot run here: {exc}")


def test_every_real_output_has_one_hand_check_and_every_edit_names_its_source():
    checks = Counter((c["task"], c["example_id"]) for c in _lines("hand_checks.jsonl"))
    outputs = Counter((t, r["example_id"]) for t in TASKS for r in _lines(f"{t}.jsonl"))
    assert checks == outputs and set(outputs.values()) == {1}
    assert Counter(t for t, _ in outputs) == {t: 20 for t in TASKS}
    for t in TASKS:
        for r in _real(t):
            assert r["source"] == "model" and r["human_note"] and r["completion"] and r["doc"], _label(r)
    real_ids = {(t, r["example_id"]) for t in TASKS for r in _lines(f"{t}.jsonl")}
    for r in _lines("edited.jsonl"):
        assert r["source"] == "edited" and r["edit"] and r["human_note"], _label(r)
        assert (r["task"], r["derived_from"]) in real_ids, _label(r)


@pytest.mark.parametrize("task", TASKS)
def test_committed_scores_are_what_the_harness_gives_now(task):
    """The stored ``score`` fields are current (rerun ``make_real_outputs.py --rescore`` after a change
    to extraction or scoring)."""
    t = _task(task)
    for r in _real(task):
        if task in ("gsm8k", "xsum"):
            live = t.score(r["doc"], r["completion"])
            assert live == {k: r["score"][k] for k in live}, _label(r)
        assert r["score"]["completion_cut"] == t.cut(r["completion"]), _label(r)
        if task in ("mbpp", "humaneval"):  # stored verdicts; the sandbox reruns them further down
            assert r["score"]["quality"] == r["human_score"], _label(r)


def test_gsm8k_answers_match_the_hand_check():
    task = _task("gsm8k")
    wrong = [
        (_label(r), task.score(r["doc"], r["completion"])["quality"], r["human_score"])
        for r in _records("gsm8k")
        if task.score(r["doc"], r["completion"])["quality"] != r["human_score"]
    ]
    assert not wrong, wrong
    assert sum(r["human_score"] for r in _real("gsm8k")) == 1  # 37: '#### 2', the only right answer


def test_gsm8k_stop_and_flexible_extraction_on_the_edited_answer():
    """The answer without '####' is graded by its last number, which is 2 only once the invented
    follow-up question (2000 and 1000 cookies) is cut away at 'Question:'."""
    (r,) = [r for r in _lines("edited.jsonl") if r["example_id"] == "37~no-hashes"]
    task = _task("gsm8k")
    assert extract_strict(r["completion"]) is None and extract_flexible(r["completion"]) == "1000"
    assert extract_flexible(task.cut(r["completion"])) == "2" == extract_strict(r["doc"]["answer"])
    (d,) = [r for r in _lines("edited.jsonl") if r["example_id"] == "36~dollars"]
    assert extract_strict(d["completion"]) == "75" == extract_strict(d["doc"]["answer"])


def _expected_code(r: dict[str, Any], cut: str) -> str:
    """The code a reader takes from a cut completion, found with plain string search: the text before
    a fence the model only closed, else the first fenced block's body, else the whole text."""
    if "code-then-closing-fence" in r["cases"]:
        return cut[: cut.index("```")]
    if "```" not in cut:
        return cut
    start = cut.index("\n", cut.index("```")) + 1
    end = cut.find("```", start)
    return cut[start:] if end < 0 else cut[start:end]


@pytest.mark.parametrize("task", ["mbpp", "humaneval"])
def test_code_extraction_takes_the_code_a_reader_takes(task):
    t = _task(task)
    for r in _records(task):
        cut = t.cut(r["completion"])
        prefix = r["doc"]["prompt"] if task == "humaneval" else ""
        assert extract_code(cut, prefix) == _expected_code(r, cut), _label(r)
        if "prompt-repeated" in r["cases"]:  # the prompt's first line comes back in the answer
            first = next(line for line in r["prompt"].splitlines() if line.strip())
            assert first in r["completion"], _label(r)
        if "own-asserts" in r["cases"]:  # the model wrote the dataset's asserts into its own code
            assert set(r["doc"]["test_list"]) <= set(extract_code(cut).splitlines()), _label(r)
        if "no-code" in r["cases"]:
            assert "def " not in cut and "```" not in cut, _label(r)


def test_the_code_outputs_cover_every_extraction_path():
    cases = Counter(c for task in ("mbpp", "humaneval") for r in _records(task) for c in r["cases"])
    assert set(cases) == CODE_CASES
    real = Counter(c for task in ("mbpp", "humaneval") for r in _real(task) for c in r["cases"])
    assert set(real) == CODE_CASES - {"no-code"}  # the model always wrote some code


def test_a_fenced_chat_answer_survives_humaneval_stops():
    """HumanEval/53: the model fences a restated, correct ``add``. The ``\\ndef `` stop right after
    '```python' used to cut the answer to the fence alone, scoring a right answer 0."""
    (r,) = [r for r in _real("humaneval") if r["example_id"] == "HumanEval/53"]
    cut = _task("humaneval").cut(r["completion"])
    assert cut == r["completion"]
    assert extract_code(cut, r["doc"]["prompt"]) == "def add(x: int, y: int) -> int:\n    return x + y\n"


@pytest.mark.parametrize("task", ["mbpp", "humaneval"])
def test_code_pass_at_1_matches_the_hand_check(task, bwrap):
    t = _task(task)
    records = _records(task)
    with ThreadPoolExecutor(2) as pool:
        scores = list(pool.map(lambda r: t.score(r["doc"], r["completion"]), records))
    assert {s["sandbox"] for s in scores} == {"bwrap"}
    wrong = [
        (_label(r), s["quality"], r["human_score"])
        for r, s in zip(records, scores)
        if s["quality"] != r["human_score"]
    ]
    assert not wrong, wrong
    assert sum(r["human_score"] for r in _real(task)) == 1  # MBPP 52 (a * b), HumanEval/53 (x + y)


_TOKENIZER = tokenizers.DefaultTokenizer(use_stemmer=True)


def _bigrams(text: str) -> Counter:
    tokens = _TOKENIZER.tokenize(text)
    return Counter(zip(tokens, tokens[1:]))


def test_rouge_equals_rouge_score_called_directly():
    task = _task("xsum")
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    for r in _records("xsum"):
        ours = task.score(r["doc"], r["completion"])
        theirs = scorer.score(r["doc"]["summary"], task.cut(r["completion"]).strip())
        for key, s in theirs.items():
            assert ours[key] == pytest.approx(100 * s.fmeasure, abs=1e-9), (_label(r), key)


def test_rouge2_counts_the_bigrams_found_by_hand():
    """ROUGE-2 F1 is 2 * overlap / (reference bigrams + summary bigrams): the overlap is the bigrams
    read off by hand, zero exactly where the hand found none."""
    task = _task("xsum")
    for r in _records("xsum"):
        cut = task.cut(r["completion"])
        ref, ours = _bigrams(r["doc"]["summary"]), _bigrams(cut)
        shared = ref & ours
        hand = Counter(pair for b in r["human_bigrams"] for pair in _bigrams(b))
        assert shared == hand and sum(hand.values()) == r["human_score"], (_label(r), shared, hand)
        total = sum(ref.values()) + sum(ours.values())
        expected = 200 * r["human_score"] / total if total else 0.0
        assert task.score(r["doc"], r["completion"])["rouge2"] == pytest.approx(expected, abs=1e-9), _label(r)


def test_rouge_extremes_hold():
    task = _task("xsum")
    by_id = {r["example_id"]: r for r in _lines("edited.jsonl")}
    for example_id, value in (
        ("33245521~empty", 0.0),
        ("33245521~blank", 0.0),
        ("33245521~reference", 100.0),
    ):
        r = by_id[example_id]
        scores = task.score(r["doc"], r["completion"])
        assert [scores[k] for k in ("rouge1", "rouge2", "rougeL")] == pytest.approx([value] * 3), example_id
    (real,) = [r for r in _real("xsum") if r["example_id"] == "33245521"]
    appended = by_id["33245521~next-document"]
    assert task.score(appended["doc"], appended["completion"]) == task.score(real["doc"], real["completion"])
