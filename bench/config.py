"""What one run decodes: a configuration (``RunConfig``) and the expansion of methods and their
parameter values into configurations.

A configuration is everything that changes a row: task, pair, method and its parameters, draft
length and draft policy, temperature, token budget, seed, data source, prompt options (prompt
truncation included), device, dtype and engine. Its id is a hash of those settings as they ran
(defaults made concrete), so re-running the same command resumes it, and raising ``--limit`` adds
examples to it (the subset is a prefix of one seeded permutation).
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from bench.context import check_truncation
from bench.drafters import canonical_drafter, check_draft_policy, drafter_class, drafter_for, drafter_label, parse_drafter
from bench.errors import BenchError
from bench.lossless import Drafts, anchors
from bench.pairs import pick_device, pick_dtype, resolve_pair
from bench.plugins import parameters, typed_params
from bench.store import SCHEMA
from bench.tasks import default_data, resolve_task
from bench.verifiers import CALIBRATED, MethodInfo, make_verifier, verifier_class


@dataclass(frozen=True)
class RunConfig:
    """One configuration: the unit that is resumed, skipped, compared and merged.

    ``None`` fields take the task's, pair's or machine's default; ``resolve`` makes them concrete,
    so that the id, the rows and the pairing with ``ar`` see the values that actually ran.
    """

    task: str
    pair: str
    method: str  # a registry name, module:Class or path/to/file.py:Class
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
    drafter: str | None = "model"  # what drafts (bench/drafters): model, or lookup[:key=value,...]

    def resolve(self, *, task_defaults: bool = True) -> RunConfig:
        """Defaults made concrete (every verifier parameter included), and settings the method
        does not read dropped (``ar`` has no draft length; only head-reading methods have a head).
        ``task_defaults=False`` leaves the task's settings (budget, data, shots, split) as given:
        the lm-eval backend's rows, whose prompts and budget lm-eval chooses."""
        pair = resolve_pair(self.pair)
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
        if any(v is CALIBRATED for v in self.params.values()):
            raise BenchError(f"{cls.name}: a calibrated sweep's values are chosen by `run` (bench.calibration) first")
        verifier = make_verifier(self.method, **self.params)
        drafts = self.drafts()
        if drafts.drafter:  # refused here, before any model loads, as when the decoder binds it
            drafter_for(drafts.drafter, cls.name, verifier.reads())
        resolved = replace(
            self,
            params={f.name: getattr(verifier, f.name) for f in parameters(verifier)},
            draft_len=self.draft_len if cls.uses_draft else 0,
            draft_policy=drafts.policy,
            drafter=drafts.drafter,
            head=self.head if cls.needs_hidden else None,
            device=device.type,
            dtype=str(pick_dtype(pair, device, self.dtype)).removeprefix("torch."),
        )
        if not task_defaults:
            return resolved
        spec = resolve_task(self.task)
        return replace(
            resolved,
            max_new_tokens=self.max_new_tokens or spec.max_new_tokens,
            data=self.source(),
            num_fewshot=spec.num_fewshot if self.num_fewshot is None else self.num_fewshot,
            split=self.split or spec.dataset["split"],
        )

    def source(self) -> str:
        """The data source: the one given, else the task's default for the pair (its fixtures for
        the offline tiny pair); what ``resolve`` makes concrete, asked before (the head cache)."""
        return self.data or default_data(resolve_task(self.task).name, resolve_pair(self.pair).kind)

    @property
    def data_source(self) -> str:
        """``data`` of a configuration ``resolve`` made concrete (the runner's, the calibration's)."""
        if self.data is None:
            raise BenchError(f"configuration {self.task}/{self.method}: no data source; resolve it first (RunConfig.resolve)")
        return self.data

    @property
    def budget(self) -> int:
        """``max_new_tokens`` of a configuration ``resolve`` made concrete."""
        if self.max_new_tokens is None:
            raise BenchError(f"configuration {self.task}/{self.method}: no token budget; resolve it first (RunConfig.resolve)")
        return self.max_new_tokens

    def drafts(self) -> Drafts:
        """What this configuration drafts, as it runs: the drafter's canonical spec (None for a
        method that drafts nothing) and the draft policy ("greedy" under greedy decoding, whose
        drafts are the argmax; None where a deterministic drafter has one draft whatever it is)."""
        cls = verifier_class(self.method)
        if not cls.uses_draft:
            return Drafts(None, None)
        drafter = canonical_drafter(self.drafter)
        if drafter_class(parse_drafter(drafter)[0]).deterministic:
            return Drafts(None, drafter)
        # Under greedy decoding every draft is the argmax, whatever the policy.
        policy = "greedy" if self.temperature == 0 else check_draft_policy(self.draft_policy or cls.draft_policy)
        return Drafts(policy, drafter)

    def anchors(self) -> list[RunConfig]:
        """The anchors of this configuration's drafts (``bench.lossless``): ``sd`` and
        ``accept_all`` on the same drafts, under the same settings; none for a method that drafts
        nothing."""
        return [
            replace(self, method=method, params={}, head=None, draft_policy=d.policy, drafter=d.drafter)
            for method, d in anchors(self.drafts())
        ]

    @property
    def config_id(self) -> str:
        """A hash of every setting (call on a resolved configuration)."""
        settings = json.dumps(asdict(self), sort_keys=True, default=str)
        digest = hashlib.sha1(f"{SCHEMA}|{settings}".encode()).hexdigest()[:10]
        # A plug-in is named by its name, not by the path or module it was loaded from.
        method = re.sub(r"[^A-Za-z0-9_.-]+", ".", verifier_class(self.method).name)
        return f"{Path(self.task).stem}-{Path(self.pair).stem}-{method}-{digest}"

    @property
    def info(self) -> MethodInfo:
        """What the method's verifier class declares about it."""
        return MethodInfo.of(verifier_class(self.method))

    @property
    def label(self) -> str:
        """Display name: the method's name and its parameters, as its class names them."""
        policy = self.draft_policy if self.temperature != 0 else None
        return self.info.label(self.params, self.head, policy, drafter_label(self.drafter) if self.drafter else "")


@dataclass(frozen=True)
class RunSettings:
    """The settings a user gives a whole run, shared by its configurations: `run`'s flags of the
    same names, or a grid file's keys. ``None``: not given, so the grid's value or RunConfig's
    default applies; a grid refuses a setting it fixes that is given here (bench/grid.py).
    Each field is a RunConfig field, except that ``drafter`` may name several (a grid axis)."""

    draft_len: int | None = None
    temperature: float | None = None
    max_new_tokens: int | None = None
    seed: int | None = None
    data: str | None = None
    num_fewshot: int | None = None
    split: str | None = None
    chat_template: bool | None = None
    truncate_prompt: str | None = None
    draft_policy: str | None = None
    drafter: str | Sequence[str] | None = None

    @classmethod
    def of(cls, given: RunSettings | Mapping[str, Any], where: str = "settings") -> RunSettings:
        """Settings from a mapping (a grid's keys, a notebook's dict): a name that is no setting is
        refused here, naming the settings, not as a TypeError deep inside a run."""
        if isinstance(given, RunSettings):
            return given
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise BenchError(f"{where}: {', '.join(unknown)} is no run setting; the settings: {', '.join(names)}")
        return cls(**given)

    def given(self) -> dict[str, Any]:
        """The settings given (not None), by name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def over(self, base: RunSettings) -> RunSettings:
        """These settings, and ``base``'s where these leave one open."""
        return replace(base, **self.given())

    def drafters(self) -> list[str]:
        """The drafters to run, one configuration each (default: the pair's draft model)."""
        drafter = self.drafter or "model"
        return [drafter] if isinstance(drafter, str) else list(drafter)

    def config(self, *, task: str, pair: str, method: str, params: dict[str, Any], head: str | None,
               drafter: str, device: str, dtype: str | None, engine: str) -> RunConfig:  # fmt: skip
        """The configuration of one task, pair, method and drafter under these settings; a setting
        left open takes RunConfig's default (None there: the task's or the method's)."""
        left = RunConfig(task=task, pair=pair, method=method)  # RunConfig's defaults
        return RunConfig(
            task=task, pair=pair, method=method, params=params, head=head, drafter=drafter, device=device,
            dtype=dtype, engine=engine,
            draft_len=left.draft_len if self.draft_len is None else self.draft_len,
            temperature=left.temperature if self.temperature is None else self.temperature,
            max_new_tokens=self.max_new_tokens,
            seed=left.seed if self.seed is None else self.seed,
            data=self.data,
            num_fewshot=self.num_fewshot,
            split=self.split,
            chat_template=left.chat_template if self.chat_template is None else self.chat_template,
            truncate_prompt=left.truncate_prompt if self.truncate_prompt is None else self.truncate_prompt,
            draft_policy=self.draft_policy,
        )  # fmt: skip


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


def expand_methods(
    methods: Iterable[str],
    *,
    params: Mapping[str, Sequence[Any]] | None = None,
    heads: Iterable[str] = (),
    sweep: bool = False,
    calibrate: bool = False,
) -> list[tuple[str, dict[str, Any], str | None]]:
    """(method, params, head) for every method and every combination of its parameters' values.

    ``params`` ({name: values}, from ``--param`` and its aliases) reach every selected method that
    has the parameter; a name that none has is refused. With ``sweep``, a method's swept
    parameters that were given no values take the default sweep its class declares. With
    ``calibrate``, a method that declares a calibration path and was given none of its parameters
    gets ``CALIBRATED`` there instead: `run` chooses the values (bench.calibration). A method
    that reads a head runs once per head."""
    methods = list(dict.fromkeys(methods))
    params = params or {}
    known = {f.name for m in methods for f in parameters(verifier_class(m))}
    stray = sorted(set(params) - known)
    if stray:
        raise BenchError(
            f"--param {', '.join(stray)}: no selected method takes it; their parameters: "
            f"{', '.join(sorted(known)) or 'none'}"
        )
    routed = _heads_by_method(heads, methods)
    out: list[tuple[str, dict[str, Any], str | None]] = []
    for m in methods:
        cls = verifier_class(m)
        own = routed.get(cls.name, routed.get("", []))
        values = {
            f.name: list(params[f.name])
            for f in parameters(cls)
            if f.name in params
        }
        if sweep:
            values = {**{k: list(v) for k, v in cls.sweep.items()}, **values}
        path = cls.calibration if calibrate else None
        if path and not set(path.moved) & set(params):
            values = {**{k: v for k, v in values.items() if k not in path.moved}, path.param: [CALIBRATED]}
        combos: list[dict[str, Any]] = [{}]
        for name, given in values.items():
            as_typed = [v if v is CALIBRATED else typed_params(cls, cls.name, {name: v})[name] for v in given]
            combos = [{**c, name: v} for c in combos for v in as_typed]
        for combo in combos:
            # validate every value before any model loads (a calibrated one at its path's end)
            make_verifier(m, **{**combo, **(path.values(path.top) if path and CALIBRATED in combo.values() else {})})
            if cls.needs_hidden and not own:
                if not learns(m, combo):
                    raise BenchError(f"{cls.name}: reads a head and trains none of its own; pass --head PATH")
                out.append((m, combo, None))  # its cached head, trained if missing (bench.learned.cache)
            else:
                out += [(m, combo, h) for h in own] if cls.needs_hidden else [(m, combo, None)]
    return out


def _heads_by_method(heads: Iterable[str], methods: Sequence[str]) -> dict[str, list[str]]:
    """``--head`` values by the method they are for: ``METHOD=PATH`` (METHOD one of the selected
    methods) gives that method its own head, so two learned methods in one run each read theirs;
    any other value is a path for every method that reads a head and was given none of its own
    (key "")."""
    names = {m: verifier_class(m).name for m in methods} | {verifier_class(m).name: verifier_class(m).name for m in methods}
    out: dict[str, list[str]] = {}
    for head in heads:
        method, sep, path = head.partition("=")
        key = names.get(method, "") if sep else ""
        out.setdefault(key, []).append(path if key else head)
    return out


def learns(method: str, params: dict[str, Any]) -> bool:
    """Whether a configuration trains its own head (a recipe): run then supplies it."""
    return make_verifier(method, **{k: v for k, v in params.items() if v is not CALIBRATED}).recipe() is not None


def example_seed(seed: int, example_id: str) -> int:
    """Per-example seed: results do not depend on order, sharding or process count."""
    return zlib.crc32(f"{seed}:{example_id}".encode())
