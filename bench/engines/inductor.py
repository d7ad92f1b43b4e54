"""What every compiled graph here shares (bench.engines.compiled for a target or draft model,
bench.engines.compiled_head for a draft head): inductor's CPU settings, dynamo's limits and
options, one code object per compiled function, and the refusals of a missing C++ compiler."""

from __future__ import annotations

import shutil
import types
from collections.abc import Callable
from typing import Any

import torch

from bench.errors import BenchError

# An engine compiles a graph per step width and batch shape it meets: allow enough, and fail rather
# than run eagerly when the limit is hit anyway.
_RECOMPILE_LIMIT = 64

# On a CPU a batch-1 step is a chain of matrix-vector products, and aten's (MKL's sgemm) reads
# SmolLM2's weights at 11-12 GB/s of this machine's 33: the eager step is 3.7x the weights' floor.
# These settings make inductor write its own: weights frozen into the graph and packed once, the
# linears that share an input (q/k/v, gate/up) concatenated, and each product generated from its
# C++ GEMM template where that is faster than aten's (timed once at compile; inductor caches the
# choice; a shape the template cannot take uses aten). fp32 target step on SmolLM2-135M: 57.6 ms
# eager, 49.5 ms compiled without these, 19.8 ms with them (docs/real-pair.md#speed). Freezing keeps
# a packed copy of the weights beside the model's own, which the prefill still runs on: a weight
# changed after the compile is not seen by the graphs (a pair's models never change during a run).
# Set for the whole compile, not as ``torch.compile`` options: dynamo reads ``freezing`` while
# tracing, and as an option it did nothing.
CPU_OPTIONS = {"cpp_wrapper": True, "freezing": True, "cpp.enable_concat_linear": True}
def own_copy(fn: Callable[..., Any]) -> types.FunctionType:
    """``fn`` with a code object of its own. Dynamo keeps compiled graphs per code object, and the
    guards an engine keeps (tensor shapes only) cannot tell two engines' calls apart: each engine
    compiles its own copy, so a call looks only at its own graphs. (torch 2.13's
    ``isolate_recompiles`` does the same; this also runs on the torch 2.11 of the GPU image.)"""
    assert isinstance(fn, types.FunctionType)  # a plain function (a class's method, unbound)
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()


def compile_options(cuda: bool) -> dict[str, str | int | bool | Callable[..., Any]]:
    """Dynamo set to fail rather than run eagerly, and the ``torch.compile`` options of every graph
    here: CUDA graphs on a GPU (one it cannot take is an error), guards on tensor shapes only."""
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, _RECOMPILE_LIMIT)
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    return {
        "triton.cudagraphs": cuda,
        "triton.cudagraph_or_error": cuda,
        "guard_filter_fn": torch.compiler.keep_tensor_guards_unsafe,
    }


def check_compiler(device: torch.device) -> None:
    """Inductor on a CPU needs a C++ compiler; say so before any compile starts."""
    if device.type != "cpu":
        return
    from torch._inductor import config

    names = config.cpp.cxx if isinstance(config.cpp.cxx, (list, tuple)) else (config.cpp.cxx,)
    if not any(name and shutil.which(name) for name in names):
        wanted = ", ".join(n for n in names if n) or "g++"
        raise BenchError(
            f"--engine compiled on CPU needs a C++ compiler for torch.compile ({wanted} not found); "
            "install g++ (or set CXX) or use --engine eager"
        )
