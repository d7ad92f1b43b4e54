"""The wire protocol, defined once (``bench.sandbox.protocol``) for the worker and the judge: every
value the worker can send comes back decoded, builtin values by content and anything else as a
handle, and whatever is not the protocol is refused as such."""

from __future__ import annotations

import math
import types

import pytest

from bench.sandbox import Limits, protocol, run_tests, worker
from bench.sandbox.judge import Remote, WorkerGone, decode

FAST = Limits(timeout_s=5)


def test_the_worker_speaks_the_judges_protocol_module():
    """No second copy to drift: the worker's codec is the protocol module's, here and in the jail
    (where the same file's text is shipped beside it)."""
    assert worker.encode is protocol.encode and worker.decode is protocol.decode
    assert worker.dumps is protocol.dumps and worker.loads is protocol.loads


RETURNED = {
    "a module": ("import math\ndef f():\n    return math\n", "module"),
    "a class": ("def f():\n    class Box:\n        pass\n    return Box\n", "type"),
    "a function": ("def f():\n    return lambda x: x\n", "function"),
    "a builtin function": ("def f():\n    return len\n", "builtin_function_or_method"),
    "a bound method": ("def f():\n    return [].append\n", "builtin_function_or_method"),
    "a generator": ("def f():\n    return (i for i in range(3))\n", "generator"),
    "an instance": ("def f():\n    class Box:\n        pass\n    return Box()\n", "Box"),
    "an exception": ("def f():\n    return ValueError('x')\n", "ValueError"),
    "Ellipsis": ("def f():\n    return ...\n", "ellipsis"),
    "a range": ("def f():\n    return range(3)\n", "range"),
    "a list holding a module": ("import math\ndef f():\n    return [math]\n", None),
}


@pytest.mark.parametrize("value", RETURNED)
def test_every_value_the_worker_sends_is_decoded(value):
    code, kind = RETURNED[value]
    if kind is None:
        tests = "(r,) = f()\nassert repr(r) == '<module in the sandbox>', repr(r)"
    else:
        tests = f"r = f()\nassert repr(r) == '<{kind} in the sandbox>', repr(r)"
    outcome = run_tests(code, tests, {"f"}, FAST)
    assert outcome.passed, outcome


def test_handles_work_like_the_values_they_stand_for():
    code = (
        "import math\ndef lib():\n    return math\n"
        "def make():\n    class Box:\n        def __init__(self, v):\n            self.v = v\n    return Box\n"
    )
    tests = "assert lib().sqrt(9) == 3.0 and lib().pi == 3.141592653589793\nassert make()(7).v == 7\n"
    assert run_tests(code, tests, {"lib", "make"}, FAST).passed


def _worker_side() -> tuple:
    """The worker's two hooks: a handle per object sent, and the object again for a handle."""
    kept: list = []

    def keep(value):
        kept.append(value)
        return protocol.handle(len(kept) - 1, type(value).__name__)

    return keep, lambda ref, kind: kept[ref]


ROUND_TRIPS = [
    None,
    True,
    0,
    -(2**64) + 1,
    2**64 - 1,
    2**64,
    -(2**64),
    10**5000,
    -(7**3000),
    2.5,
    float("inf"),
    "ünïcødé ✓ \ud800",
    b"\x00\xff",
    1 - 2j,
    [1, [2, [3]]],
    (1, (2,)),
    {1, (2, 3)},
    frozenset({frozenset({1})}),
    {"k": {(1, 2): [b"v"]}},
]


@pytest.mark.parametrize("value", ROUND_TRIPS, ids=lambda v: type(v).__name__)
def test_builtin_values_cross_unchanged_both_ways(value):
    keep, find = _worker_side()
    wire = protocol.loads(protocol.dumps({"ok": protocol.encode(value, keep)}))["ok"]
    back = protocol.decode(wire, find)
    assert back == value and type(back) is type(value)


def test_big_ints_travel_in_hex():
    """Decimal conversion is quadratic and Python refuses more than 4300 digits of it."""
    keep, _ = _worker_side()
    assert protocol.encode(2**64 - 1, keep) == 2**64 - 1
    assert protocol.encode(-(2**64), keep) == {"i": "-10000000000000000"}
    assert protocol.encode(10**5000, keep) == {"i": format(10**5000, "x")}


def test_subclasses_of_builtins_travel_as_the_builtin():
    keep, find = _worker_side()
    from collections import Counter, OrderedDict, namedtuple

    point = namedtuple("point", "x y")
    for value, plain in [
        (Counter("aab"), {"a": 2, "b": 1}),
        (OrderedDict(a=1), {"a": 1}),
        (point(1, 2), (1, 2)),
    ]:
        back = protocol.decode(protocol.encode(value, keep), find)
        assert back == plain and type(back) is type(plain)


def test_what_has_no_wire_form_is_a_handle():
    keep, find = _worker_side()
    for value in (math, type, len, (i for i in ()), object(), ...):
        wire = protocol.encode(value, keep)
        assert set(wire) == {"r", "n"} and wire["n"] == type(value).__name__
        assert protocol.decode(wire, find) is value


def test_the_judge_turns_handles_into_remotes():
    channel = types.SimpleNamespace(deadline=float("inf"))
    (remote,) = decode({"l": [protocol.handle(3, "module")]}, channel)
    assert isinstance(remote, Remote) and repr(remote) == "<module in the sandbox>" and remote._ref == 3


MALFORMED = {
    "a JSON list": [1],
    "an unknown tag": {"m": "math"},
    "two tags": {"l": [], "t": []},
    "a handle without a kind": {"r": 1},
    "a handle with a string ref": {"r": "1", "n": "x"},
    "a list that is no list": {"l": "abc"},
    "an unhashable set member": {"s": [{"l": []}]},
    "an unhashable dict key": {"d": [[{"l": []}, 1]]},
    "a dict entry of three": {"d": [[1, 2, 3]]},
    "bytes not in hex": {"b": "xyz"},
    "a complex of strings": {"c": ["1", "2"]},
    "a complex of one part": {"c": [1]},
    "an int not in hex": {"i": "0xg"},
}


@pytest.mark.parametrize("wire", MALFORMED)
def test_what_is_not_the_protocol_is_refused_as_such(wire):
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(MALFORMED[wire], lambda ref, kind: None)
    with pytest.raises(WorkerGone, match="broke the protocol"):
        decode(MALFORMED[wire], types.SimpleNamespace(deadline=float("inf")))


@pytest.mark.parametrize(
    "line", [b"not json", b"[1]", b'{"ok": 1, "x": 2}', b'{"error": ["ValueError"]}', b"9" * 5000]
)
def test_lines_that_are_no_reply_are_refused(line):
    with pytest.raises(protocol.ProtocolError):
        protocol.reply_value(protocol.loads(line))


def test_errors_name_the_nearest_builtin_exception():
    class Negative(ValueError):
        pass

    assert protocol.error(Negative("below zero")) == {"error": ["ValueError", "Negative: below zero"]}
    assert protocol.error(KeyError("k")) == {"error": ["KeyError", "'k'"]}
    with pytest.raises(protocol.Raised) as raised:
        protocol.reply_value(protocol.error(Negative("x")))
    assert (raised.value.name, raised.value.text) == ("ValueError", "Negative: x")
