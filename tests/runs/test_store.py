"""The results store (bench/store.py): rows of another schema version are refused with one line
that says why; rows of the previous schema are still read, but a run does not add to them."""

import json

import pytest

from bench.errors import BenchError
from bench.reports.summary import summarise
from bench.store import load_results
from small_runs import cli, tiny_run


def test_results_of_an_older_schema_are_refused(tmp_path, capsys):
    rows = tiny_run(tmp_path / "new")
    rows.drop(columns="schema").to_parquet(tmp_path / "old.parquet")
    (tmp_path / "olddir").mkdir()
    (tmp_path / "old.parquet").rename(tmp_path / "olddir" / "x.0of1.parquet")
    code, err = cli(capsys, "table", str(tmp_path / "olddir"))
    assert code == 2 and len(err) == 1 and "another diversed-bench version" in err[0]


def test_gemma3_rows_of_the_full_window_engines_are_refused_for_that_reason(tmp_path, capsys):
    rows = tiny_run(tmp_path / "new")
    (tmp_path / "old").mkdir()
    for pair, expected in (("gemma3", "Gemma 3 rows decoded with full attention"), ("tiny", "another")):
        rows.assign(schema=2, pair=pair).to_parquet(tmp_path / "old" / "x.0of1.parquet")
        code, err = cli(capsys, "table", str(tmp_path / "old"))
        assert code == 2 and len(err) == 1 and expected in err[0], err


def test_schema_3_rows_are_read_with_their_method_from_the_registry_and_never_added_to(tmp_path):
    rows = tiny_run(tmp_path / "new", ("ar", "ensemble"), params={"target_weight": [0.4]})
    old = tmp_path / "old"
    old.mkdir()
    given = rows.assign(schema=3, params=[json.dumps({"target_weight": 0.4} if m == "ensemble" else {}) for m in rows["method"]])
    given.drop(columns=["method_info", "verifier"]).to_parquet(old / "x.0of1.parquet")
    summary = summarise(load_results(old)).set_index("method")
    assert summary.loc["ensemble", "params"] == {"target_weight": 0.4, "mix": "prob"}  # defaults filled in
    assert summary.loc["ensemble", "family"] == "ensemble" and summary.loc["ensemble", "swept"] == "w=0.4"
    with pytest.raises(BenchError, match="older diversed-bench version.*new --output-dir"):
        tiny_run(old)


def test_the_table_does_not_depend_on_how_rows_were_batched_into_files(tmp_path):
    """The bootstrap resamples rows by position: the reports order them by configuration and
    example, so the same rows give the same intervals however they were batched (or sharded)."""
    from bench import api

    settings = api.RunSettings(max_new_tokens=8, temperature=1.0)
    tables, orders = [], []
    for batch in (2, 8):
        out = tmp_path / f"b{batch}"
        api.run(tasks=["gsm8k"], pairs=["tiny"], methods=["ar", "sd"], settings=settings, device="cpu", limit=8,
                output_dir=out, batch_size=batch, timing_examples=0, progress=False, report=False,
                log=lambda m: None, accept_all=False)  # fmt: skip
        assert len(list(out.glob("*.parquet"))) == 2
        rows = load_results(out)
        orders.append(list(zip(rows["config_id"], rows["example_id"])))
        tables.append(api.table(out)[0])
    assert orders[0] == orders[1] == sorted(orders[0])
    assert tables[0] == tables[1] and "[" in tables[0]


def test_a_grids_batch_size_is_used_and_not_given_twice(tmp_path):
    from bench import api
    from bench.grid import load_grid

    assert load_grid("demo")["batch_size"] == 64
    grid = tmp_path / "one.yaml"
    grid.write_text("tasks: [gsm8k]\npairs: [tiny]\nmethods: [ar]\nlimit: 3\nmax_new_tokens: 4\nbatch_size: 3\n")
    quiet = dict(device="cpu", progress=False, report=False, log=lambda m: None, timing_examples=0)
    api.run(grid=str(grid), output_dir=tmp_path / "r", **quiet)
    assert set(load_results(tmp_path / "r")["batch_size"]) == {3}
    with pytest.raises(BenchError, match="sets batch_size: 3; drop --batch-size"):
        api.run(grid=str(grid), output_dir=tmp_path / "t", batch_size=2, **quiet)
    grid.write_text(grid.read_text().replace("batch_size: 3", "batch_size: 0"))
    with pytest.raises(BenchError, match="batch_size must be a positive integer"):
        api.run(grid=str(grid), output_dir=tmp_path / "b", **quiet)


def test_a_part_written_from_the_rows_reads_back_as_pandas_writes_it(tmp_path):
    """Parts are written straight from the row dicts (bench.store._atomic_write_rows, faster than
    through a pandas frame); what the readers get back is the same frame, dtypes included."""
    import pandas as pd
    from pandas.testing import assert_frame_equal

    from bench.store import _atomic_write_rows

    from bench import api

    api.run(tasks=["gsm8k"], pairs=["tiny"], methods=["ar", "sd", "ensemble"], params={"target_weight": [0.4]},
            settings=api.RunSettings(max_new_tokens=8), device="cpu", limit=4, output_dir=tmp_path / "r",
            timing_examples=1, progress=False, report=False, log=lambda m: None)  # fmt: skip
    rows = load_results(tmp_path / "r")
    assert rows["wall_time_s"].isna().any() and rows["wall_time_s"].notna().any()  # timed and batched rows
    for records in (rows.head(1).to_dict("records"), rows.to_dict("records")):
        pd.DataFrame(records).to_parquet(tmp_path / "pandas.parquet", index=False)
        _atomic_write_rows(records, tmp_path / "rows.parquet")
        assert_frame_equal(pd.read_parquet(tmp_path / "rows.parquet"), pd.read_parquet(tmp_path / "pandas.parquet"))
