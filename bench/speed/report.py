"""The lookup speed table (markdown) and its speed-against-fidelity plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.speed.lookup import AR, HF


def _num(value: float | None, form: str, scale: float = 1.0) -> str:
    """A cell: the value in ``form``, or n/a where it does not exist (sampled runs, transformers)."""
    return "n/a" if value is None else format(scale * value, form)


def _cells(x: dict[str, Any]) -> list[str]:
    lo, hi = x["speedup_range"]
    return [
        x["method"], str(x["draft_len"]), f"{x['speedup']:.2f} [{lo:.2f}, {hi:.2f}]", f"{x['vs_hf']:.2f}",
        _num(x["tokens_per_forward"], ".2f"), _num(x["drafting_share"], ".0f", 100),
        _num(x["acceptance_rate"], ".1f", 100), f"{x['target_loglik']:.3f}", f"{x['loglik_vs_ar']:+.3f}",
        _num(x["quality"], ".2f"), _num(x["quality_vs_ar"], "+.2f"), _num(x["prefix_agreement"], ".3f"),
        _num(x["same_as_ar"], ".2f"), "n/a" if x["equals_hf"] is None else str(x["equals_hf"]),
    ]  # fmt: skip


def lookup_markdown(result: dict[str, Any], command: str) -> str:
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
        "Target step cost per width (ms, median): " + ", ".join(f"{w}: {c:.2f}" for w, c in r["width_ms"].items()),
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
            "x": r["target_loglik"], "y": r["speedup"], "range": r["speedup_range"], "transformers": r["method"] == HF,
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
        style = {"marker": "s" if p["transformers"] else "o", "color": "black" if p["transformers"] else f"C{k % 10}"}
        ax.errorbar(p["x"], p["y"], yerr=[[p["y"] - lo], [hi - p["y"]]], ls="", capsize=3, ms=6, **style)
        ax.annotate(str(k), (p["x"], p["y"]), xytext=(4, 3), textcoords="offset points", fontsize=7)
        key.append(Line2D([], [], ls="", **style, label=f"{k}: {p['label']}"))
    ax.margins(x=0.1, y=0.1)
    ax.xaxis.set_major_locator(plt.MaxNLocator(6))
    ax.set_xlabel("target log p per emitted token (ar's own: dashed; a relaxed rule can move it either way)")
    ax.set_ylabel("speedup over ar (median; bar: range over repeats)")
    sampled = f"temperature {result['temperature']:g}" if result["temperature"] else "greedy"
    ax.set_title(f"Prompt lookup on {result['pair']} ({result['dtype']}), {result['task']}, {sampled}", fontsize=9)
    ax.legend(handles=key, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)
