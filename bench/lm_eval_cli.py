"""``diversed-lm-eval``: the ``lm_eval`` command with the ``diversed`` model registered.

lm-eval 0.4 discovers no third-party models, so this command imports the backend first. A
``BenchError`` (bad model_args, a missing head, an unsupported request), no task or a task name
lm-eval does not know, and a task whose dataset cannot be loaded (the hub unreachable, nothing in
the local cache) each print as one line; anything else keeps its traceback.
"""

from __future__ import annotations

import sys

from bench.errors import BenchError

OFFLINE_HINT = (
    "lm-eval's task files read their datasets from the hub: download the dataset where the hub is "
    "reachable (`hf download DATASET --repo-type dataset`), or give a task file that reads local data "
    "(--include_path DIR; docs/lm-eval.md shows one)"
)


def main() -> None:
    try:
        try:
            from lm_eval.__main__ import cli_evaluate
        except ImportError:
            raise BenchError('lm-eval is not installed: pip install ".[lm-eval]" (in a checkout of this repository)') from None
        import bench.lm_eval_model  # noqa: F401  (registers --model diversed)

        try:
            cli_evaluate()
        except ConnectionError as exc:  # datasets: not in the local cache and the hub unreachable
            raise BenchError(f"{exc}; {OFFLINE_HINT}") from None
        except ValueError as exc:  # lm-eval's checks of --tasks
            if not str(exc).startswith(("Tasks not found", "No tasks specified")):
                raise
            raise BenchError(
                f"{str(exc).rstrip('.')}; `diversed-lm-eval ls tasks` lists them "
                "(add --include_path DIR for your own task files)"
            ) from None
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
