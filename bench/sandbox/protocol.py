"""The wire protocol between the judge (outside the jail) and the worker (inside it), written once.

One JSON object per line. The judge sends requests (``load``, ``call``, ``getattr``, ``setattr``,
``list``, built by the functions below); the worker answers each with ``{"ok": value}`` or
``{"error": [builtin exception name, text]}``. Values travel as JSON scalars or as one-key tagged
objects, rebuilt on the other side from builtin types only:

- ``{"l"|"t"|"s"|"f": [...]}`` a list, tuple, set or frozenset; ``{"d": [[key, value], ...]}`` a
  dict; ``{"b": hex}`` bytes; ``{"c": [real, imag]}`` a complex; ``{"i": hex}`` an int past 64 bits
  (decimal digits are quadratic to convert, and Python refuses more than 4300 of them);
- ``{"r": ref, "n": kind}`` a handle: anything else (a function, a class, a module, a generator, an
  instance) stays with the worker, and the judge holds only its number and its type's name.

The worker runs as ``python -I -S -c SOURCE``, which cannot import this package: the harness ships
this file's text into the jail beside the worker's, so it needs only the standard library.
"""

from __future__ import annotations

import builtins
import json

TYPE_CHECKING = False  # typing costs every jail milliseconds to import; type checkers read on
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

MAX_DEPTH = 100  # containers in containers, in one value
_SCALARS = (bool, int, float, str)
_COLLECTIONS = (("l", list), ("t", tuple), ("s", set), ("f", frozenset))
_BUILT = {"l": list, "t": tuple, "s": set, "f": frozenset}
_WORD = 1 << 64  # ints from here (either sign) travel in hex


class ProtocolError(Exception):
    """A line or a value that this protocol does not define."""


class Raised(Exception):
    """An ``error`` reply: the candidate's code raised ``name`` (a builtin exception's name)."""

    def __init__(self, name: str, text: str) -> None:
        super().__init__(name, text)
        self.name, self.text = name, text


# --- lines ---------------------------------------------------------------------------------------


def dumps(message: dict[str, Any]) -> bytes:
    """One message as its line."""
    return json.dumps(message).encode() + b"\n"


def loads(line: bytes) -> dict[str, Any]:
    """One line as its message; anything but a JSON object is a ``ProtocolError``."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError) as exc:  # bad JSON, too many digits, nested too deeply
        raise ProtocolError(f"a line that is no JSON ({type(exc).__name__})") from None
    if type(message) is not dict:
        raise ProtocolError("a line that is no JSON object")
    return message


# --- requests (judge to worker) ------------------------------------------------------------------


def load(code: str, names: list[str]) -> dict[str, Any]:
    """Run ``code``; reply with those of ``names`` it defined, as values."""
    return {"op": "load", "code": code, "names": names}


def call(ref: int, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"op": "call", "ref": ref, "args": args, "kwargs": kwargs}


def get_attribute(ref: int, name: str) -> dict[str, Any]:
    return {"op": "getattr", "ref": ref, "name": name}


def set_attribute(ref: int, name: str, value: Any) -> dict[str, Any]:
    return {"op": "setattr", "ref": ref, "name": name, "value": value}


def list_items(ref: int) -> dict[str, Any]:
    """Iterate the handle to its end, there; reply with the items as one list."""
    return {"op": "list", "ref": ref}


# --- replies (worker to judge) -------------------------------------------------------------------


def ok(value: Any) -> dict[str, Any]:
    return {"ok": value}


def error(exc: BaseException) -> dict[str, Any]:
    """The candidate's exception, named by its nearest builtin class (a ``class E(ValueError)``
    is caught as the ValueError it is by the tests' ``except``), its own name in the text."""
    kind = next(c for c in type(exc).__mro__ if getattr(builtins, c.__name__, None) is c)
    own = type(exc).__name__
    text = str(exc) if own == kind.__name__ else f"{own}: {exc}"
    return {"error": [kind.__name__, text[:300]]}


def reply_value(message: dict[str, Any]) -> Any:
    """The value an ``ok`` reply carries; an ``error`` reply raises ``Raised``."""
    if set(message) == {"ok"}:
        return message["ok"]
    if set(message) == {"error"}:
        body = message["error"]
        if type(body) is list and len(body) == 2 and all(type(part) is str for part in body):
            raise Raised(body[0], body[1])
    raise ProtocolError("a line that is no reply")


# --- values --------------------------------------------------------------------------------------


def handle(ref: int, kind: str) -> dict[str, Any]:
    """The wire form of an object that stays with the worker."""
    return {"r": ref, "n": kind}


def encode(value: Any, opaque: Callable[[Any], dict[str, Any]], depth: int = 0) -> Any:
    """``value`` as wire data: builtin values (and their subclasses, as the builtin) by content;
    anything else is ``opaque(value)``, the sender's handle for it (or its refusal to send it)."""
    if depth > MAX_DEPTH:
        raise ValueError(f"a value nested more than {MAX_DEPTH} deep")
    if value is None or type(value) in _SCALARS:
        return {"i": format(value, "x")} if type(value) is int and not -_WORD < value < _WORD else value
    for kind in _SCALARS:
        if isinstance(value, kind):
            return encode(kind(value), opaque, depth)
    for tag, collection in _COLLECTIONS:
        if isinstance(value, collection):
            return {tag: [encode(v, opaque, depth + 1) for v in value]}
    if isinstance(value, dict):
        return {"d": [[encode(k, opaque, depth + 1), encode(v, opaque, depth + 1)] for k, v in value.items()]}
    if isinstance(value, (bytes, bytearray)):
        return {"b": bytes(value).hex()}
    if isinstance(value, complex):
        return {"c": [value.real, value.imag]}
    return opaque(value)


def _same(value: Any) -> Any:
    return value


def decode(value: Any, opaque: Callable[[int, str], Any], take: Callable[[Any], Any] = _same) -> Any:
    """Wire data rebuilt from builtin types only, so nothing of the sender's code runs here; a
    handle becomes ``opaque(ref, kind)``. Every number, bytes, tuple and frozenset built passes
    through ``take``, where the judge keeps its budget; anything malformed is a ``ProtocolError``."""

    def rebuild(v: Any) -> Any:
        if v is None or type(v) in (bool, str):
            return v
        if type(v) in (int, float):
            return take(v)
        if type(v) is not dict:
            raise ProtocolError(f"a {type(v).__name__} where a value belongs")
        if len(v) == 2 and type(v.get("r")) is int and type(v.get("n")) is str:
            return opaque(v["r"], v["n"])
        if len(v) != 1:
            raise ProtocolError("an object that is no value")
        ((tag, body),) = v.items()
        if tag in _BUILT and type(body) is list:
            items = [rebuild(item) for item in body]
            try:
                built = _BUILT[tag](items)
            except TypeError:  # an unhashable member of a set
                raise ProtocolError("an unhashable member of a set") from None
            return take(built) if tag in "tf" else built
        if tag == "d" and type(body) is list and all(type(p) is list and len(p) == 2 for p in body):
            try:
                return {rebuild(k): rebuild(item) for k, item in body}
            except TypeError:
                raise ProtocolError("an unhashable key of a dict") from None
        if tag == "b" and type(body) is str:
            try:
                return take(bytes.fromhex(body))
            except ValueError:
                raise ProtocolError("bytes that are no hex") from None
        if tag == "c" and type(body) is list and [type(p) in (int, float) for p in body] == [True, True]:
            return take(complex(body[0], body[1]))
        if tag == "i" and type(body) is str:
            try:
                return take(int(body, 16))
            except ValueError:
                raise ProtocolError("an int that is no hex") from None
        raise ProtocolError(f"an object tagged {tag!r} that is no value")

    return rebuild(value)
