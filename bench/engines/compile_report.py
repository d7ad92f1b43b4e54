"""What the compiled engine says about compiling: before a compile, how long it should take and
where inductor caches its work; after it, what the cache gave; and nothing of inductor's own output
(autotune tables, warnings) unless asked (``--verbose``).

Inductor's on-disk cache (``TORCHINDUCTOR_CACHE_DIR``, by default a folder in the system's temp
directory) keeps compiled graphs (the FX graph cache), GEMM autotune choices and built C++ kernels.
A later process compiling the same model and shapes traces it again (dynamo is never cached) and
loads the rest, with one exception measured here: a CPU graph whose frozen weights inductor packed
for oneDNN (mkldnn tensors, which it cannot pickle) bypasses the graph cache, so it is compiled
again, reusing only kernels and autotune choices. Each compile's time is recorded beside the cache,
keyed by the model's shape, step width and batch, and the next announcement quotes it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch
from torch._dynamo.utils import counters
from transformers import PreTrainedModel

from bench.atomic import write_atomic

RECORD = "diversed-bench-compile-times.json"
# A rough prior for a model never compiled here, from the cold compiles measured on the shared 2-core
# CPU the docs' timings come from (a CPU graph, one step width and batch shape): SmolLM2-135M's
# 30-layer target 100-140 s per graph with the C++ GEMM templates (speed's tables: 546 s for 4
# graphs, 717 s for 7), the 2-layer test pair 20-40 s. Seconds per graph, plus per layer with and
# without the GEMM templates (docs/engines-and-timing.md#compile-time-and-its-cache).
PRIOR_S_PER_GRAPH, PRIOR_S_PER_LAYER = 20.0, {True: 3.0, False: 1.0}
_LOGGERS = ("torch._dynamo", "torch._inductor", "torch._functorch", "torch.fx", "torch._subclasses")


def cache_dir() -> Path:
    from torch._inductor.runtime.cache_dir_utils import cache_dir as inductor_cache_dir

    return Path(inductor_cache_dir())


def caching() -> str:
    """Where inductor caches compiled work, or why it does not."""
    from torch._inductor import config

    if config.force_disable_caches:
        return "inductor's cache is off (torch.compiler.config.force_disable_caches)"
    if not config.fx_graph_cache:
        return "inductor's graph cache is off (TORCHINDUCTOR_FX_GRAPH_CACHE=0)"
    return f"inductor's cache: {cache_dir()}"


def key(model: PreTrainedModel, rows: int, width: int | str, gemms: bool) -> str:
    """A compile's identity for the record: what sets its cost (shapes, dtype, device, options)."""
    c = model.config.get_text_config()
    return (
        f"{c.model_type} layers={c.num_hidden_layers} hidden={c.hidden_size} vocab={c.vocab_size} "
        f"{model.dtype} {model.device.type} rows={rows} width={width} gemm_templates={gemms} "
        f"torch={torch.__version__}"
    )


def _read() -> dict[str, dict[str, float]]:
    try:
        return json.loads((cache_dir() / RECORD).read_text())
    except (OSError, ValueError):
        return {}


def estimate(model: PreTrainedModel, rows: int, widths: list[int | str], gemms: bool) -> str:
    """Before a compile: how long it should take, and on what that figure rests."""
    found = _read()
    seen = [s for w in widths if (s := found.get(key(model, rows, w, gemms)))]
    if len(seen) == len(widths):
        last = sum(s["last_s"] for s in seen)
        first = sum(s["first_s"] for s in seen)
        return f"about {last:.0f} s (its last compile here; the first took {first:.0f} s)"
    if model.device.type != "cpu":
        return "no compile of this model recorded on this machine yet"
    layers = model.config.get_text_config().num_hidden_layers
    prior = len(widths) * (PRIOR_S_PER_GRAPH + PRIOR_S_PER_LAYER[gemms] * layers)
    return (
        f"roughly {prior:.0f} s (nothing recorded here yet; a prior from compiles measured on a 2-core "
        "CPU, a few minutes per graph for SmolLM2-135M)"
    )


def record(model: PreTrainedModel, rows: int, width: int | str, gemms: bool, seconds: float) -> None:
    """Keep a compile's time beside the cache for the next estimate (best effort: a read-only
    cache folder only loses the estimate)."""
    found = _read()
    name = key(model, rows, width, gemms)
    entry = found.get(name) or {"first_s": seconds}
    found[name] = {**entry, "last_s": seconds}
    with contextlib.suppress(OSError):
        text = json.dumps(found, indent=1, sort_keys=True)
        write_atomic(cache_dir() / RECORD, lambda tmp: tmp.write_text(text))


def cache_counts() -> tuple[int, int]:
    """(hits, bypasses) of inductor's FX graph cache so far in this process. A CPU graph holding
    weights that inductor packed for oneDNN (mkldnn tensors, which it cannot pickle) bypasses it:
    such a graph is compiled again by every process, only its kernels and autotune choices reused."""
    return counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_bypass"]


def outcome(seconds: float, graphs: int, hits: int, bypassed: int) -> str:
    """After a compile: its time and what the cache gave."""
    text = f"compiled in {seconds:.0f} s ({hits} of {graphs} graphs from the cache"
    if bypassed:
        text += f"; {bypassed} not cacheable: weights packed for oneDNN, only kernels and autotune choices reused"
    return text + ")"


@contextlib.contextmanager
def quiet(verbose: bool) -> Iterator[None]:
    """Inductor's own output kept off the terminal unless ``verbose``: its autotune tables and stats
    (written to ``sys.stderr``), its loggers' warnings, Python warnings and anything the compile
    writes to file descriptors 1 and 2. A failure still raises, and the engine turns it into one line."""
    if verbose:
        yield
        return
    loggers = [logging.getLogger(name) for name in _LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with (
            torch._inductor.config.patch(autotune_num_choices_displayed=0, max_autotune_report_choices_stats=False),
            warnings.catch_warnings(),
            _silenced_fds(),
            open(os.devnull, "w") as null,
            contextlib.redirect_stdout(null),
            contextlib.redirect_stderr(null),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


@contextlib.contextmanager
def _silenced_fds() -> Iterator[None]:
    """File descriptors 1 and 2 (C++ warnings, a compiler's chatter) pointed at /dev/null."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)
