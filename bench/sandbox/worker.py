"""The untrusted side, run inside the jail by ``python -I -S -c``: only the standard library.

It executes the candidate's code, then serves the judge's requests (call this, set that attribute,
list that iterator) over stdin/stdout, one JSON line each. It never sees the tests and never says
whether they passed: the judge, outside the jail, runs the tests and compares the plain values
this side returns. Nothing here is trusted; it only has to work for honest programs.
"""

import io
import json
import os
import sys
import types


def main() -> None:
    requests = io.open(os.dup(0), "rb")
    replies = io.open(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # the candidate's prints go to the capped stderr, never into the protocol
    sys.stdin, sys.stdout = open(os.devnull), sys.stderr
    handles: list = []

    def encode(value, depth=0):
        if depth > 100:
            raise ValueError("value nested too deeply")
        if value is None or type(value) in (bool, int, float, str):
            return value
        for kind in (bool, int, float, str):
            if isinstance(value, kind):
                return kind(value)
        for tag, kind in (("l", list), ("t", tuple), ("s", set), ("f", frozenset)):
            if isinstance(value, kind):
                return {tag: [encode(v, depth + 1) for v in value]}
        if isinstance(value, dict):
            return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
        if isinstance(value, (bytes, bytearray)):
            return {"b": bytes(value).hex()}
        if isinstance(value, complex):
            return {"c": [value.real, value.imag]}
        if isinstance(value, types.ModuleType):
            return {"m": value.__name__}
        handles.append(value)
        return {"r": len(handles) - 1, "n": type(value).__name__}

    def decode(value):
        if isinstance(value, list):
            return [decode(v) for v in value]
        if not isinstance(value, dict):
            return value
        ((tag, body),) = value.items()
        if tag == "r":
            return handles[body]
        if tag == "d":
            return {decode(k): decode(v) for k, v in body}
        if tag == "b":
            return bytes.fromhex(body)
        if tag == "c":
            return complex(*body)
        items = [decode(v) for v in body]
        return {"l": list, "t": tuple, "s": set, "f": frozenset}[tag](items)

    def serve(request):
        op = request["op"]
        if op == "load":
            namespace = {"__name__": "__main__", "__builtins__": __builtins__}
            exec(compile(request["code"], "program.py", "exec"), namespace)
            names = [k for k in request["names"] if k in namespace and not k.startswith("__")]
            return {k: encode(namespace[k]) for k in names}
        target = handles[request["ref"]]
        if op == "call":
            args = [decode(a) for a in request["args"]]
            kwargs = {k: decode(v) for k, v in request["kwargs"].items()}
            return encode(target(*args, **kwargs))
        if op == "getattr":
            return encode(getattr(target, request["name"]))
        if op == "setattr":
            setattr(target, request["name"], decode(request["value"]))
            return None
        if op == "list":
            return encode(list(target))
        raise ValueError(f"unknown request {op!r}")

    for line in requests:
        try:
            reply = {"ok": serve(json.loads(line))}
        except BaseException as exc:  # the candidate's failure is the judge's to weigh
            reply = {"error": [type(exc).__name__, str(exc)[:300]]}
        replies.write(json.dumps(reply).encode() + b"\n")
        replies.flush()


if __name__ == "__main__":
    main()
