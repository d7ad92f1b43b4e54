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
