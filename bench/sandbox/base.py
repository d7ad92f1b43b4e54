"""What every jail shares: the limits, the outcome, the interface and how a worker is reaped."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import IO, Protocol


@dataclass(frozen=True)
class Limits:
    """``timeout_s`` is CPU time, fair on a loaded machine; a program blocked without using CPU
    (sleeping, waiting on a pipe) is stopped by the wall clock, ``wall_s`` (default: 3 x that)."""

    timeout_s: float = 10.0
    wall_s: float | None = None
    memory_bytes: int = 2 * 1024**3
    file_bytes: int = 8 * 1024**2
    threads: int = 32  # threads and processes of the jail's uid (forks are denied anyway)
    # Open descriptors: each socket or pipe holds kernel memory the address-space limit does not
    # count, and the descriptors passed in flight over a unix socket are capped by the same number.
    files: int = 64

    @property
    def wall(self) -> float:
        return self.wall_s if self.wall_s is not None else 3 * self.timeout_s


@dataclass(frozen=True)
class Outcome:
    passed: bool
    status: str  # passed | failed | timeout
    sandbox: str
    detail: str = ""


class Jail(Protocol):
    """Starts the worker (``python -c limits + worker``, stdin/stdout its pipes) in some isolation;
    a jail may add its own hardening between the two."""

    name: str

    def check(self) -> None:
        """Raise ``BenchError`` saying what to do when this jail cannot run here."""

    def process(
        self, limits: str, worker: str, stderr: IO[bytes]
    ) -> AbstractContextManager[subprocess.Popen]:
        """The running worker; leaving the context kills it and everything it started."""


def reap(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """Yield ``proc``, then kill its whole session (it was started with ``start_new_session``)."""
    try:
        yield proc
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
