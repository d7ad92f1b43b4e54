"""``diversed-lm-eval``: the ``lm_eval`` command with the ``diversed`` model registered.

lm-eval 0.4 discovers no third-party models, so this command imports the backend first. A
``BenchError`` (bad model_args, a missing head, an unsupported request) prints as one line.
"""

from __future__ import annotations

import sys

from bench.errors import BenchError


def main() -> None:
    try:
        try:
            from lm_eval.__main__ import cli_evaluate
        except ImportError:
            raise BenchError('lm-eval is not installed; pip install "diversed-bench[lm-eval]"') from None
        import bench.lm_eval_model  # noqa: F401  (registers --model diversed)

        cli_evaluate()
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
