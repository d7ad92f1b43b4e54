"""The sandbox's contract: honest code passes through the proxies, wrong code fails, the jail in
use is named, and without bubblewrap nothing runs unless the weaker guard is asked for."""

import json
import subprocess
import sys

import pytest

from bench import sandbox
from bench.errors import BenchError
from bench.sandbox import Limits, run_tests, use_sandbox
from bench.sandbox.bwrap import _probe, seccomp_filter

FAST = Limits(timeout_s=5)


@pytest.fixture
def guard():
    use_sandbox("guard")
    yield
    use_sandbox("bwrap")


def test_a_correct_program_passes_and_a_wrong_one_fails():
    right = run_tests("def f(x):\n    return x + 1\n", "assert f(1) == 2\n", {"f"}, FAST)
    wrong = run_tests("def f(x):\n    return x\n", "assert f(1) == 2\n", {"f"}, FAST)
    assert right.passed and right.sandbox == "bwrap"
    assert not wrong.passed and wrong.status == "failed" and wrong.detail.startswith("AssertionError")


def test_values_keep_their_types_across_the_boundary():
    code = (
        "from collections import Counter, namedtuple\nP = namedtuple('P', 'a b')\n"
        "def f():\n    return [1, 2.5, 'x', b'y', (1, 2), {3}, frozenset({4}), {'k': [None, True]}, 1j,"
        " Counter('aab'), P(1, 2), 10 ** 40, float('inf')]\n"
    )
    tests = (
        "v = f()\nassert v == [1, 2.5, 'x', b'y', (1, 2), {3}, frozenset({4}), {'k': [None, True]}, 1j,"
        " {'a': 2, 'b': 1}, (1, 2), 10 ** 40, float('inf')]\n"
        "assert [type(x).__name__ for x in v] == ['int', 'float', 'str', 'bytes', 'tuple', 'set', 'frozenset',"
        " 'dict', 'complex', 'dict', 'tuple', 'int', 'float']\n"
    )
    assert run_tests(code, tests, {"f"}, FAST).passed


def test_objects_stay_in_the_sandbox_and_can_be_used_there():
    code = (
        "class Node:\n    def __init__(self, v):\n        self.v, self.left = v, None\n"
        "def depth(n):\n    return 0 if n is None else 1 + depth(n.left)\n"
        "def squares(n):\n    return (i * i for i in range(n))\n"
    )
    tests = (
        "root = Node(1)\nroot.left = Node(2)\nassert depth(root) == 2 and root.v == 1\n"
        "assert list(squares(4)) == [0, 1, 4, 9]\nassert squares(2) != [0, 1]\n"
    )
    assert run_tests(code, tests, {"Node", "depth", "squares"}, FAST).passed


def test_exceptions_come_back_as_builtin_types():
    code = "def f(x):\n    return 1 / x\n"
    tests = "try:\n    f(0)\n    raise AssertionError('no error')\nexcept ZeroDivisionError:\n    pass\n"
    assert run_tests(code, tests, {"f"}, FAST).passed


def test_tests_see_only_the_names_the_reference_provides():
    code = "def f(x):\n    return x\ndef helper():\n    return 1\n"
    outcome = run_tests(code, "assert helper() == 1\n", {"f"}, FAST)
    assert not outcome.passed and "NameError" in outcome.detail


def test_a_program_that_does_not_load_fails_with_its_error():
    outcome = run_tests("def f(:\n", "assert f(1) == 2\n", {"f"}, FAST)
    assert not outcome.passed and outcome.detail.startswith("SyntaxError")


def test_guard_is_explicit_and_named(guard):
    outcome = run_tests("def f(x):\n    return x + 1\n", "assert f(1) == 2\n", {"f"}, FAST)
    assert outcome.passed and outcome.sandbox == "guard"
    assert not run_tests("import os\nos._exit(0)\n", "assert False\n", set(), FAST).passed


def test_unknown_sandbox_is_refused():
    with pytest.raises(BenchError, match="choose one of bwrap, guard"):
        use_sandbox("docker")


def test_without_bubblewrap_no_code_runs_and_the_error_says_what_to_do(monkeypatch):
    monkeypatch.setattr("bench.sandbox.bwrap.shutil.which", lambda name: None)
    _probe.cache_clear()
    sandbox._jail.cache_clear()
    try:
        with pytest.raises(BenchError, match=r"apt-get install bubblewrap.*--sandbox guard"):
            run_tests("def f():\n    return True\n", "assert f()\n", {"f"}, FAST)
    finally:
        _probe.cache_clear()
        sandbox._jail.cache_clear()


def test_a_bwrap_that_cannot_build_the_jail_is_refused(monkeypatch):
    monkeypatch.setattr("bench.sandbox.bwrap._bwrap", lambda: "/bin/false")
    _probe.cache_clear()
    sandbox._jail.cache_clear()
    try:
        with pytest.raises(BenchError, match=r"cannot build its jail here \(exit code 1\).*--sandbox guard"):
            run_tests("def f():\n    return True\n", "assert f()\n", {"f"}, FAST)
    finally:
        _probe.cache_clear()
        sandbox._jail.cache_clear()


def test_seccomp_filter_is_refused_for_unknown_machines():
    assert len(seccomp_filter("x86_64")) % 8 == 0
    with pytest.raises(BenchError, match="no seccomp filter for sparc"):
        seccomp_filter("sparc")


@pytest.mark.parametrize("choice", ["bwrap", "guard"])
def test_score_records_the_sandbox_and_leaves_it_out_of_the_means(tmp_path, choice):
    rows = [json.loads(line) for line in open("tasks/fixtures/mbpp/test.jsonl")][:3]
    predictions = tmp_path / "preds.jsonl"
    completions = [rows[0]["code"], rows[1]["code"], "def nothing():\n    pass\n"]
    predictions.write_text(
        "".join(
            json.dumps({"example_id": r["task_id"], "completion": c}) + "\n"
            for r, c in zip(rows, completions)
        )
    )
    out = subprocess.run(
        [sys.executable, "-m", "bench", "score", "--task", "mbpp", "--data", "fixture"]
        + ["--predictions", str(predictions), "--sandbox", choice],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert f"sandbox={choice}" in out.stdout and "pass@1=0.6667" in out.stdout
    scored = [json.loads(line) for line in predictions.with_suffix(".scores.jsonl").read_text().splitlines()]
    assert [r["sandbox"] for r in scored] == [choice] * 3


def test_a_uid_held_by_another_process_is_not_taken():
    """Jails of other processes (xdist workers, shard jobs, torchrun ranks) share the host's
    per-uid thread count: a uid another process holds is never handed out here."""
    import subprocess
    import sys

    from bench.sandbox import bwrap

    holder = subprocess.Popen(
        [sys.executable, "-c", "from bench.sandbox import bwrap\nwith bwrap.jail_uid() as u:\n"
         "    print(u, flush=True)\n    input()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        held = int(holder.stdout.readline())
        with bwrap.jail_uid() as mine:
            assert mine != held
    finally:
        holder.communicate("\n", timeout=30)


def test_more_jails_than_uids_are_refused_in_one_line(monkeypatch):
    from bench.sandbox import bwrap

    # The last uid: jails claim from the first, in this process and in others (an xdist worker)
    free = next(u for u in reversed(bwrap.JAIL_UIDS) if u not in bwrap._named_uids())
    monkeypatch.setattr(bwrap, "JAIL_UIDS", range(free, free + 1))
    with bwrap.jail_uid() as uid:
        assert uid == free
        with pytest.raises(BenchError, match="jails at once"):
            with bwrap.jail_uid():
                pass
    with bwrap.jail_uid() as again:  # given back when its jail ends
        assert again == free
