"""Results you can trust: ids hold only the method's own settings, every setting is in the rows,
pairing and panels use all of them, and bad input gets one clear line."""

import sys

import numpy as np
import pytest

from bench.cli import main
from bench.grid import configs_from_flags
from bench.reports.summary import panels, summarise
from bench.reports.table import write_table
from bench.runner import Runner, RunConfig
from bench.store import SHARED_SETTINGS, load_results


def run(out, methods=("ar", "sd"), **kw):
    settings = dict(tasks=["gsm8k"], pairs=["tiny"], device="cpu", max_new_tokens=8)
    configs = configs_from_flags(methods=list(methods), **{**settings, **kw})
    Runner(out, limit=2, progress=False, log=lambda m: None).run(configs)
    return load_results(out)


def cli(capsys, *args):
    """``diversed-bench ARGS`` in this process: (exit code, stderr lines)."""
    saved = sys.argv
    sys.argv = ["diversed-bench", *args]
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.argv = saved
    return code, capsys.readouterr().err.strip().splitlines()


def test_ar_id_ignores_the_draft_length():
    ids = {RunConfig("gsm8k", "tiny", "ar", draft_len=n, device="cpu").resolve().config_id for n in (3, 5)}
    sd = {RunConfig("gsm8k", "tiny", "sd", draft_len=n, device="cpu").resolve().config_id for n in (3, 5)}
    assert len(ids) == 1 and len(sd) == 2


def test_a_draft_length_sweep_in_one_directory(tmp_path):
    run(tmp_path, draft_len=3)
    rows = run(tmp_path, draft_len=5)
    assert rows[rows["method"] == "ar"]["config_id"].nunique() == 1  # ar ran once, not per length
    summary = summarise(rows)
    ar = summary[summary["method"] == "ar"]
    assert len(ar) == 1 and ar["normalised_time"].iloc[0] == 1.0
    found = panels(summary)
    assert sorted(len(p.part) for p in found) == [2, 2]  # each draft length with the one ar
    assert len({p.title for p in found}) == 2 and len({p.slug for p in found}) == 2
    text, _ = write_table(tmp_path, "markdown")
    assert "draft length 3" in text and "draft length 5" in text


def test_two_budgets_are_two_comparisons(tmp_path):
    run(tmp_path, max_new_tokens=6)
    summary = summarise(run(tmp_path, max_new_tokens=8))
    assert (summary[summary["method"] == "ar"]["normalised_time"] == 1.0).all()
    assert {len(p.part) for p in panels(summary)} == {2}
    assert {"6 tokens", "8 tokens"} <= {t for p in panels(summary) for t in p.title.split(", ")}


def test_pairing_needs_the_same_prompt_settings(tmp_path):
    run(tmp_path, methods=["ar"], num_fewshot=0)
    rows = run(tmp_path, methods=["sd"], num_fewshot=4)
    assert set(SHARED_SETTINGS) <= set(rows.columns)
    assert sorted(rows["num_fewshot"].unique()) == [0, 4]
    summary = summarise(rows)
    assert np.isnan(summary[summary["method"] == "sd"]["normalised_time"].iloc[0])  # no ar at 4 shots


def test_results_of_an_older_schema_are_refused(tmp_path, capsys):
    rows = run(tmp_path / "new")
    rows.drop(columns="schema").to_parquet(tmp_path / "old.parquet")
    (tmp_path / "olddir").mkdir()
    (tmp_path / "old.parquet").rename(tmp_path / "olddir" / "x.0of1.parquet")
    code, err = cli(capsys, "table", str(tmp_path / "olddir"))
    assert code == 2 and len(err) == 1 and "another diversed-bench version" in err[0]


def test_gemma3_rows_of_the_full_window_engines_are_refused_for_that_reason(tmp_path, capsys):
    rows = run(tmp_path / "new")
    (tmp_path / "old").mkdir()
    for pair, expected in (("gemma3", "Gemma 3 rows decoded with full attention"), ("tiny", "another")):
        rows.assign(schema=2, pair=pair).to_parquet(tmp_path / "old" / "x.0of1.parquet")
        code, err = cli(capsys, "table", str(tmp_path / "old"))
        assert code == 2 and len(err) == 1 and expected in err[0], err


def test_bad_input_is_one_line(tmp_path, capsys):
    results = tmp_path / "results"
    run(results)
    (results / "notes.parquet").write_text("not parquet")
    broken = tmp_path / "preds.jsonl"
    broken.write_text('{"example_id": "0", "completion": "#### 3"}\n{"example_id": "1", "compl\n')
    head_file = tmp_path / "head" / "head.safetensors"
    head_file.parent.mkdir()
    head_file.write_bytes(b"")
    run_args = [
        "run",
        "--task",
        "gsm8k",
        "--device",
        "cpu",
        "--no-report",
        "--output-dir",
        str(tmp_path / "r"),
    ]
    for args, needle in (
        (["table", str(results)], "notes.parquet is not a readable parquet file"),
        (
            ["score", "--task", "gsm8k", "--data", "fixture", "--predictions", str(broken)],
            "line 2: not valid JSON",
        ),
        ([*run_args, "--method", "sd", "--limit", "-3"], "--limit must be >= 1"),
        ([*run_args, "--method", "sd", "--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
        ([*run_args, "--method", "sd", "--draft-len", "0"], "--draft-len must be >= 1"),
        ([*run_args, "--method", "sd", "--seed", "-1"], "--seed must be >= 0"),
        ([*run_args, "--method", "diversed", "--head", str(head_file)], f"--head {head_file.parent}"),
        (["table", str(broken)], "is a file"),
    ):
        code, err = cli(capsys, *args)
        assert code == 2 and len(err) == 1, (args, err)
        assert needle in err[0], (args, err)


def test_progress_is_a_line_per_configuration_off_a_terminal(tmp_path):
    lines = []
    configs = configs_from_flags(
        tasks=["gsm8k"], pairs=["tiny"], methods=["ar", "sd"], device="cpu", max_new_tokens=8
    )
    Runner(tmp_path, limit=2, progress=True, log=lines.append).run(configs)
    assert len(lines) == 2 and all("2/2 examples" in line and "\r" not in line for line in lines)


@pytest.mark.parametrize("command", ["train", "merge", "plot", "run", "speed"])
def test_folders_are_spelled_output_dir(command):
    from typer.testing import CliRunner

    from bench.cli import app

    out = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output
    assert "--output-dir" in out and "--output " not in out
