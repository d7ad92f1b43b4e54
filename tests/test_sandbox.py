"""Hostile programs, with harmless stand-ins: each must fail (or be contained) without harm."""

import time
from pathlib import Path

import pytest

from bench.sandbox import Limits, run_program

FAST = Limits(timeout_s=3)


def test_a_correct_program_passes_and_a_wrong_one_fails():
    assert run_program("def f(x):\n    return x + 1\nassert f(1) == 2\n", FAST).passed
    assert not run_program("def f(x):\n    return x\nassert f(1) == 2\n", FAST).passed


def test_writing_outside_the_temp_dir(tmp_path):
    target = tmp_path / "escaped.txt"
    outcome = run_program(f"open({str(target)!r}, 'w').write('x')\n", FAST)
    assert not outcome.passed and not target.exists()
    assert run_program(
        "open('inside.txt', 'w').write('x')\nassert open('inside.txt').read() == 'x'\n", FAST
    ).passed


def test_reading_outside_the_temp_dir(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    assert not run_program(f"assert open({str(secret)!r}).read() == 's3cret'\n", FAST).passed


def test_fork_loop_is_refused():
    outcome = run_program("import os\nfor _ in range(20):\n    os.fork()\n", FAST)
    assert not outcome.passed


def test_infinite_loop_times_out():
    start = time.monotonic()
    outcome = run_program("while True:\n    pass\n", Limits(timeout_s=2))
    assert outcome.status == "timeout" and time.monotonic() - start < 10


def test_huge_allocation_fails_without_touching_the_host():
    outcome = run_program("x = bytearray(20 * 1024 ** 3)\nassert len(x) > 0\n", FAST)
    assert not outcome.passed and "MemoryError" in outcome.detail


@pytest.mark.parametrize(
    "program",
    [
        "import os\nos.system('touch {marker}')\n",
        "import subprocess\nsubprocess.run(['touch', '{marker}'])\n",
        "import ctypes\nctypes.CDLL(None).system(b'touch {marker}')\n",
    ],
)
def test_shelling_out_is_refused(tmp_path, program):
    marker = tmp_path / "marker"
    assert not run_program(program.format(marker=marker), FAST).passed
    assert not marker.exists()


@pytest.mark.parametrize(
    "exit_call", ["import sys\nsys.exit(0)", "import os\nos._exit(0)", "raise SystemExit"]
)
def test_exiting_before_the_asserts_fails(exit_call):
    assert not run_program(f"{exit_call}\nassert False\n", FAST).passed


def test_monkey_patching_assert_builtins_does_not_help():
    program = "import builtins\nbuiltins.AssertionError = type('Fake', (Exception,), {{}})\nassert 1 == 2\n"
    assert not run_program(program.replace("{{}}", "{}"), FAST).passed


def test_the_temp_dir_is_removed(tmp_path):
    before = set(Path("/tmp").glob("bench-sandbox-*"))
    run_program("open('junk', 'w').write('x' * 100)\n", FAST)
    assert set(Path("/tmp").glob("bench-sandbox-*")) == before


def test_output_flood_is_capped():
    start = time.monotonic()
    outcome = run_program(
        "while True:\n    print('x' * 10000)\n", Limits(timeout_s=5, file_bytes=1024 * 1024)
    )
    assert not outcome.passed and outcome.status == "failed"  # stopped by the file-size limit, not the clock
    assert time.monotonic() - start < 5
