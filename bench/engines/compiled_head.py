"""A draft head's steps compiled with static shapes: what ``CompiledEngine`` does for a transformers
model, for a head that reads the target's states (EAGLE, ``bench.eagle.heads``).

A head's forward is ``head(hidden, tokens, positions=, cache=, mask=) -> (out, cache)`` over a
cache of (keys, values) per layer that it extends by concatenation: a shape that grows every step.
Here each layer's keys and values live in a buffer [rows, kv_heads, capacity, head_dim]; a row's
head position i sits in slot i. A step hands the head the row's whole buffer as its past (all
``capacity`` slots, a fixed shape) under a mask that shows only the slots the step may see, and
writes the new keys and values into their slots afterwards, in the same graph. The head itself
runs unchanged: the same code as the eager drafter's, with every slot it must not see masked out
(their weight is exactly zero).

Two graphs per step width: ``causal`` (a row's next positions after its first ``start`` slots: the
catch-up over confirmed target states, a chain's step) builds its mask in the graph; ``masked``
(a tree level: positions, slots and the mask over the past and the new entries given) takes them.
A narrower causal step is padded into the next width declared: its padding sits at later
positions than every real entry, which no real query sees, and its slots are overwritten later. A
step wider than every width (the prompt's catch-up) runs the same code uncompiled. The graphs
compile in ``start``, before the loop's clock, with the target engine's options.
"""

from __future__ import annotations

import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from bench.engines import compile_report
from bench.engines.base import to_device
from bench.engines.inductor import CPU_OPTIONS, check_compiler, compile_options, first_line, own_copy
from bench.errors import BenchError

CAUSAL, MASKED = "causal", "masked"


@dataclass(frozen=True, order=True)
class HeadShape:
    """A step the loop will run: its kind (``CAUSAL`` or ``MASKED``), its width (entries fed) and
    the width of the features it reads (the target's fused states, or the head's own output)."""

    kind: str
    width: int
    features: int


@dataclass(frozen=True)
class HeadCacheLayout:
    """The head's K/V geometry: layers, key/value heads, head dim."""

    layers: int
    kv_heads: int
    head_dim: int


class CompiledHead:
    """A head's steps over static K/V buffers, a graph per declared ``HeadShape`` and batch shape."""

    def __init__(
        self,
        head: nn.Module,
        layout: HeadCacheLayout,
        shapes: Sequence[HeadShape],
        verbose: bool = False,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.head, self.layout, self.verbose, self.log = head, layout, verbose, log
        weight = next(head.parameters())
        self.device, self.dtype, self.cuda = weight.device, weight.dtype, weight.device.type == "cuda"
        check_compiler(self.device)
        head.requires_grad_(False)  # an inference graph, as the target engine's
        self.shapes = sorted(set(shapes))
        options = compile_options(self.cuda)
        self.causal = torch.compile(types.MethodType(own_copy(CompiledHead._causal), self), fullgraph=True, dynamic=False, options=options)
        self.masked = torch.compile(types.MethodType(own_copy(CompiledHead._masked), self), fullgraph=True, dynamic=False, options=options)
        self.buffers: list[tuple[Tensor, Tensor]] = []
        self.sets: list[list[tuple[Tensor, Tensor]]] = []  # one per batch shape met; each has its graphs
        self.compile_s = self.warmup_s = 0.0

    @property
    def rows(self) -> int:
        return self.buffers[0][0].shape[0] if self.buffers else 0

    @property
    def capacity(self) -> int:
        return self.buffers[0][0].shape[2] if self.buffers else 0

    def start(self, rows: int, max_len: int) -> None:
        """Buffers for ``rows`` rows of ``max_len`` head positions (and the widest step past them):
        the smallest set already compiled that holds them, else new ones, compiled now."""
        need = max_len + max((s.width for s in self.shapes), default=1)
        fits = [b for b in self.sets if b[0][0].shape[0] >= rows and b[0][0].shape[2] >= need]
        if fits:
            self.buffers = min(fits, key=lambda b: (b[0][0].shape[0], b[0][0].shape[2]))
            return
        c, capacity = self.layout, max(64, 1 << (need - 1).bit_length())
        shape = (rows, c.kv_heads, capacity, c.head_dim)
        self.buffers = [
            (torch.zeros(shape, dtype=self.dtype, device=self.device), torch.zeros(shape, dtype=self.dtype, device=self.device))
            for _ in range(c.layers)
        ]
        if self.cuda:
            for pair in self.buffers:
                for buf in pair:
                    torch._dynamo.mark_static_address(buf)
        self._compile()
        self.sets.append(self.buffers)

    def _compile(self) -> None:
        spent, widths = self.compile_s, [f"{s.kind}{s.width}x{s.features}" for s in self.shapes]
        if self.log:
            self.log(f"compiling the draft head for steps {', '.join(widths)}, batch {self.rows}; {compile_report.caching()}")
        options = {} if self.cuda else CPU_OPTIONS
        with torch._inductor.config.patch(options), compile_report.quiet(self.verbose):
            for shape in self.shapes:
                self._compile_shape(shape)
        if self.log:
            self.log(f"  the draft head compiled in {self.compile_s - spent:.1f} s")

    def _compile_shape(self, shape: HeadShape) -> None:
        def longs(*size: int) -> Tensor:  # a tensor each: inputs aliased at compile are one input in the graph
            return torch.zeros(size, dtype=torch.long, device=self.device)

        hidden = torch.zeros(1, shape.width, shape.features, dtype=self.dtype, device=self.device)
        mask = torch.zeros(1, 1, shape.width, self.capacity + shape.width, dtype=self.dtype, device=self.device)
        for call in range(3):  # compile; then warm-up runs (CUDA graphs record on a later call)
            tick = time.perf_counter()
            try:
                if shape.kind == CAUSAL:
                    self._graph(self.causal, hidden, longs(1, shape.width), longs(1), longs(1))
                else:
                    self._graph(self.masked, hidden, longs(1, shape.width), longs(1), longs(1, shape.width), longs(shape.width), mask)
            except Exception as exc:
                raise BenchError(f"--engine compiled: torch.compile cannot compile the draft head ({shape.kind} step of width {shape.width}): {first_line(exc)}; use --engine eager") from exc
            if self.cuda:
                torch.cuda.synchronize(self.device)
            if call == 0:
                self.compile_s += time.perf_counter() - tick
            else:
                self.warmup_s += time.perf_counter() - tick

    def _graph(self, fn: Callable[..., Tensor], *args: Tensor) -> Tensor:
        if self.cuda:
            torch.compiler.cudagraph_mark_step_begin()
            return fn(*args).clone()  # the graph's output is overwritten next replay
        return fn(*args)

    def __call__(
        self, row: int, hidden: Tensor, tokens: Tensor, past: int, positions: Tensor | None = None, mask: Tensor | None = None
    ) -> tuple[Tensor, int]:
        """The head's forward for row ``row`` over ``tokens`` [1, T] with ``hidden`` [1, T, F], its
        first ``past`` slots its past: causal after them when ``mask`` is None, else at
        ``positions`` under ``mask`` [1, 1, T, past + T] (the eager head's: over the past, then the
        new entries). Returns the output [1, T, H] and the slots now held (past + T)."""
        count = tokens.shape[1]
        if past + count > self.capacity:
            raise RuntimeError(f"draft head cache overflow: {past + count} > {self.capacity} slots")
        at = to_device([row], self.device)  # no host sync on a GPU
        if mask is not None:
            assert positions is not None  # a tree level gives both
            low = torch.full((*mask.shape[:3], self.capacity - past), torch.finfo(self.dtype).min, dtype=self.dtype, device=self.device)
            full = torch.cat([mask[..., :past], low, mask[..., past:]], dim=-1)
            slots = past + torch.arange(count, device=self.device)
            return self._step(self.masked, MASKED, hidden, tokens, at, positions, slots, full), past + count
        start = to_device([past], self.device)
        return self._step(self.causal, CAUSAL, hidden, tokens, at, start), past + count

    def _step(self, fn: Callable[..., Tensor], kind: str, hidden: Tensor, tokens: Tensor, *args: Tensor) -> Tensor:
        """The narrowest graph of this kind that holds the step (padded; a masked step's width is
        exact); a causal step wider than every graph runs uncompiled (the prompt's catch-up)."""
        count, features = tokens.shape[1], hidden.shape[-1]
        fit = [s.width for s in self.shapes if s.kind == kind and s.features == features and (s.width >= count if kind == CAUSAL else s.width == count)]
        if not fit:
            if kind == MASKED or not any(s.kind == CAUSAL and s.features == features for s in self.shapes):
                raise BenchError(f"--engine compiled: the draft head has no {kind} graph of {count} entries of {features} features; use --engine eager")
            return CompiledHead._causal(self, hidden, tokens, *args)  # wider than every graph: the prompt's
        width = min(fit)
        # Fresh tensors, padded: a graph's guards check strides too, and a view (a chain feeds back
        # its last output, ``out[:, -1]``) has others than the tensor the graph was compiled on.
        hidden = torch.cat([hidden, hidden.new_zeros(1, width - count, features)], dim=1)
        tokens = torch.cat([tokens, tokens.new_zeros(1, width - count)], dim=1)
        try:
            with torch.compiler.set_stance("fail_on_recompile"):
                out = self._graph(fn, hidden, tokens, *args)
        except RuntimeError as exc:
            if "fail_on_recompile" not in str(exc):
                raise
            raise BenchError(f"--engine compiled: a draft head step of width {width} would compile again; start and step it in the same grad mode") from exc
        return out[:, :count]

    def _causal(self, hidden: Tensor, tokens: Tensor, row: Tensor, start: Tensor) -> Tensor:
        """Entries at positions (and slots) start, start + 1, ...: each sees the row's first
        ``start`` slots and the entries before it."""
        width, capacity = tokens.shape[1], self.buffers[0][0].shape[2]
        positions = start.view(1, 1) + torch.arange(width, device=tokens.device)
        past = (torch.arange(capacity, device=tokens.device) < start).view(1, 1, 1, capacity).expand(1, 1, width, capacity)
        new = torch.ones(width, width, dtype=torch.bool, device=tokens.device).tril().view(1, 1, width, width)
        allowed = torch.cat([past, new], dim=-1)
        mask = torch.zeros((), dtype=self.dtype, device=tokens.device).where(allowed, torch.finfo(self.dtype).min)
        return self._write(hidden, tokens, row, positions, positions[0], mask)

    def _masked(self, hidden: Tensor, tokens: Tensor, row: Tensor, positions: Tensor, slots: Tensor, mask: Tensor) -> Tensor:
        """Entries at ``positions``, written to ``slots``, under ``mask`` over every slot and them."""
        return self._write(hidden, tokens, row, positions, slots, mask)

    def _write(self, hidden: Tensor, tokens: Tensor, row: Tensor, positions: Tensor, slots: Tensor, mask: Tensor) -> Tensor:
        """The head's forward over the row's whole buffer, its new keys and values into ``slots``."""
        past = [(k.index_select(0, row), v.index_select(0, row)) for k, v in self.buffers]
        out, grown = self.head(hidden, tokens, positions=positions, cache=past, mask=mask)
        capacity, at, where = self.buffers[0][0].shape[2], row.view(1, 1), slots.view(1, -1)
        for (k, v), (new_k, new_v) in zip(self.buffers, grown):
            k[at, :, where] = new_k[:, :, capacity:].transpose(1, 2)
            v[at, :, where] = new_v[:, :, capacity:].transpose(1, 2)
        return out
