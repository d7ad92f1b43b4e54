"""The untrusted side, run inside the jail by ``python -I -S -c``: only the standard library.

It executes the candidate's code, then serves the judge's requests (call this, set that attribute,
list that iterator) over stdin/stdout, one JSON line each (``protocol``; both files are shipped
into the jail as text, see ``bench.sandbox.jail_program``). It never sees the tests and never says
whether they passed: the judge, outside the jail, runs the tests and compares the plain values
this side returns. Nothing here is trusted; it only has to work for honest programs.
"""

from __future__ import annotations

import io
import os
import sys

from bench.sandbox.protocol import decode, dumps, encode, error, handle, loads, ok

TYPE_CHECKING = False  # typing costs every jail milliseconds to import; type checkers read on
if TYPE_CHECKING:
    from typing import Any


def main() -> None:
    """Serve requests until the judge closes stdin."""
    requests = io.open(os.dup(0), "rb")
    replies = io.open(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # the candidate's prints go to the output pipe the judge drains, never into the protocol
    # Block-buffered: a program printing line by line costs a write per 8 KiB, not one per line.
    output = io.TextIOWrapper(io.open(2, "wb", closefd=False), encoding="utf-8", errors="backslashreplace")
    sys.stdin, sys.stdout, sys.stderr = open(os.devnull), output, output
    handles: list[Any] = []

    def keep(value: Any) -> dict[str, Any]:
        handles.append(value)
        return handle(len(handles) - 1, type(value).__name__)

    def send(value: Any) -> Any:
        return encode(value, keep)

    def receive(value: Any) -> Any:
        return decode(value, lambda ref, kind: handles[ref])

    def serve(request: dict[str, Any]) -> Any:
        op = request["op"]
        if op == "load":
            namespace = {"__name__": "__main__", "__builtins__": __builtins__}
            exec(compile(request["code"], "program.py", "exec"), namespace)
            names = [k for k in request["names"] if k in namespace and not k.startswith("__")]
            return {k: send(namespace[k]) for k in names}
        target = handles[request["ref"]]
        if op == "call":
            args = [receive(a) for a in request["args"]]
            kwargs = {k: receive(v) for k, v in request["kwargs"].items()}
            return send(target(*args, **kwargs))
        if op == "getattr":
            return send(getattr(target, request["name"]))
        if op == "setattr":
            setattr(target, request["name"], receive(request["value"]))
            return None
        if op == "list":
            return send(list(target))
        raise ValueError(f"unknown request {op!r}")

    for line in requests:
        try:
            reply = dumps(ok(serve(loads(line))))
        except BaseException as exc:  # the candidate's failure is the judge's to weigh
            reply = dumps(error(exc))
        replies.write(reply)
        replies.flush()
