"""Hostile programs against the bwrap jail, each in its own sandbox: 0 escapes, 0 passes without
the asserts having run. Each attack is written so that success would make its tests pass (or leave
a mark on the host), and where the route is subtle, a control run outside the jail shows it works."""

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from textwrap import indent

import pytest

from bench.sandbox import Limits, run_tests

FAST = Limits(timeout_s=3)


def attack(code: str, tests: str = "assert f()", limits: Limits = FAST):
    outcome = run_tests(code, tests, {"f"}, limits)
    assert outcome.sandbox == "bwrap"
    return outcome


# Each route starts a process that creates MARK; ``f`` says whether MARK exists.
SPAWN = {
    "os.fork": "pid = os.fork()\nif pid == 0:\n    open(MARK, 'w').close()\n    os._exit(0)\nos.waitpid(pid, 0)",
    "os.system": "os.system('touch ' + MARK)",
    "subprocess": "import subprocess\nsubprocess.run(['touch', MARK])",
    "os.posix_spawn": "os.waitpid(os.posix_spawn('/usr/bin/touch', ['touch', MARK], {}), 0)",
    "_posixsubprocess": (
        "import _posixsubprocess\nr, w = os.pipe()\n"
        "pid = _posixsubprocess.fork_exec([b'/usr/bin/touch', MARK.encode()], [b'/usr/bin/touch'], True,"
        " (w,), None, None, -1, -1, -1, -1, -1, -1, r, w, False, False, -1, None, None, None, -1, None,"
        " False)\nos.waitpid(pid, 0)"
    ),
    "multiprocessing": (
        "import multiprocessing\np = multiprocessing.get_context('fork').Process(target=open, args=(MARK, 'w'))"
        "\np.start()\np.join()"
    ),
    "pty.fork": "import pty\npid, fd = pty.fork()\nif pid == 0:\n    open(MARK, 'w').close()\n    os._exit(0)\nos.waitpid(pid, 0)",
    "ctypes libc fork": (
        "import ctypes\npid = ctypes.CDLL(None).fork()\nif pid == 0:\n    open(MARK, 'w').close()\n    os._exit(0)\n"
        "os.waitpid(pid, 0)"
    ),
    "ctypes raw clone": (
        "import ctypes, platform\nnr = {'x86_64': 56, 'aarch64': 220}[platform.machine()]\n"
        "pid = ctypes.CDLL(None).syscall(nr, 17, 0, 0, 0, 0)\nif pid == 0:\n    open(MARK, 'w').close()\n"
        "    os._exit(0)\nos.waitpid(pid, 0)"
    ),
}


def _spawner(route: str, mark: str) -> str:
    body = indent(SPAWN[route], "    ")
    return f"import os\nMARK = {mark!r}\ntry:\n{body}\nexcept BaseException:\n    pass\n"


@pytest.mark.parametrize("route", list(SPAWN))
def test_no_process_can_be_created(tmp_path, route):
    control = tmp_path / "control"
    subprocess.run([sys.executable, "-c", _spawner(route, str(control))], cwd=tmp_path, timeout=30)
    assert control.exists(), f"the {route} route does not work even outside the jail"
    host_mark = tmp_path / "escaped"
    for mark in ("/tmp/child", str(host_mark)):
        code = _spawner(route, mark) + f"def f():\n    return os.path.exists({mark!r})\n"
        assert not attack(code).passed
    assert not host_mark.exists()


def test_fork_bomb_is_stopped_at_once():
    outcome = attack("import os\nwhile True:\n    os.fork()\n", limits=Limits(timeout_s=10))
    assert not outcome.passed and outcome.status == "failed" and "PermissionError" in outcome.detail


def test_threads_are_not_processes_and_still_work():
    code = "import threading\nout = []\nt = threading.Thread(target=out.append, args=(1,))\nt.start()\nt.join()\n"
    assert attack(code + "def f():\n    return out == [1]\n").passed


@pytest.mark.parametrize("where", ["/usr/escaped", sys.base_prefix + "/escaped", "/work/escaped", "HOST"])
def test_writes_outside_the_jail_do_not_land(tmp_path, where):
    path = str(tmp_path / "escaped") if where == "HOST" else where
    code = (
        f"import os\ndef f():\n    try:\n        os.makedirs(os.path.dirname({path!r}), exist_ok=True)\n"
        f"        open({path!r}, 'w').write('x')\n        return True\n    except OSError:\n        return False\n"
    )
    outcome = attack(code)
    assert not os.path.exists(path)
    if where != "HOST":  # a host path only "works" inside the jail's own tmpfs, which dies with it
        assert not outcome.passed


def test_the_private_tmp_is_writable_and_capped():
    code = (
        "def f():\n    n = 0\n    try:\n        for i in range(200):\n"
        "            open(f'/tmp/{i}', 'wb').write(b'x' * 2**20)\n            n += 1\n"
        "    except OSError:\n        pass\n    return n\n"
    )
    assert attack(code, "assert 10 < f() < 100").passed  # writable, and stops below 100 MiB


def test_host_files_cannot_be_read(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    for path in (str(secret), "/etc/passwd", os.path.join(os.getcwd(), "pyproject.toml")):
        code = f"import os\ndef f():\n    return os.path.exists({path!r})\n"
        assert not attack(code).passed, path


def test_runner_environment_and_processes_are_invisible(monkeypatch):
    token = secrets.token_hex(8)
    monkeypatch.setenv("BENCH_HOSTILE_SECRET", token)
    host = os.getpid()
    code = (
        "import os, glob\ndef f():\n    seen = str(dict(os.environ))\n"
        "    for p in glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline'):\n"
        "        try:\n            seen += open(p, 'rb').read().decode(errors='replace')\n"
        "        except OSError:\n            pass\n"
        f"    try:\n        seen += open('/proc/{host}/mem', 'rb').read(1).decode(errors='replace')\n"
        "    except OSError:\n        pass\n"
        f"    return {token!r} in seen or os.path.exists('/proc/{host}/environ')\n"
    )
    assert not attack(code).passed


SCAN = """
def f():
    h1, h2 = H1.encode(), H2.encode()
    mem = open('/proc/self/mem', 'rb')
    for line in open('/proc/self/maps').read().splitlines():
        span, perms = line.split()[:2]
        lo, hi = (int(x, 16) for x in span.split('-'))
        if not perms.startswith('rw') or hi - lo > 2**28:
            continue
        try:
            mem.seek(lo)
            data = mem.read(hi - lo)
        except OSError:
            continue
        i = data.find(h1)
        while i >= 0:
            if data[i + len(h1) : i + len(h1) + len(h2)] == h2:
                return True
            i = data.find(h1, i + 1)
    return False
"""


def test_the_tests_are_not_in_the_programs_memory():
    token = secrets.token_hex(8)
    code = f"H1, H2 = {token[:8]!r}, {token[8:]!r}\n" + SCAN
    planted = "_planted = H1 + H2\n"  # control: the scan finds the token where it is in memory...
    control = attack(code.replace(SCAN, planted + SCAN), f"assert f(), {token!r}")
    # ...unless the jail cannot read even its own memory (a worker that left uid 0 is not dumpable)
    assert control.passed or "Permission denied: '/proc/self/mem'" in control.detail, control
    assert not attack(code, f"assert f(), {token!r}").passed


def test_other_host_processes_cannot_be_signalled():
    victim = subprocess.Popen(["sleep", "30"])
    try:
        code = (
            f"import os, signal\ntry:\n    os.kill({victim.pid}, signal.SIGKILL)\nexcept OSError:\n    pass\n"
        )
        attack(code + "def f():\n    return True\n")
        time.sleep(0.2)
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_network_and_loopback_are_unreachable():
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    tcp.settimeout(0.5)
    name = f"bench-hostile-{secrets.token_hex(4)}"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind("\0" + name)
    unix.listen()
    unix.settimeout(0.5)
    try:
        code = (
            "import socket\ndef f():\n    ok = []\n"
            f"    for family, address in ((socket.AF_INET, ('127.0.0.1', {tcp.getsockname()[1]})),"
            f" (socket.AF_UNIX, '\\0{name}'), (socket.AF_INET, ('1.1.1.1', 53))):\n"
            "        try:\n            socket.socket(family).connect(address)\n            ok.append(1)\n"
            "        except OSError:\n            pass\n    return bool(ok)\n"
        )
        assert not attack(code).passed
        for server in (tcp, unix):
            with pytest.raises(socket.timeout):
                server.accept()
    finally:
        tcp.close()
        unix.close()


@pytest.mark.parametrize(
    "code",
    [
        "x = bytearray(20 * 1024 ** 3)\ndef f():\n    return True\n",
        "xs = []\nwhile True:\n    xs.append(bytearray(10 ** 8))\n",
    ],
)
def test_memory_exhaustion_is_refused(code):
    outcome = attack(code, limits=Limits(timeout_s=5, memory_bytes=512 * 1024**2))
    assert not outcome.passed and "MemoryError" in outcome.detail


def test_cpu_loop_with_signals_ignored_is_killed():
    code = (
        "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU, signal.SIGALRM):\n"
        "    signal.signal(s, signal.SIG_IGN)\ndef f():\n    while True:\n        pass\n"
    )
    outcome = attack(code, limits=Limits(timeout_s=1, wall_s=120))
    assert outcome.status == "timeout" and "CPU time" in outcome.detail


def test_a_sleeping_program_is_stopped_by_the_wall_clock():
    outcome = attack("import time\ndef f():\n    time.sleep(600)\n", limits=Limits(timeout_s=1))
    assert outcome.status == "timeout" and "wall-clock" in outcome.detail


FLOODS = {
    "print": "while True:\n    print('x' * 10000)\n",
    "stdout": "import os\nwhile True:\n    os.write(1, b'x' * 10000)\n",
    "stderr": "import os\nwhile True:\n    os.write(2, b'x' * 10000)\n",
    "from threads": (
        "import os, threading\nfor _ in range(8):\n"
        "    threading.Thread(target=lambda: [os.write(2, b'x' * 65536) for _ in iter(int, 1)], daemon=True).start()\n"
        "def f():\n    import time\n    time.sleep(600)\n"
    ),
}


@pytest.mark.parametrize("flood", FLOODS)
def test_output_floods_fill_nothing_on_the_host(flood):
    """Output is drained from a pipe and dropped past the judge's last few KiB: an endless flood
    runs into the clock, the judge holding no more of it than that."""
    import tracemalloc

    tracemalloc.start()
    try:
        outcome = attack(FLOODS[flood], limits=Limits(timeout_s=1, wall_s=3))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert outcome.status == "timeout" and "output discarded" in outcome.note, outcome
    assert peak < 4 * 1024**2, f"the judge held {peak / 1024**2:.1f} MiB"


def test_a_flood_of_the_reply_pipe_is_refused():
    code = (
        "import os\nwhile True:\n    for fd in range(3, 8):\n        try:\n            os.write(fd, b'[' * 100000)\n"
        "        except OSError:\n            pass\n"
    )
    outcome = attack(code, limits=Limits(timeout_s=20))
    assert not outcome.passed and outcome.status == "failed", outcome  # stopped by the cap, not the clock
    assert "a reply exceeded" in outcome.detail, outcome.detail


EARLY_EXITS = [
    "import sys\nsys.exit(0)\n",
    "import os\nos._exit(0)\n",
    "raise SystemExit\n",
    "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
    "import atexit, os\natexit.register(os._exit, 0)\n",
    "import sys\nclass D:\n    def __del__(self):\n        sys.exit(0)\nd = D()\ndel d\n",
    "import signal, os\nsignal.signal(signal.SIGALRM, lambda *a: os._exit(0))\nsignal.setitimer(signal.ITIMER_REAL, 0.01)\n",
    "import os, sys\nos.dup2(os.open(os.devnull, os.O_WRONLY), 1)\nsys.stdout.write('ok\\n')\n",
]


@pytest.mark.parametrize("prelude", EARLY_EXITS)
@pytest.mark.parametrize("where", ["load", "call"])
def test_early_exits_never_pass(prelude, where):
    wrong = "def f(x):\n    return x\n"
    if where == "load":
        code = prelude + wrong
    else:
        code = "def f(x):\n" + indent(prelude, "    ") + "    return x\n"
    assert not attack(code, "assert f(1) == 2").passed


TAMPERING = [
    # the assertion machinery
    "import builtins\nbuiltins.AssertionError = type('Fake', (Exception,), {})\n",
    "import sys\nsys.excepthook = lambda *a: None\n",
    # replacements for what the tests call, besides the function under test
    "abs = lambda x: 0\nsorted = lambda x: [2]\nlen = lambda x: 2\n",
    "class _M:\n    isclose = staticmethod(lambda *a, **k: True)\nmath = _M()\n",
    # objects that claim to equal anything, or to be true
    "class A:\n    __eq__ = lambda s, o: True\n    __bool__ = lambda s: True\n_f = f\nf = lambda x: A()\n",
    "class S(str):\n    __eq__ = lambda s, o: True\n_f = f\nf = lambda x: S('x')\n",
    "class I(int):\n    __eq__ = lambda s, o: True\n_f = f\nf = lambda x: I(7)\n",
    # forged protocol replies
    "import os\nfor fd in range(3, 8):\n    try:\n        os.write(fd, b'{\"ok\": true}\\n' * 50)\n    except OSError:\n        pass\n",
]


@pytest.mark.parametrize("tamper", TAMPERING)
def test_tampering_with_the_checks_never_passes(tamper):
    code = "import math\ndef f(x):\n    return x\n" + tamper
    tests = (
        "assert f(1) == 2\nassert abs(f(1) - 2) < 0.5\nassert sorted(f([2])) == [1]\n"
        "assert math.isclose(f(1), 2)\nassert f(0) is True\nassert len(f('a')) == 2\n"
    )
    for line in tests.splitlines():
        assert not attack(code, line).passed, line


def test_honest_counterparts_of_the_tampering_tests_pass():
    code = "import math\ndef f(x):\n    return x + 1 if isinstance(x, int) else x\n"
    for line in ("assert f(1) == 2", "assert abs(f(1) - 2) < 0.5", "assert math.isclose(f(1), 2)"):
        assert attack(code, line).passed, line


def test_a_signal_to_the_judge_is_impossible():
    code = f"import os, signal\ntry:\n    os.kill({os.getpid()}, signal.SIGINT)\nexcept OSError:\n    pass\n"
    attack(code + "def f():\n    return True\n")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # and we are still here
