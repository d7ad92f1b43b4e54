"""`report`: the self-contained HTML page, opened in a real browser (headless Chromium)."""

import html
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from bench.errors import BenchError
from bench.reports.html import build_report
from bench.store import load_results, load_traces

CHROMIUM = Path("/usr/bin/chromium")
COLOURS = {"a": "rgb(183, 228, 199)", "r": "rgb(244, 166, 166)", "b": "rgb(169, 201, 245)"}
# Injected first into <head>: records console errors and uncaught exceptions, then (after the page's
# own script) picks one known trace in the left pane and writes what the browser drew into the DOM.
HARNESS = """<script>
window.__errors = [];
const __error = console.error;
console.error = function(...a) { window.__errors.push(a.join(' ')); __error.apply(console, a); };
window.addEventListener('error', e => window.__errors.push(String(e.message)));
window.addEventListener('load', () => {
  const pick = %s;
  const node = document.getElementById('trace-data');
  if (pick && node) {
    const data = JSON.parse(node.textContent);
    document.getElementById('tv-example').value = String(data.examples.findIndex(e => e[1] === pick.example));
    const s = document.querySelector('#pane-left select');
    s.value = pick.method;
    s.dispatchEvent(new Event('change'));
  }
  const spans = [...document.querySelectorAll('#pane-left .tok')];
  const pane = p => ({
    method: document.querySelector(`#pane-${p} select`)?.value,
    info: document.querySelector(`#pane-${p} .info`)?.textContent,
    tokens: document.querySelectorAll(`#pane-${p} .tok`).length,
  });
  const out = {
    errors: window.__errors,
    rows: [...document.querySelectorAll('table.table1 tr')].slice(1).map(r => r.cells[0].textContent),
    fates: spans.map(s => s.dataset.fate).join(''),
    colours: Object.fromEntries(spans.map(s => [s.dataset.fate, getComputedStyle(s).backgroundColor])),
    tip: spans.length ? spans[0].title : '',
    left: pane('left'),
    right: pane('right'),
    groups: [...document.querySelectorAll('#tv-example optgroup')].map(g => [g.label, g.children.length]),
    overflow: document.documentElement.scrollWidth > window.innerWidth,
  };
  const pre = document.createElement('pre');
  pre.id = 'harness';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def open_in_chromium(page: str, pick: dict | None = None, screenshot: Path | None = None) -> dict:
    """Load the page (with the harness) in headless Chromium and return what the harness saw."""
    if not CHROMIUM.exists():
        pytest.skip("chromium is not installed (apt-get install chromium); .ci/run installs it")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "report.html"
        path.write_text(page.replace("<head>", "<head>" + HARNESS % json.dumps(pick), 1), encoding="utf-8")
        flags = [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp}/profile",
        ]
        done = subprocess.run(
            [*flags, "--dump-dom", path.as_uri()], capture_output=True, text=True, timeout=120
        )
        if screenshot:
            subprocess.run(
                [*flags, "--window-size=1300,2400", f"--screenshot={screenshot}", path.as_uri()],
                capture_output=True,
                timeout=120,
            )
    found = re.search(r'<pre id="harness">(.*?)</pre>', done.stdout, re.S)
    assert found, done.stderr[-2000:]
    return json.loads(html.unescape(found.group(1)))


def test_report_renders_in_a_browser_with_table_and_token_colours(demo_results, tmp_path):
    page = build_report(demo_results, ["diversed"])
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in page
    rows, traces = load_results(demo_results), load_traces(demo_results)
    # A known trace holding all three fates: the browser must colour each token by its fate.
    counts = traces.groupby(["config_id", "example_id"])["fate"].agg(lambda f: len(set(f)))
    config, example = counts[counts == 3].index[0]
    known = traces[(traces["config_id"] == config) & (traces["example_id"] == example)].sort_values(
        "position"
    )
    label = rows.loc[rows["config_id"] == config, "label"].iloc[0]
    seen = open_in_chromium(page, {"method": label, "example": example})
    assert seen["errors"] == [] and not seen["overflow"]
    labels = list(dict.fromkeys(rows.sort_values("config_id")["label"]))
    assert sorted(seen["rows"]) == sorted(labels)
    assert seen["fates"] == "".join(
        {"accepted": "a", "resampled": "r", "bonus": "b"}[f] for f in known["fate"]
    )
    assert seen["colours"] == COLOURS
    assert seen["tip"].startswith("#0 ") and "p=" in seen["tip"] and "q=" in seen["tip"]
    assert "verdict-above" in page
    # Side by side: the candidate and the static ensemble it is judged against, both drawn.
    ensemble = set(rows.loc[rows["method"] == "ensemble", "label"])
    assert seen["left"]["method"] == label and seen["right"]["method"] in ensemble
    assert seen["right"]["tokens"] > 0


def test_report_charts_keep_to_their_panel_and_a_bad_output_is_one_line(demo_results, tmp_path):
    import pandas as pd
    from typer.testing import CliRunner

    from bench.cli import app

    # The same configurations again at another temperature: a second panel with the same labels.
    two = tmp_path / "two"
    shutil.copytree(demo_results, two, ignore=shutil.ignore_patterns("traces"))
    rows = load_results(demo_results)
    other = rows.assign(temperature=0.5, config_id=rows["config_id"] + "-t05")
    other.to_parquet(two / "other.0of1.parquet")
    page = build_report(two, ["diversed"])
    charts = re.findall(r"<svg class=\"chart\".*?</svg>", page)
    family = rows.loc[rows["method"] == "ensemble", "config_id"].nunique()
    assert len(charts) == 2 and all(c.count("<circle") == family + 1 for c in charts)
    assert pd.Series(["w=0.2" in c for c in charts]).all()

    blocker = tmp_path / "file"
    blocker.write_text("")
    result = CliRunner().invoke(app, ["report", str(demo_results), "--output", str(blocker / "r.html")])
    assert result.exit_code != 0 and isinstance(result.exception, BenchError)
    assert "cannot write" in str(result.exception) and "--output" in str(result.exception)


def _selected(page: str, pane: str) -> str:
    """The method a token-view pane opens with."""
    options = re.search(f'id="pane-{pane}"><select aria-label="method">(.*?)</select>', page).group(1)
    return html.unescape(re.search(r'<option value="([^"]*)" selected>', options).group(1))


def test_report_shows_frontier_verdicts_and_orders_panes_by_structure_not_labels(demo_results, tmp_path):
    import numpy as np
    import pandas as pd

    # Every label a random string, and half the ensemble sweep (w=0.2, 0.6) a family of its own.
    split = tmp_path / "split"
    shutil.copytree(demo_results, split)
    rng = np.random.default_rng(1)
    for path in split.glob("*.parquet"):
        part = pd.read_parquet(path)
        names = {cid: "".join(rng.choice(list("abc() =,"), 10)) for cid in part["config_id"].unique()}
        half = part["params"].map(lambda p: json.loads(p).get("target_weight") in (0.2, 0.6))
        if half.any():
            info = {**json.loads(part.loc[half, "method_info"].iloc[0]), "name": "ensemble-half"}
            part.loc[half, "method_info"] = json.dumps(info)
            part.loc[half, "method"] = "ensemble-half"
        part.assign(label=part["config_id"].map(names)).to_parquet(path)
    rows = load_results(split)
    page = build_report(split, ["ensemble-half", "diversed"])
    table = re.search(r'<table class="verdicts frontiers">(.*?)</table>', page).group(1)
    assert table.count("<tr class=") == 1
    assert re.search(r'class="verdict-(equivalent|inconclusive)"', table)  # level: the margin decides which
    assert "ensemble-half (2 pts)" in table and "ensemble (2 pts)" in table
    # One chart of both families: two hulls, four points named by their swept values, the shared
    # range, the verdict in its title; the point rows fold under it.
    charts = re.findall(r'<svg class="chart".*?</svg>', page)
    (chart,) = [c for c in charts if "ensemble-half vs ensemble<" in c]
    assert chart.count("<polyline") == 2 and chart.count("<circle") == 4 and 'class="shared"' in chart
    assert all(f">w={w}<" in chart for w in (0.2, 0.4, 0.6, 0.8)) and re.search(r">(equivalent|inconclusive) \(margin ±2\.0%\)<", chart)
    assert all('paint-order="stroke"' in t for t in re.findall(r"<text[^>]*>w=", chart))  # names on a halo
    # One chart per task, candidate family and baseline family: DIVERSED against both families,
    # ensemble-half against ensemble and against DIVERSED (a baseline family too), never against
    # itself; never one per point.
    titles = sorted(re.search(r">([^<>]* vs [^<>]*)<", c).group(1) for c in charts)
    assert len(charts) == 4, titles
    assert page.index("<h2>Verdicts</h2>") < page.index("<h2>Table 1</h2>") < page.index("<h2>Settings</h2>")
    # Rows fold under each chart, and under ensemble-half's line against its own family (no chart).
    assert page.count("<details><summary>") == 6  # four charts, that line and the manifest
    # The token view opens on the candidate, then a baseline it is judged against, whatever their labels.
    label = dict(zip(rows["config_id"], rows["label"]))
    by_method = rows.groupby("method")["config_id"].agg(set)
    assert _selected(page, "left") in {label[c] for c in by_method["ensemble-half"]}
    page = build_report(split, ["diversed"])
    assert _selected(page, "left") == label[next(iter(by_method["diversed"]))]
    assert _selected(page, "right") in {label[c] for c in by_method["ensemble"] | by_method["ensemble-half"]}


def test_report_on_a_multi_task_run_and_without_traces(demo_results, tmp_path, tiny_pair):
    from bench.config import RunSettings
    from bench.grid import configs_from_flags
    from bench.runner import Runner

    multi = tmp_path / "multi"
    configs = configs_from_flags(
        tasks=["gsm8k", "xsum"],
        pairs=["tiny"],
        methods=["ar", "ensemble"],
        params={"target_weight": [0.5, 0.9]},
        settings=RunSettings(max_new_tokens=8, num_fewshot=0),  # one panel: the tasks share every setting
        device="cpu",
    )
    Runner(
        multi, limit=2, batch_size=2, timing_examples=0, progress=False, log=lambda m: None, trace=True
    ).run(configs)
    page = build_report(multi, ["ensemble"])
    assert page.count('class="table1"') == 1 and "GSM8K" in page and "XSum" in page
    assert "too few examples" in page
    seen = open_in_chromium(page)
    assert seen["errors"] == [] and len(seen["rows"]) == 3
    assert not seen["overflow"]  # a wide table scrolls inside the page
    # Examples listed per task; the two panes show two methods on the same example of that task.
    assert sorted(seen["groups"]) == [["gsm8k", 2], ["xsum", 2]]
    assert seen["left"]["method"] != seen["right"]["method"]
    assert seen["left"]["tokens"] > 0 and seen["right"]["tokens"] > 0
    capped = build_report(multi, ["ensemble"], token_examples=1)
    data = json.loads(re.search(r'id="trace-data">(.*?)</script>', capped).group(1))
    assert sorted(data["groups"][g]["name"] for g, _ in data["examples"]) == ["gsm8k", "xsum"]

    bare = tmp_path / "bare"
    shutil.copytree(demo_results, bare, ignore=shutil.ignore_patterns("traces"))
    from typer.testing import CliRunner

    from bench.cli import app

    out = tmp_path / "bare.html"
    result = CliRunner().invoke(app, ["report", str(bare), "--output", str(out), "--candidate", "diversed"])
    assert result.exit_code == 0, result.output
    assert 'id="no-traces"' in out.read_text() and "above" in out.read_text()
