"""Scale-out: torchrun ranks and --shard jobs cover the grid exactly once and merge to one run."""

import os
import subprocess
import sys

import pandas as pd
import pytest
from conftest import cli_error, run_all
from small_runs import cli

from bench.errors import BenchError
from bench.config import RunSettings
from bench.grid import configs_from_flags
from bench.runner import Runner
from bench.store import load_results, merge

TIMING = ["wall_time_s", "wall_times_s", "prefill_time_s"]
KEY = ["config_id", "example_id"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
RUN = [
    "-m",
    "bench",
    "run",
    "--task",
    "gsm8k,xsum",
    "--method",
    "ar,sd,ensemble",
    "--limit",
    "4",
    "--max-new-tokens",
    "16",
    "--device",
    "cpu",
    "--no-report",
    "--no-progress",
]


def grid():
    return configs_from_flags(
        tasks=["gsm8k", "mbpp", "xsum"],
        pairs=["tiny"],
        methods=["ar", "sd", "ensemble", "cascade"],
        params={"target_weight": [0.5, 0.9], "cascade_rule": ["chow", "token"]},
        settings=RunSettings(draft_len=3, max_new_tokens=8),
        device="cpu",
    )


def items(runner, configs):
    return [(cfg.config_id, e.example_id) for cfg, mine in runner.assignments(configs) for e in mine]


def test_shards_cover_the_grid_exactly_once(tmp_path):
    configs = grid()
    everything = items(Runner(tmp_path / "all", limit=5, progress=False), configs)
    assert len(everything) == len(set(everything)) == len(configs) * 5
    shards = [
        items(Runner(tmp_path / f"s{i}", limit=5, partition=(i, 3), progress=False), configs)
        for i in range(3)
    ]
    flat = [x for s in shards for x in s]
    assert sorted(flat) == sorted(everything)  # every item once, no overlaps
    assert max(map(len, shards)) - min(map(len, shards)) <= 1  # balanced


def rows(path):
    return load_results(path).drop(columns=TIMING).sort_values(KEY).reset_index(drop=True)


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """The reference: one process, no shards."""
    out = tmp_path_factory.mktemp("single")
    subprocess.run(
        [sys.executable, *RUN, "--output-dir", str(out)],
        env=ENV,
        check=True,
        capture_output=True,
        timeout=600,
    )
    return rows(out)


@pytest.mark.slow
def test_shard_jobs_merge_to_the_single_run(tmp_path, single):
    jobs = run_all(
        [
            [sys.executable, *RUN, "--shard", f"{i}/3", "--output-dir", str(tmp_path / f"job{i}")]
            for i in range(3)
        ],
        env=ENV,
        capture_output=True,
        timeout=600,
    )
    assert all(job.returncode == 0 for job in jobs), [job.stderr[-2000:] for job in jobs]
    merge([tmp_path / f"job{i}" for i in range(3)], tmp_path / "merged")
    pd.testing.assert_frame_equal(rows(tmp_path / "merged"), single)


@pytest.mark.slow
def test_two_torchrun_processes_equal_one(tmp_path, single):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            *RUN,
            "--output-dir",
            str(tmp_path / "ranks"),
        ],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    writers = {p.name.split(".")[1] for p in (tmp_path / "ranks").glob("*.parquet")}
    assert writers == {"0of2", "1of2"}
    pd.testing.assert_frame_equal(rows(tmp_path / "ranks"), single)


def test_mixed_settings_are_refused(tmp_path, capsys):
    """Two shards of one output directory, the second with another seed: it is refused as it
    starts, and the directory is refused by every reader. The commands run in this process (what
    they write is the same; the shard jobs above run as separate processes)."""
    base = [
        "run",
        "--task",
        "gsm8k",
        "--method",
        "sd",
        "--limit",
        "4",
        "--max-new-tokens",
        "8",
        "--device",
        "cpu",
        "--no-report",
        "--no-progress",
    ]
    shared = tmp_path / "shared"
    code, said = cli(capsys, *base, "--shard", "0/2", "--output-dir", str(shared))
    assert code == 0, said
    code, said = cli(capsys, *base, "--shard", "1/2", "--seed", "1", "--output-dir", str(shared))
    assert code == 2 and "disagree on seed" in said[-1], said
    with pytest.raises(BenchError, match="disagree on seed"):
        load_results(shared)
    assert "disagree on seed" in cli_error("table", str(shared))


def test_different_library_versions_are_refused(tmp_path):
    import json

    run = tmp_path / "r"
    Runner(run, limit=2, progress=False, log=lambda m: None).run(grid()[:1])
    manifest = next((run / "manifests").glob("*.json"))
    data = json.loads(manifest.read_text())
    data.update(writer="1of2", versions={**data["versions"], "torch": "0.0-other"})
    (run / "manifests" / manifest.name.replace("0of1", "1of2")).write_text(json.dumps(data))
    with pytest.raises(BenchError, match="different library versions"):
        load_results(run)
