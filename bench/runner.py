"""The runner: configurations -> decoded, scored rows in the results store.

Examples are decoded in batches (``batch_size``): a row's tokens and counters do not depend on its
batch, but its latency does, so batched rows carry no time (NaN) and a timing pass decodes the
first ``timing_examples`` of every configuration alone, the configurations of one task and pair
interleaved example by example so that paired times share the machine's state, each example
``timing_repeats`` times over: how much the same example's times disagree is what measures the
machine's noise (docs/engines-and-timing.md).
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from bench.build import decoder_for
from bench.config import RunConfig, example_seed
from bench.context import Context, fit_prompt
from bench.conversation import Messages, check_chat, decode_turns
from bench.decode_stats import Generation
from bench.decoding import SpeculativeDecoder
from bench.engines import CompiledEngines, make_engine
from bench.errors import BenchError
from bench.pairs import Pair, encode_prompt, load_pair, pick_device, pick_dtype, resolve_pair
from bench.progress import Progress
from bench.records import fixed_columns, row, write_manifest
from bench.store import ResultStore
from bench.trace import TRACE_FIELDS
from bench.tasks import Example, Task, resolve_task

__all__ = ["RunConfig", "Runner"]

# A configuration's warm-up decode before its first timed one: a few rounds (prefill, drafts,
# verification, the bonus token) touch every step of a decode, and a full one cost the demo 0.4 s.
WARMUP_TOKENS = 16


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

    def seed(self, example: Example, turn: int = 0) -> int:
        """The example's seed; a later turn of a conversation draws from its own."""
        return example_seed(self.cfg.seed, example.example_id + (f"#turn{turn + 1}" if turn else ""))


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
        timing_repeats: int = 2,
        engine: str = "eager",
        progress: bool = True,
        log: Any = print,
        trace: bool = False,
        verbose: bool = False,
    ) -> None:
        if limit is not None and limit < 1:
            raise BenchError(f"--limit must be >= 1 (or left out for every example), got {limit}")
        if batch_size < 1:
            raise BenchError(f"--batch-size must be a positive integer, got {batch_size}")
        if timing_examples < 0:
            raise BenchError(f"--timing-examples must be 0 or more, got {timing_examples}")
        if timing_repeats < 1:
            raise BenchError(f"--timing-repeats must be 1 or more, got {timing_repeats}")
        self.batch_size, self.timing_examples, self.timing_repeats = batch_size, timing_examples, timing_repeats
        self.engine_name, self.engine = engine, make_engine(engine, verbose, log)
        self.store = ResultStore(output_dir, writer=f"{partition[0]}of{partition[1]}")
        self.store.check_writable()
        self.limit, self.partition, self.device, self.progress, self.log = (
            limit,
            partition,
            device,
            progress,
            log,
        )
        self.trace = trace
        self.notes: dict[str, dict[str, Any]] = {}  # config id -> more manifest entries (calibration)
        self._pairs: dict[str, Pair] = {}
        self._pair_keys: dict[tuple[str, str, str | None], str] = {}  # settings as given -> resolved
        self._tasks: dict[tuple[Any, ...], Task] = {}
        self._prompts: dict[str, dict[str, tuple[list[int], int]]] = {}
        self._encoded: dict[tuple[str, bool, str], list[int]] = {}  # (pair, chat template, prompt) -> ids
        self._decoders: dict[str, SpeculativeDecoder] = {}  # built to check prompts, kept for the job

    def decoder(self, cfg: RunConfig) -> SpeculativeDecoder:
        """The decoder of a configuration, built once: the prompt check asks it which models' context
        applies (``SpeculativeDecoder.context``), and the job decodes with it (``job`` takes it)."""
        if cfg.config_id not in self._decoders:
            self._decoders[cfg.config_id] = decoder_for(cfg, self.pair(cfg), self.engine, trace=self.trace)
        return self._decoders[cfg.config_id]

    def pair(self, cfg: RunConfig) -> Pair:
        """The configuration's pair, loaded once: keyed by the device and dtype it resolves to, so a
        head trained before the run (bench.learned.cache) and the decoding share one load (the
        settings as given map to that key once: a prompt's encoding asks for the pair too)."""
        device = self.device or cfg.device
        given = (cfg.pair, device, cfg.dtype)
        if given not in self._pair_keys:
            dev = pick_device(device)
            self._pair_keys[given] = f"{cfg.pair}|{dev}|{pick_dtype(resolve_pair(cfg.pair), dev, cfg.dtype)}"
        key = self._pair_keys[given]
        if key not in self._pairs:
            self._pairs.clear()  # one pair in memory at a time
            self._decoders.clear()  # their models with it
            self._pairs[key] = load_pair(cfg.pair, device=device, dtype=cfg.dtype)
        return self._pairs[key]

    def task(self, cfg: RunConfig) -> Task:
        key = (cfg.task, cfg.data, cfg.num_fewshot, cfg.split)
        if key not in self._tasks:
            self._tasks[key] = Task(
                resolve_task(cfg.task), cfg.data_source, num_fewshot=cfg.num_fewshot, split=cfg.split
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
            if len(pending) < len(mine):
                found = f"found {len(mine) - len(pending)} of {len(mine)} examples' rows in {self.store.root}"
                self.log(f"{cfg.task} | {cfg.pair} | {cfg.label}: resuming: {found}; {len(pending)} left")
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
        decoder = self.decoder(cfg)
        del self._decoders[cfg.config_id]  # the job holds it now, and drops it when done
        budget = cfg.budget
        write_manifest(self.store, cfg, pair.device, self.limit, **self.notes.get(cfg.config_id, {}))
        fixed = fixed_columns(cfg, pair.spec.name, task.name)
        fitted = self._prompts.pop(cfg.config_id, None) or self.prompts(cfg, pending, decoder)
        prompts = {example_id: ids for example_id, (ids, _) in fitted.items()}
        dropped = {example_id: n for example_id, (_, n) in fitted.items()}
        first = {e.example_id for e in task.examples(self.limit, cfg.seed)[: self.timing_examples]}
        timed = [e for e in pending if e.example_id in first or self.batch_size == 1]
        return _Job(cfg, pending, decoder, task, pair, fixed, prompts, dropped, budget, timed)

    def prompts(
        self, cfg: RunConfig, pending: list[Example], decoder: SpeculativeDecoder | None = None
    ) -> dict[str, tuple[list[int], int]]:
        """Each example's prompt ids and how many prompt tokens were cut to fit the context of the
        models the method feeds (refused with one line unless --truncate-prompt left); ``decoder``:
        the one that will decode them (default: this runner's for ``cfg``)."""
        check_chat(cfg.task, pending, cfg.chat_template)
        context = (decoder or self.decoder(cfg)).context
        return {e.example_id: self.fit(cfg, context, e, e.prompt) for e in pending}

    def fit(
        self, cfg: RunConfig, context: Context, example: Example, prompt: str | Messages
    ) -> tuple[list[int], int]:
        """A prompt (or a conversation) encoded, and cut to the decoder's ``context`` or refused
        (fit_prompt)."""
        pair = self.pair(cfg)
        return fit_prompt(
            self._encode(pair, prompt, cfg.chat_template),
            cfg.budget,
            context,
            cfg.truncate_prompt,
            example=f"{cfg.task} example {example.example_id}",
            bos_token_id=getattr(pair.tokenizer, "bos_token_id", None),
        )

    def _encode(self, pair: Pair, prompt: str | Messages, chat_template: bool) -> list[int]:
        """A prompt's ids, encoded once per pair: every method of a task asks for the same prompts
        (a conversation's later turns differ by method, and are encoded each time)."""
        if not isinstance(prompt, str):
            return encode_prompt(pair, prompt, chat_template)
        key = (pair.spec.name, chat_template, prompt)
        if key not in self._encoded:
            self._encoded[key] = encode_prompt(pair, prompt, chat_template)
        return list(self._encoded[key])

    def decode(self, job: _Job, examples: list[Example]) -> list[tuple[Generation, list[str] | None]]:
        """Examples decoded together (one alone is timed); a multi-turn task's later turns follow,
        each asked with the method's own earlier answers (bench/conversation.py), and the row sums
        the turns' counters and times. Returns each example's generation and its turns' answers."""

        def batch(prompts: list[list[int]], seeds: list[int]) -> list[Generation]:
            return job.decoder.generate_batch(prompts, job.budget, seeds)

        gens = batch([job.prompts[e.example_id] for e in examples], [job.seed(e) for e in examples])
        if not job.task.spec.turns:
            return [(gen, None) for gen in gens]

        def prompt(example: Example, messages: Messages) -> list[int]:
            ids, dropped = self.fit(job.cfg, job.decoder.context, example, messages)
            job.dropped[example.example_id] += dropped
            return ids

        def answer(token_ids: list[int]) -> str:
            return job.task.cut(job.pair.text(token_ids)).strip()

        return [(gen, turns) for gen, turns in decode_turns(examples, gens, batch, prompt, answer, job.seed)]

    def timing_pass(self, jobs: list[_Job]) -> None:
        """Examples decoded alone, timed: after a short warm-up decode per configuration, example i of
        every configuration, ``timing_repeats`` rounds over, then example i + 1, and so on. A row
        keeps every repeat's time (``wall_times_s``) and their median (``wall_time_s``); the
        repeats draw from the same seed, so their tokens and counters are the same."""
        for job in jobs:
            if job.timed:  # warm-up: the first rounds run every step a decode takes
                job.decoder.generate(job.prompts[job.timed[0].example_id], min(job.budget, WARMUP_TOKENS), seed=0)
        total = sum(len(job.timed) for job in jobs)
        if not total:
            return
        overall = Progress(
            total * self.timing_repeats,
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
            live = [(job, progress) for job, progress in zip(jobs, each) if i < len(job.timed)]
            times: list[list[float]] = [[] for _ in live]
            decoded: list[tuple[Generation, list[str] | None]] = []
            for _ in range(self.timing_repeats):
                decoded = []
                for (job, _), own in zip(live, times):
                    overall.describe(
                        f"{job.task.name} | {job.pair.spec.name} | {job.cfg.label} | timing, batch 1"
                    )
                    [(gen, turns)] = self.decode(job, [job.timed[i]])
                    own.append(gen.stats.wall_time_s)
                    decoded.append((gen, turns))
                    overall.update(gen.stats)
            for (job, progress), (gen, turns), own in zip(live, decoded, times):
                example = job.timed[i]
                gen.stats.wall_time_s = statistics.median(own)
                stored = self.row(job, example, gen, turns) | {"wall_times_s": own}
                self.store.append(stored, self.trace_frame(job, [(example, gen)]))
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
            decoded = self.decode(job, batch)
            gens = [gen for gen, _ in decoded]
            self.store.append_batch(
                [self.row(job, example, gen, turns) for example, (gen, turns) in zip(batch, decoded)],
                self.trace_frame(job, list(zip(batch, gens))),
            )
            for gen in gens:
                cache_bytes = max(cache_bytes, gen.stats.kv_cache_bytes)
                progress.update(gen.stats)
        progress.close(f"KV caches peak {cache_bytes / 2**20:.1f} MiB")
        self.store.compact(job.cfg.config_id)

    def row(self, job: _Job, example: Example, gen: Generation, turns: list[str] | None = None) -> dict[str, Any]:
        """An example's row; a multi-turn task's rows add every turn's answer (``turn_completions``),
        the completion being the last turn's."""
        completion = job.pair.text(gen.token_ids)
        return row(
            job.fixed,
            example.example_id,
            completion,
            gen.stats,
            **job.task.score(example.doc, completion),
            **job.task.columns(example.doc),
            **({"turns": len(turns), "turn_completions": turns} if turns is not None else {}),
            prompt_tokens_dropped=job.dropped[example.example_id],
        )

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

    def _progress(self, total: int, desc: str) -> Progress:
        return Progress(total, desc, self.log, quiet=not self.progress)
