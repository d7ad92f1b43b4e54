"""A low-overhead engine: static K/V buffers and model steps compiled with static shapes.

In eager transformers a small decoding step costs mostly Python and kernel launches, not weights,
so measured draft/target cost ratios (and speedups) understate a serving stack. Here every shape is
fixed once per batch: K/V buffers of ``capacity`` slots, attention over all of them under the same
causal-by-position masks as ``EagerEngine``, and one graph per step width the loop declares (draft
1 and 2, target N + 1; narrower steps are padded into the next graph, the padding lands in slots no
real query sees). Positions are tensors, so a rollback stays a lower length on the host and the next
step simply overwrites. On a GPU the graphs are CUDA graphs (inductor's ``triton.cudagraphs``, what
``mode="reduce-overhead"`` turns on); on a CPU inductor writes each graph's launcher in C++
(``cpp_wrapper``): ``ar`` on the tiny pair then takes 0.66x the time per token (more compile time,
measured and reported like the rest).

A call's fixed cost is most of a small model's step, so each engine keeps it low. Its graphs are its
own (a code object per engine: a call looks only at this engine's few graphs, never another model's).
Their guards check only the shapes of the step's tensors (ids, start, K/V buffers): an engine serves
one model, in eval mode, under inference mode, and a step width, a batch shape and a capacity, which
pick the graph, are all shapes. (Dynamo's lookup per call on the tiny pair, under the profiler: 95 us
with every guard, 42 us without the modules', 8.5 us with these.) And the weights are frozen, so
inductor builds an inference graph, not a training one.

An engine made keeping the target's layer states (``states``: an EAGLE drafter's features) returns
them from every graph beside the logits; the factory keeps it apart from the same model's engine
that keeps none. The factory also compiles an EAGLE head's steps (``CompiledEngines.head``,
bench.engines.compiled_head) and counts their compile time with the engines'.

Compilation happens in ``start`` (timed into ``compile_s`` and ``warmup_s``), before the loop starts
its clock. The prompt's one-off prefill, whose width changes per example, runs the same forward
uncompiled. Anything that stops compilation is an error naming the model, never a quiet fallback:
``fullgraph=True`` turns graph breaks into errors, and a step CUDA graphs skip (inductor would run
it without them, with a warning) stops the run too.
"""

from __future__ import annotations

import time
import types
import weakref
from collections.abc import Callable, Iterable, Sequence

import torch
from torch import Tensor
from torch._dynamo.utils import counters
from transformers import PreTrainedModel

from bench.engines import compile_report
from bench.engines.base import to_device, weight_bytes
from bench.engines.compiled_head import CompiledHead, HeadCacheLayout, HeadShape
from bench.engines.eager import EagerEngine, SlotCache
from bench.engines.inductor import CPU_OPTIONS, check_compiler, compile_options, first_line, own_copy
from bench.errors import BenchError

# Generating a product costs a C++ compile per shape (~3 s here): worth it only where a step reads
# its weights from memory, not from cache (a tiny test model's step is all overhead).
_CPU_GEMMS = {"max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN"}
_CPU_GEMMS_FROM_BYTES = 64 * 2**20


class StaticSlotCache(SlotCache):
    """``SlotCache`` with every step reading all ``capacity`` slots (a fixed shape), and rows that
    leave the batch compacted in place so the buffers keep their shape and address."""

    def __init__(self, rows: int, capacity: int, devices: Iterable[torch.device] = ()) -> None:
        super().__init__(rows, capacity, devices)
        self.visible = capacity

    def compact(self, rows: Tensor) -> None:
        for store in (self.keys, self.values):
            for buf in store.values():
                buf[: len(rows)] = buf.index_select(0, rows.to(buf.device))


class CompiledEngine(EagerEngine):
    """``EagerEngine``'s masks and architecture checks, over a static cache and compiled steps."""

    cache: StaticSlotCache  # the graphs are compiled over its fixed buffers

    def __init__(
        self,
        model: PreTrainedModel,
        widths: Sequence[int],
        verbose: bool = False,
        log: Callable[[str], None] | None = None,
        trees: Sequence[int] = (),
        states: Sequence[int] = (),
    ) -> None:
        # ``states``: the layer states its graphs return beside the logits (an EAGLE head's
        # features); fixed here, since a graph's outputs are traced into it.
        super().__init__(model, states=states)
        # Inductor's own output (autotune tables, warnings) only with --verbose; the harness says
        # before each compile how long it should take and where it is cached (compile_report).
        self.verbose, self.log = verbose, log
        check_compiler(model.device)
        # Weights that require grad make AOT autograd build a training graph (an autograd.Function
        # around the kernels), even under inference_mode: 1.5-1.7x the inference graph's step on the
        # tiny pair. The harness never trains a pair's models.
        model.requires_grad_(False)
        self.widths = sorted(set(widths))
        self.trees = sorted(set(trees))  # token-tree widths (root + nodes): a graph each
        self.cuda = model.device.type == "cuda"
        if self._gemms() and 1 in self.widths:
            # Inductor's products for one row lose to its products for two on a CPU (SmolLM2-135M,
            # bf16, a 650-token prompt: the width-1 graph's step 29.95 ms, the width-2 graph's 21.61,
            # eager's width-1 step 21.5; scripts/tree_verify_cost.py --sizes 1,2): a one-token step
            # runs in the width-2 graph, its second slot padding that no query sees.
            self.widths = sorted(set(self.widths) - {1} | {2})
        options = compile_options(self.cuda)
        self.compiled = torch.compile(
            types.MethodType(own_copy(CompiledEngine._forward), self), fullgraph=True, dynamic=False, options=options
        )
        self.compiled_tree = torch.compile(
            types.MethodType(own_copy(CompiledEngine._tree_forward), self),
            fullgraph=True,
            dynamic=False,
            options=options,
        )
        self.cache = StaticSlotCache(0, 0)
        self.caches: list[StaticSlotCache] = []  # one per batch shape met; each has its graphs
        self.fresh = True  # no step since start: the next one is the prompt's prefill
        self.compile_s = 0.0
        self._last_compile_s = 0.0
        self.warmup_s = 0.0
        # transformers installs its output-capturing hooks at a model's first forward, and graphs
        # guard on hooks: install them now, before any engine compiles (pairs may share layers).
        with torch.no_grad():
            model(
                input_ids=torch.zeros(1, 1, dtype=torch.long, device=model.device), output_hidden_states=True
            )

    def _forward(self, ids: Tensor, start: Tensor, keep: int) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Logits and last hidden states of the last ``keep`` positions (both always: one graph
        serves every verifier, and unused outputs cost nothing), and the layer states at
        ``states_at`` of every position when it keeps any. Row b's tokens sit at positions
        start[b], start[b] + 1, ...: computed in the graph, so a step's host work is one tensor."""
        positions = start.unsqueeze(1) + torch.arange(ids.shape[1], device=ids.device)
        return self._forward_at(ids, positions, self.cache.max_len, keep, hidden=True)

    def _tree_forward(self, ids: Tensor, start: Tensor, parents: Tensor) -> tuple[Tensor, Tensor | None]:
        """A token tree per row over all ``capacity`` slots (``EagerEngine._tree_forward_at``):
        its logits and the layer states at ``states_at``."""
        logits, _, states = self._tree_forward_at(ids, start, parents, self.cache.max_len)
        return logits, states

    def start(self, rows: int, max_len: int) -> None:
        """Reuse the smallest cache (and its graphs) that holds the batch, extra rows running as
        idle padding; else allocate one and compile for it. Capacities round up to a power of two,
        so growing prompts rarely compile again."""
        need = max_len + max(self.widths + self.trees, default=1)
        fits = [c for c in self.caches if c.rows >= rows and c.max_len >= need]
        if fits:
            self.cache = min(fits, key=lambda c: (c.rows, c.max_len))
        else:
            self.cache = StaticSlotCache(rows, max(64, 1 << (need - 1).bit_length()), self.devices)
            self._compile()
            self.caches.append(self.cache)
        self.lengths = [0] * rows
        self.fresh = True

    def _compile(self) -> None:
        device = self.model.device
        start = torch.zeros(self.cache.rows, dtype=torch.long, device=device)
        self._forward(start.unsqueeze(1), start, 1)  # allocates the buffers from the model's keys
        if self.cuda:
            for buf in [*self.cache.keys.values(), *self.cache.values.values()]:
                torch._dynamo.mark_static_address(buf)
        gemms = self._gemms()
        rows, before, spent = self.cache.rows, compile_report.cache_counts(), self.compile_s
        if self.log:
            config = self.model.config.get_text_config()
            self.log(
                f"compiling {config.model_type} ({config.num_hidden_layers} layer"
                f"{'s' * (config.num_hidden_layers != 1)}) for step "
                f"width{'s' * (len(self.widths) > 1)} {', '.join(map(str, self.widths))}, batch {rows}"
                f"{' and token trees of ' + ', '.join(map(str, self.trees)) if self.trees else ''}: "
                f"{compile_report.estimate(self.model, rows, [*self.widths, *(f'tree{t}' for t in self.trees)], gemms)}; "
                f"{compile_report.caching()}"
            )
        with torch._inductor.config.patch(self._cpu_options()), compile_report.quiet(self.verbose):
            for width in self.widths:
                self._compile_width(width, start)
                compile_report.record(self.model, rows, width, gemms, self._last_compile_s)
            for width in self.trees:
                self._compile_width(width, start, tree=True)
                compile_report.record(self.model, rows, f"tree{width}", gemms, self._last_compile_s)
        if self.log:
            hits, bypassed = (now - then for now, then in zip(compile_report.cache_counts(), before))
            graphs = len(self.widths) + len(self.trees)
            self.log("  " + compile_report.outcome(self.compile_s - spent, graphs, hits, bypassed))

    def _gemms(self) -> bool:
        """Whether inductor generates the products from its C++ GEMM templates (CPU, large weights)."""
        return not self.cuda and weight_bytes(self.model) >= _CPU_GEMMS_FROM_BYTES

    def _cpu_options(self) -> dict[str, object]:
        if self.cuda:
            return {}
        return CPU_OPTIONS | (_CPU_GEMMS if self._gemms() else {})

    def _compile_width(self, width: int, start: Tensor, tree: bool = False) -> None:
        ids = torch.zeros(self.cache.rows, width, dtype=torch.long, device=start.device)
        parents = ids[:, 1:] - 1  # every node a child of the root
        for call in range(3):  # compile; then warm-up runs (CUDA graphs record on a later call)
            tick = time.perf_counter()
            skips = counters["inductor"]["cudagraph_skips"]
            try:
                self._run_tree(ids, start, parents) if tree else self._run(ids, start)
            except Exception as exc:
                raise BenchError(
                    f"--engine compiled: torch.compile cannot compile {self.model.config.model_type} "
                    f"(step width {width}): {first_line(exc)}; use --engine eager"
                ) from exc
            if self.cuda and counters["inductor"]["cudagraph_skips"] > skips:  # inductor only warns
                raise BenchError(
                    f"--engine compiled: CUDA graphs cannot capture {self.model.config.model_type}'s "
                    f"step of width {width} (the 'skipping cudagraphs' warning above says why); "
                    "use --engine eager"
                )
            if self.cuda:
                torch.cuda.synchronize(start.device)
            if call == 0:
                self._last_compile_s = time.perf_counter() - tick
                self.compile_s += self._last_compile_s
            else:
                self.warmup_s += time.perf_counter() - tick

    def _run(self, ids: Tensor, start: Tensor) -> tuple[Tensor | None, ...]:
        if self.cuda:
            torch.compiler.cudagraph_mark_step_begin()
            # the graph's outputs are overwritten next replay
            return tuple(t if t is None else t.clone() for t in self.compiled(ids, start, ids.shape[1]))
        return self.compiled(ids, start, ids.shape[1])

    def _run_tree(self, ids: Tensor, start: Tensor, parents: Tensor) -> tuple[Tensor | None, ...]:
        if self.cuda:
            torch.compiler.cudagraph_mark_step_begin()
            return tuple(t if t is None else t.clone() for t in self.compiled_tree(ids, start, parents))
        return self.compiled_tree(ids, start, parents)

    def _replay(self, ids: Tensor, start: Tensor, parents: Tensor | None = None) -> tuple[Tensor | None, ...]:
        """A step runs a graph ``start`` compiled, never a new one: a graph whose guards fail here
        (e.g. compiled outside inference mode, stepped inside) would compile again without
        ``start``'s CPU options: a different, slower graph, in silence."""
        try:
            with torch.compiler.set_stance("fail_on_recompile"):
                return self._run(ids, start) if parents is None else self._run_tree(ids, start, parents)
        except RuntimeError as exc:
            if "fail_on_recompile" not in str(exc):
                raise
            reason = next((line.strip("- ") for line in str(exc).splitlines() if line.strip().startswith("- ")), "")
            raise BenchError(
                f"--engine compiled: a {self.model.config.model_type} step of width {ids.shape[1]} would compile "
                f"again ({reason or 'its guards failed'}); start and step the engine in the same grad mode "
                "(the decoder runs both under torch.inference_mode)"
            ) from exc

    def step(self, ids: Tensor, real: Sequence[int], keep: int, hidden: bool) -> tuple[Tensor, Tensor | None]:
        count, width = ids.shape
        graph = width if self.fresh else next((w for w in self.widths if w >= width), 0)
        if not graph:
            raise RuntimeError(f"step of {width} tokens is wider than the compiled widths {self.widths}")
        if max(self.lengths) + graph > self.cache.max_len:
            raise RuntimeError(f"cache overflow: {max(self.lengths) + graph} > {self.cache.max_len} slots")
        if (count, width) != (self.cache.rows, graph):
            padded = ids.new_zeros(self.cache.rows, graph)
            padded[:count, :width] = ids
            ids = padded
        start = to_device(self.lengths + [0] * (self.cache.rows - count), ids.device)
        outputs: tuple[Tensor | None, ...]
        if self.fresh:  # the prompt: its width is the example's, so it runs uncompiled
            outputs, first = self._forward(ids, start, keep), 0
        else:
            outputs, first = self._replay(ids.contiguous(), start), width - keep
        logits, last, states = outputs
        self.fresh = False
        self.lengths = [n + r for n, r in zip(self.lengths, real)]
        self.states = None if states is None else states[:count, :width]
        assert logits is not None and last is not None  # the graph returns both, always
        if (count, first, keep) != (logits.shape[0], 0, logits.shape[1]):  # padded, or fewer kept
            window = slice(first, first + keep)
            logits, last = logits[:count, window], last[:count, window]
        return logits, last if hidden else None

    def tree_step(self, ids: Tensor, parents: Tensor, real: Sequence[int]) -> Tensor:
        """A tree of n + 1 tokens runs the narrowest tree graph declared that holds it: its extra
        nodes hang under the root in slots past every real one, its extra rows are idle."""
        count, width = ids.shape
        graph = next((w for w in self.trees if w >= width), 0)
        if not graph:
            declared = ", ".join(map(str, self.trees)) or "none"
            raise BenchError(
                f"--engine compiled: a token tree of {width} tokens is wider than the tree widths compiled "
                f"({declared}); declare it (Drafter.tree_widths) or use --engine eager"
            )
        if max(self.lengths) + graph > self.cache.max_len:
            raise RuntimeError(f"cache overflow: {max(self.lengths) + graph} > {self.cache.max_len} slots")
        rows = self.cache.rows
        full_ids = ids.new_zeros(rows, graph)
        full_ids[:count, :width] = ids
        full_parents = parents.new_full((rows, graph - 1), -1)
        full_parents[:count, : width - 1] = parents
        start = to_device(self.lengths + [0] * (rows - count), ids.device)
        logits, states = self._replay(full_ids, start, full_parents)
        self.fresh = False
        self.tree_start = list(self.lengths)
        self.lengths = [n + r for n, r in zip(self.lengths, real)]
        self.states = None if states is None else states[:count, :width]
        assert logits is not None
        return logits[:count, :width]

    def select(self, rows: Sequence[int]) -> None:
        self.cache.compact(to_device(list(rows), self.model.device))
        self.lengths = [self.lengths[i] for i in rows]


class CompiledEngines:
    """Engine factory that keeps one compiled engine per model and width set, so decoders built
    one after another (one per method, per repeat) reuse the graphs instead of recompiling."""

    def __init__(self, verbose: bool = False, log: Callable[[str], None] | None = None) -> None:
        self.verbose, self.log = verbose, log
        self.engines: weakref.WeakKeyDictionary[PreTrainedModel, dict[tuple[tuple[int, ...], ...], CompiledEngine]] = (
            weakref.WeakKeyDictionary()
        )
        self.heads: weakref.WeakKeyDictionary[PreTrainedModel, dict[tuple[str | HeadShape, ...], CompiledHead]] = weakref.WeakKeyDictionary()

    def __call__(
        self, model: PreTrainedModel, widths: Sequence[int], trees: Sequence[int] = (), states: Sequence[int] = ()
    ) -> CompiledEngine:
        """The engine of ``model`` for these step widths, tree widths and kept layer states: an
        engine that keeps states is never another decoder's that keeps none (its graphs output
        them: copies a step without a reader pays)."""
        mine = self.engines.setdefault(model, {})
        key = (tuple(sorted(set(widths))), tuple(sorted(set(trees))), tuple(states))
        if key not in mine:
            mine[key] = CompiledEngine(model, key[0], self.verbose, self.log, key[1], key[2])
        return mine[key]

    def head(
        self, target: PreTrainedModel, name: str, module: torch.nn.Module, layout: HeadCacheLayout, shapes: Sequence[HeadShape]
    ) -> CompiledHead:
        """The compiled steps of the draft head ``name`` (EAGLE's, loaded as ``module``) reading
        ``target``: one per target, head and step set, reused as the target's engines are (a
        decoder built again loads the head again: the first load's graphs serve it)."""
        mine = self.heads.setdefault(target, {})
        steps = tuple(sorted(set(shapes)))
        key: tuple[str | HeadShape, ...] = (name, *steps)
        if key not in mine:
            mine[key] = CompiledHead(module, layout, steps, self.verbose, self.log)
        return mine[key]

    def _all(self) -> list[CompiledEngine | CompiledHead]:
        return [e for store in (self.engines, self.heads) for m in store.values() for e in m.values()]

    @property
    def compile_s(self) -> float:
        return sum(e.compile_s for e in self._all())

    @property
    def warmup_s(self) -> float:
        return sum(e.warmup_s for e in self._all())
