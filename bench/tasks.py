"""Tasks: a declarative YAML file per task (``tasks/``) and the small interpreter of those files.

Adding a task is one YAML file, plus a metric function in ``bench/metrics.py`` when none of the
existing ones fits.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.data import has_fixture, load_rows
from bench.errors import BenchError
from bench.registry import entries, find, load_yaml
from bench.metrics import FENCE, get_metric


UNORDERED = 99  # a task file that declares no order sorts after those that do


@dataclass(frozen=True)
class TaskSpec:
    """The fields of a task file."""

    name: str
    dataset: dict[str, Any]
    query: str
    metric: str
    quality: str
    id_field: str | None = None
    num_fewshot: int = 0
    fewshot_seed: int = 1234
    instruction: str = ""
    exemplar: str = ""
    separator: str = "\n\n"
    stop: list[str] = field(default_factory=list)
    max_new_tokens: int = 128
    reference_field: str | None = None
    # A chat benchmark's rows: ``turns`` names the row's list of user turns (each rendered through
    # ``query`` as ``{turn}``; the later ones are asked with the method's own earlier answers in the
    # conversation, bench/conversation.py). ``category_field`` names the row's category (rows carry
    # it as ``category``; examples are drawn round-robin over categories); ``category_groups`` pools
    # categories into the per-category report's columns, in order.
    turns: str | None = None
    category_field: str | None = None
    category_groups: dict[str, list[str]] = field(default_factory=dict)
    # How reports show the task: its column title (None: its name), its place among tasks (lower
    # first) and whether its quality is a fraction shown as a percentage (accuracy, pass@1).
    title: str | None = None
    order: int = UNORDERED
    percent: bool = False

    @classmethod
    def from_file(cls, path: Path | Any) -> TaskSpec:
        data = load_yaml(path, "task")
        if not isinstance(data.get("dataset"), dict) or "split" not in data["dataset"]:
            raise BenchError(
                f"task file {path}: dataset needs at least a split, e.g. dataset: {{data_files: test.jsonl, split: test}}"
            )
        if "data_files" in data["dataset"]:
            data["dataset"] = {
                **data["dataset"],
                "data_files": _local_files(data["dataset"]["data_files"], data["dataset"], path),
            }
        try:
            spec = cls(**data)
        except TypeError as exc:
            raise BenchError(f"task file {path}: {exc}") from None
        get_metric(spec.metric)
        return spec


def _local_files(files: Any, dataset: dict[str, Any], path: Path | Any) -> dict[str, str]:
    """``data_files`` as {split: absolute path}: a path relative to the task file is read from
    beside it, so a task folder can be moved or shared as a whole."""
    if isinstance(files, str):
        files = {dataset.get("split", "test"): files}
    if not isinstance(files, dict) or not files:
        raise BenchError(f"task file {path}: data_files takes a file path or {{split: file path, ...}}")
    out = {}
    for split, name in files.items():
        file = Path(str(name)).expanduser()
        file = file if file.is_absolute() else Path(str(path)).parent / file
        if file.suffix not in (".json", ".jsonl", ".parquet"):
            raise BenchError(f"task file {path}: data_files {split}: {name} is not .json, .jsonl or .parquet")
        if not file.is_file():
            raise BenchError(f"task file {path}: data_files {split}: no file {file}")
        out[str(split)] = str(file.resolve())
    return out


@dataclass(frozen=True)
class Example:
    """One evaluation example: its stable id, its dataset row and the rendered prompt (the first
    user turn); ``follow_ups`` are a multi-turn example's later user turns."""

    example_id: str
    doc: dict[str, Any]
    prompt: str
    follow_ups: tuple[str, ...] = ()


def task_names() -> list[str]:
    return sorted(entries("tasks"))


def resolve_task(name_or_path: str) -> TaskSpec:
    """A registry name or a path to a task YAML file."""
    return TaskSpec.from_file(find("tasks", name_or_path))


def _fields(doc: dict[str, Any]) -> dict[str, Any]:
    """Template fields: lists (test asserts) are written one per line."""
    return {k: "\n".join(map(str, v)) if isinstance(v, (list, tuple)) else v for k, v in doc.items()}


def select(n_rows: int, limit: int | None, seed: int) -> list[int]:
    """The first ``limit`` rows of a seeded permutation: the same subset on any number of processes."""
    order = np.random.default_rng(seed).permutation(n_rows)
    return [int(i) for i in (order if limit is None else order[:limit])]


def round_robin(order: list[int], categories: list[str]) -> list[int]:
    """``order`` regrouped into rounds holding each category's next row (in ``order``'s order):
    any prefix covers the categories as evenly as they allow, and a longer prefix extends a shorter."""
    seen: dict[str, int] = {}
    rank = []
    for category in categories:
        rank.append(seen.get(category, 0))
        seen[category] = rank[-1] + 1
    return [order[i] for i in sorted(range(len(order)), key=lambda i: (rank[i], i))]


class Task:
    """A task file bound to a data source."""

    def __init__(
        self, spec: TaskSpec, data: str, num_fewshot: int | None = None, split: str | None = None
    ) -> None:
        if num_fewshot is not None and num_fewshot < 0:
            raise BenchError(f"--num-fewshot must be >= 0, got {num_fewshot}")
        dataset = dict(spec.dataset, split=split) if split else spec.dataset
        self.spec = replace(
            spec, dataset=dataset, num_fewshot=spec.num_fewshot if num_fewshot is None else num_fewshot
        )
        self.data = data
        self.metric = get_metric(spec.metric)
        self._rows: list[dict[str, Any]] | None = None
        self._fewshot: str | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    def rows(self) -> list[dict[str, Any]]:
        if self._rows is None:
            self._rows = load_rows(self.name, self.spec.dataset, self.data, self.spec.dataset["split"])
        return self._rows

    def example_id(self, index: int, doc: dict[str, Any]) -> str:
        """The dataset's own id where it has one, else the row index in its split."""
        return str(doc[self.spec.id_field]) if self.spec.id_field else str(index)

    def fewshot_block(self) -> str:
        """Instruction and exemplars, drawn from the few-shot split by a fixed seed."""
        if self._fewshot is None:
            parts = [self.spec.instruction] if self.spec.instruction else []
            k = self.spec.num_fewshot
            if k:
                pool = load_rows(self.name, self.spec.dataset, self.data, self.spec.dataset["fewshot_split"])
                if len(pool) < k:
                    raise BenchError(
                        f"task {self.name}: {k} exemplars asked for, the few-shot split has {len(pool)}"
                    )
                parts += [
                    self.spec.exemplar.format(**_fields(pool[i]))
                    for i in select(len(pool), k, self.spec.fewshot_seed)
                ]
            self._fewshot = self.spec.separator.join(parts)
        return self._fewshot

    def render(self, doc: dict[str, Any]) -> str:
        query = self.spec.query.format(**_fields(doc), **self._turn(doc, 0))
        prefix = self.fewshot_block()
        return prefix + self.spec.separator + query if prefix else query

    def _turn(self, doc: dict[str, Any], index: int) -> dict[str, str]:
        """``{turn}`` for a multi-turn task's query: the row's user turn ``index``."""
        if not self.spec.turns:
            return {}
        turns = doc.get(self.spec.turns)
        if turns is None or isinstance(turns, str) or not hasattr(turns, "__len__") or not len(turns):
            raise BenchError(f"task {self.name}: a row's {self.spec.turns!r} is not a list of user turns: {turns!r}")
        return {"turn": str(turns[index])}

    def follow_ups(self, doc: dict[str, Any]) -> tuple[str, ...]:
        """A multi-turn row's user turns after the first, each rendered through the query."""
        count = len(doc[self.spec.turns]) if self.spec.turns else 0
        return tuple(self.spec.query.format(**_fields(doc), **self._turn(doc, i)) for i in range(1, count))

    def columns(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Columns a row of this task carries besides its scores: its category, where it has one."""
        return {"category": str(doc[self.spec.category_field])} if self.spec.category_field else {}

    def _example(self, example_id: str, doc: dict[str, Any]) -> Example:
        return Example(example_id, doc, self.render(doc), self.follow_ups(doc))

    def render_text(self, text: str) -> str:
        """A user's text put where a dataset row's field goes, with the task's instruction and
        exemplars around it: the prompt ``run`` would decode for such a row."""
        if self.spec.turns:
            return self.render({self.spec.turns: [text]})
        names = {f for _, f, _, _ in string.Formatter().parse(self.spec.query) if f}
        if len(names) != 1:
            raise BenchError(
                f"task {self.name}: its query fills {len(names)} fields ({', '.join(sorted(names))}), "
                "so one text cannot fill it; pick a dataset example with --example ID instead"
            )
        return self.render({names.pop(): text})

    def example(self, example_id: str) -> Example:
        """One example by its id (as in the results' ``example_id``), rendered as ``run`` renders it."""
        for i, doc in enumerate(self.rows()):
            if self.example_id(i, doc) == example_id:
                return self._example(example_id, doc)
        raise BenchError(f"task {self.name} ({self.data}): no example with id {example_id!r}")

    def category_members(self, group: str) -> list[str]:
        """The categories the task file pools as ``group`` (its ``category_groups``); refused in one
        line for a task without categories or a group it does not declare."""
        if not self.spec.category_groups:
            raise BenchError(
                f"task {self.name} has no category groups; --category takes a task that declares them (spec_bench)"
            )
        if group not in self.spec.category_groups:
            raise BenchError(
                f"task {self.name} has no category group {group!r}; "
                f"choose one of {', '.join(self.spec.category_groups)}"
            )
        return list(self.spec.category_groups[group])

    def examples(
        self, limit: int | None = None, seed: int = 0, categories: list[str] | None = None
    ) -> list[Example]:
        """The first ``limit`` examples of a seeded order (round-robin over categories where rows
        carry one); only those of ``categories`` when given."""
        rows = self.rows()
        order = select(len(rows), None, seed)
        field = self.spec.category_field
        if categories is not None:
            if not field:
                raise BenchError(f"task {self.name}: its rows carry no category (no category_field); drop the categories")
            order = [i for i in order if str(rows[i][field]) in categories]
        if field:
            order = round_robin(order, [str(rows[i][field]) for i in order])
        return [self._example(self.example_id(i, rows[i]), rows[i]) for i in order[:limit]]

    def examples_by_id(self) -> dict[str, dict[str, Any]]:
        return {self.example_id(i, doc): doc for i, doc in enumerate(self.rows())}

    def cut(self, completion: str) -> str:
        """The completion up to the earliest stop string outside the first fenced code block: a chat
        model's answer opens its code there with the ``def`` that HumanEval's ``\\ndef `` stop is for."""
        block = FENCE.search(completion)
        inside = range(*block.span()) if block else range(0)
        ends = []
        for stop in self.spec.stop:
            i = completion.find(stop)
            if i in inside:
                i = completion.find(stop, inside.stop)
            if i >= 0:
                ends.append(i)
        return completion[: min(ends)] if ends else completion

    def score(self, doc: dict[str, Any], completion: str) -> dict[str, Any]:
        """The cut completion, every metric and the primary ``quality``."""
        cut = self.cut(completion)
        scores = self.metric(cut, doc, self.spec.reference_field)
        return {"completion_cut": cut, **scores, "quality": float(scores[self.spec.quality])}


def default_data(task: str, pair_kind: str) -> str:
    """Fixtures for the offline tiny pair when the task ships them; the real source otherwise."""
    return "fixture" if pair_kind == "tiny" and has_fixture(task) else "hub"
