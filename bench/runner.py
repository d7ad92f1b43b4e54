"""The runner: task + pair + method configurations -> decoded, scored rows in the results store.

A configuration is everything that changes a row: task, pair, method and its parameters, draft
length and draft policy, temperature, token budget, seed, data source, prompt options (prompt
truncation included), device and dtype. Its id is a hash of those settings, so re-running the
same command resumes it, and raising ``--limit`` adds examples to it (the subset is a prefix of one
seeded permutation).

Examples are decoded in batches (``batch_size``): a row's tokens and counters do not depend on its
batch, but its latency does, so batched rows carry no time (NaN) and a timing pass decodes the
first ``timing_examples`` of every configuration alone, the configurations of one task and pair
interleaved example by example so that paired times share the machine's state.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import re
import subprocess
import sys
import typing
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from bench.context import Context, check_truncation, fit_prompt
from bench.decoding import (
    TRACE_FIELDS,
    DecodeStats,
    Generation,
    SpeculativeDecoder,
    check_draft_policy,
)
from bench.distributions import Sampling
from bench.engines import CompiledEngines, make_engine
from bench.errors import BenchError
from bench.head import required_head
from bench.progress import Progress
from bench.pairs import Pair, load_pair, pick_device, pick_dtype, resolve_pair
from bench.store import SCHEMA, SHARED_SETTINGS, ResultStore
from bench.tasks import Example, Task, default_data, resolve_task
from bench.verifiers import make_verifier, verifier_class

PARAM_COLUMNS = ("target_weight", "lenience", "cascade_rule", "cascade_alpha", "mix")


@dataclass(frozen=True)
class RunConfig:
    """One configuration: the unit that is resumed, skipped, compared and merged.

    ``None`` fields take the task's, pair's or machine's default; ``resolve`` makes them concrete,
    so that the id, the rows and the pairing with ``ar`` see the values that actually ran.
    """

    task: str
    pair: str
    method: str
    params: dict[str, Any] = field(default_factory=dict)
    head: str | None = None
    draft_len: int = 5
    temperature: float = 1.0
    max_new_tokens: int | None = None  # None: the task file's
    seed: int = 0
    data: str | None = None  # None: fixtures for the tiny pair, the hub otherwise
    num_fewshot: int | None = None  # None: the task file's
    split: str | None = None  # None: the task file's evaluation split
    chat_template: bool = False
    device: str = "auto"
    dtype: str | None = None  # None: the pair file's for the device
    engine: str = "eager"  # how model steps run (bench/engines); it changes times, so ids see it
    truncate_prompt: str = "none"  # none: refuse prompt + budget past a model's context; left: cut
    draft_policy: str | None = None  # sample or greedy; None: what the method's engine does

    def resolve(self) -> RunConfig:
        """Defaults made concrete, and settings the method does not read dropped (``ar`` has no
        draft length; only head-reading methods have a head)."""
        spec, pair = resolve_task(self.task), resolve_pair(self.pair)
        device = pick_device(self.device)
        cls = verifier_class(self.method)
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise BenchError(f"--max-new-tokens must be >= 1, got {self.max_new_tokens}")
        if cls.uses_draft and self.draft_len < 1:
            raise BenchError(f"--draft-len must be >= 1 for {cls.name}, got {self.draft_len}")
        if self.temperature < 0:
            raise BenchError(f"--temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if self.seed < 0:
            raise BenchError(f"--seed must be >= 0, got {self.seed}")
        check_truncation(self.truncate_prompt)
        # Under greedy decoding every draft is the argmax, whatever the policy.
        policy = (
            "greedy" if self.temperature == 0 else check_draft_policy(self.draft_policy or cls.draft_policy)
        )
        return replace(
            self,
            draft_len=self.draft_len if cls.uses_draft else 0,
            draft_policy=policy if cls.uses_draft else None,
            head=self.head if cls.needs_hidden else None,
            max_new_tokens=self.max_new_tokens or spec.max_new_tokens,
            data=self.data or default_data(spec.name, pair.kind),
            num_fewshot=spec.num_fewshot if self.num_fewshot is None else self.num_fewshot,
            split=self.split or spec.dataset["split"],
            device=device.type,
            dtype=str(pick_dtype(pair, device, self.dtype)).removeprefix("torch."),
        )

    @property
    def config_id(self) -> str:
        """A hash of every setting (call on a resolved configuration)."""
        settings = json.dumps(asdict(self), sort_keys=True, default=str)
        digest = hashlib.sha1(f"{SCHEMA}|{settings}".encode()).hexdigest()[:10]
        method = re.sub(r"[^A-Za-z0-9_.-]+", ".", self.method)  # module:Class, path/to/file.py:Class
        return f"{Path(self.task).stem}-{Path(self.pair).stem}-{method}-{digest}"

    @property
    def label(self) -> str:
        """Short human name: the method's name and the parameters it was given."""
        shown = {
            "target_weight": "w",
            "lenience": "l",
            "cascade_rule": "",
            "cascade_alpha": "a",
            "mix": "mix",
            "posterior_threshold": "eps",
            "posterior_alpha": "alpha",
            "speculative_accept_threshold_single": "single",
            "speculative_accept_threshold_acc": "acc",
            "relaxed_topk": "topk",
            "relaxed_delta": "delta",
        }
        params = {k: v for k, v in self.params.items() if not (k == "mix" and v == "prob")}
        parts = [f"{shown.get(k, k)}={v}" if shown.get(k, k) else str(v) for k, v in params.items()]
        if self.head:  # heads trained on different tasks sit side by side in the cross-task table
            parts.append(f"head={self.head}")
        cls = verifier_class(self.method)
        if self.draft_policy and self.temperature != 0 and self.draft_policy != cls.draft_policy:
            parts.append(f"{self.draft_policy} draft")
        # A plug-in is shown by its name, not by the path or module it was loaded from.
        return cls.name + (f" ({', '.join(parts)})" if parts else "")


def parse_params(texts: Iterable[str]) -> dict[str, list[str]]:
    """``--param name=value[,value...]`` (repeatable) -> {name: [values]}."""
    out: dict[str, list[str]] = {}
    for text in texts:
        name, sep, values = text.partition("=")
        name = name.strip()
        if not sep or not name or not values.strip():
            raise BenchError(
                f"--param takes name=value[,value...] (e.g. posterior_alpha=0.3,0.5), got {text!r}"
            )
        out.setdefault(name, []).extend(v.strip() for v in values.split(",") if v.strip())
    return out


def _coerce(method: str, name: str, kind: Any, raw: Any) -> Any:
    """A --param value as the type the verifier's field declares."""
    try:
        if kind is int:
            return int(str(raw))
        if kind is float:
            return float(raw)
    except ValueError:
        raise BenchError(
            f"{method}: {name} takes {'an integer' if kind is int else 'a number'}, got {raw!r}"
        ) from None
    return raw


def _with_params(
    method: str, base: dict[str, Any], params: Mapping[str, Sequence[Any]]
) -> list[dict[str, Any]]:
    """Every combination of the --param values that ``method``'s verifier has as fields."""
    cls = verifier_class(method)
    kinds = typing.get_type_hints(cls)
    combos = [dict(base)]
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name in params and f.name in base:
            raise BenchError(f"--param {f.name}: it has its own option, use --{f.name.replace('_', '-')}")
        if f.name in params:
            values = [_coerce(cls.name, f.name, kinds.get(f.name), v) for v in params[f.name]]
            combos = [{**c, f.name: v} for c in combos for v in values]
    return combos


def expand_methods(
    methods: Iterable[str],
    *,
    target_weights: Iterable[float] = (0.7,),
    lenience: Iterable[float] = (0.5,),
    cascade_rules: Iterable[str] = ("opt",),
    cascade_alphas: Iterable[float] = (0.5,),
    heads: Iterable[str] = (),
    mix: str = "prob",
    params: Mapping[str, Sequence[Any]] | None = None,
) -> list[tuple[str, dict[str, Any], str | None]]:
    """(method, params, head) for every method and every value of its swept parameters.

    ``params`` ({name: values}, from ``--param``) reaches any verifier's dataclass fields; a name
    that no selected method has is refused."""
    methods = list(methods)
    params = params or {}
    known = {f.name for m in methods for f in fields(verifier_class(m))}  # type: ignore[arg-type]
    stray = sorted(set(params) - known)
    if stray:
        raise BenchError(
            f"--param {', '.join(stray)}: no selected method takes it; their parameters: {', '.join(sorted(known)) or 'none'}"
        )
    out: list[tuple[str, dict[str, Any], str | None]] = []
    for m in methods:
        if m == "ensemble":
            out += [(m, {"target_weight": w, "mix": mix}, None) for w in target_weights]
        elif m == "lossy":
            out += [(m, {"lenience": v}, None) for v in lenience]
        elif m == "cascade":
            out += [
                (m, {"cascade_rule": r, "cascade_alpha": a}, None)
                for r in cascade_rules
                for a in cascade_alphas
            ]
        elif m == "diversed":
            out += [(m, {"mix": mix}, h) for h in heads]
        else:
            out.append((m, {}, None))
    out = [(m, combo, h) for m, p, h in out for combo in _with_params(m, p, params)]
    for method, chosen, _ in out:
        make_verifier(method, **chosen)  # validate every value before any model loads
    return out


def example_seed(seed: int, example_id: str) -> int:
    """Per-example seed: results do not depend on order, sharding or process count."""
    return zlib.crc32(f"{seed}:{example_id}".encode())


def git_revision() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def environment(device: torch.device) -> dict[str, Any]:
    import datasets
    import transformers

    import bench

    name = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or platform.machine()
    )
    return {
        "versions": {
            "bench": bench.__version__,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "datasets": datasets.__version__,
            "python": platform.python_version(),
        },
        "device_name": name,
        "cpu_threads": torch.get_num_threads(),  # a CPU's timings depend on it (--threads)
        "git_revision": git_revision(),
    }


def stats_columns(stats: DecodeStats) -> dict[str, Any]:
    reached = stats.reached_per_position
    return {
        "prompt_tokens": stats.prompt_tokens,
        "new_tokens": stats.new_tokens,
        "rounds": stats.rounds,
        "drafted_tokens": stats.drafted_tokens,
        "accepted_tokens": stats.accepted_tokens,
        "drafted_per_position": stats.drafted_per_position,
        "accepted_per_position": stats.accepted_per_position,
        "reached_per_position": reached,
        "acceptance_rate": stats.acceptance_rate,
        "acceptance_length": stats.acceptance_length,
        "expected_acceptance": stats.expected_acceptance,
        "bias": stats.bias,
        "expected_acceptance_per_position": [
            s / r if r else math.nan for s, r in zip(stats.expected_acceptance_sum, reached)
        ],
        "bias_per_position": [s / r if r else math.nan for s, r in zip(stats.bias_sum, reached)],
        "target_forwards": stats.target_forwards,
        "draft_forwards": stats.draft_forwards,
        "wall_time_s": stats.wall_time_s,
        "prefill_time_s": stats.prefill_time_s,
        "batch_size": stats.batch_size,
        "kv_cache_bytes": stats.kv_cache_bytes,
        "weight_mean": sum(stats.weights) / len(stats.weights) if stats.weights else math.nan,
        "weights": stats.weights,
    }


@dataclass
class _Job:
    """One configuration's pending examples, with everything needed to decode and store them."""

    cfg: RunConfig
    pending: list[Example]
    decoder: SpeculativeDecoder
    task: Task
    pair: Pair
    fixed: dict[str, Any]
    prompts: dict[str, list[int]]
    dropped: dict[str, int]  # prompt tokens cut to fit the context (--truncate-prompt left)
    budget: int
    timed: list[Example]  # decoded alone in the timing pass

    def seed(self, example: Example) -> int:
        return example_seed(self.cfg.seed, example.example_id)


class Runner:
    """Runs configurations into one results directory, resuming whatever is already there.

    ``partition = (i, k)``: this process takes every k-th item, from the i-th, of the flattened
    (configuration x example) list, so k processes or jobs cover the grid exactly once whatever
    is already done. ``device`` overrides where models load (one GPU per rank) without changing
    the configurations' ids.
    """

    def __init__(
        self,
        output_dir: Path,
        *,
        limit: int | None = None,
        partition: tuple[int, int] = (0, 1),
        device: str | None = None,
        batch_size: int = 1,
        timing_examples: int = 4,
        engine: str = "eager",
        progress: bool = True,
        log: Any = print,
        trace: bool = False,
    ) -> None:
        if limit is not None and limit < 1:
            raise BenchError(f"--limit must be >= 1 (or left out for every example), got {limit}")
        if batch_size < 1:
            raise BenchError(f"--batch-size must be a positive integer, got {batch_size}")
        if timing_examples < 0:
            raise BenchError(f"--timing-examples must be 0 or more, got {timing_examples}")
        self.batch_size, self.timing_examples = batch_size, timing_examples
        self.engine_name, self.engine = engine, make_engine(engine)
        self.store = ResultStore(output_dir, writer=f"{partition[0]}of{partition[1]}")
        self.limit, self.partition, self.device, self.progress, self.log = (
            limit,
            partition,
            device,
            progress,
            log,
        )
        self.trace = trace
        self._pairs: dict[str, Pair] = {}
        self._tasks: dict[tuple[Any, ...], Task] = {}
        self._prompts: dict[str, dict[str, tuple[list[int], int]]] = {}

    def pair(self, cfg: RunConfig) -> Pair:
        device = self.device or cfg.device
        key = f"{cfg.pair}|{device}|{cfg.dtype}"
        if key not in self._pairs:
            self._pairs.clear()  # one pair in memory at a time
            self._pairs[key] = load_pair(cfg.pair, device=device, dtype=cfg.dtype)
        return self._pairs[key]

    def task(self, cfg: RunConfig) -> Task:
        key = (cfg.task, cfg.data, cfg.num_fewshot, cfg.split)
        if key not in self._tasks:
            self._tasks[key] = Task(
                resolve_task(cfg.task), cfg.data, num_fewshot=cfg.num_fewshot, split=cfg.split
            )
        return self._tasks[key]

    def assignments(self, configs: list[RunConfig]) -> list[tuple[RunConfig, list[Example]]]:
        """This partition's examples of every configuration, resolved (and each id once: a draft-length
        sweep runs ar once)."""
        resolved = (
            replace(c, device=self.device or c.device, engine=self.engine_name).resolve() for c in configs
        )
        unique = list({c.config_id: c for c in resolved}.values())
        index, count = self.partition
        out, offset = [], 0
        for cfg in unique:
            examples = self.task(cfg).examples(self.limit, cfg.seed)
            out.append((cfg, [e for i, e in enumerate(examples) if (offset + i) % count == index]))
            offset += len(examples)
        return out

    def run(self, configs: list[RunConfig]) -> None:
        groups: dict[tuple[Any, ...], list[tuple[RunConfig, list[Example]]]] = {}
        for cfg, mine in self.assignments(configs):
            done = self.store.done_ids(cfg.config_id)
            pending = [e for e in mine if e.example_id not in done]
            if not pending:
                self.log(f"{cfg.task} | {cfg.pair} | {cfg.label}: done, skipped")
                self.store.compact(cfg.config_id)
                continue
            groups.setdefault((cfg.task, cfg.pair, cfg.device, cfg.dtype), []).append((cfg, pending))
        # Every prompt is checked against the models' context before anything decodes; the
        # groups are checked last to first, so the first group's pair is the one left loaded.
        for group in reversed(list(groups.values())):
            for cfg, pending in group:
                self._prompts[cfg.config_id] = self.prompts(cfg, pending)
        for group in groups.values():
            jobs = [self.job(cfg, pending) for cfg, pending in group]
            self.timing_pass(jobs)
            for job in jobs:
                self.batched_pass(job)
        if isinstance(self.engine, CompiledEngines):
            self.log(
                f"compiled engine: {self.engine.compile_s:.1f} s compiling, {self.engine.warmup_s:.1f} s "
                "warming up, outside every example's time"
            )

    def job(self, cfg: RunConfig, pending: list[Example]) -> _Job:
        pair, task = self.pair(cfg), self.task(cfg)
        verifier = make_verifier(cfg.method, **cfg.params)
        head = None
        if verifier.needs_hidden:
            head = required_head(cfg.head, cfg.method, pair.spec.name, pair.hidden_sizes, pair.device)
        decoder = SpeculativeDecoder(
            pair.target,
            pair.draft,
            verifier,
            draft_len=cfg.draft_len,
            sampling=Sampling(cfg.temperature),
            eos_token_ids=pair.eos_token_ids,
            head=head,
            engine=self.engine,
            draft_policy=cfg.draft_policy,
            trace=self.trace,
        )
        budget = cfg.max_new_tokens
        self.store.write_manifest(
            cfg.config_id,
            {
                "config_id": cfg.config_id,
                "settings": asdict(cfg),
                "label": cfg.label,
                "limit": self.limit,
                **environment(pair.device),
            },
        )
        fixed = {
            "config_id": cfg.config_id,
            **{k: getattr(cfg, k) for k in SHARED_SETTINGS},
            "task": task.name,
            "pair": pair.spec.name,
            "method": verifier_class(cfg.method).name,
            "label": cfg.label,
            "draft_len": cfg.draft_len,
            **{k: cfg.params.get(k) for k in PARAM_COLUMNS},
            "params": json.dumps(cfg.params, sort_keys=True),
            "head": cfg.head,
            "draft_policy": cfg.draft_policy,
            "schema": SCHEMA,
        }
        fitted = self._prompts.pop(cfg.config_id, None) or self.prompts(cfg, pending)
        prompts = {example_id: ids for example_id, (ids, _) in fitted.items()}
        dropped = {example_id: n for example_id, (_, n) in fitted.items()}
        first = {e.example_id for e in task.examples(self.limit, cfg.seed)[: self.timing_examples]}
        timed = [e for e in pending if e.example_id in first or self.batch_size == 1]
        return _Job(cfg, pending, decoder, task, pair, fixed, prompts, dropped, budget, timed)

    def prompts(self, cfg: RunConfig, pending: list[Example]) -> dict[str, tuple[list[int], int]]:
        """Each example's prompt ids and how many prompt tokens were cut to fit the context of the
        models the method feeds (refused with one line unless --truncate-prompt left)."""
        pair = self.pair(cfg)
        uses_draft = verifier_class(cfg.method).uses_draft
        context = Context.of(pair.target, pair.draft if uses_draft else None)
        bos = getattr(pair.tokenizer, "bos_token_id", None)
        return {
            e.example_id: fit_prompt(
                self.encode(pair, e.prompt, cfg.chat_template),
                cfg.max_new_tokens,  # type: ignore[arg-type]
                context,
                cfg.truncate_prompt,
                example=f"{cfg.task} example {e.example_id}",
                bos_token_id=bos,
            )
            for e in pending
        }

    def timing_pass(self, jobs: list[_Job]) -> None:
        """Examples decoded alone, timed: after one warm-up decode per configuration, example i of
        every configuration, then example i + 1 of every configuration, and so on."""
        for job in jobs:
            if job.timed:
                job.decoder.generate(job.prompts[job.timed[0].example_id], job.budget, seed=0)  # warm-up
        total = sum(len(job.timed) for job in jobs)
        if not total:
            return
        overall = Progress(
            total,
            f"{jobs[0].task.name} | {jobs[0].pair.spec.name} | timing, batch 1",
            self.log,
            quiet=not (self.progress and sys.stderr.isatty()),  # off a terminal: the lines below
        )
        each = [
            Progress(
                len(job.timed),
                f"{job.task.name} | {job.pair.spec.name} | {job.cfg.label} | batch 1",
                self.log,
                live=False,
                quiet=not self.progress,
                own_time=True,
            )
            for job in jobs
        ]
        for i in range(max(len(job.timed) for job in jobs)):
            for job, progress in zip(jobs, each):
                if i < len(job.timed):
                    example = job.timed[i]
                    overall.describe(
                        f"{job.task.name} | {job.pair.spec.name} | {job.cfg.label} | timing, batch 1"
                    )
                    gen = job.decoder.generate(job.prompts[example.example_id], job.budget, job.seed(example))
                    self.store.append(self.row(job, example, gen), self.trace_frame(job, [(example, gen)]))
                    overall.update(gen.stats)
                    progress.update(gen.stats)
        overall.close()
        for progress in each:
            if progress.total:
                progress.close()

    def batched_pass(self, job: _Job) -> None:
        """The configuration's other examples, ``batch_size`` at a time, each batch written at once."""
        timed = {e.example_id for e in job.timed}
        rest = [e for e in job.pending if e.example_id not in timed]
        if not rest:
            self.store.compact(job.cfg.config_id)
            return
        desc = f"{job.task.name} | {job.pair.spec.name} | {job.cfg.label} | batch {self.batch_size}"
        progress = self._progress(len(rest), desc)
        cache_bytes = 0
        for start in range(0, len(rest), self.batch_size):
            batch = rest[start : start + self.batch_size]
            gens = job.decoder.generate_batch(
                [job.prompts[e.example_id] for e in batch], job.budget, [job.seed(e) for e in batch]
            )
            self.store.append_batch(
                [self.row(job, example, gen) for example, gen in zip(batch, gens)],
                self.trace_frame(job, list(zip(batch, gens))),
            )
            for gen in gens:
                cache_bytes = max(cache_bytes, gen.stats.kv_cache_bytes)
                progress.update(gen.stats)
        progress.close(f"KV caches peak {cache_bytes / 2**20:.1f} MiB")
        self.store.compact(job.cfg.config_id)

    def row(self, job: _Job, example: Example, gen: Generation) -> dict[str, Any]:
        completion = job.pair.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
        row = {**job.fixed, "example_id": example.example_id, "completion": completion}
        row.update(job.task.score(example.doc, completion))
        row.update(stats_columns(gen.stats))
        row["prompt_tokens_dropped"] = job.dropped[example.example_id]
        return row

    def trace_frame(self, job: _Job, decoded: list[tuple[Example, Generation]]) -> pd.DataFrame | None:
        """The token traces of decoded examples, one row per token (None when not tracing)."""
        if not self.trace:
            return None
        frames = []
        for example, gen in decoded:
            frame = pd.DataFrame(gen.trace or [], columns=list(TRACE_FIELDS))
            frame["token_text"] = job.pair.tokenizer.batch_decode([[t] for t in frame["token_id"]])
            frame["rejected_text"] = job.pair.tokenizer.batch_decode(
                [[t] if t >= 0 else [] for t in frame["rejected_token_id"]]
            )
            frame.insert(0, "example_id", example.example_id)
            frame.insert(0, "config_id", job.cfg.config_id)
            frames.append(frame)
        return pd.concat(frames, ignore_index=True)

    @staticmethod
    def encode(pair: Pair, prompt: str, chat_template: bool) -> list[int]:
        if chat_template:
            if not getattr(pair.tokenizer, "chat_template", None):
                raise BenchError(
                    f"pair {pair.spec.name}: the tokenizer has no chat template; drop --chat-template"
                )
            text = pair.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
            )
            return list(pair.tokenizer(text, add_special_tokens=False).input_ids)
        return list(pair.tokenizer(prompt).input_ids)

    def _progress(self, total: int, desc: str) -> Progress:
        return Progress(total, desc, self.log, quiet=not self.progress)
