"""The trusted side: runs the dataset's tests here, against the candidate's code over there.

The candidate's code lives in a jailed worker process (``worker.py``). The tests run in this
process, in a fresh namespace where every name the candidate defined is a proxy: calling it sends
the arguments to the worker and brings back the result. Results come back over ``protocol`` and
are rebuilt here only as plain builtin values (numbers, strings, bytes, lists, tuples, dicts, sets)
or as opaque handles (``Remote``), so the comparisons in the asserts are Python's own, never the
candidate's ``__eq__``. The verdict is "the tests ran to their end here without raising": nothing
the worker can write, print, exit with or read out of memory changes it.
"""

from __future__ import annotations

import builtins
import importlib
import os
import select
import subprocess
import sys
import time
from collections.abc import Collection
from types import CodeType
from typing import Any

from bench.sandbox import protocol

MAX_REPLY_BYTES = 16 * 1024**2
MAX_REPLY_ITEMS = 1_000_000  # values in one reply, nested ones included
# Brackets in one reply, counted before it is parsed: JSON decoding builds every container before
# any budget sees it: 16 MiB of empty ones took some 440 MiB here; with this cap a reply peaks near
# 15 MiB, and one refused at 16 MiB near 32 MiB (tracemalloc, a million empty lists).
MAX_REPLY_CONTAINERS = 100_000
# Distinct hashable values of one reply that may share a hash: ints congruent modulo 2**61 - 1 (and
# tuples of them) all hash alike, and a set or dict of many would take quadratic time here.
MAX_SAME_HASH = 64
# Raised by the candidate, these would steer the tests' own control flow (StopIteration ends an
# ``all(map(...))`` early and so passes it; SystemExit and KeyboardInterrupt would stop the judge):
# here they arrive as a plain failure.
_CONTROL_FLOW = ("StopIteration", "StopAsyncIteration", "GeneratorExit", "KeyboardInterrupt", "SystemExit")
# Of the program's output (stdout and stderr, one pipe), the last bytes kept: they say why it died.
OUTPUT_KEPT = 4096


class CandidateRaised(Exception):
    """An exception the candidate raised that must not act as control flow in the judge."""


class Timeout(Exception):
    """The worker did not answer before the program's deadline."""


class WorkerGone(Exception):
    """The worker died, closed its pipe or broke the protocol."""


class Output:
    """The program's stdout and stderr, one pipe that the judge drains whenever it waits on the
    worker: only the last ``OUTPUT_KEPT`` bytes are kept, the rest counted and dropped. So an honest
    program may print as much as it likes (it never blocks on a full pipe, nor dies at a file size
    limit), and a hostile one fills neither the host's disk nor its memory."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self.fd, self.open, self.tail, self.total = fd, True, bytearray(), 0

    def read(self) -> None:
        """One read of what the pipe holds; at its end the pipe is no longer waited on."""
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            self.open = False
            return
        self.total += len(chunk)
        self.tail += chunk
        del self.tail[:-OUTPUT_KEPT]

    def read_rest(self, limit: int = 1 << 20) -> None:
        """What the pipe still holds, up to ``limit`` bytes: all of it once the worker is dead."""
        start = self.total
        while self.open and self.total - start < limit:
            before = self.total
            self.read()
            if self.total == before:  # empty for now (or just ended)
                return

    def waited_on(self) -> list[int]:
        return [self.fd] if self.open else []

    def last_line(self) -> str:
        lines = self.tail.decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else ""

    def note(self) -> str:
        """What was dropped, for the outcome (empty when nothing was)."""
        dropped = self.total - len(self.tail)
        if not dropped:
            return ""
        return (
            f"{dropped:,} bytes of the program's output discarded (the judge keeps the last {OUTPUT_KEPT:,})"
        )


class Channel:
    """One JSON line out, one JSON line back, within a deadline and a size cap, the program's
    output drained all the while."""

    def __init__(self, proc: subprocess.Popen, deadline: float, output: Output) -> None:
        self.proc, self.deadline, self.output, self.buffer = proc, deadline, output, bytearray()
        assert proc.stdin is not None and proc.stdout is not None  # the jail opens both as pipes
        self.stdin, self.stdout = proc.stdin, proc.stdout

    def request(self, message: dict[str, Any]) -> Any:
        self._send(protocol.dumps(message))
        line = self._line()
        if line.count(b"{") + line.count(b"[") > MAX_REPLY_CONTAINERS:
            raise WorkerGone(f"a reply held more than {MAX_REPLY_CONTAINERS} brackets")
        try:
            return protocol.reply_value(protocol.loads(line))
        except protocol.ProtocolError as exc:
            raise WorkerGone(f"the program's process broke the protocol: {exc}") from None
        except protocol.Raised as raised:
            kind = getattr(builtins, raised.name, None)
            if raised.name in _CONTROL_FLOW or not (isinstance(kind, type) and issubclass(kind, Exception)):
                raise CandidateRaised(f"{raised.name}: {raised.text}") from None
            raise kind(raised.text) from None

    def _send(self, data: bytes) -> None:
        """Write without ever blocking past the deadline: a worker that stops reading its pipe
        leaves the judge waiting only until then."""
        fd = self.stdin.fileno()
        os.set_blocking(fd, False)
        view = memoryview(data)
        while view:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise Timeout
            readable, writable, _ = select.select(self.output.waited_on(), [fd], [], left)
            if readable:
                self.output.read()
            if not writable:
                if not readable:
                    raise Timeout
                continue
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                continue
            except OSError as exc:  # BrokenPipeError among them
                raise WorkerGone("the program's process is gone") from exc

    def _line(self) -> bytes:
        """One reply line, read before the deadline; at most ``MAX_REPLY_BYTES``."""
        fd = self.stdout.fileno()
        while (end := self.buffer.find(b"\n")) < 0:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise Timeout
            readable = select.select([fd, *self.output.waited_on()], [], [], left)[0]
            if not readable:
                raise Timeout
            if self.output.fd in readable:
                self.output.read()
            if fd not in readable:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise WorkerGone("the program's process exited before the tests finished")
            self.buffer += chunk
            if len(self.buffer) > MAX_REPLY_BYTES:
                raise WorkerGone(f"a reply exceeded {MAX_REPLY_BYTES} bytes")
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 1]
        return line


class Remote:
    """A value that stays in the worker (a protocol handle): it can be called, iterated, passed
    back and have its attributes read or set, all by asking the worker; it is equal only to itself
    and has no truth value, since its ``__eq__`` and ``__bool__`` would be the candidate's."""

    def __init__(self, channel: Channel, ref: int, kind: str) -> None:
        object.__setattr__(self, "_channel", channel)
        object.__setattr__(self, "_ref", ref)
        object.__setattr__(self, "_kind", kind[:100])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        message = protocol.call(
            self._ref, [encode(a) for a in args], {str(k): encode(v) for k, v in kwargs.items()}
        )
        return decode(self._channel.request(message), self._channel)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return decode(self._channel.request(protocol.get_attribute(self._ref, name)), self._channel)

    def __setattr__(self, name: str, value: Any) -> None:
        self._channel.request(protocol.set_attribute(self._ref, name, encode(value)))

    def __iter__(self) -> Any:
        return iter(decode(self._channel.request(protocol.list_items(self._ref)), self._channel))

    def __bool__(self) -> bool:
        raise TypeError(f"a {self._kind} from the sandbox has no truth value here; return a bool")

    def __repr__(self) -> str:
        return f"<{self._kind} in the sandbox>"


def _send_remote(value: Any) -> dict[str, Any]:
    if isinstance(value, Remote):
        return protocol.handle(value._ref, value._kind)
    raise TypeError(f"a {type(value).__name__} cannot be passed into the sandbox")


def encode(value: Any) -> Any:
    """Arguments for the worker: plain values by content, ``Remote`` handles by reference."""
    return protocol.encode(value, _send_remote)


class _Budget:
    """What one reply may build here: a number of values, few distinct values per hash, and the
    example's deadline (hashing nested tuples level by level is still more than linear work)."""

    def __init__(self, deadline: float) -> None:
        self.items, self.deadline = 0, deadline
        self.by_hash: dict[int, list[Any]] = {}

    def take(self, value: Any) -> Any:
        self.items += 1
        if time.monotonic() > self.deadline:
            raise Timeout
        if self.items > MAX_REPLY_ITEMS:
            raise WorkerGone(f"a reply held more than {MAX_REPLY_ITEMS} values")
        if type(value) in (int, float, complex, bytes, tuple, frozenset):
            try:
                key = hash(value)
            except TypeError:  # a tuple holding a list: it can be no set member or dict key
                return value
            same = self.by_hash.setdefault(key, [])
            if len(same) < MAX_SAME_HASH + 1 and not any(type(v) is type(value) and v == value for v in same):
                same.append(value)
                if len(same) > MAX_SAME_HASH:
                    raise WorkerGone("a reply held many distinct values with one hash (a hash flood)")
        return value


def decode(value: Any, channel: Channel) -> Any:
    """A worker's reply rebuilt from builtin types only: nothing of the candidate's runs here, and
    nothing it sends keeps this side busy past the example's deadline."""
    budget = _Budget(channel.deadline)
    try:
        return protocol.decode(value, lambda ref, kind: Remote(channel, ref, kind), budget.take)
    except protocol.ProtocolError as exc:
        raise WorkerGone(f"the program's process broke the protocol: {exc}") from None


def _names(code: CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, CodeType):
            names |= _names(const)
    return names


def run_tests(channel: Channel, code: str, tests: str, provides: Collection[str], trusted: str = "") -> None:
    """Load the candidate's code in the worker, then run ``tests`` here; raises if they fail.

    The tests see, of what the program defined, only the names in ``provides`` (those the
    reference solution defines), so a program cannot hand them its own ``abs`` or ``sorted``.
    ``trusted`` is dataset code run here first (HumanEval's prompt): the helpers the tests call
    (``poly``, ``encode_cyclic``) are the prompt's own, out of the completion's reach.
    """
    compiled = compile(tests, "tests.py", "exec")
    used = _names(compiled)
    # Only what the tests name crosses over: an honest program's big global table stays there.
    exports = channel.request(protocol.load(code, sorted(used)))
    if type(exports) is not dict:
        raise WorkerGone("the program's process broke the protocol")
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    if trusted:
        exec(compile(trusted, "prompt.py", "exec"), namespace)
    for name in used & set(exports):
        if name in provides:
            namespace[name] = decode(exports[name], channel)
        elif name in sys.stdlib_module_names:
            # MBPP's asserts use modules the program imported (math.isclose): the real module,
            # imported here, whatever the program bound to that name.
            namespace[name] = importlib.import_module(name)
    exec(compiled, namespace)
