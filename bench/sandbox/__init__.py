"""Running model-written code against its tests: the candidate in a jail, the verdict outside it.

``run_tests(code, tests)`` starts a worker in the chosen jail (``bwrap``, the default and the
only one that isolates; ``guard`` only when asked for), loads the candidate's code there, and runs
the dataset's tests in this process against proxies of what the code defined (see ``judge``).
The outcome names the jail, so scored rows can record it. There is no silent downgrade: without
a usable bubblewrap no code runs and the error says how to install it or how to ask for the guard.
"""

from __future__ import annotations

import math
import signal
import subprocess
import time
from collections.abc import Collection
from functools import lru_cache
from pathlib import Path

from bench.errors import BenchError
from bench.plugins import Registry
from bench.sandbox import judge
from bench.sandbox.base import Jail, Limits, Outcome
from bench.sandbox.bwrap import BwrapJail
from bench.sandbox.guard import GuardJail

__all__ = ["Limits", "Outcome", "SANDBOXES", "run_tests", "use_sandbox"]

SANDBOXES: Registry[Jail] = Registry("sandbox", BwrapJail, GuardJail)
_chosen = "bwrap"


def _jail_program() -> str:
    """The worker's program for ``python -I -S -c``, which cannot import this package: the protocol
    and the worker modules, shipped as text and defined under their own names, then the worker run."""
    lines = ["import sys as _sys, types as _types"]
    for name in ("protocol", "worker"):
        module = f"bench.sandbox.{name}"
        source = Path(__file__).with_name(f"{name}.py").read_text()
        lines += [
            f"_sys.modules[{module!r}] = _types.ModuleType({module!r})",
            f"exec(compile({source!r}, {name + '.py'!r}, 'exec'), _sys.modules[{module!r}].__dict__)",
        ]
    return "\n".join(lines + ["_sys.modules['bench.sandbox.worker'].main()", ""])


_WORKER = _jail_program()


def use_sandbox(name: str) -> None:
    """Choose the jail for every later ``run_tests`` in this process (the CLI's ``--sandbox``)."""
    global _chosen
    if name not in SANDBOXES:
        raise BenchError(f"unknown sandbox {name!r}; choose one of {', '.join(SANDBOXES)}")
    _chosen = name


@lru_cache(maxsize=None)
def _jail(name: str) -> Jail:
    jail = SANDBOXES[name]()
    jail.check()
    return jail


def _limits_source(limits: Limits) -> str:
    """Set by the worker's first lines, before any candidate code exists; hard limits, so the
    candidate (without CAP_SYS_RESOURCE) cannot raise them again."""
    cpu = math.ceil(limits.timeout_s)
    pairs = [("CPU", cpu, cpu + 1), ("AS", limits.memory_bytes, limits.memory_bytes)]
    pairs += [("FSIZE", limits.file_bytes, limits.file_bytes), ("CORE", 0, 0)]
    pairs += [("NPROC", limits.threads, limits.threads)]  # counted for the jail's unprivileged uid
    pairs += [("NOFILE", limits.files, limits.files), ("MSGQUEUE", 0, 0)]  # POSIX queues: kernel memory
    body = "".join(f"resource.setrlimit(resource.RLIMIT_{k}, ({s}, {h}))\n" for k, s, h in pairs)
    return "import resource\n" + body


def _killed_by_cpu_limit(proc: subprocess.Popen) -> bool:
    """SIGXCPU at the soft limit, SIGKILL at the hard one; bwrap reports them as 128 + signal."""
    try:
        code = proc.wait(timeout=1)
    except subprocess.TimeoutExpired:
        return False
    return code in (-signal.SIGXCPU, -signal.SIGKILL, 128 + signal.SIGXCPU, 128 + signal.SIGKILL)


def run_tests(
    code: str, tests: str, provides: Collection[str], limits: Limits = Limits(), trusted: str = ""
) -> Outcome:
    """Pass only if ``tests`` run to their end, here, against ``code`` running in the jail;
    ``provides``: the names the tests may take from the program (its functions and classes);
    ``trusted``: dataset code the tests call, run here (HumanEval's prompt helpers). One wall-clock
    deadline covers every exchange; past it the jail's whole process tree is killed. What the
    program prints is drained and dropped as it comes, never part of the verdict."""
    jail = _jail(_chosen)
    with jail.process(_limits_source(limits), _WORKER) as proc:
        wall = limits.wall
        assert proc.stderr is not None  # the jail opens it as a pipe
        output = judge.Output(proc.stderr.fileno())
        channel = judge.Channel(proc, time.monotonic() + wall, output)
        try:
            judge.run_tests(channel, code, tests, provides, trusted)
            status, detail = "passed", ""
        except judge.Timeout:
            status, detail = "timeout", f"killed after {wall:g} s of wall-clock time"
        except judge.WorkerGone as exc:
            if _killed_by_cpu_limit(proc):
                status, detail = "timeout", f"over {limits.timeout_s:g} s of CPU time"
            else:
                output.read_rest()  # why it died: the last line it wrote (a fatal error, say)
                status, detail = "failed", f"{exc}; {output.last_line()}"[:300]
        except Exception as exc:  # the tests failed: an assert, or an error they raised
            status, detail = "failed", f"{type(exc).__name__}: {exc}"[:300]
    return Outcome(status == "passed", status, jail.name, detail, output.note())
