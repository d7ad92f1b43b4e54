"""Helpers shared by test files: a two-example run of the tiny pair through the API, and the CLI
called in this process as a user calls it."""

import sys
from pathlib import Path

import pandas as pd

from bench import api
from bench.cli import main
from bench.store import load_results


def tiny_run(out: Path, methods: tuple[str, ...] = ("ar", "sd"), **kw) -> pd.DataFrame:
    """``run --task gsm8k --pair tiny --limit 2 --max-new-tokens 8`` into ``out`` (``kw``: more of
    api.run's arguments); its rows."""
    api.run(tasks=["gsm8k"], pairs=["tiny"], methods=list(methods), settings=api.RunSettings(max_new_tokens=8),
            device="cpu", limit=2, output_dir=out, progress=False, report=False, log=lambda m: None, **kw)  # fmt: skip
    return load_results(out)


def cli(capsys, *args: str) -> tuple[int, list[str]]:
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
