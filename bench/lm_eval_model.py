"""diversed-bench as an lm-evaluation-harness model backend: ``--model diversed``.

lm-eval 0.4 finds models only in its own registry (it has no plugin entry points), so importing
this module registers the backend; ``diversed-lm-eval`` (``bench.lm_eval_cli``) is the ``lm_eval``
command with it registered. Nothing in the core CLI imports this module.

``generate_until`` decodes through ``SpeculativeDecoder.generate_batch`` to the request's token
budget (or EOS) and then cuts at the ``until`` strings, the harness's protocol: the counters
describe every decoded token. Log-likelihood requests are answered by the target model alone,
which is lossless by definition (no draft is involved), ``--batch_size`` at a time, so
multiple-choice tasks run too.
"""

from __future__ import annotations

import hashlib
import math
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch
from lm_eval.api.instance import Instance
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import normalize_gen_kwargs, postprocess_generated_text

from bench.context import fit_prompt
from bench.decode_stats import DecodeStats, Generation
from bench.decoding import SpeculativeDecoder
from bench.distributions import Sampling
from bench.errors import BenchError
from bench.pairs import chat_text, encode_prompt, load_pair
from bench.plugins import typed_params
from bench.build import build_decoder, pair_head
from bench.config import RunConfig, example_seed
from bench.engines import ENGINES, make_engine
from bench.records import fixed_columns, row, write_manifest
from bench.store import ResultStore
from bench.verifiers import Verifier, make_verifier, verifier_class

log = logging.getLogger("lm_eval.models.diversed")  # under lm-eval's logger, so its setup shows our lines

DEFAULT_MAX_GEN_TOKS = 256  # lm-eval's HF backend default when a task sets no budget
GEN_KWARGS = {"until", "max_gen_toks", "do_sample", "temperature"}


def _integer(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BenchError(f"model_args: {name} must be an integer >= {minimum}, got {value!r}")
    return value


def _check_model_args(params: dict[str, Any], batch_size: int | str, max_batch_size: int | None) -> None:
    """Refuse model_args that belong elsewhere: generation settings (the task's gen_kwargs) and an
    automatic batch size."""
    for name in ("temperature", "max_new_tokens", "max_gen_toks"):
        if name in params:
            raise BenchError(
                f"model_args: {name} belongs to the task's generation settings; pass it with "
                f"--gen_kwargs (e.g. do_sample=true,temperature=1.0,max_gen_toks=256)"
            )
    if isinstance(batch_size, str) and batch_size.startswith("auto") or max_batch_size is not None:
        raise BenchError("--model diversed takes a fixed batch size; pass --batch_size N (no auto)")


def _verifier(method: str, params: dict[str, Any]) -> tuple[dict[str, Any], Verifier]:
    """The method's typed parameters and its verifier."""
    try:
        typed = typed_params(verifier_class(method), method, params)  # lm-eval parses model_args loosely
        verifier = make_verifier(method, **typed)
    except BenchError as exc:
        raise BenchError(
            f"{exc} (model_args also take pair, method, draft_len, drafter, head, seed, dtype, engine, output_dir)"
        ) from None
    return typed, verifier


class _Job(NamedTuple):
    """One generate_until request on its way through the decoder."""

    slot: int  # its request's place in lm-eval's list (``index`` would shadow tuple.index)
    example_id: str
    request: Instance
    prompt: list[int]
    until: list[str]


@dataclass
class Tally:
    """Counters pooled over many decoded requests (``DecodeStats.pool``)."""

    requests: int = 0
    stats: DecodeStats = field(default_factory=lambda: DecodeStats(prompt_tokens=0, draft_len=0))

    def add(self, stats: DecodeStats) -> None:
        self.requests += 1
        self.stats.pool(stats)

    def summary(self) -> dict[str, Any]:
        """Pooled rates: accepted / drafted, tokens / rounds, and both per draft position."""

        def defined(value: float) -> float | None:
            return None if math.isnan(value) else value  # JSON has no NaN

        s = self.stats
        return {
            "requests": self.requests,
            "new_tokens": s.new_tokens,
            "rounds": s.rounds,
            "drafted_tokens": s.drafted_tokens,
            "accepted_tokens": s.accepted_tokens,
            "acceptance_rate": defined(s.acceptance_rate),
            "acceptance_length": defined(s.acceptance_length),
            "acceptance_rate_per_position": [
                a / d if d else None for a, d in zip(s.accepted_per_position, s.drafted_per_position)
            ],
            "expected_acceptance": defined(s.expected_acceptance),
        }


@register_model("diversed")
class DiversedLM(LM):
    """Relaxed speculative decoding behind lm-eval's LM interface.

    model_args: ``pair``, ``method`` (a registry name or ``module:Class``), the method's own
    parameters (``target_weight``, ``lenience``, ``cascade_rule``, ``cascade_alpha``, ``mix``, or a
    custom verifier's fields), ``draft_len``, ``drafter`` (``model``, the default, or
    ``lookup[:...]`` etc., as `run`'s --drafter), ``head`` (DIVERSED), ``seed`` (default: lm-eval's
    torch seed), ``dtype``, ``engine`` and ``output_dir`` (the parquet results directory).
    ``device`` and ``batch_size`` are lm-eval's own flags (the command always passes them, so
    model_args cannot); temperature and budget come from the task's generation kwargs, as for
    every lm-eval model.
    """

    def __init__(
        self,
        pair: str = "tiny",
        method: str = "sd",
        draft_len: int = 5,
        head: str | None = None,
        seed: int | None = None,
        device: str | None = None,
        dtype: str | None = None,
        output_dir: str = "results/lm_eval",
        engine: str = "eager",
        drafter: str = "model",
        batch_size: int | str = 1,
        max_batch_size: int | None = None,
        **params: Any,
    ) -> None:
        super().__init__()
        _check_model_args(params, batch_size, max_batch_size)
        self.batch_size = _integer("batch_size", batch_size, 1)
        self.draft_len = _integer("draft_len", draft_len, 0)
        self.method, self.drafter = str(method), str(drafter)
        self.params, self.verifier = _verifier(self.method, params)
        self.seed = torch.initial_seed() if seed is None else _integer("seed", seed, 0)
        if engine not in ENGINES:
            raise BenchError(f"model_args: engine={engine!r}; use engine={' or engine='.join(ENGINES)}")
        self.engine_name, self.engine = engine, make_engine(engine)
        self.device_name = device or "auto"
        self.head_path = None if head is None else str(head)
        self.pair_name = str(pair)
        self.pair = load_pair(self.pair_name, device=self.device_name, dtype=dtype)
        self.tokenizer = self.pair.tokenizer
        self.head = (
            pair_head(self.head_path, self.method, self.pair, self.drafter)
            if self.head_path is not None
            else None  # a head it does not read, or none where it reads one: the decoder refuses
        )
        self._decoders: dict[Sampling, SpeculativeDecoder] = {}
        self.decoder(Sampling(0.0))  # refuse a bad draft_len or drafter before any request
        self.store = ResultStore(Path(output_dir))
        self.output_dir = Path(output_dir)
        self._manifests: set[str] = set()
        self._chat_templated = False
        self.tallies: dict[str, Tally] = {}  # per lm-eval task
        self.total = Tally()

    @property
    def device(self) -> torch.device:
        return self.pair.device

    @property
    def tokenizer_name(self) -> str:
        return f"diversed-{self.pair.spec.name}"

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return getattr(self.tokenizer, "chat_template", None)

    def apply_chat_template(
        self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True
    ) -> str:
        if not getattr(self.tokenizer, "chat_template", None):
            raise BenchError(
                f"pair {self.pair.spec.name}: the tokenizer has no chat template; drop --apply_chat_template"
            )
        self._chat_templated = True
        return chat_text(self.pair, chat_history, add_generation_prompt)

    def decoder(self, sampling: Sampling) -> SpeculativeDecoder:
        if sampling not in self._decoders:
            self._decoders[sampling] = build_decoder(
                self.pair,
                self.method,
                self.params,
                head=self.head,
                draft_len=self.draft_len,
                sampling=sampling,
                engine=self.engine,
                drafter=self.drafter,
            )
        return self._decoders[sampling]

    def encode(self, text: str) -> list[int]:
        """Token ids as the runner encodes a prompt; chat-templated text already has its specials."""
        if self._chat_templated:
            return list(self.tokenizer(text, add_special_tokens=False).input_ids)
        return encode_prompt(self.pair, text, chat_template=False)

    # --- generation ------------------------------------------------------------------------

    @staticmethod
    def generation_settings(gen_kwargs: dict[str, Any]) -> tuple[Sampling, int, list[str]]:
        """(sampling, token budget, stop strings) of one request; other settings are refused."""
        kwargs = normalize_gen_kwargs(gen_kwargs, DEFAULT_MAX_GEN_TOKS)
        unknown = sorted(set(kwargs) - GEN_KWARGS)
        if unknown:
            raise BenchError(
                f"--model diversed: generation setting(s) {unknown} not supported (it takes until, "
                "max_gen_toks, do_sample and temperature); drop them from --gen_kwargs or the task file"
            )
        temperature = float(kwargs["temperature"]) if kwargs["do_sample"] else 0.0
        until = [s for s in kwargs["until"] if s]
        return Sampling(temperature), int(kwargs["max_gen_toks"]), until

    def config(self, task: str, sampling: Sampling, budget: int) -> RunConfig:
        """The configuration of this backend's rows, made concrete by `RunConfig.resolve` as a run's
        is: lm-eval chooses prompts, exemplars and budget, so the data is "lm-eval" and the task's
        other settings stay unset."""
        return RunConfig(
            task=task,
            pair=self.pair_name,
            method=self.method,
            params=self.params,
            head=self.head_path,
            draft_len=self.draft_len,
            drafter=self.drafter,
            temperature=sampling.temperature,
            max_new_tokens=budget,
            seed=self.seed,
            data="lm-eval",
            chat_template=self._chat_templated,
            device=self.pair.device.type,
            dtype=str(self.pair.target.dtype).removeprefix("torch."),
            engine=self.engine_name,
        ).resolve(task_defaults=False)

    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        seen: dict[str, int] = {}
        groups: dict[tuple[Sampling, int], list[_Job]] = {}
        for i, req in enumerate(requests):
            context, gen_kwargs = req.args
            sampling, budget, until = self.generation_settings(gen_kwargs)
            digest = hashlib.sha1(f"{context}\0{sorted(gen_kwargs.items())}".encode()).hexdigest()[:10]
            base = f"{req.task_name}/{req.doc_id}/{req.idx}/{digest}"
            repeat = seen[base] = seen.get(base, -1) + 1  # repeats>1 tasks pass one instance n times
            # Prompts past a model's context are refused here too (no truncation: the rows say "none").
            prompt, _ = fit_prompt(
                self.encode(context), budget, self.decoder(sampling).context, "none", example=f"lm-eval {base}"
            )
            job = _Job(i, f"{base}/{repeat}", req, prompt, until)
            groups.setdefault((sampling, budget), []).append(job)
        out: list[str] = [""] * len(requests)
        done = 0
        for (sampling, budget), group in groups.items():
            decoder = self.decoder(sampling)
            group.sort(key=lambda j: -len(j.prompt))  # similar lengths share a batch
            for start in range(0, len(group), self.batch_size):
                chunk = group[start : start + self.batch_size]
                gens = decoder.generate_batch(
                    [j.prompt for j in chunk], budget, [example_seed(self.seed, j.example_id) for j in chunk]
                )
                for job, gen in zip(chunk, gens):
                    out[job.slot] = self.record(job, sampling, budget, gen)
                done += len(chunk)
                log.info("diversed: %d/%d generate_until requests", done, len(requests))
        for config_id in self._manifests:
            self.store.compact(config_id)
        for task, tally in self.tallies.items():
            s = tally.summary()
            rate, length = (
                f"{v:.3f}" if v is not None else "-" for v in (s["acceptance_rate"], s["acceptance_length"])
            )
            log.info(
                "diversed %s: %d requests, acceptance rate %s, acceptance length %s",
                task,
                s["requests"],
                rate,
                length,
            )
        return out

    def record(self, job: _Job, sampling: Sampling, budget: int, gen: Generation) -> str:
        """Write the request's row to the parquet store and count it; return the cut completion."""
        req, until = job.request, job.until
        task = req.task_name or "lm-eval"
        cfg = self.config(task, sampling, budget)
        if cfg.config_id not in self._manifests:
            write_manifest(
                self.store, cfg, self.pair.device, None, lm_eval={"task": task, "version": _lm_eval_version()}
            )
            self._manifests.add(cfg.config_id)
        text = self.pair.text(gen.token_ids)
        cut = postprocess_generated_text(text, until, None)
        self.store.append(
            row(
                fixed_columns(cfg, self.pair.spec.name, task),
                job.example_id,
                text,
                gen.stats,
                doc_id=req.doc_id,
                until=until,
                completion_cut=cut,
                prompt_tokens_dropped=0,
            )
        )
        self.tallies.setdefault(task, Tally()).add(gen.stats)
        self.total.add(gen.stats)
        self.cache_hook.add_partial("generate_until", req.args, cut)
        return cut

    def get_model_info(self) -> dict[str, Any]:
        """Goes into the ``config`` block of lm-eval's results JSON, beside its metrics."""
        return {
            "diversed": {
                "pair": self.pair.spec.name,
                "method": self.verifier.name,
                "params": self.params,
                "draft_len": self.decoder(Sampling(0.0)).draft_len,
                "drafter": self.drafter,
                "head": self.head_path,
                "seed": self.seed,
                "results_dir": str(self.output_dir),
                "acceptance": {
                    "all": self.total.summary(),
                    **{t: s.summary() for t, s in self.tallies.items()},
                },
            }
        }

    # --- log-likelihood: the target alone ---------------------------------------------------

    def _encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """(context ids, continuation ids); trailing spaces of the context go to the continuation."""
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        if not context:
            prefix = self.tokenizer.bos_token_id
            prefix = self.tokenizer.eos_token_id if prefix is None else prefix
            return [prefix], list(self.tokenizer(continuation, add_special_tokens=False).input_ids)
        whole, ctx = self.encode(context + continuation), self.encode(context)
        return ctx, whole[len(ctx) :]

    @torch.inference_mode()
    def loglikelihood(self, requests: list[Instance], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """Scored by the target model alone: lossless by definition, no draft, no counters.

        ``--batch_size`` requests share a forward, right-padded: a causal model's logits at a
        real position never see the padding after it (the longest first, so a batch's rows are
        of similar lengths)."""
        pairs = []
        for req in requests:
            ctx, cont = self._encode_pair(*req.args)
            if not cont:
                raise BenchError(f"loglikelihood: continuation {req.args[1]!r} encodes to no tokens")
            pairs.append((ctx, cont))
        order = sorted(range(len(requests)), key=lambda i: -sum(map(len, pairs[i])))
        out: list[tuple[float, bool]] = [(0.0, False)] * len(requests)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            rows = [pairs[i][0] + pairs[i][1] for i in chunk]  # the last token is only a target
            width = max(map(len, rows))
            ids = torch.tensor([r + [0] * (width - len(r)) for r in rows], device=self.device)
            real = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=self.device)
            logits = self.pair.target(input_ids=ids[:, :-1], attention_mask=real[:, :-1]).logits
            scored = []
            for b, i in enumerate(chunk):
                at = slice(len(pairs[i][0]) - 1, len(rows[b]) - 1)  # the positions predicting cont
                row, target = logits[b, at].float(), ids[b, at.start + 1 : at.stop + 1]
                logprob = row.log_softmax(-1).gather(-1, target.unsqueeze(-1)).sum()
                scored.append(torch.stack([logprob, (row.argmax(-1) == target).all().float()]))
            for i, (score, greedy) in zip(chunk, torch.stack(scored).tolist()):  # one read per batch
                out[i] = (score, bool(greedy))
                self.cache_hook.add_partial("loglikelihood", requests[i].args, out[i])
        return out

    def loglikelihood_rolling(self, requests: list[Instance], disable_tqdm: bool = False) -> list[float]:
        raise BenchError(
            "--model diversed does not score perplexity tasks (loglikelihood_rolling): they measure the "
            "target alone; run them with --model hf --model_args pretrained=TARGET"
        )


def _lm_eval_version() -> str:
    import lm_eval

    return lm_eval.__version__
