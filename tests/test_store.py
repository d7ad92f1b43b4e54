"""The results store (bench/store.py): rows of another schema version are refused with one line
that says why."""

import sys

from bench.cli import main
from bench.grid import configs_from_flags
from bench.runner import Runner
from bench.store import load_results


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
