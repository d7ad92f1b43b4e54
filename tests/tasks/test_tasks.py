"""Tasks: fixtures in the hub's schema, prompts, cutting, metrics, data sources, scoring, and task
files of the user's own (local data files, a broken file in one line)."""

import json
import os
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import bench_cli, cli_error

from bench.data import fixture_dir, read_table
from bench.errors import BenchError
from bench.metrics import extract_flexible, extract_strict, rouge
from bench.tasks import Task, resolve_task, select, task_names

HUB_SCHEMA = {
    "gsm8k": {"question", "answer"},
    "cnndm": {"article", "highlights", "id"},
    "xsum": {"document", "summary", "id"},
    "mbpp": {"text", "code", "task_id", "test_setup_code", "test_list", "challenge_test_list"},
}


def test_registry_lists_the_seven_tasks():
    assert task_names() == ["arith", "cnndm", "gsm8k", "humaneval", "mbpp", "spec_bench", "xsum"]


@pytest.mark.parametrize("name", sorted(HUB_SCHEMA))
def test_fixtures_follow_the_hub_schema(name):
    test, train = (read_table(fixture_dir(name) / f"{s}.jsonl") for s in ("test", "train"))
    assert len(test) >= 8 and len(train) >= 4
    for row in test + train:
        assert set(row) == HUB_SCHEMA[name]


def test_gsm8k_prompt_is_four_shot_chain_of_thought():
    task = Task(resolve_task("gsm8k"), "fixture")
    prompt = task.examples(limit=1)[0].prompt
    assert prompt.count("Question:") == 5
    assert prompt.count("Answer: Let's think step by step.") == 5
    assert prompt.count("####") == 4 and prompt.endswith("Answer: Let's think step by step.\n")
    assert (
        Task(resolve_task("gsm8k"), "fixture", num_fewshot=0).examples(limit=1)[0].prompt.count("Question:")
        == 1
    )


def test_summarisation_prompts():
    cnn = Task(resolve_task("cnndm"), "fixture").examples(limit=1)[0].prompt
    assert cnn.count("Article:") == 2 and cnn.count("Highlights:") == 2 and cnn.endswith("Highlights:")
    xsum = Task(resolve_task("xsum"), "fixture").examples(limit=1)[0].prompt
    assert xsum.startswith("Summarize") and "20 words" in xsum
    assert xsum.count("Document:") == 3 and xsum.endswith("Summary:")


def test_mbpp_prompt_carries_the_asserts():
    ex = Task(resolve_task("mbpp"), "fixture").examples(limit=1)[0]
    assert all(t in ex.prompt for t in ex.doc["test_list"])
    assert ex.example_id == str(ex.doc["task_id"])


def test_example_subset_is_a_prefix_of_one_seeded_permutation():
    assert select(100, 10, seed=3) == select(100, 40, seed=3)[:10]
    assert select(100, 10, seed=3) != select(100, 10, seed=4)
    assert sorted(select(50, None, seed=0)) == list(range(50))


def test_cut_at_stop_strings():
    task = Task(resolve_task("gsm8k"), "fixture")
    assert task.cut("4 + 4 = 8\n#### 8\n\nQuestion: next one") == "4 + 4 = 8\n#### 8\n\n"
    cnn = Task(resolve_task("cnndm"), "fixture")
    assert cnn.cut(" A summary.\n\nArticle: another") == " A summary."


@pytest.mark.parametrize(
    "text,strict,flexible",
    [
        ("so 3 + 4 = 7\n#### 7", "7", "7"),
        ("The answer is 1,260 dollars.", None, "1260"),
        ("#### $1,260.", "1260", "1260"),
        ("We get 12.50 then 3.0", None, "3"),
        ("no number here", None, None),
        ("#### -4", "-4", "-4"),
    ],
)
def test_gsm8k_extraction(text, strict, flexible):
    assert extract_strict(text) == strict
    assert extract_flexible(text) == flexible


def test_records_keep_raw_cut_and_every_metric():
    task = Task(resolve_task("gsm8k"), "fixture")
    doc = task.rows()[0]
    scores = task.score(doc, "Mia has 30.\n#### 22\nQuestion: more")
    assert scores["completion_cut"] == "Mia has 30.\n#### 22\n"
    assert scores["exact_strict"] == scores["exact_flexible"] == scores["quality"] == 1.0


def test_rouge_on_a_pair_computed_by_hand():
    doc = {"summary": "the cat was on the mat"}
    scores = rouge("the cat sat on the mat", doc, "summary")
    # bigrams: 3 of 5 shared both ways -> F1 0.6; unigrams 5 of 6 -> 0.8333; LCS 5 of 6
    assert scores["rouge2"] == pytest.approx(60.0)
    assert scores["rouge1"] == pytest.approx(500 / 6)
    assert scores["rougeL"] == pytest.approx(500 / 6)
    assert rouge("the cat was on the mat", doc, "summary")["rouge2"] == pytest.approx(100.0)


def test_humaneval_is_one_file_and_its_gold_solutions_pass():
    task = Task(resolve_task("humaneval"), "hub")
    examples = task.examples(limit=5, seed=0)
    assert all(e.example_id.startswith("HumanEval/") for e in examples)
    for e in examples:
        assert task.score(e.doc, e.doc["canonical_solution"])["pass@1"] == 1.0
        assert task.score(e.doc, "    return None\n")["pass@1"] == 0.0


def test_local_path_sources(tmp_path):
    rows = read_table(fixture_dir("xsum") / "test.jsonl")
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:3]))
    only_test = Task(resolve_task("xsum"), str(tmp_path / "test.jsonl"), num_fewshot=0)
    assert {e.example_id for e in only_test.examples()} == {r["id"] for r in rows[:3]}
    with pytest.raises(BenchError, match="few-shot"):
        Task(resolve_task("xsum"), str(tmp_path / "test.jsonl")).examples()
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[3:6]))
    assert Task(resolve_task("xsum"), str(tmp_path)).examples(limit=1)[0].prompt.count("Document:") == 3
    with pytest.raises(BenchError, match="no such file"):
        Task(resolve_task("xsum"), str(tmp_path / "missing.jsonl")).examples()


def test_unknown_task_names_the_choices():
    with pytest.raises(BenchError, match="cnndm, gsm8k, humaneval, mbpp, spec_bench, xsum"):
        resolve_task("squad")


def test_score_command_and_ids(tmp_path):
    rows = read_table(fixture_dir("mbpp") / "test.jsonl")
    preds = tmp_path / "preds.jsonl"
    preds.write_text(
        json.dumps({"example_id": rows[0]["task_id"], "completion": rows[0]["code"]})
        + "\n"
        + json.dumps({"example_id": rows[1]["task_id"], "completion": "def nothing():\n    pass"})
        + "\n"
    )
    out = bench_cli("score", "--task", "mbpp", "--data", "fixture", "--predictions", str(preds), timeout=120)
    assert out.returncode == 0, out.stderr
    assert "examples=2" in out.stdout and "pass@1=0.5" in out.stdout
    scored = read_table(tmp_path / "preds.scores.jsonl")
    assert [r["pass@1"] for r in scored] == [1.0, 0.0]


def test_unreachable_hub_answers_fast_with_one_line(tmp_path):
    preds = tmp_path / "p.jsonl"
    preds.write_text('{"example_id": 0, "completion": "1"}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf"))  # closed local port
    start = time.monotonic()
    out = bench_cli(
        "score", "--task", "gsm8k", "--data", "hub", "--predictions", str(preds), env=env, timeout=120
    )
    assert time.monotonic() - start < 20  # the libraries' own retries took 25 s here
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error: cannot load dataset openai/gsm8k") and "--data fixture" in lines[-1]
    assert "the hub is unreachable" in lines[-1]
    assert "Traceback" not in out.stderr


# --- Real data beside the checkout (skipped when ../shared/data is absent) -------------------


def test_gold_gsm8k_solutions_score_100_percent(shared_data):
    task = Task(resolve_task("gsm8k"), str(shared_data / "gsm8k_test.jsonl"), num_fewshot=0)
    rows = task.rows()
    assert len(rows) == 200
    for doc in rows:
        scores = task.score(doc, doc["answer"])
        assert scores["exact_strict"] == scores["exact_flexible"] == 1.0, doc["answer"]


def test_rouge_of_real_references_against_themselves(shared_data):
    for name, file, field in (
        ("xsum", "xsum_test.jsonl", "summary"),
        ("cnndm", "cnndm_test.jsonl", "highlights"),
    ):
        task = Task(resolve_task(name), str(shared_data / file), num_fewshot=0)
        for doc in task.rows()[:20]:
            assert task.score(doc, doc[field])["rouge2"] == pytest.approx(100.0)


def test_rouge_equals_evaluates_rouge_with_the_stemmer(shared_data):
    """evaluate's rouge module is fetched from the hub; this runs wherever a warm cache has it."""
    evaluate = pytest.importorskip("evaluate")
    try:
        module = evaluate.load("rouge")
    except Exception as exc:  # offline without a cached module
        pytest.skip(f"evaluate's rouge module is not available offline ({type(exc).__name__})")
    from bench.data import read_table
    from bench.metrics import rouge

    rows = read_table(shared_data / "xsum_test.jsonl")
    preds = [" ".join(r["document"].split()[:30]) for r in rows]
    refs = [r["summary"] for r in rows]
    theirs = module.compute(predictions=preds, references=refs, use_stemmer=True, use_aggregator=False)
    for i, (p, t) in enumerate(zip(preds, refs)):
        ours = rouge(p, {"reference": t}, None)
        for key in ("rouge1", "rouge2", "rougeL"):
            assert ours[key] == pytest.approx(100 * theirs[key][i], abs=1e-9)


# --- a task file of the user's own ------------------------------------------------------------


def _task_file(folder: Path, data_files: str) -> Path:
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "test.jsonl").write_text(
        "\n".join(json.dumps({"question": f"{a} + 1", "answer": f"#### {a + 1}"}) for a in range(5))
    )
    (folder / "data" / "train.json").write_text(json.dumps([{"question": "1 + 1", "answer": "#### 2"}]))
    pd.DataFrame([{"question": "9 + 9", "answer": "#### 18"}]).to_parquet(folder / "data" / "extra.parquet")
    path = folder / "my_task.yaml"
    path.write_text(
        "name: my_task\n"
        f"dataset: {{data_files: {data_files}, split: test, fewshot_split: train}}\n"
        "num_fewshot: 1\n"
        'exemplar: "Q: {question}\\nA: {answer}"\n'
        'query: "Q: {question}\\nA: "\n'
        "metric: gsm8k\nreference_field: answer\nquality: exact_flexible\n"
    )
    return path


def test_task_yaml_reads_local_files_relative_or_absolute(tmp_path):
    path = _task_file(tmp_path / "t", "{test: data/test.jsonl, train: data/train.json}")
    task = Task(resolve_task(str(path)), "hub")
    examples = task.examples()
    assert len(examples) == 5 and examples[0].prompt.startswith("Q: 1 + 1\nA: #### 2\n\nQ: ")
    absolute = tmp_path / "t" / "data" / "extra.parquet"
    other = tmp_path / "u" / "task.yaml"
    other.parent.mkdir()
    other.write_text(
        path.read_text().replace("{test: data/test.jsonl, train: data/train.json}", str(absolute))
    )
    assert [e.doc["question"] for e in Task(resolve_task(str(other)), "hub", num_fewshot=0).examples()] == [
        "9 + 9"
    ]
    other.write_text(path.read_text().replace("data/test.jsonl", "data/nope.jsonl"))
    with pytest.raises(BenchError, match="no file .*nope.jsonl"):
        resolve_task(str(other))


def test_broken_task_yaml_is_one_line_with_file_and_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text('name: broken\ndataset: {path: x, split: test\nquery: "{q}"\n')
    message = cli_error("run", "--task", str(path), "--pair", "tiny")
    assert str(path) in message and "line 3" in message
    path.write_text("- just\n- a list\n")
    assert "expected a mapping" in cli_error("run", "--task", str(path))


def test_reports_read_a_tasks_title_order_and_percent_from_its_yaml(tmp_path):
    """A task's report facts live in its file: a user's task file declares them and every report
    reads them from there; one whose file is gone keeps its name, sorts last, plain number."""
    from bench.reports.summary import sorted_tasks, task_facts

    mine = tmp_path / "mine.yaml"
    mine.write_text(
        "name: mine\ndataset: {path: x, split: test}\nquery: '{q}'\nmetric: gsm8k\nquality: exact_flexible\n"
        "title: Mine\norder: -1\npercent: true\n"
    )
    facts = task_facts(str(mine))
    assert (facts.title, facts.order, facts.percent, facts.quality) == ("Mine", -1, True, "exact_flexible")
    assert sorted_tasks(["arith", "cnndm", str(tmp_path / "gone.yaml"), str(mine), "gsm8k"])[:3] == [
        str(mine), "gsm8k", "cnndm"
    ]
    assert task_facts("gsm8k").title == "GSM8K" and task_facts("gsm8k").percent
    assert not task_facts("cnndm").percent and task_facts("arith").title == "arith"
    gone = task_facts(str(tmp_path / "gone.yaml"))
    assert (gone.title, gone.percent) == (str(tmp_path / "gone.yaml"), False)
