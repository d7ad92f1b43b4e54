"""Scoring completions produced outside the harness, against the same ids and metrics."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.data import read_table
from bench.errors import BenchError
from bench.tasks import Task, resolve_task


def score_predictions(
    task_name: str, data: str, predictions: Path, output: Path, split: str | None = None
) -> dict[str, Any]:
    """Score every prediction, write one JSON line per example and return the means."""
    if not predictions.is_file():
        raise BenchError(f"predictions file {predictions} does not exist")
    task = Task(resolve_task(task_name), data, split=split)
    docs = task.examples_by_id()
    rows = read_table(predictions)
    if not rows:
        raise BenchError(f"{predictions} holds no predictions; write one JSON object per line")
    for i, row in enumerate(rows):
        if "example_id" not in row or "completion" not in row:
            raise BenchError(f"{predictions} line {i + 1}: needs the keys example_id and completion")
        key = str(row["example_id"])
        if key not in docs:
            raise BenchError(
                f"{predictions} line {i + 1}: example_id {key!r} is not in {task.name} ({task.data})"
            )

    def score(row: dict[str, Any]) -> dict[str, Any]:
        key = str(row["example_id"])
        return {
            "example_id": key,
            "completion": row["completion"],
            **task.score(docs[key], row["completion"]),
        }

    # Threads: code metrics spend their time waiting on sandboxed processes, one per CPU.
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        scored = list(pool.map(score, rows))
    output.write_text("".join(json.dumps(r) + "\n" for r in scored))
    metrics = [k for k, v in scored[0].items() if isinstance(v, float)] if scored else []
    summary: dict[str, Any] = {"task": task.name, "examples": len(scored)}
    summary.update({k: sum(r[k] for r in scored) / len(scored) for k in metrics})
    if scored and "sandbox" in scored[0]:  # which jail ran the code: text, never averaged
        summary["sandbox"] = ",".join(sorted({r["sandbox"] for r in scored}))
    return summary
