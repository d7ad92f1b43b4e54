"""The ``diversed-bench`` command line. Each command is a thin layer over a module of ``bench``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import typer  # noqa: E402

from bench.errors import BenchError  # noqa: E402

app = typer.Typer(
    help="Reference harness for relaxed speculative decoding (SD, lossy SD, SpecCascade, "
    "static ensemble, DIVERSED).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """Reference harness for relaxed speculative decoding."""


@app.command()
def generate(
    prompt: str = typer.Argument(..., help="Raw text prompt."),
    pair: str = typer.Option("tiny", help="Pair name or pair YAML path."),
    method: str = typer.Option("sd", help="Method name or module:Class of a verifier."),
    draft_len: int = typer.Option(5, help="Drafted tokens per round."),
    temperature: float = typer.Option(1.0, help="0 = greedy."),
    max_new_tokens: int = typer.Option(64),
    target_weight: float = typer.Option(0.7, help="ensemble: weight of the target."),
    seed: int = typer.Option(0),
    device: str = typer.Option("auto"),
) -> None:
    """Decode one prompt and print the text and its acceptance counters.

    Example: diversed-bench generate "Question: 2 + 3?" --method ensemble --target-weight 0.6
    """
    from bench.decoding import SpeculativeDecoder
    from bench.distributions import Sampling
    from bench.head import WeightHead
    from bench.pairs import load_pair
    from bench.verifiers import make_verifier

    params = {"target_weight": target_weight} if method == "ensemble" else {}
    verifier = make_verifier(method, **params)
    loaded = load_pair(pair, device=device)
    head = WeightHead(*loaded.hidden_sizes).to(loaded.device) if verifier.needs_hidden else None
    decoder = SpeculativeDecoder(
        loaded.target, loaded.draft, verifier, draft_len=draft_len,
        sampling=Sampling(temperature), eos_token_ids=loaded.eos_token_ids, head=head,
    )
    gen = decoder.generate(loaded.tokenizer(prompt).input_ids, max_new_tokens, seed=seed)
    s = gen.stats
    typer.echo(loaded.tokenizer.decode(gen.token_ids, skip_special_tokens=True))
    typer.echo(
        f"\n[{method}] {s.new_tokens} tokens in {s.rounds} rounds, acceptance_rate "
        f"{s.acceptance_rate:.3f}, acceptance_length {s.acceptance_length:.2f}, {s.wall_time_s:.3f} s"
    )


@app.command()
def score(
    task: str = typer.Option(..., help="Task name or task YAML path."),
    predictions: Path = typer.Option(..., exists=False, help='JSONL: {"example_id": ..., "completion": ...} per line.'),
    data: str = typer.Option("hub", help="hub, fixture, or a local jsonl/parquet file or folder."),
    split: Optional[str] = typer.Option(None, help="Dataset split (default: the task file's)."),
    output: Optional[Path] = typer.Option(None, help="Per-example scores (default: PREDICTIONS.scores.jsonl)."),
) -> None:
    """Score completions made elsewhere with the task's metrics.

    Example: diversed-bench score --task gsm8k --data fixture --predictions preds.jsonl
    """
    from bench.scoring import score_predictions

    out = output or predictions.with_suffix(".scores.jsonl")
    summary = score_predictions(task, data, predictions, out, split=split)
    typer.echo(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items()))
    typer.echo(f"per-example scores: {out}")


def main() -> None:
    """Entry point: user errors print one line, never a traceback."""
    try:
        app()
    except BenchError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
