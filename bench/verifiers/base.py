"""The verifier template: one round in, a verdict out, and the registry of methods by name.

A verifier is a pure function of tensors that decides which drafted tokens to keep. It sees one round (drafted tokens,
draft distributions ``q``, target distributions ``p``) and returns the accepted mass ``m`` and the
residual ``r`` per drafted position. The shared ``verify`` function then accepts drafted ``x`` with
probability ``m(x) / q(x)`` left to right, samples the first rejected position from ``norm(r)`` and
adds a bonus token from ``p`` when everything was accepted. The emitted token at a position follows
``m + (1 - sum m) * norm(r)``.

Most methods are mixtures: they name a verification distribution ``pi`` and get
``m = min(q, pi)``, ``r = max(0, pi - q)``, so the emitted tokens follow ``pi`` exactly and the
acceptance is ``1 - TV(q, pi)`` (docs/spec.md §2, the verification template). Under greedy decoding a drafted token is kept
while it equals ``argmax pi``.

Everything is batched over a leading dimension B (1 while decoding, 10^5 in the statistical tests).
No models, tasks or I/O in this module.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor

from bench.distributions import Generators, Sampling, normalise, sample, tv, uniform
from bench.errors import BenchError
from bench.plugins import Registry, load_class, parameters


@dataclass(frozen=True)
class Round:
    """What a verifier may read about one round of N drafted tokens, batched over B.

    ``p`` and ``q`` are processed the same way (``sampling``: temperature, top-k/top-p); under
    greedy decoding they are the temperature-1 softmax. ``p_logits``/``q_logits`` give the raw
    scores for rules that read temperature-1 probabilities (SpecCascade's deferral) or mix before
    processing (logit mixing). ``weights`` are per-token target weights from a DIVERSED head, when
    one runs, or a judge's p(important) per drafted token: whatever the verifier's learned head
    outputs (``Verifier.recipe``).
    """

    draft: Tensor  # [B, N] drafted token ids
    q: Tensor  # [B, N, V] the drafter's law: a draft model's, or the point mass on a lookup's token
    p: Tensor  # [B, N, V] at the drafted positions (the bonus row is not here)
    q_logits: Tensor | None  # [B, N, V]; None without a draft model (prompt lookup)
    p_logits: Tensor  # [B, N, V]
    sampling: Sampling
    weights: Tensor | None = None  # [B, N] the learned head's output per drafted token
    greedy_draft: bool = False  # the draft drafted its argmax instead of sampling q

    @property
    def temperature(self) -> float:
        return self.sampling.temperature

    @cached_property
    def proposal(self) -> Tensor:
        """The law the drafted tokens were drawn from: ``q`` when the draft samples, the one-hot on
        the drafted token when it drafts its argmax. Acceptance and residual are taken against it,
        while ``q`` stays the draft model's distribution (the ensemble's component). A lookup's
        ``q`` is already the point mass it drew from."""
        if not self.greedy_draft:
            return self.q
        return torch.zeros_like(self.q).scatter_(-1, self.draft.unsqueeze(-1), 1.0)

    @cached_property
    def q1(self) -> Tensor:
        """Temperature-1 draft probabilities (a draft model's only: ``draft_reads`` says who reads them)."""
        if self.q_logits is None:
            raise BenchError("this rule reads the draft model's logits, and the round has no draft model")
        return self.q_logits.float().softmax(-1)

    @cached_property
    def p1(self) -> Tensor:
        """Temperature-1 target probabilities."""
        return self.p_logits.float().softmax(-1)


@dataclass(frozen=True)
class Verdict:
    """Outcome of one round, batched over B."""

    accepted: Tensor  # [B] number of drafted tokens kept
    next_token: Tensor  # [B] the token emitted after them (residual sample or bonus)
    expected_acceptance: Tensor  # [B, N] probability each position is accepted given its context
    bias: Tensor  # [B, N] TV(emitted distribution, p) per position


@dataclass(frozen=True)
class Calibration:
    """How a family is swept by acceptance instead of by fixed values (docs/compare.md, "Calibrated
    sweeps"): one parameter moved over [low, high] moves the family's acceptance monotonically,
    rising with it or falling (``rising``). ``ties`` move other parameters along the same path, each
    as ``param ** exponent`` (typical's alpha = eps ** 0.5); ``lossless`` is the value where the
    method is lossless speculative decoding, if it has one: a calibrated sweep always runs it."""

    param: str
    low: float
    high: float
    rising: bool
    lossless: float | None = None
    ties: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.low < self.high:
            raise BenchError(f"calibration of {self.param}: low {self.low} must be below high {self.high}")
        if self.ties and self.low < 0:
            raise BenchError(f"calibration of {self.param}: tied parameters need low >= 0, got {self.low}")
        if self.lossless is not None and not self.low <= self.lossless <= self.high:
            raise BenchError(f"calibration of {self.param}: lossless {self.lossless} is outside [{self.low}, {self.high}]")

    @property
    def floor(self) -> float:
        """The end of the path with the lowest acceptance."""
        return self.low if self.rising else self.high

    @property
    def top(self) -> float:
        """The end of the path with the highest acceptance."""
        return self.high if self.rising else self.low

    @property
    def moved(self) -> tuple[str, ...]:
        """Every parameter the path sets."""
        return (self.param, *self.ties)

    def values(self, x: float) -> dict[str, float]:
        """The parameters at path position ``x`` (rounded: they name configurations)."""
        return {self.param: _round(x), **{k: _round(x**e) for k, e in self.ties.items()}}


class _Calibrated:
    """Stands for the value of a parameter that a calibrated sweep chooses (bench.calibration)."""

    def __repr__(self) -> str:
        return "calibrated"


CALIBRATED = _Calibrated()
# Significant digits a label shows of a float parameter (a calibrated value has many); a family
# whose points would then read the same shows more (MethodInfo.digits). Rows keep every digit.
LABEL_DIGITS = 3


def _round(x: float) -> float:
    return float(f"{x:.4g}")


class Verifier(ABC):
    """Base class of all verifiers; subclasses are frozen dataclasses of their parameters.

    The class is the one place that says what its method is: besides the rule, how runs sweep it,
    how tables name and order it, how plots draw it and whether candidates are judged against it.
    Runner, grids, CLI and reports read these fields (through ``MethodInfo``), so a plug-in that
    declares them is swept, tabled, plotted and compared exactly like a built-in.
    """

    name: ClassVar[str]
    uses_draft: ClassVar[bool] = True
    needs_hidden: ClassVar[bool] = False
    # What the rule reads of the draft besides its tokens and the proposal they came from: "q" (the
    # drafter's law: a point mass for prompt lookup), "q_logits" (the draft model's scores) and
    # "hidden" (its hidden states). A drafter that cannot supply one of them
    # (prompt lookup has no model) is refused with this method.
    draft_reads: ClassVar[frozenset[str]] = frozenset()
    # How the engine a rule comes from drafts: "sample" (draw from q) or "greedy" (argmax of q).
    draft_policy: ClassVar[str] = "sample"
    # The swept parameter(s) and their default sweep: the points of this method's family (what
    # ``--grid baselines`` runs when no value is given) and what tells a family's points apart.
    sweep: ClassVar[Mapping[str, Sequence[Any]]] = {}
    # How a label names a parameter (``target_weight`` -> ``w``; "" shows the value alone). A
    # parameter named here is always shown; others only when they differ from their default.
    shorthand: ClassVar[Mapping[str, str]] = {}
    # Matplotlib marker style of the method's points (marker, color, ...); empty: the plots give
    # the method one of their spare styles, bold enough to find a candidate among the baselines.
    style: ClassVar[Mapping[str, Any]] = {}
    # A baseline family: a swept candidate is judged against its frontier.
    baseline: ClassVar[bool] = False
    # How a calibrated sweep moves its acceptance (``Calibration``); None: fixed values only.
    calibration: ClassVar[Calibration | None] = None
    # Position in tables and legends (lower first).
    order: ClassVar[int] = 100
    # How the rule runs on a token tree (bench/verifiers/tree.py, docs/spec.md §10, token trees):
    # "lossless", "sglang" or "target_only"; None: not defined on trees, refused there.
    tree_rule: ClassVar[str | None] = None
    # Parameters with a flag and a grid key of their own besides --param (``--target-weight``): a
    # grid takes every registered class's; `run`'s flags are spelled in bench/cli.py, and
    # tests/decoding/test_contracts.py holds them equal to the registered classes' aliases.
    aliases: ClassVar[tuple[str, ...]] = ()
    # The engine call that ships this rule outside the harness, a key of
    # bench.reports.deploy.ENGINE_CALLS (`recommend` prints it with the engine's own names); None:
    # no engine ships it, only this harness's `generate` runs it.
    shipped_in: ClassVar[str | None] = None
    # Whether `run` decodes it when no method is named (the paper's six).
    default_run: ClassVar[bool] = False
    # Whether a `run` from flags trains its missing head (a judge's classifier: quick); False: only
    # `train` does (DIVERSED's REINFORCE takes long), and such a run given no --head skips it,
    # saying how to train one.
    trains_in_run: ClassVar[bool] = True
    # A parameter in [0, 1] whose value shades the family's colour from point to point in the
    # per-position plots (the ensemble's target weight: darker for more weight on the target),
    # its points then drawn with one line style; None: each point takes the next line style.
    shade: ClassVar[str | None] = None
    # A parameter w in [0, 1] mixing the target's law into the draft's, pi = w p + (1 - w) q (the
    # static ensemble's target weight): the acceptance-vs-weight figure draws the measured
    # acceptance against w beside the theory 1 - w TV(p, q); None: no such mixture.
    mixes_target: ClassVar[str | None] = None
    # Swept parameters whose value here leaves the learned head as trained (DIVERSED's logit shift
    # 0): labels leave them out at that value, so a trained head's one point reads as before.
    neutral: ClassVar[Mapping[str, Any]] = {}

    def recipe(self) -> object:
        """How this configuration's head is trained; None: the method learns nothing. A learned
        verifier names a registered recipe with settings built from its parameters (a judge's
        features), ``("classifier", {"miner": "selfjudge", "features": "target"})``, so that
        `train --method` and `--grid baselines` train it with no other code. A verifier stays tensor
        math: it names how it learns and imports nothing of training; a plug-in may instead return
        its own recipe object (docs/methods.md, writing a learned verifier)."""
        return None

    def check_head(self, given: bool) -> None:
        """The one refusal of a head this rule does not read (never ignored) or of none where it
        reads one (never a silent default), for every decoder (``SpeculativeDecoder`` calls it)."""
        if given and not self.needs_hidden:
            raise BenchError(f"{self.name}: reads no head; drop --head (head= in lm-eval's model_args) or use a method that reads one")
        if not given and self.needs_hidden:
            raise BenchError(
                f"{self.name}: needs a head; pass --head PATH (head=PATH in lm-eval's model_args), a folder from "
                f"`diversed-bench train --method {self.name}`, or init for an untrained one"
            )

    def reads(self) -> frozenset[str]:
        """What this configuration reads of the draft: the class's ``draft_reads`` unless a
        parameter changes it."""
        return self.draft_reads

    @abstractmethod
    def rule(self, r: Round) -> tuple[Tensor, Tensor]:
        """(accepted mass m, residual r), each [B, N, V]."""

    @abstractmethod
    def greedy_target(self, r: Round) -> Tensor:
        """The distribution whose argmax a drafted token must equal under greedy decoding."""


class MixtureVerifier(Verifier):
    """A verifier defined by its verification distribution pi (docs/spec.md §2, the verification template)."""

    @abstractmethod
    def pi(self, r: Round) -> Tensor:
        """Verification distribution per drafted position, [B, N, V]."""

    def rule(self, r: Round) -> tuple[Tensor, Tensor]:
        pi, q = self.pi(r), r.proposal
        return torch.minimum(q, pi), (pi - q).clamp_min(0)

    def greedy_target(self, r: Round) -> Tensor:
        return self.pi(r)


def verify(
    verifier: Verifier,
    r: Round,
    bonus: Tensor,
    generator: Generators = None,
) -> Verdict:
    """Run one round of verification. ``bonus`` [B, V] is the target's next distribution p.

    ``generator`` may be one per row: row b then draws its uniforms and its token from its own."""
    batch, n = r.draft.shape
    if r.temperature == 0:
        target = verifier.greedy_target(r)
        choice = target.argmax(-1)
        ok = r.draft == choice
        candidates = torch.cat([choice, bonus.argmax(-1, keepdim=True)], dim=1)
        expected = ok.float()
        on_p = choice if target is r.p else r.p.argmax(-1)  # SD verifies against p itself
        bias = (choice != on_p).float()
    else:
        mass, residual = verifier.rule(r)
        draft_q = r.proposal.gather(-1, r.draft.unsqueeze(-1)).squeeze(-1)
        draft_m = mass.gather(-1, r.draft.unsqueeze(-1)).squeeze(-1)
        accept_prob = (draft_m / draft_q).clamp(max=1)
        u = uniform(batch, n, generator, r.draft.device)
        ok = u < accept_prob
        expected = mass.sum(-1)
        emitted = mass + (1 - expected).unsqueeze(-1) * normalise(residual, r.p)
        bias = tv(emitted, r.p)
        candidates = None
    accepted = (
        ok.long().cumprod(-1).sum(-1) if n else torch.zeros(batch, dtype=torch.long, device=r.draft.device)
    )
    if candidates is None:
        rows = torch.cat([normalise(residual, r.p), bonus.unsqueeze(1)], dim=1)
        picked = rows[torch.arange(batch, device=rows.device), accepted]
        next_token = sample(picked, generator)
    else:
        next_token = candidates.gather(1, accepted.unsqueeze(1)).squeeze(1)
    return Verdict(accepted, next_token, expected, bias)


# ---------------------------------------------------------------------------------------------
# Registry

VERIFIERS: Registry[Verifier] = Registry("verifier")


def register(cls: type[Verifier]) -> type[Verifier]:
    """Make a verifier class available by its ``name`` (usable as a class decorator)."""
    return VERIFIERS.add(cls)


def verifier_class(name: str) -> type[Verifier]:
    """Look a method up by registry name, by ``module:Class`` (an importable module) or by
    ``path/to/file.py:Class`` (a file, imported without touching PYTHONPATH)."""
    unknown = f"unknown method {name!r}; choose one of {', '.join(VERIFIERS)} or give module:Class"
    return load_class(name, Verifier, VERIFIERS, "verifier", unknown)


def make_verifier(name: str, **params: Any) -> Verifier:
    """Build a verifier; unknown parameters are refused, not ignored."""
    cls = verifier_class(name)
    known = {f.name for f in parameters(cls)}
    unknown = set(params) - known
    if unknown:
        allowed = ", ".join(sorted(known)) or "none"
        raise BenchError(f"{cls.name}: unknown parameter(s) {sorted(unknown)}; allowed: {allowed}")
    return cls(**params)


# ---------------------------------------------------------------------------------------------
# What a method is, as rows carry it


@dataclass(frozen=True)
class MethodInfo:
    """A verifier class's declarations as plain data. Rows carry it (``method_info``), so a results
    directory names, groups and draws its methods without importing a plug-in's file again."""

    name: str
    defaults: dict[str, Any]  # every parameter with its default
    sweep: dict[str, list[Any]]  # swept parameter -> default sweep
    shorthand: dict[str, str] = field(default_factory=dict)
    style: dict[str, Any] = field(default_factory=dict)
    baseline: bool = False
    order: int = 100
    uses_draft: bool = True
    needs_hidden: bool = False
    draft_policy: str = "sample"
    draft_reads: list[str] = field(default_factory=list)
    calibration: dict[str, Any] | None = None  # the class's Calibration as plain data
    neutral: dict[str, Any] = field(default_factory=dict)
    shipped_in: str | None = None
    shade: str | None = None
    mixes_target: str | None = None

    @classmethod
    def of(cls, verifier: type[Verifier]) -> MethodInfo:
        defaults = {
            f.name: f.default for f in parameters(verifier) if f.default is not MISSING
        }
        unknown = set(verifier.sweep) - {f.name for f in parameters(verifier)}
        if unknown:
            raise BenchError(f"{verifier.name}: sweep names {sorted(unknown)}, which are not its parameters")
        calibration = verifier.calibration
        stray = set(calibration.moved if calibration else ()) - {f.name for f in parameters(verifier)}
        if stray:
            raise BenchError(f"{verifier.name}: calibration moves {sorted(stray)}, which are not its parameters")
        return cls(
            name=verifier.name,
            defaults=defaults,
            sweep={k: list(v) for k, v in verifier.sweep.items()},
            shorthand=dict(verifier.shorthand),
            style=dict(verifier.style),
            baseline=verifier.baseline,
            order=verifier.order,
            uses_draft=verifier.uses_draft,
            needs_hidden=verifier.needs_hidden,
            draft_policy=verifier.draft_policy,
            draft_reads=sorted(verifier.draft_reads),
            calibration={**asdict(calibration), "ties": dict(calibration.ties)} if calibration else None,
            neutral=dict(verifier.neutral),
            shipped_in=verifier.shipped_in,
            shade=verifier.shade,
            mixes_target=verifier.mixes_target,
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text: str) -> MethodInfo:
        return cls(**json.loads(text))

    @property
    def calibrated(self) -> Calibration | None:
        """The declared calibration path, rebuilt from the rows' plain data."""
        return Calibration(**self.calibration) if self.calibration else None

    @property
    def swept(self) -> tuple[str, ...]:
        """The parameters whose values are a family's points: the declared sweep and the parameters
        its calibration moves, or, for a class that declares neither, every numeric parameter (any
        of them may be swept with --param)."""
        calibrated = self.calibrated
        moved = calibrated.moved if calibrated else ()
        if self.sweep or moved:
            return tuple(dict.fromkeys([*self.sweep, *moved]))
        return tuple(
            k for k, v in self.defaults.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
        )

    def full(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Every parameter's value: the defaults, overridden by those given."""
        return {**self.defaults, **params}

    def shown(self, name: str, value: Any, digits: int | None = LABEL_DIGITS) -> str:
        """One parameter as labels show it (``w=0.2``; the value alone for an empty shorthand), a
        float at ``digits`` significant digits (``display_value``; None: every digit)."""
        short = self.shorthand.get(name, name)
        text = display_value(value, digits)
        return f"{short}={text}" if short else text

    def swept_text(self, params: Mapping[str, Any], digits: int | None = LABEL_DIGITS) -> str:
        """The swept values, as a label shows them (``w=0.2``): what tells a family's points apart."""
        full = self.full(params)
        return ", ".join(
            self.shown(k, full[k], digits)
            for k in self.swept
            if k in full and not (k in self.neutral and full[k] == self.neutral[k])
        )

    def digits(self, points: Sequence[Mapping[str, Any]]) -> int:
        """The significant digits labels need to tell these points (one family's) apart: at least
        ``LABEL_DIGITS``, more only where two of their swept values would otherwise read the same."""
        values = [{v for p in points if isinstance(v := self.full(p).get(k), float)} for k in self.swept]
        return max((_distinct_digits(v) for v in values), default=LABEL_DIGITS)

    def _fixed_parts(
        self, params: Mapping[str, Any], head: str | None, draft_policy: str | None, drafter: str = ""
    ) -> list[str]:
        full = self.full(params)
        parts = [
            self.shown(k, v, None)  # every digit: these name the family
            for k, v in full.items()
            if k not in self.swept and (k in self.shorthand or v != self.defaults.get(k, MISSING))
        ]
        if head:
            parts.append(f"head={head_text(head)}")
        if draft_policy and draft_policy != self.draft_policy:
            parts.append(f"{draft_policy} draft")
        if drafter:
            parts.append(drafter)
        return parts

    def family(
        self, params: Mapping[str, Any], head: str | None = None, draft_policy: str | None = None, drafter: str = ""
    ) -> str:
        """The family a configuration belongs to: its method with every setting but the swept ones,
        its drafter included (``drafter``: as ``bench.drafters.drafter_label`` names it)."""
        parts = self._fixed_parts(params, head, draft_policy, drafter)
        return self.name + (f" ({', '.join(parts)})" if parts else "")

    def label(
        self,
        params: Mapping[str, Any],
        head: str | None = None,
        draft_policy: str | None = None,
        drafter: str = "",
        digits: int | None = LABEL_DIGITS,
    ) -> str:
        """The display name of one configuration (only for display: reports group by ``family``,
        rows keep every parameter's value): bare fixed values first (a cascade rule, a drafter),
        then the swept values (floats at ``digits`` significant digits), then the named others."""
        fixed = self._fixed_parts(params, head, draft_policy, drafter)
        bare = [p for p in fixed if "=" not in p and not p.endswith(" draft")]
        parts = [*bare, self.swept_text(params, digits), *(p for p in fixed if p not in bare)]
        parts = [p for p in parts if p]
        return self.name + (f" ({', '.join(parts)})" if parts else "")

    def sweep_key(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        """The swept values in order, for sorting a family's points."""
        full = self.full(params)
        return tuple(full.get(k) for k in self.swept)


def head_text(head: str) -> str:
    """A head as labels name it: an absolute path (a cached head, ``$DIVERSED_BENCH_CACHE/heads/
    diversed-arith-ref-3aa2449dd8``) by its folder, which names what made it and a hash of it; a
    path given relative or as ``bench:...`` as given. Rows keep the full path."""
    return Path(head).name if Path(head).is_absolute() else head


def display_value(value: Any, digits: int | None = LABEL_DIGITS) -> str:
    """A parameter's value for display: a float rounded to ``digits`` significant digits where it
    has more (a calibrated ``-0.005857`` reads ``-0.00586``; ``0.2`` and ``1.0`` stay as they are)."""
    if digits is None or not isinstance(value, float):
        return str(value)
    return str(float(f"{value:.{digits}g}"))


def _distinct_digits(values: set[float]) -> int:
    """The fewest significant digits (at least ``LABEL_DIGITS``) at which distinct values read apart."""
    for digits in range(LABEL_DIGITS, 18):  # 17 significant digits tell any two doubles apart
        if len({display_value(v, digits) for v in values}) == len(values):
            return digits
    return 17


def method_info(method: str) -> MethodInfo:
    """The declarations of a method named as ``--method`` takes it."""
    return MethodInfo.of(verifier_class(method))
