"""What every jail shares: the limits, the outcome, the interface and how a worker is reaped."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol


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
    detail: str = ""  # why it failed
    note: str = ""  # what the judge dropped on the way (output past its cap), pass or fail


class Jail(Protocol):
    """Starts the worker (``python -c limits + worker``; stdin, stdout and stderr its pipes) in some
    isolation; a jail may add its own hardening between the two."""

    name: str

    def check(self) -> None:
        """Raise ``BenchError`` saying what to do when this jail cannot run here."""

    def process(self, limits: str, worker: str) -> AbstractContextManager[subprocess.Popen]:
        """The running worker; leaving the context kills it and everything it started."""


REAP_S = 1.0  # how long the reaper waits for the children of the killed process to be gone


def reap(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """Yield ``proc``, then kill its whole session (it was started with ``start_new_session``) and
    wait until its children are gone too, up to ``REAP_S``. bwrap's child is the jail's PID 1: it
    exits only after every process in the jail has, so no example outlives its score (dying with
    gigabytes to free takes a while)."""
    try:
        yield proc
    finally:
        children = _pidfds_of_children(proc.pid)  # numbered before the kill, which frees the numbers
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        end = time.monotonic() + REAP_S
        while children and (left := end - time.monotonic()) > 0:
            for fd in select.select(children, [], [], left)[0]:  # readable once that process exited
                children.remove(fd)
                os.close(fd)
        for fd in children:
            os.close(fd)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass


def _pidfds_of_children(pid: int) -> list[int]:
    """Handles on ``pid``'s children that stay valid once it is dead and they are reparented."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as listing:
            listed = listing.read().split()
    except OSError:  # already gone
        return []
    fds = []
    for child in listed:
        try:
            fds.append(os.pidfd_open(int(child)))
        except ProcessLookupError:
            pass
    return fds
