"""How a model step runs on a batch of rows and how its KV cache is kept.

The decoding loop (``bench.decoding``) owns verification, bookkeeping and counters; an engine owns
one model and its cache. Every engine keeps the same contract (``ModelEngine``): row ``b``'s token
at position ``t`` lives at cache slot ``t``, a step writes each row's new tokens at that row's own
positions and attends causally BY POSITION (plus the sliding window on sliding layers), and rolling
a row back only lowers its length: rejected slots are hidden by causality and overwritten by the
next step. So a row sees exactly the tokens it would see decoded alone, whatever shares its batch.

An engine is made by a factory ``(model, widths[, trees][, states=...]) -> ModelEngine`` (through
``open_engine``); ``widths`` are the step widths the loop will feed after the prompt, ``trees`` the
token-tree widths (root and nodes) a tree drafter's rounds verify (``ModelEngine.tree_step``), which
a static-shape engine compiles before the clock starts, and ``states`` the target's layer states an
EAGLE drafter reads (``ModelEngine.states_at``), which a compiled graph returns as outputs.
"""

from collections.abc import Callable

from bench.engines.base import ModelEngine, open_engine, to_device
from bench.engines.compiled import CompiledEngine, CompiledEngines
from bench.engines.eager import EagerEngine
from bench.errors import BenchError

# (model, step widths[, token-tree widths][, states=layers]): a tree drafter's loop passes the
# third, a drafter reading the target's layer states the keyword (``open_engine``).
EngineFactory = Callable[..., ModelEngine]
ENGINES = ("eager", "compiled")


def make_engine(name: str, verbose: bool = False, log: Callable[[str], None] | None = None) -> EngineFactory:
    """The factory for ``--engine NAME``: ``eager`` (the reference) or ``compiled``, which says on
    ``log`` what each compile should cost and keeps inductor's own output for ``verbose``."""
    if name == "eager":
        return EagerEngine
    if name == "compiled":
        return CompiledEngines(verbose, log)
    raise BenchError(f"unknown engine {name!r}: use --engine {' or '.join(ENGINES)}")


__all__ = [
    "ENGINES",
    "CompiledEngine",
    "CompiledEngines",
    "EagerEngine",
    "EngineFactory",
    "ModelEngine",
    "make_engine",
    "open_engine",
    "to_device",
]
