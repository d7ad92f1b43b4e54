"""The operating-system jail: bubblewrap namespaces plus a seccomp filter against new processes.

Inside, the worker sees a read-only ``/usr`` and Python's own install, a fresh ``/proc`` and a
read-only minimal ``/dev``, on a read-only root; a small private tmpfs at ``/tmp`` is the only
writable place. It has its own user,
PID, network (loopback only, none of the host's), IPC, UTS and cgroup namespaces, no capabilities,
no environment beyond PATH/HOME/LANG, and dies with its parent. The seccomp filter makes fork,
vfork and process-creating clone fail with EPERM (threads stay allowed), which also holds for
root, where RLIMIT_NPROC does not.
"""

from __future__ import annotations

import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import IO

from bench.errors import BenchError
from bench.sandbox.base import reap

GUARD_HINT = "or pass --sandbox guard to accept the weaker in-process guard"
INSTALL_HINT = f"install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap), {GUARD_HINT}"
TMPFS_BYTES = 64 * 1024**2

# struct seccomp_data: nr at 0, arch at 4, args[0] (low half, little-endian) at 16.
_ARCHES = {  # audit arch, [fork-like syscalls], clone, clone3, lowest x32 syscall or None
    "x86_64": (0xC000003E, [57, 58], 56, 435, 0x40000000),
    "aarch64": (0xC00000B7, [], 220, 435, None),
}
_CLONE_THREAD = 0x00010000
_RET_ALLOW, _RET_KILL = 0x7FFF0000, 0x80000000
_RET_EPERM, _RET_ENOSYS = 0x00050000 | 1, 0x00050000 | 38


def _bpf(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def seccomp_filter(machine: str) -> bytes:
    """A classic-BPF program for ``bwrap --seccomp``: no new processes, any other syscall allowed.

    clone3 answers ENOSYS so the C library falls back to clone, whose flags a filter can read;
    foreign ABIs (x32, 32-bit) are killed because their syscall numbers differ.
    """
    if machine not in _ARCHES:
        raise BenchError(f"the bwrap sandbox has no seccomp filter for {machine}; {GUARD_HINT}")
    arch, forks, clone, clone3, x32 = _ARCHES[machine]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    head = [_bpf(ld, 4), _bpf(jeq, arch, 1, 0), _bpf(ret, _RET_KILL), _bpf(ld, 0)]
    if x32 is not None:
        head += [_bpf(jge, x32, 0, 1), _bpf(ret, _RET_KILL)]
    # Each check jumps to the matching return below; the returns follow in the order
    # eperm, enosys, clone-check, allow.
    checks = [(nr, "eperm") for nr in forks] + [(clone3, "enosys"), (clone, "clone")]
    tail = [
        _bpf(ret, _RET_ALLOW),
        _bpf(ret, _RET_EPERM),
        _bpf(ret, _RET_ENOSYS),
        _bpf(ld, 16),
        _bpf(jset, _CLONE_THREAD, 0, 1),
        _bpf(ret, _RET_ALLOW),
        _bpf(ret, _RET_EPERM),
    ]
    where = {"eperm": 1, "enosys": 2, "clone": 3}
    body = []
    for i, (nr, target) in enumerate(checks):
        after = len(checks) - i - 1  # checks still to skip to reach the tail
        body.append(_bpf(jeq, nr, after + where[target], 0))
    return b"".join(head + body + tail)


def _system_view() -> list[str]:
    """Read-only binds of the system's /usr and of Python's install, and its top-level links."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib64", "/lib32"):
        path = Path(top)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), top]
        elif path.is_dir():
            args += ["--ro-bind", top, top]
    prefix = Path(sys.base_prefix).resolve()
    if not prefix.is_relative_to("/usr"):
        args += ["--ro-bind", str(prefix), str(prefix)]
    return args


class BwrapJail:
    name = "bwrap"

    def __init__(self) -> None:
        self.filter = seccomp_filter(platform.machine())

    def command(self, argv: list[str], seccomp_fd: int) -> list[str]:
        return [
            _bwrap(),
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--cap-drop", "ALL",
            *_system_view(),
            "--proc", "/proc",
            "--dev", "/dev",
            "--remount-ro", "/dev",
            "--size", str(TMPFS_BYTES), "--tmpfs", "/tmp",
            "--remount-ro", "/",
            "--chdir", "/tmp",
            "--hostname", "sandbox",
            "--clearenv",
            "--setenv", "PATH", "/usr/bin:/bin",
            "--setenv", "HOME", "/tmp",
            "--setenv", "LANG", "C.UTF-8",
            "--seccomp", str(seccomp_fd),
            "--",
            *argv,
        ]  # fmt: skip

    @contextmanager
    def process(self, limits: str, worker: str, stderr: IO[bytes]) -> Iterator[subprocess.Popen]:
        argv = [os.path.realpath(sys.executable), "-I", "-S", "-c", limits + worker]
        read, write = os.pipe()
        try:
            os.write(write, self.filter)
            os.close(write)
            proc = subprocess.Popen(
                self.command(argv, read),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                pass_fds=(read,),
                env={},  # bwrap's own process stays in the jail as PID 1: it must hold no secrets
                start_new_session=True,
            )
        finally:
            os.close(read)
        yield from reap(proc)

    def check(self) -> None:
        _probe()


def _bwrap() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise BenchError(f"generated code is not run: bubblewrap (bwrap) is not installed; {INSTALL_HINT}")
    return path


@lru_cache(maxsize=1)
def _probe() -> None:
    """Once per process: bwrap exists and can build this jail here; else say what to do."""
    _bwrap()
    with tempfile.TemporaryFile() as err:
        with BwrapJail().process("", "pass", err) as proc:
            proc.communicate()
        if proc.returncode != 0:
            err.seek(0)
            said = err.read().decode(errors="replace").strip().splitlines()
            reason = said[-1] if said else f"exit code {proc.returncode}"
            raise BenchError(
                f"generated code is not run: bubblewrap cannot build its jail here ({reason}); "
                f"allow unprivileged user namespaces, {GUARD_HINT}"
            )
