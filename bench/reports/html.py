"""One self-contained HTML page for a results directory: settings and manifests, Table 1, the
Pareto plots, the ``compare`` verdicts with their frontiers, and a token view of the traces.

Everything is inline (styles, the one script, PNG figures as base64, frontier charts as SVG), so
the file opens anywhere without a network. Traces are embedded compactly (token ids once in a
vocabulary, probabilities in thousandths) and drawn by the script for the example picked, so a
page stays small and fast for long runs; ``token_examples`` caps how many examples it carries.
"""

from __future__ import annotations

import base64
import html
import json
import tempfile
from pathlib import Path
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from bench.errors import BenchError
from bench.lossless import ANCHORS
from bench.reports.charts import BASE, CAND, chart, marks
from bench.reports.compare import (
    POOLED,
    FamilyVerdict,
    Verdicts,
    baseline_families,
    chosen,
    compare,
    with_anchors,
)
from bench.reports.compare_format import cells, family_line, frontier_cells, gap_text, verdict_short
from bench.reports.margins import Margins
from bench.reports.summary import Panel, panels, quality_metrics, summarise
from bench.reports.table import table_frames
from bench.store import load_results, load_traces, manifests

FATES = {"accepted": "a", "resampled": "r", "bonus": "b"}
STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;
max-width:1200px;padding:0 16px;color:#1d1d1f}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
h3{font-size:15px}table{border-collapse:collapse;margin:8px 0 16px;font-size:12.5px}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f5f5f7}.scroll{overflow-x:auto;max-width:100%}.muted{color:#6e6e73}.fig{max-width:100%;height:auto}
.verdict-above{background:#d8f3dc}.verdict-below{background:#ffd6d6}
.verdict-equivalent{background:#eef1f5}.verdict-inconclusive{background:#f4f4f4}.verdict-cannot{background:#fff3cd}
.verdict-dominates{background:#d8f3dc}.verdict-dominated{background:#ffd6d6}.verdict-crosses{background:#e8dcf5}
.charts{display:flex;flex-wrap:wrap;gap:12px}.chart{border:1px solid #eee}
.family{max-width:100%}.family details{max-width:470px}.family-verdicts li{padding:1px 6px;margin:2px 0}
.panes{display:flex;gap:16px}.pane{flex:1;min-width:0;border:1px solid #ddd;padding:8px;border-radius:6px}
.tokens{white-space:pre-wrap;font:13px/1.9 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;
word-break:break-word}
.tok{border-radius:3px;padding:1px 0;margin:0 .5px}
.tok-a{background:#b7e4c7}.tok-r{background:#f4a6a6}.tok-b{background:#a9c9f5}
.legend span{display:inline-block;padding:1px 8px;margin-right:8px;border-radius:3px}
select{max-width:100%}
"""
SCRIPT = """
(function(){
const data=JSON.parse(document.getElementById('trace-data').textContent);
const ex=document.getElementById('tv-example');
const fateName={a:'accepted draft',r:'rejected draft, resampled',b:'target (bonus)'};
function num(v){return v<0?'n/a':(v/1000).toFixed(3);}
function fill(pane){
  const label=pane.querySelector('select').value, [group, eid]=data.examples[ex.value];
  const out=pane.querySelector('.tokens'), info=pane.querySelector('.info');
  out.textContent='';
  const cid=data.groups[group].methods[label];
  const t=cid===undefined?undefined:(data.traces[cid]||{})[eid];
  if(!t){info.textContent=cid===undefined?label+' did not run here':'not traced for this example';return;}
  info.textContent=t.info;
  const frag=document.createDocumentFragment();
  for(let i=0;i<t.id.length;i++){
    const s=document.createElement('span'), f=t.fate[i];
    s.className='tok tok-'+f; s.dataset.fate=f;
    const text=data.vocab[t.id[i]];
    s.textContent=text.replace(/\\n/g,'\\u21b5\\n');
    let tip='#'+i+' '+fateName[f]+'\\np='+num(t.p[i])+' q='+num(t.q[i]);
    if(t.w[i]>=0) tip+=' w='+num(t.w[i]);
    if(f==='r') tip+='\\nrejected '+JSON.stringify(data.vocab[t.rej[i]])+' p='+num(t.rp[i])+' q='+num(t.rq[i]);
    s.title=tip; frag.appendChild(s);
  }
  out.appendChild(frag);
}
function all(){document.querySelectorAll('.pane').forEach(fill);}
ex.addEventListener('change',all);
document.querySelectorAll('.pane select').forEach(s=>s.addEventListener('change',all));
all();
document.body.dataset.renderMs=performance.now().toFixed(0);
})();
"""


def _esc(value: Any) -> str:
    return html.escape(str(value))


def _table(frame: pd.DataFrame, cls: str) -> str:
    """A frame with a flat or two-level header as an HTML table; rows keyed by their index."""
    head = "".join(f"<th>{_esc(' '.join(c) if isinstance(c, tuple) else c)}</th>" for c in frame.columns)
    body = "".join(
        f"<tr><th>{_esc(idx)}</th>" + "".join(f"<td>{_esc(v)}</td>" for v in row) + "</tr>"
        for idx, row in zip(frame.index, frame.to_numpy())
    )
    return (
        f'<div class="scroll"><table class="{cls}"><tr><th>{_esc(frame.index.name or "")}</th>{head}</tr>'
        f"{body}</table></div>"
    )


def _settings(results: Path, rows: pd.DataFrame) -> str:
    found = manifests(results)
    by = {m["config_id"]: m for m in found}
    counts = rows.groupby("config_id")["example_id"].nunique()
    first = found[0] if found else {}
    versions = ", ".join(f"{k} {v}" for k, v in first.get("versions", {}).items())
    lines = [
        f"<p>Results: <code>{_esc(results)}</code>, {len(rows)} rows, {rows['config_id'].nunique()} "
        f"configurations. Device: {_esc(first.get('device_name', '?'))}, CPU threads "
        f"{_esc(first.get('cpu_threads', '?'))}; {_esc(versions)}; git {_esc(first.get('git_revision'))}.</p>"
    ]
    table = pd.DataFrame(
        [
            {
                "label": by.get(cid, {}).get("label", cid),
                "examples": int(counts[cid]),
                "limit": by.get(cid, {}).get("limit"),
                "writers": sum(m["config_id"] == cid for m in found),
            }
            for cid in counts.index
        ],
        index=pd.Index(list(counts.index), name="configuration"),
    )
    folded = f"<details><summary>{len(table)} configurations</summary>{_table(table, 'manifest')}</details>"
    return "\n".join(lines) + folded


def _figure(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img class="fig" alt="{_esc(path.stem)}" src="data:image/png;base64,{data}">'


def _plots(found: list[Panel], qualities: dict[str, str]) -> str:
    from bench.reports.plots import FIDELITY_FIGURES, PARETO_AXES, plot_pareto

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for panel in found:
            views = [*((x, "quality") for x in PARETO_AXES), *(("normalised_time", y) for y in FIDELITY_FIGURES)]
            for x, y in views:
                for path in plot_pareto(panel, qualities, Path(tmp), x, y):
                    if path.suffix == ".png":
                        out.append(_figure(path))
    return "\n".join(out)


def _short(name: str, width: int = 34) -> str:
    """A name that fits a chart's title line; the lines and tables beside it give the whole one."""
    return name if len(name) <= width else name[: width - 1] + "…"


def _pooled_names(members: pd.DataFrame) -> list[str]:
    """Names of the pooled family's points: each setting's family and swept values, short."""
    return [
        _short(f"{family} {swept}".strip(), 22) if method not in ANCHORS else family
        for family, swept, method in zip(
            members["family"].astype(str), members["swept"].astype(str), members["method"].astype(str)
        )
    ]


def _family_chart(v: FamilyVerdict, part: pd.DataFrame, candidates: list[str]) -> str:
    """One family verdict's chart: the baseline family's points and frontier (dashed), every point
    of the candidate family and its frontier (solid), the shared range shaded, the verdict on top."""
    task = part[part["task"] == v.task]
    base = dict(baseline_families(task, candidates))[v.family]
    base = base[np.isfinite(base["acceptance_rate"].to_numpy(float))]  # a rule that drafts nothing has no point
    mine = task[chosen(task, candidates) & (task["family"] == v.candidate)]
    mine = mine[np.isfinite(mine["acceptance_rate"].to_numpy(float))]
    if mine.empty or base.empty or v.kind == "own":  # its own family: the rows say all there is
        return ""
    names = _pooled_names(base) if v.family.startswith(POOLED) else None
    own = list(mine["swept"]) if len(mine) > 1 else [""]
    # The candidate's frontier holds its drafts' anchors, as compare's does.
    series = [(base, BASE, True)] + ([(with_anchors(task, mine)[0], CAND, False)] if len(mine) > 1 else [])
    titles = [
        (f"{v.task}: {_short(v.candidate)} vs {_short(v.family, 30)}", "#1d1d1f"),
        (verdict_short(v) if v.verdict != "cannot judge" else "cannot judge (the rows below say why)", CAND),
        (gap_text(v), "#6e6e73"),
    ]
    return chart(
        series,
        [*marks(base, BASE, names), *marks(mine, CAND, own, radius=5)],
        titles,
        v.percent,
        shade=v.acceptance if v.kind == "frontier" else None,
    )


def _rows(items: list[Any], to_cells: Callable[[Any], dict[str, str]], cls: str) -> str:
    """A verdict table: one row per comparison, coloured by its verdict."""
    head = "".join(f"<th>{_esc(k)}</th>" for k in to_cells(items[0]))
    body = "".join(
        f'<tr class="verdict-{c.verdict.split()[0]}">'
        + "".join(f"<td>{_esc(v)}</td>" for v in to_cells(c).values())
        + "</tr>"
        for c in items
    )
    return f'<div class="scroll"><table class="{cls}"><tr>{head}</tr>{body}</table></div>'


def _verdicts(verdicts: Verdicts, found: list[Panel], candidates: list[str]) -> str:
    """Per panel and task: the family lines, then one chart per candidate family and baseline
    family with its point (and frontier) rows folded under it."""
    parts = {p.title: p.part for p in found}
    out = []
    for title in dict.fromkeys(v.panel for v in verdicts.families):
        out.append(f"<h3>{_esc(title)}</h3>")
        mine = [v for v in verdicts.families if v.panel == title]
        for task in dict.fromkeys(v.task for v in mine):
            lines = [v for v in mine if v.task == task]
            items = "".join(
                f'<li class="verdict-{v.verdict.split()[0]}">{_esc(family_line(v))}</li>' for v in lines
            )
            out.append(f'<h4>{_esc(task)}</h4><ul class="family-verdicts">{items}</ul><div class="charts">')
            for v in lines:
                key = (v.panel, v.task, v.candidate, v.family)
                rows = [c for c in verdicts.points if (c.panel, c.task, c.candidate_family, c.family) == key]
                fronts = [f for f in verdicts.frontiers if (f.panel, f.task, f.candidate, f.family) == key]
                folded = _rows(rows, cells, "verdicts") + (
                    _rows(fronts, frontier_cells, "verdicts frontiers") if fronts else ""
                )
                out.append(
                    f'<div class="family">{_family_chart(v, parts[title], candidates)}'
                    f"<details><summary>{len(rows)} point verdict{'s' * (len(rows) != 1)}"
                    f"{' and the frontier verdict' if fronts else ''}</summary>{folded}</details></div>"
                )
            out.append("</div>")
    return "\n".join(out)


def _milli(values: pd.Series) -> list[int]:
    v = values.to_numpy(float)
    return np.where(np.isfinite(v), np.round(v * 1000), -1).astype(int).tolist()


def token_groups(found: list[Panel]) -> list[tuple[str, dict[str, str]]]:
    """(name, {label: config_id}) per panel and task: the configurations whose traces of one
    example sit side by side. Named by the task, and by the panel too where there are several."""
    out = []
    for panel in found:
        for task, part in panel.part.groupby("task", sort=False):
            name = str(task) if len(found) == 1 else f"{task} · {panel.title}"
            out.append((name, dict(zip(part["label"].astype(str), part["config_id"].astype(str)))))
    return out


def trace_data(
    rows: pd.DataFrame, traces: pd.DataFrame, groups: list[tuple[str, dict[str, str]]], examples: int
) -> dict[str, Any]:
    """The traces of the first ``examples`` traced examples of each group, in the page's compact
    form: token texts once in a vocabulary, probabilities in thousandths."""
    keep: list[tuple[int, str]] = []
    for g, (_, methods) in enumerate(groups):
        mine = traces.loc[traces["config_id"].isin(set(methods.values())), "example_id"]
        keep += [(g, str(e)) for e in list(dict.fromkeys(mine))[:examples]]
    wanted = {(cid, eid) for g, eid in keep for cid in groups[g][1].values()}
    traces = traces[[k in wanted for k in zip(traces["config_id"], traces["example_id"])]]
    vocab: dict[int, str] = {}
    for tid, text in zip(traces["token_id"], traces["token_text"]):
        vocab.setdefault(int(tid), str(text))
    for tid, text in zip(traces["rejected_token_id"], traces["rejected_text"]):
        if tid >= 0:
            vocab.setdefault(int(tid), str(text))
    info = rows.set_index(["config_id", "example_id"])
    out: dict[str, dict[str, Any]] = {}
    for (cid, eid), t in traces.groupby(["config_id", "example_id"], sort=False):
        t = t.sort_values("position")
        r = info.loc[(cid, eid)] if (cid, eid) in info.index else None
        summary = (
            f"{len(t)} tokens, {int(r['accepted_tokens'])}/{int(r['drafted_tokens'])} drafts accepted, "
            f"quality {float(r['quality']):.3g}"
            if r is not None
            else f"{len(t)} tokens"
        )
        out.setdefault(cid, {})[eid] = {
            "id": t["token_id"].astype(int).tolist(),
            "fate": "".join(FATES[f] for f in t["fate"]),
            "p": _milli(t["p"]),
            "q": _milli(t["q"]),
            "w": _milli(t["weight"]),
            "rej": t["rejected_token_id"].astype(int).tolist(),
            "rp": _milli(t["rejected_p"]),
            "rq": _milli(t["rejected_q"]),
            "info": summary,
        }
    return {
        "vocab": {str(k): v for k, v in vocab.items()},
        "groups": [{"name": name, "methods": methods} for name, methods in groups],
        "examples": [[g, eid] for g, eid in keep],
        "traces": out,
    }


def pane_order(summary: pd.DataFrame, candidates: list[str]) -> list[str]:
    """The token view's methods (labels, as its panes name them): the candidates first, then the
    baselines they are judged against, then the rest, each in the summary's order (the methods'
    declared ``order``, then their swept values)."""
    pick, base = chosen(summary, candidates), summary["baseline"].astype(bool)
    rank = sorted(range(len(summary)), key=lambda i: (not pick.iat[i], not base.iat[i]))
    return list(dict.fromkeys(summary["label"].astype(str).iloc[rank]))


def _token_view(data: dict[str, Any], ordered: list[str]) -> str:
    shown = {label for g in data["groups"] for label in g["methods"]}
    order = [label for label in ordered if label in shown]
    left, right = order[0], (order[1] if len(order) > 1 else order[0])

    def pane(which: str, picked: str) -> str:
        options = "".join(
            f'<option value="{_esc(label)}"{" selected" if label == picked else ""}>{_esc(label)}</option>'
            for label in order
        )
        return (
            f'<div class="pane" id="pane-{which}"><select aria-label="method">{options}</select>'
            f'<div class="info muted"></div><div class="tokens"></div></div>'
        )

    examples = "".join(
        f'<optgroup label="{_esc(group["name"])}">'
        + "".join(
            f'<option value="{i}">{_esc(eid)}</option>'
            for i, (g, eid) in enumerate(data["examples"])
            if g == number
        )
        + "</optgroup>"
        for number, group in enumerate(data["groups"])
        if any(g == number for g, _ in data["examples"])
    )
    carried = len(data["examples"])
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return (
        '<p class="legend"><span class="tok-a">accepted draft</span><span class="tok-r">rejected draft, '
        'resampled</span><span class="tok-b">target (bonus)</span> hover a token for p, q and w<sub>t</sub></p>'
        f'<p>Example <select id="tv-example">{examples}</select> '
        f'<span class="muted">({carried} examples carried: the first --token-examples of each task)</span></p>'
        f'<div class="panes">{pane("left", left)}{pane("right", right)}</div>'
        f'<script type="application/json" id="trace-data">{payload}</script><script>{SCRIPT}</script>'
    )


def build_report(
    results: Path, candidates: list[str], token_examples: int = 100, margins: Margins = Margins()
) -> str:
    """The whole page as one string; ``margins``: what each verdict calls equivalent."""
    if token_examples < 1:
        raise BenchError(f"--token-examples must be >= 1, got {token_examples}")
    rows = load_results(results)
    summary = summarise(rows, margins)
    found, qualities = panels(summary), quality_metrics(summary)
    sections = []
    if candidates:  # the answer first
        sections += [
            "<h2>Verdicts</h2>",
            '<p class="muted">Per task, one line per candidate family and baseline family: the frontier '
            "verdict where the candidate ran several settings (the mean gap between the two frontiers over "
            "the acceptance range both span, shaded), else its point's verdict (Δ quality: the candidate "
            "minus the family's frontier at its acceptance), each with its paired 95% bootstrap interval "
            "(docs/compare.md). <i>all baselines</i>: every baseline point and their anchors (lossless sd, accept_all) pooled (a random "
            "mix of any two settings is attainable). Charts: points with 95% intervals, the baseline's "
            "frontier dashed, the candidate's solid; the point rows fold under each chart.</p>",
            _verdicts(compare(rows, candidates, margins=margins, summary=summary, found=found), found, candidates),
        ]
    sections += [
        "<h2>Table 1</h2>",
        '<p class="muted">[low, high] is the 95% bootstrap interval over examples. Fidelity beside quality: '
        "TV to target (0 for ar), the divergence log p(y) + H(p) per token (0 in expectation for the target's "
        "own tokens) and fidelity vs ar: on-distribution where the divergence's paired interval against ar's lies "
        "inside the fidelity margin. Time is per emitted token against ar's; time per example beside it.</p>",
    ]
    for title, quality, speed in table_frames(summary, qualities, found):
        sections += [f"<h3>{_esc(title)}</h3>", _table(quality, "table1"), _table(speed, "speed")]
    sections += ["<h2>Pareto plots</h2>", _plots(found, qualities)]
    traces = load_traces(results)
    sections.append("<h2>Tokens</h2>")
    if traces.empty:
        sections.append(
            '<p id="no-traces">No token traces in these results: run with <code>--trace</code>.</p>'
        )
    else:
        data = trace_data(rows, traces, token_groups(found), token_examples)
        sections.append(_token_view(data, pane_order(summary, candidates)))
    sections += ["<h2>Settings</h2>", _settings(results, rows)]
    body = "\n".join(sections)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>diversed-bench report: {_esc(results.name)}</title><style>{STYLE}</style></head>"
        f"<body><h1>diversed-bench report: {_esc(results.name)}</h1>{body}</body></html>"
    )


def write_report(
    results: Path, output: Path, candidates: list[str], token_examples: int = 100, margins: Margins = Margins()
) -> Path:
    page = build_report(results, candidates, token_examples, margins)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise BenchError(
            f"cannot write {output} ({exc.filename}: {exc.strerror}); give a writable --output path"
        ) from None
    return output
