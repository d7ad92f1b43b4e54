"""What a program prints is never part of its verdict: honest programs that print megabytes pass,
the judge keeps only the last few KiB and says how much it dropped, and a crash's last line still
reaches the failure's detail."""

from __future__ import annotations

import re
import tracemalloc

import pytest

from bench.sandbox import Limits, run_tests, use_sandbox
from bench.sandbox.judge import OUTPUT_KEPT

FAST = Limits(timeout_s=5)
TEN_MB = 10_000_000
PRINTERS = {
    "200,000 debug lines": (  # 50 bytes each
        "def total(xs):\n    s = 0\n    for i, x in enumerate(xs):\n        print(f'debug: step {i:06d}, sum {s:>25}')\n"
        "        s += x\n    return s\n",
        TEN_MB,
    ),
    "10 MB to sys.stdout": (
        "import sys\ndef total(xs):\n    sys.stdout.write('x' * 10_000_000)\n    return sum(xs)\n",
        TEN_MB,
    ),
    "10 MB to sys.stderr": (
        "import sys\ndef total(xs):\n    sys.stderr.write('x' * 10_000_000)\n    return sum(xs)\n",
        TEN_MB,
    ),
    "10 MB to fd 1": (
        "import os\ndef total(xs):\n    os.write(1, b'x' * 10_000_000)\n    return sum(xs)\n",
        TEN_MB,
    ),
    "10 MB to fd 2": (
        "import os\ndef total(xs):\n    os.write(2, b'x' * 10_000_000)\n    return sum(xs)\n",
        TEN_MB,
    ),
    "10 MB while loading": ("print('x' * 10_000_000)\ndef total(xs):\n    return sum(xs)\n", TEN_MB),
}
TESTS = "assert total(list(range(200_000))) == 19999900000\n"


def _discarded(note: str) -> int:
    match = re.fullmatch(
        r"([\d,]+) bytes of the program's output discarded \(the judge keeps the last [\d,]+\)", note
    )
    assert match, note
    return int(match.group(1).replace(",", ""))


@pytest.fixture(params=["bwrap", "guard"])
def jail(request):
    use_sandbox(request.param)
    yield request.param
    use_sandbox("bwrap")


@pytest.mark.parametrize("printer", PRINTERS)
def test_honest_programs_that_print_a_lot_pass(jail, printer):
    code, printed = PRINTERS[printer]
    outcome = run_tests(code, TESTS, {"total"}, FAST)
    assert outcome.passed and outcome.sandbox == jail, outcome
    # All of it reached the judge, bar what the pipe and the program's buffer still held at the end.
    assert printed - 2**17 - OUTPUT_KEPT <= _discarded(outcome.note) <= printed, outcome.note


def test_what_is_dropped_costs_the_judge_no_memory():
    """200 MB of output pass through the judge; it holds a few KiB of them at a time."""
    code = "import os\ndef f():\n    for _ in range(200):\n        os.write(1, b'x' * 10**6)\n    return 1\n"
    tracemalloc.start()
    try:
        outcome = run_tests(code, "assert f() == 1", {"f"}, Limits(timeout_s=10))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert outcome.passed and _discarded(outcome.note) > 199 * 10**6, outcome
    assert peak < 4 * 1024**2, f"the judge held {peak / 1024**2:.1f} MiB"


def test_a_quiet_program_has_no_note():
    outcome = run_tests("def f():\n    print('one line')\n    return 1\n", "assert f() == 1", {"f"}, FAST)
    assert outcome.passed and outcome.note == "", outcome


def test_the_last_line_before_a_crash_is_in_the_detail():
    code = (
        "import os, sys\ndef f():\n    sys.stdout.write('noise\\n' * 2_000_000)\n"
        "    sys.stderr.write('fatal: the reason\\n')\n    sys.stderr.flush()\n    os._exit(3)\n"
    )
    outcome = run_tests(code, "assert f() == 1", {"f"}, FAST)
    assert not outcome.passed and outcome.status == "failed", outcome
    assert outcome.detail.endswith("fatal: the reason"), outcome.detail
    assert _discarded(outcome.note) > 11 * 10**6, outcome.note  # 12 MB of noise
