"""What a new user trips on: verifiers from a file, generate with a task's template, tasks reading
local files, broken YAML, timings that cannot be trusted, Ctrl-C, progress lines, plot folders and
the lm-eval extra. Cheap: no test here decodes more than a few tokens of the 2-layer pairs."""

import importlib.metadata
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import cli_error
from typer.testing import CliRunner

from bench.api import generate_prompt as _generate_prompt
from bench.cli import app
from bench.decoding import DecodeStats
from bench.errors import BenchError
from bench.grid import configs_from_flags
from bench.progress import Progress
from bench.reports.summary import summarise
from bench.reports.table import render
from bench.runner import Runner
from bench.store import SCHEMA, SHARED_SETTINGS, load_results
from bench.tasks import Task, resolve_task
from bench.verifiers import Verifier, verifier_class

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


# --- a verifier from a file ----------------------------------------------------------------------


def test_verifier_from_a_file_runs_without_pythonpath(tmp_path, monkeypatch):
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    shutil.copy(HERE / "example_verifier.py", folder / "my_verifier.py")
    monkeypatch.chdir(tmp_path)
    assert str(folder) not in sys.path
    method = "elsewhere/my_verifier.py:ConfidenceEnsemble"
    cls = verifier_class(method)
    assert issubclass(cls, Verifier) and cls.name == "confidence"
    assert verifier_class(method) is cls  # imported once, not once per lookup
    assert verifier_class("example_verifier:ConfidenceEnsemble").name == "confidence"  # module:Class
    out = tmp_path / "results"
    run = configs_from_flags(tasks=["arith"], pairs=["ref"], methods=[method], device="cpu", max_new_tokens=4)
    Runner(out, limit=1, progress=False, log=lambda m: None).run(run)
    rows = load_results(out)
    assert rows["method"].tolist() == ["confidence"] and "/" not in rows["config_id"].iloc[0]
    assert rows["label"].tolist() == ["confidence (floor=0.2)"]  # its name in tables and plots, not its path
    assert "does not exist" in cli_error("run", "--method", "elsewhere/missing.py:X", "--task", "arith")


# --- generate shows what run decodes -------------------------------------------------------------


def test_generate_prompt_is_the_task_prompt_of_run():
    text, note = _generate_prompt(None, "gsm8k", "3", None, "tiny")
    first = {e.example_id: e.prompt for e in Task(resolve_task("gsm8k"), "fixture").examples()}
    assert text == first["3"] and "4-shot" in note
    text, note = _generate_prompt("347 + 285", "arith", None, None, "packaged")
    assert text == "Q: 347 + 285\nA: " and "arith" in note
    text, note = _generate_prompt("hello", None, None, None, "tiny")
    assert text == "hello" and "raw" in note and "--task" in note
    with pytest.raises(BenchError, match="--example"):
        _generate_prompt("x", "mbpp", None, None, "tiny")  # two fields: one text cannot fill them


def test_generate_with_a_task_prints_the_prompt_it_decodes():
    result = CliRunner().invoke(
        app,
        [
            "generate",
            "347 + 285",
            "--task",
            "arith",
            "--pair",
            "ref",
            "--max-new-tokens",
            "3",
            "--device",
            "cpu",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "task arith's template" in result.stderr and "Q: 347 + 285\nA: " in result.stderr
    assert "[sd] 3 tokens" in result.stdout


# --- a task reading local files ------------------------------------------------------------------


def _task_file(folder: Path, data_files: str) -> Path:
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "test.jsonl").write_text(
        "\n".join(json.dumps({"question": f"{a} + 1", "answer": f"#### {a + 1}"}) for a in range(5))
    )
    (folder / "data" / "train.json").write_text(json.dumps([{"question": "1 + 1", "answer": "#### 2"}]))
    pd.DataFrame([{"question": "9 + 9", "answer": "#### 18"}]).to_parquet(folder / "data" / "extra.parquet")
    path = folder / "my_task.yaml"
    path.write_text(
        "name: my_task\n"
        f"dataset: {{data_files: {data_files}, split: test, fewshot_split: train}}\n"
        "num_fewshot: 1\n"
        'exemplar: "Q: {question}\\nA: {answer}"\n'
        'query: "Q: {question}\\nA: "\n'
        "metric: gsm8k\nreference_field: answer\nquality: exact_flexible\n"
    )
    return path


def test_task_yaml_reads_local_files_relative_or_absolute(tmp_path):
    path = _task_file(tmp_path / "t", "{test: data/test.jsonl, train: data/train.json}")
    task = Task(resolve_task(str(path)), "hub")
    examples = task.examples()
    assert len(examples) == 5 and examples[0].prompt.startswith("Q: 1 + 1\nA: #### 2\n\nQ: ")
    absolute = tmp_path / "t" / "data" / "extra.parquet"
    other = tmp_path / "u" / "task.yaml"
    other.parent.mkdir()
    other.write_text(
        path.read_text().replace("{test: data/test.jsonl, train: data/train.json}", str(absolute))
    )
    assert [e.doc["question"] for e in Task(resolve_task(str(other)), "hub", num_fewshot=0).examples()] == [
        "9 + 9"
    ]
    other.write_text(path.read_text().replace("data/test.jsonl", "data/nope.jsonl"))
    with pytest.raises(BenchError, match="no file .*nope.jsonl"):
        resolve_task(str(other))


# --- a broken task YAML --------------------------------------------------------------------------


def test_broken_task_yaml_is_one_line_with_file_and_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text('name: broken\ndataset: {path: x, split: test\nquery: "{q}"\n')
    message = cli_error("run", "--task", str(path), "--pair", "tiny")
    assert str(path) in message and "line 3" in message
    path.write_text("- just\n- a list\n")
    assert "expected a mapping" in cli_error("run", "--task", str(path))


# --- timings: intervals as measured, untrustworthy ones flagged ----------------------------------


def _rows(times: dict[str, list[float]]) -> pd.DataFrame:
    """Result rows of ar and sd on four examples with given times (everything else constant)."""
    settings = dict(
        task="gsm8k",
        pair="tiny",
        temperature=1.0,
        max_new_tokens=8,
        seed=0,
        data="fixture",
        num_fewshot=0,
        split="test",
        chat_template=False,
        device="cpu",
        dtype="float32",
        engine="eager",
        truncate_prompt="none",
    )
    assert set(settings) == set(SHARED_SETTINGS)
    out = []
    for method, ts in times.items():
        for i, t in enumerate(ts):
            out.append(
                {
                    **settings,
                    "config_id": method,
                    "label": method,
                    "method": method,
                    "example_id": str(i),
                    "draft_len": 0 if method == "ar" else 5,
                    "params": "{}",
                    "head": None,
                    "schema": SCHEMA,
                    "drafted_tokens": 0 if method == "ar" else 10,
                    "accepted_tokens": 0 if method == "ar" else 7,
                    "reached_per_position": [0] * 5 if method == "ar" else [2, 2, 2, 2, 2],
                    "expected_acceptance": np.nan,
                    "bias": np.nan,
                    "quality": float(i % 2),
                    "new_tokens": 8,
                    "rounds": 8 if method == "ar" else 2,
                    "weight_mean": np.nan,
                    "wall_time_s": t,
                }
            )
    return pd.DataFrame(out)


def test_table_prints_measured_intervals_and_flags_spread_timings():
    metric = {"gsm8k": "exact_flexible"}
    steady = render(
        summarise(_rows({"ar": [1.0, 1.1, 0.9, 1.0], "sd": [0.5, 0.55, 0.5, 0.45]})), metric, "markdown"
    )
    sd_rows = [line for line in steady.splitlines() if line.startswith("| sd |")]
    assert "±" not in steady and not any("not shown" in line for line in sd_rows)
    assert "| 2.00 |" in sd_rows[1]  # the speedup of sd, printed
    assert "| 50.0% [" in sd_rows[0]  # quality with its [low, high] interval
    noisy = render(
        summarise(_rows({"ar": [1.0, 1.1, 0.9, 1.0], "sd": [0.2, 0.55, 0.5, 2.0]})), metric, "markdown"
    )
    sd_speed = [line for line in noisy.splitlines() if line.startswith("| sd |")][1]
    assert "not shown: times vary 10.0x" in sd_speed and "(times vary 10.0x)" in sd_speed


def test_each_configuration_warms_up_before_its_first_timed_example(tmp_path, monkeypatch):
    from bench.decoding import SpeculativeDecoder
    from bench.store import ResultStore

    events: list[str] = []
    generate, append = SpeculativeDecoder.generate, ResultStore.append
    monkeypatch.setattr(
        SpeculativeDecoder,
        "generate",
        lambda self, *a, **k: events.append("decode") or generate(self, *a, **k),
    )
    monkeypatch.setattr(
        ResultStore, "append", lambda self, *a, **k: events.append("store") or append(self, *a, **k)
    )
    run = configs_from_flags(
        tasks=["arith"], pairs=["ref"], methods=["ar", "sd"], device="cpu", max_new_tokens=3
    )
    Runner(tmp_path, limit=2, timing_examples=2, progress=False, log=lambda m: None).run(run)
    # two warm-up decodes (one per configuration) that store nothing, then four timed examples
    assert events == ["decode", "decode"] + ["decode", "store"] * 4
    assert load_results(tmp_path)["wall_time_s"].notna().sum() == 4


def test_tasks_with_their_own_exemplar_counts_share_one_panel():
    from bench.reports.summary import panels

    times = {"ar": [1.0, 1.0, 1.0, 1.0], "sd": [0.5, 0.5, 0.5, 0.5]}
    gsm8k = _rows(times).assign(num_fewshot=4)
    cnndm = _rows(times).assign(task="cnndm", num_fewshot=1, config_id=lambda f: f["config_id"] + "-c")
    (panel,) = panels(summarise(pd.concat([gsm8k, cnndm], ignore_index=True)))
    assert set(panel.part["task"]) == {"gsm8k", "cnndm"}
    assert "cnndm test 1-shot, gsm8k test 4-shot" in panel.title
    again = _rows(times).assign(num_fewshot=0, config_id=lambda f: f["config_id"] + "-0")
    split = panels(summarise(pd.concat([gsm8k, again], ignore_index=True)))  # one task, two counts
    assert sorted(len(p.part) for p in split) == [2, 2] and len({p.slug for p in split}) == 2


def test_pareto_draws_a_users_verifier_and_labels_each_sweep_point_once(tmp_path):
    from bench.reports.plots import _merge_coincident, plot_pareto
    from bench.reports.summary import panels

    rows = _rows({"ar": [1.0] * 4, "confidence": [0.5] * 4, "lossy": [0.6] * 4})
    lossy = rows[rows["method"] == "lossy"]
    swept = [
        lossy.assign(label=f"lossy (l={v})", config_id=f"lossy-{v}", params=json.dumps({"lenience": v}))
        for v in (0.3, 0.6)
    ]
    (panel,) = panels(summarise(pd.concat([rows[rows["method"] != "lossy"], *swept], ignore_index=True)))
    paths = plot_pareto(panel, {"gsm8k": "exact_flexible"}, tmp_path, "acceptance_rate")
    assert {p.suffix for p in paths} == {".png", ".pdf", ".svg", ".txt"}
    svg = (tmp_path / "pareto_acceptance_tiny.svg").read_text()
    assert "confidence" in svg and "lossy, l swept" in svg and "l=0.3, 0.6" in svg  # same point: one label
    assert _merge_coincident([(1.0, 2.0), (3.0, 4.0)], ["a=0.1", "a=0.3"])[1] == ["a=0.1", "a=0.3"]


def test_sweep_labels_cover_no_marker_error_bar_or_other_label():
    import matplotlib.pyplot as plt

    from bench.reports.plots import _obstacles, _place_labels

    fig, ax = plt.subplots(figsize=(4, 3))
    xs, ys = [1.0, 2.0, 3.0], [1.0, 1.0, 1.0]
    ax.plot(xs, ys, "-^")
    for x in xs:  # another method's point and error bars just above and right of every sweep point
        ax.errorbar(x + 0.1, 1.02, xerr=0.4, yerr=0.05, marker="o")
    ax.set_xlim(0, 4)
    ax.set_ylim(0.5, 1.5)
    _place_labels(ax, list(zip(xs, ys)), ["w=0.2", "w=0.5", "w=0.8"], "green")
    renderer = fig.canvas.get_renderer()
    boxes = [text.get_window_extent(renderer) for text in ax.texts]
    markers, lines = _obstacles(ax)
    plt.close(fig)
    assert len(boxes) == 3
    for i, box in enumerate(boxes):
        assert not any(box.overlaps(other) for other in boxes[i + 1 :])
        assert not any(box.overlaps(marker) for marker in markers)
        x, y = lines[:, 0], lines[:, 1]
        assert not ((x >= box.x0) & (x <= box.x1) & (y >= box.y0) & (y <= box.y1)).any()


def test_a_quality_axis_shows_no_impossible_values():
    import matplotlib.pyplot as plt

    from bench.reports.plots import _bound_quality_axis

    fig, (zeros, perfect) = plt.subplots(1, 2)
    zeros.plot([1, 2], [0, 0], "o")  # the tiny pair: quality 0 everywhere
    perfect.plot([1, 2], [100, 100], "o")
    _bound_quality_axis(zeros, "exact_flexible")
    _bound_quality_axis(perfect, "rouge2")
    plt.close(fig)
    low, high = zeros.get_ylim()
    assert -0.5 < low <= 0 and high >= 4  # from 0 up, not -0.05 to 0.05
    low, high = perfect.get_ylim()
    assert 100 <= high < 100.5 and low <= 96


def test_quality_vs_time_explains_hollow_markers_in_its_legend(tmp_path):
    from bench.reports.plots import plot_pareto
    from bench.reports.summary import panels

    for name, times in [("steady", [0.5, 0.55, 0.5, 0.45]), ("noisy", [0.2, 0.55, 0.5, 2.0])]:
        (panel,) = panels(summarise(_rows({"ar": [1.0, 1.1, 0.9, 1.0], "sd": times})))
        plot_pareto(panel, {"gsm8k": "exact_flexible"}, tmp_path / name, "normalised_time")
    assert "hollow" not in (tmp_path / "steady" / "pareto_tiny.svg").read_text()
    assert "hollow: time varies &gt; 2x" in (tmp_path / "noisy" / "pareto_tiny.svg").read_text()


def test_acceptance_figures_draw_their_95_percent_intervals(tmp_path, monkeypatch):
    from matplotlib.container import ErrorbarContainer

    from bench.reports import plots
    from bench.reports.summary import panels

    rows = _rows({"ar": [1.0] * 4, "sd": [0.5] * 4, "ensemble": [0.5] * 4})
    per_position = [[0] * 5] * 4 + [[2, 2, 1, 1, 1]] * 4  # ar, sd; then the ensemble, varying by example
    per_position += [[2, 2, 1, 1, 0], [2, 1, 1, 0, 0], [2, 2, 2, 1, 1], [1, 1, 1, 1, 0]]
    rows["accepted_per_position"] = per_position
    rows["drafted_per_position"] = [[0] * 5 if m == "ar" else [2] * 5 for m in rows["method"]]
    rows["accepted_tokens"] = [sum(a) for a in per_position]
    rows.loc[rows["method"] == "ensemble", "params"] = '{"mix": "prob", "target_weight": 0.7}'
    (panel,) = panels(summarise(rows))
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, *args: figures.append(fig) or [])
    plots.plot_acceptance_vs_weight(rows, panel, tmp_path)
    plots.plot_acceptance_per_position(rows, panel, tmp_path)
    assert len(figures) == 2
    for fig in figures:
        bars = [
            c for ax in fig.axes for c in ax.containers if isinstance(c, ErrorbarContainer) and c.has_yerr
        ]
        heights = [abs(s[1][1] - s[0][1]) for c in bars for lines in c.lines[2] for s in lines.get_segments()]
        assert max(heights) > 0  # the ensemble's examples disagree: its interval has width


def test_each_weights_panel_shows_its_own_mean(tmp_path, monkeypatch):
    from bench.reports import plots
    from bench.reports.summary import panels

    times = {"ar": [1.0] * 4, "diversed": [0.5] * 4}
    gsm8k = _rows(times).assign(weights=[[]] * 4 + [[0.1, 0.3]] * 4)
    cnndm = _rows(times).assign(task="cnndm", config_id=lambda f: f["config_id"] + "-c")
    cnndm["weights"] = [[]] * 4 + [[0.7, 0.9]] * 4
    rows = pd.concat([gsm8k, cnndm], ignore_index=True)
    (panel,) = panels(summarise(rows))
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, *args: figures.append(fig) or [])
    plots.plot_weights(rows, panel, tmp_path)
    (fig,) = figures
    assert [[t.get_text() for t in ax.texts] for ax in fig.axes] == [["mean 0.20"], ["mean 0.80"]]
    assert not any("mean 0." in t.get_text() for legend in fig.legends for t in legend.get_texts())


def test_two_heads_in_one_weights_panel_have_their_own_colours(tmp_path, monkeypatch):
    from matplotlib.colors import to_hex

    from bench.reports import plots
    from bench.reports.summary import panels

    rows = _rows({"ar": [1.0] * 4, "diversed": [0.5] * 4}).assign(weights=[[]] * 4 + [[0.1, 0.3]] * 4)
    other = rows[rows["method"] == "diversed"].assign(
        label="diversed (head=init)", head="init", config_id="diversed-init", weights=[[0.5]] * 4
    )
    rows = pd.concat([rows, other], ignore_index=True)
    (panel,) = panels(summarise(rows))
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, *args: figures.append(fig) or [])
    plots.plot_weights(rows, panel, tmp_path)
    (ax,) = figures[0].axes
    bars = {to_hex(patch.get_facecolor(), keep_alpha=False) for patch in ax.patches}
    means = {to_hex(line.get_color()) for line in ax.lines}
    assert len(bars) == 2 and means == bars


# --- Ctrl-C, progress, plot folders --------------------------------------------------------------


def test_ctrl_c_prints_what_was_saved_and_the_command_that_resumes(tmp_path, monkeypatch):
    def interrupted(self, configs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Runner, "run", interrupted)
    argv = ["run", "--task", "arith", "--pair", "ref", "--method", "ar", "--output-dir", str(tmp_path / "r")]
    monkeypatch.setattr(sys, "argv", ["diversed-bench", *argv])
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 130
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "interrupted" in lines[0] and str(tmp_path / "r") in lines[0]
    assert lines[0].endswith("resume with: diversed-bench " + " ".join(argv))


def test_progress_names_the_configuration_and_its_own_time():
    logged: list[str] = []
    progress = Progress(
        2, "arith | ref | ensemble (w=0.2) | batch 1", logged.append, live=False, own_time=True
    )
    for seconds in (0.25, 0.5):
        progress.update(
            DecodeStats(
                prompt_tokens=3,
                draft_len=5,
                new_tokens=10,
                drafted_tokens=10,
                accepted_tokens=5,
                wall_time_s=seconds,
            )
        )
    progress.close()
    assert logged == [
        "arith | ref | ensemble (w=0.2) | batch 1: 2/2 examples in 0.8 s of its own decoding, acceptance "
        "0.500, 27 tokens/s"
    ]


def test_plots_follow_the_results_folder(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr("bench.reports.plots.write_plots", lambda results, out: seen.append(out) or [])
    CliRunner().invoke(app, ["plot", str(tmp_path / "mine")])
    assert seen == [tmp_path / "mine" / "plots"]


# --- the lm-eval extra ---------------------------------------------------------------------------


def test_lm_eval_extra_installs_as_documented():
    meta = importlib.metadata.metadata("diversed-bench")
    assert "lm-eval" in meta.get_all("Provides-Extra")
    assert any(r.startswith("lm-eval") and 'extra == "lm-eval"' in r for r in meta.get_all("Requires-Dist"))
    assert 'pip install ".[lm-eval]"' in (REPO / "docs" / "lm-eval.md").read_text()


# --- the docs agree with the code ----------------------------------------------------------------


def test_cli_reference_is_generated_from_the_app_and_names_every_option():
    import importlib.util

    import typer

    spec = importlib.util.spec_from_file_location("cli_reference", REPO / "scripts" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = (REPO / "docs" / "cli.md").read_text()
    assert page == module.reference(), "docs/cli.md is stale: run python scripts/cli_reference.py"
    for name, command in typer.main.get_command(app).commands.items():
        section = page.split(f"## `diversed-bench {name}`", 1)[1].split("\n## ", 1)[0]
        for param in command.params:
            for opt in [*param.opts, *param.secondary_opts]:
                assert (f"`{opt}`" if opt.startswith("-") else f"`{opt.upper()}`") in section, (name, opt)


def test_docs_carry_no_development_history():
    import re

    history = re.compile(r"\bissues? \d|\bPR \d|available to this work|\bno longer\b|used to be")
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        found = history.search(page.read_text())
        assert found is None, (page.name, found and found.group())
    assert len((REPO / "README.md").read_text().splitlines()) <= 250
