"""Files a run resumes from are written whole or not at all (issue 51 item 9), and a resumed run
says in one line what it found and what is left.

A kill inside a write is simulated by a write that leaves half a file and raises: the previous
file must survive it, and the next run must resume from it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
import torch

from bench import api
from bench.atomic import write_atomic
from bench.learned import TrainJob
from bench.learned.reinforce import ReinforceRecipe
from bench.store import SCHEMA, ResultStore, load_results
from bench.tasks import Task, resolve_task
from bench.learned.reinforce import TrainConfig, Trainer


class Killed(Exception):
    """Stands for the signal that ends a process mid-write."""


def torn(path: Path | str) -> None:
    """Half a file, then the kill."""
    Path(path).write_bytes(b"PK\x03\x04 half a file")
    raise Killed


def test_a_write_killed_midway_leaves_the_previous_file(tmp_path):
    path = tmp_path / "card.json"
    write_atomic(path, lambda tmp: tmp.write_text('{"step": 1}'))
    with pytest.raises(Killed):
        write_atomic(path, lambda tmp: torn(tmp))
    assert path.read_text() == '{"step": 1}'
    assert [p.name for p in tmp_path.iterdir()] == ["card.json"]  # no temporary file left behind


def test_a_compaction_killed_midway_loses_no_row(tmp_path, monkeypatch):
    store = ResultStore(tmp_path)
    row = {"config_id": "c", "schema": SCHEMA}
    store.append_batch([{**row, "example_id": str(i)} for i in range(2)])
    store.compact("c")
    store.append_batch([{**row, "example_id": "2"}])
    monkeypatch.setattr(pd.DataFrame, "to_parquet", lambda self, path, **kw: torn(path))
    with pytest.raises(Killed):
        store.compact("c")
    monkeypatch.undo()
    assert sorted(load_results(tmp_path)["example_id"]) == ["0", "1", "2"]


def test_training_killed_inside_its_checkpoint_resumes_from_the_last_one(tiny_pair, tmp_path, monkeypatch):
    """The kill lands in step 3's checkpoint write, after its log was written: the run resumes
    from step 2 (its log cut to match), says so in one line, and ends where an unkilled run ends."""
    task = Task(resolve_task("gsm8k"), "fixture", split="train", num_fewshot=0)
    cfg = TrainConfig(lr=0.05, batch_size=2, epochs=2, num_prompts=4, rollout_tokens=12, allow_flat_reward=True)
    folder = tmp_path / "head"
    Trainer(tiny_pair, task, cfg, folder).train(until=2)
    with monkeypatch.context() as m:
        m.setattr(torch, "save", lambda obj, f: torn(f))
        with pytest.raises(Killed):
            Trainer(tiny_pair, task, cfg, folder).train(until=3)
    resumed = Trainer(tiny_pair, task, cfg, folder)
    assert resumed.step == 2 and len(resumed.history) == 2
    card = (folder / "card.json").read_text()
    assert '"trained": false' in card  # a killed run's head is resumed, never used as trained
    lines: list[str] = []
    ReinforceRecipe(cfg).train(TrainJob(tiny_pair, task, "fixture", folder, log=lines.append))
    assert (
        lines[0]
        == f"train: resuming from {folder / 'checkpoint.pt'}: 2 of 4 steps done (2 prompts a step), 2 left"
    )
    assert (
        Trainer(tiny_pair, task, cfg, folder).step == 4
        and '"trained": true' in (folder / "card.json").read_text()
    )


def test_mining_killed_inside_its_save_resumes_from_the_last_batch(tmp_path, monkeypatch):
    from bench.learned import classifier
    from bench.pairs import load_pair

    ref = load_pair("ref", device="cpu")
    monkeypatch.setattr(classifier, "BATCH", 4)
    recipe = classifier.ClassifierRecipe(
        miner="selfjudge", features="target", questions=8, draft_temperature=1.0
    )
    job = TrainJob(
        ref, Task(resolve_task("arith"), "hub", split="train"), "hub", tmp_path, log=lambda m: None
    )
    saves = []
    real_save = torch.save

    def second_torn(obj, f):
        saves.append(f)
        return real_save(obj, f) if len(saves) == 1 else torn(f)

    with monkeypatch.context() as m:
        m.setattr(torch, "save", second_torn)
        with pytest.raises(Killed):
            recipe.mine_all(job)
    lines: list[str] = []
    state = recipe.mine_all(TrainJob(ref, job.task, "hub", tmp_path, log=lines.append))
    assert (
        lines[0] == f"mining: found 4 of 8 questions' labels in {tmp_path / classifier.LABELS}; up to 4 left"
    )
    assert len(state["done"]) == 8


def test_a_resumed_run_says_what_it_found(tmp_path):
    def run(limit: int) -> list[str]:
        lines: list[str] = []
        api.run(
            tasks=["gsm8k"], pairs=["tiny"], methods=["ar"], limit=limit, output_dir=tmp_path, device="cpu",
            timing_examples=0, progress=False, report=False, log=lines.append,
        )  # fmt: skip
        return lines

    assert not any("resuming" in line for line in run(2))
    found = [line for line in run(4) if "resuming" in line]
    assert len(found) == 1 and re.fullmatch(
        rf"gsm8k \| tiny \| ar: resuming: found 2 of 4 examples' rows in {re.escape(str(tmp_path))}; 2 left",
        found[0],
    ), found
