"""``python -m bench`` is the ``diversed-bench`` command."""

from bench.cli import main

main()
