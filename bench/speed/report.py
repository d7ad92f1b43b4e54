"""What ``speed`` writes: the markdown page of each measurement (step timing, lookup timing,
throughput), its plot (the first two), and ``write``, which puts each result's .md, .json and .png
beside one another under one stem.

Rendering is kept apart from measuring: the measurement modules return plain dicts (what the JSON
holds), and every page here is made from that dict alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.speed.lookup import AR, HF


def _steps_header(r: dict[str, Any], command: str) -> list[str]:
    """Title, command, what was run, the memory bandwidth and the floor of a target step."""
    return [
        f"# Speed: pair {r['pair']} on {r['device']} ({r['dtype']}, CPU threads: {r['threads']})",
        "",
        f"Command: `{command}`",
        "",
        f"{r['prompts']} prompts x {r['max_new_tokens']} new tokens, greedy. Ratios are medians over {r['repeats']} "
        "repeats of runs made back to back (engines alternating within each repeat).",
        "",
        f"Memory bandwidth ({r['threads']} threads, before and after): read "
        + ", ".join(f"{b:.1f}" for b in r["read_bandwidth_gb_s"])
        + " GB/s (a max over a large buffer); copy "
        + ", ".join(f"{b:.1f}" for b in r["bandwidth_gb_s"])
        + f" GB/s (read + write). Target weights {r['target_weight_bytes'] / 1e6:.0f} MB: the floor of a batch-1 "
        f"target step (weights / read bandwidth) is **{r['floor_ms']:.2f} ms**.",
        "",
    ]


def _engine_table(r: dict[str, Any]) -> list[str]:
    """Each engine's step costs against the floor, and its setup."""
    lines = [
        "| engine | draft step ms | target step ms | target step / floor | c | compile s | warm-up s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, e in r["engines"].items():
        lines.append(
            f"| {name} | {e['t_draft_ms']:.3f} | {e['t_target_ms']:.3f} | {e['target_vs_floor']:.2f} | {e['c']:.3f} | "
            f"{e['compile_s']:.1f} | {e['warmup_s']:.1f} |"
        )
    return lines


def _rows_table(r: dict[str, Any]) -> list[str]:
    """The reference engine's ``ar`` against transformers, then a row per engine and draft length
    (the ensemble's columns where it was timed)."""
    ens = "ensemble_vs_hf" in r["rows"][0]
    first = r["rows"][0]["engine"]
    lines = [
        "",
        f"`ar` ({first}): harness / transformers generate() = **{r['ar_vs_hf']:.2f}** "
        f"(outputs equal: {r['ar_equals_hf']}); {r['ar_ms_per_token']:.2f} vs {r['hf_ms_per_token']:.2f} ms per "
        f"token, prompts included ({r['ar_ms_per_token'] / r['floor_ms']:.2f}x the floor)",
        "",
        "| engine | N | alpha | c | sd / HF assisted | outputs equal HF | equal ar | speedup | rounds' speedup | ideal S "
        "| efficiency "
        f"| in steps | verify step ms | sd vs {first} | ar vs {first} | equal {first} |"
        + (" ensemble / HF | ensemble equal HF |" if ens else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if ens else ""),
    ]
    for row in r["rows"]:
        line = (
            f"| {row['engine']} | {row['draft_len']} | {row['alpha']:.3f} | {row['c']:.3f} | {row['sd_vs_hf']:.2f} | "
            f"{row['sd_equals_hf']} | {row['sd_equals_ar']} | {row['speedup']:.2f} | {row['decode_speedup']:.2f} | "
            f"{row['ideal_speedup']:.2f} | "
            f"{row['efficiency']:.2f} | {100 * row['forward_share']:.0f}% | {row['t_verify_ms']:.3f} | "
            f"{row['sd_vs_first']:.2f} | {row['ar_vs_first']:.2f} | {row['equals_first']} |"
        )
        if ens:
            line += (
                f" {row['ensemble_vs_hf']:.2f} | {row['ensemble_equals_hf']} |"
                if "ensemble_vs_hf" in row
                else " | |"
            )
        lines.append(line)
    return lines


def _syncs_table(r: dict[str, Any]) -> list[str]:
    """Host-device synchronisations per round, where they were counted (CUDA); else nothing."""
    synced = [row for row in r["rows"] if "host_syncs" in row]
    if not synced:
        return []
    return [
        "",
        "Host-device synchronisations (CUDA's sync debug mode, one greedy decode of the first prompt, "
        "prefill and clock included):",
        "",
        "| engine | N | sd syncs | sd rounds | sd syncs / round | ar syncs | ar steps | ar syncs / step |",
        "|---|---|---|---|---|---|---|---|",
    ] + [
        f"| {row['engine']} | {row['draft_len']} | {s['syncs']} | {s['rounds']} | {s['per_round']:.2f} | "
        f"{a['syncs']} | {a['rounds']} | {a['per_round']:.2f} |"
        for row in synced
        for s, a in [(row["host_syncs"], row["ar_host_syncs"])]
    ]


def steps_markdown(result: dict[str, Any], command: str) -> str:
    """The ``speed`` page: bandwidth and floor, the engines' step costs, the rows, the host syncs
    (CUDA) and what each column means."""
    first = result["rows"][0]["engine"]
    lines = (
        _steps_header(result, command) + _engine_table(result) + _rows_table(result) + _syncs_table(result)
    )
    lines += [
        "",
        "Step costs are medians of engine steps inside the loop, timed in clocked runs made in every repeat "
        "(draft: `sd`'s steps; target: single-token `ar` steps); compile and warm-up happen in untimed runs before "
        "any measurement. alpha: per-token acceptance (accepted / verified positions); ideal S = (1 - alpha^(N+1)) "
        "/ ((1 - alpha)(N c + 1)) with the c of the same repeat; speedup: `ar` time / `sd` time in the same engine; "
        "rounds' speedup: the same without the prompts' prefill (S models the rounds only); efficiency = rounds' "
        "speedup / S, per repeat; every figure is a median over repeats; in steps: share of the sd wall time "
        "spent inside model steps (the rest is the loop's own overhead); verify step: median target step of `sd`, "
        f"N + 1 tokens, which S prices as one single-token step; sd / ar vs {first}: time per emitted "
        f"token in this engine over the {first} engine's.",
    ]
    return "\n".join(lines) + "\n"


def steps_plot(result: dict[str, Any], path: Path) -> None:
    """Each engine's rounds' speedup and ideal S against N, and transformers' assisted generation
    against the harness's ``ar``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for k, name in enumerate(result["engines"]):
        rows = [r for r in result["rows"] if r["engine"] == name]
        n = [r["draft_len"] for r in rows]
        color = f"C{k}"
        ax.plot(n, [r["decode_speedup"] for r in rows], "o-", color=color, label=f"{name}: sd / ar, rounds")
        ax.plot(
            n, [r["ideal_speedup"] for r in rows], "s--", color=color, label=f"{name}: ideal S(alpha, N, c)"
        )
    rows = [r for r in result["rows"] if r["engine"] == next(iter(result["engines"]))]
    ax.plot(
        [r["draft_len"] for r in rows],
        [r["hf_speedup"] for r in rows],
        "^:",
        color="grey",
        label="transformers assisted vs harness ar",
    )
    ax.axhline(1, color="grey", lw=0.8)
    ax.set_xlabel("draft length N")
    ax.set_ylabel("speedup over ar")
    costs = ", ".join(f"c = {e['c']:.2f} ({name})" for name, e in result["engines"].items())
    ax.set_title(f"{result['pair']} on {result['device']}, {costs}", fontsize=9)
    lengths = sorted({r["draft_len"] for r in result["rows"]})
    ax.set_xticks(lengths)  # only the lengths measured: one N must not get fractional ticks
    ax.set_xlim(lengths[0] - 0.5, lengths[-1] + 0.5)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def throughput_markdown(result: dict[str, Any], command: str) -> str:
    """The throughput table: every ratio is against the first batch size of the same method."""
    first = result["rows"][0]["batch_size"]
    lines = [
        f"# Throughput: {result['pair']} on {result['device']} (CPU threads: {result['threads']})",
        "",
        f"`{command}`: {result['examples']} examples, up to {result['max_new_tokens']} new tokens, "
        f"temperature {result['temperature']:g}, N = {result['draft_len']}, median of {result['repeats']} "
        f"repeats (batch sizes alternated within a repeat). Outputs equal batch {first}'s: "
        f"**{result['outputs_equal']}**.",
        "",
        f"| method | batch | examples/s | tokens/s | x batch {first} | same outputs | KV caches MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['method']} | {r['batch_size']} | {r['examples_per_s']:.2f} | {r['tokens_per_s']:.0f} | "
        f"{r['vs_first']:.2f} | {r['outputs_equal_first']} | {r['kv_cache_mib']:.1f} |"
        for r in result["rows"]
    ]
    return "\n".join(lines) + "\n"


def _num(value: float | None, form: str, scale: float = 1.0) -> str:
    """A cell: the value in ``form``, or n/a where it does not exist (sampled runs, transformers)."""
    return "n/a" if value is None else format(scale * value, form)


def _cells(x: dict[str, Any]) -> list[str]:
    """One lookup row's cells, in the header's order."""
    lo, hi = x["speedup_range"]
    return [
        x["method"], str(x["draft_len"]), f"{x['speedup']:.2f} [{lo:.2f}, {hi:.2f}]", f"{x['vs_hf']:.2f}",
        _num(x["tokens_per_forward"], ".2f"), _num(x["drafting_share"], ".0f", 100),
        _num(x["acceptance_rate"], ".1f", 100), f"{x['target_loglik']:.3f}", f"{x['loglik_vs_ar']:+.3f}",
        _num(x["quality"], ".2f"), _num(x["quality_vs_ar"], "+.2f"), _num(x["prefix_agreement"], ".3f"),
        _num(x["same_as_ar"], ".2f"), "n/a" if x["equals_hf"] is None else str(x["equals_hf"]),
    ]  # fmt: skip


def lookup_markdown(result: dict[str, Any], command: str) -> str:
    """The ``speed --drafter lookup`` page: what was timed, the verify cost per width, a row per
    method and N, and what each judged column means."""
    r = result
    metric = r["rows"][0]["quality_metric"]
    sampled = f"temperature {r['temperature']:g}" if r["temperature"] else "greedy"
    category = f", category group {r['category']}" if r.get("category") else ""
    header = [
        "method", "N", "speedup over ar", "vs transformers' lookup", "tokens/forward", "rounds drafted %",
        "accept rate %", "target log p/token", "Δ log p/token vs ar", metric, f"Δ {metric} vs ar",
        "prefix agreement with ar", "same as ar", "equal transformers",
    ]  # fmt: skip
    lines = [
        f"# Prompt lookup speed: pair {r['pair']} on {r['device']} ({r['dtype']}, CPU threads: {r['threads']})",
        "",
        f"Command: `{command}`",
        "",
        f"Drafter `{r['drafter']}`; {r['prompts']} prompts of {r['task']}{category} ({r['data']}"
        f"{', chat template' if r.get('chat_template') else ''}) x {r['max_new_tokens']} new tokens, {sampled}; "
        f"medians over {r['repeats']} repeats of runs made back to back (range in brackets); setup {r['setup_s']:.0f} s.",
        "",
        "Target step cost per width (ms, median): "
        + ", ".join(f"{w}: {c:.2f}" for w, c in r["width_ms"].items()),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    lines += ["| " + " | ".join(_cells(x)) + " |" for x in r["rows"]]
    lines += [
        "",
        f"vs transformers' lookup: transformers' time / this row's on the same prompts (above 1: faster). "
        f"Judged on the first repeat's outputs: target log p/token by one target forward over prompt + output "
        f"(temperature 1); {metric}: the task's own score against the reference, mean over the prompts that have "
        f"one; Δ: minus ar's at the same N. Greedy only: prefix agreement is the share of ar's text before the first "
        f"difference (mean over prompts, as the per-category report defines it), same as ar the share of prompts "
        f"whose tokens equal ar's. A lossless method's outputs equal ar's and transformers' (in fp32; bf16 rounding "
        f"can differ by step width); a relaxed one's need not.",
    ]
    return "\n".join(lines) + "\n"


def plot_points(result: dict[str, Any]) -> list[dict[str, Any]]:
    """A point per method setting and N, ``ar`` left out (it is the axes' origin: speedup 1 and the
    vertical line): its label, fidelity x, median speedup y and the range's ends."""
    several = len({r["draft_len"] for r in result["rows"]}) > 1
    return [
        {
            "label": f"{r['method']}, N={r['draft_len']}" if several else r["method"],
            "x": r["target_loglik"],
            "y": r["speedup"],
            "range": r["speedup_range"],
            "transformers": r["method"] == HF,
        }  # fmt: skip
        for r in result["rows"]
        if r["method"] != AR
    ]


def lookup_plot(result: dict[str, Any], path: Path) -> None:
    """Speedup over ar (median, range as an error bar) against the target's log p/token: a numbered
    point per method setting (the key beside the axes names it: many settings' labels would
    overlap on the points), transformers' lookup a black square, ar's log p a dashed vertical line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fig, ax = plt.subplots(figsize=(9, 4.8))
    for x in {r["target_loglik"] for r in result["rows"] if r["method"] == AR}:
        ax.axvline(x, color="grey", ls="--", lw=0.9)
    ax.axhline(1, color="grey", lw=0.8)
    key = [Line2D([], [], color="grey", ls="--", label="ar (log p/token; speedup 1)")]
    for k, p in enumerate(plot_points(result), start=1):
        lo, hi = p["range"]
        marker, color = ("s", "black") if p["transformers"] else ("o", f"C{k % 10}")
        ax.errorbar(p["x"], p["y"], yerr=[[p["y"] - lo], [hi - p["y"]]], ls="", capsize=3, ms=6, marker=marker, color=color)
        ax.annotate(str(k), (p["x"], p["y"]), xytext=(4, 3), textcoords="offset points", fontsize=7)
        key.append(Line2D([], [], ls="", marker=marker, color=color, label=f"{k}: {p['label']}"))
    ax.margins(x=0.1, y=0.1)
    ax.xaxis.set_major_locator(plt.MaxNLocator(6))
    ax.set_xlabel("target log p per emitted token (ar's own: dashed; a relaxed rule can move it either way)")
    ax.set_ylabel("speedup over ar (median; bar: range over repeats)")
    sampled = f"temperature {result['temperature']:g}" if result["temperature"] else "greedy"
    ax.set_title(
        f"Prompt lookup on {result['pair']} ({result['dtype']}), {result['task']}, {sampled}", fontsize=9
    )
    ax.legend(handles=key, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)



STEP_NAMES = {
    "target": "target step (`ar`'s)",
    "verify": "verify step",
    "head_step": "head step (law + one head forward)",
    "catch_up": "catch-up (head forward over the confirmed states + law)",
}


def _head_steps(r: dict[str, Any]) -> list[str]:
    """The step-cost table of ``speed --drafter eagle``: a row per step, its share of the width-1
    target step and of each N's verify step."""
    lens = [row["draft_len"] for row in r["rows"]]
    lines = [
        "| step | tokens | ms | / target step | " + " | ".join(f"/ verify step (N={n})" for n in lens) + " |",
        "|---|---|---|---|" + "---|" * len(lens),
    ]
    for x in r["steps"]:
        shares = " | ".join(f"{x['per_verify'][str(n)]:.3f}" for n in lens)
        lines.append(f"| {STEP_NAMES[x['step']]} | {x['tokens']} | {x['ms']:.3f} | {x['per_target']:.3f} | {shares} |")
    return lines


def eagle_markdown(result: dict[str, Any], command: str) -> str:
    """The ``speed --drafter eagle`` page: the head's step costs against the target's, then per N
    the bound they give beside the measured speedup, and how to read both."""
    r = result
    sampled = f"temperature {r['temperature']:g}" if r["temperature"] else "greedy"
    lines = [
        f"# EAGLE head step cost: pair {r['pair']} on {r['device']} ({r['dtype']}, CPU threads: {r['threads']})",
        "",
        f"Command: `{command}`",
        "",
        f"Drafter `{r['drafter']}` (head `{r['head']}`). Step costs after the first prompt ({r['prompt_tokens']} "
        f"tokens): medians of {r['passes']} round-robin passes, each calling every step once, back to back, so each "
        f"share is taken within a pass. Decodes: {r['prompts']} prompts x {r['max_new_tokens']} new tokens, {sampled}, "
        f"`ar` and `sd` back to back in each of {r['repeats']} repeats (medians; range in brackets); setup "
        f"{r['setup_s']:.0f} s.",
        "",
    ]
    lines += _head_steps(r)
    lines += [
        "",
        "| N | tokens/fwd | draft fwd/round | accept rate % | verify cost | draft cost/round | bound | rounds' speedup "
        "| speedup | efficiency | equal ar | tokens/fwd to break even |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for x in r["rows"]:
        lo, hi = x["speedup_range"]
        lines.append(
            f"| {x['draft_len']} | {x['tokens_per_forward']:.2f} | {x['draft_forwards_per_round']:.2f} | "
            f"{100 * x['acceptance_rate']:.1f} | {x['verify_cost']:.3f} | {x['draft_cost']:.3f} | {x['bound']:.2f} | "
            f"{x['decode_speedup']:.2f} | {x['speedup']:.2f} [{lo:.2f}, {hi:.2f}] | {x['efficiency']:.2f} | "
            f"{'n/a' if x['equals_ar'] is None else x['equals_ar']} | {x['break_even_tokens']:.2f} |"
        )
    lines += [
        "",
        "Costs are in width-1 target steps. A chain round of k tokens runs the catch-up (its first token) and k - 1 "
        "head steps: k draft forwards, as `draft_forwards` counts them. verify cost: the verify step (N + 1 tokens); "
        "draft cost/round: the catch-up of T states (T = tokens/fwd rounded, within 1 .. N + 1) plus (F - 1) head "
        "steps, F = draft fwd/round counted in the same decodes; bound = T / (verify cost + draft cost/round), the "
        "speedup over `ar` if the loop's own work (verifying, the round's host read) were free; rounds' speedup: "
        "`ar` time / `sd` time without the prompts' prefill (the head's catch-up over the prompt is in the first "
        "round); efficiency = rounds' speedup / bound; tokens/fwd to break even: verify cost + draft cost/round.",
    ]
    return "\n".join(lines) + "\n"


Render = Callable[[dict[str, Any], str], str]
Plot = Callable[[dict[str, Any], Path], None]

# Each result's file stem (``<kind>_<pair>``) -> its page and its plot (throughput has none).
OUTPUTS: dict[str, tuple[Render, Plot | None]] = {
    "speed": (steps_markdown, steps_plot),
    "speed_lookup": (lookup_markdown, lookup_plot),
    "speed_throughput": (throughput_markdown, None),
    "speed_eagle": (eagle_markdown, None),
}


def write(kind: str, result: dict[str, Any], output_dir: Path | str, command: str) -> tuple[str, list[Path]]:
    """``<output_dir>/<kind>_<pair>``.md (the page), .json (``result`` itself) and .png (the plot,
    where the kind has one); the page and the files written, as the API returns them."""
    page, plot = OUTPUTS[kind]
    stem = Path(output_dir) / f"{kind}_{result['pair']}"
    stem.parent.mkdir(parents=True, exist_ok=True)
    text = page(result, command)
    stem.with_suffix(".md").write_text(text)
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2))
    paths = [stem.with_suffix(".md"), stem.with_suffix(".json")]
    if plot is not None:
        plot(result, stem.with_suffix(".png"))
        paths.append(stem.with_suffix(".png"))
    return text, paths
