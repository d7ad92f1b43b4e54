"""Drafters: what proposes a round's tokens (docs/spec.md §3). ``model`` is the pair's draft model,
``lookup`` prompt lookup (no model), ``lookup_tree`` several lookups merged into a token tree,
``suffix`` SuffixDecoding's suffix trees (no model), ``eagle`` an EAGLE draft head reading the
target's states. A drafter is named on the command line and in grids by a spec string,
``NAME[:key=value,...]`` (``lookup:ngram=3,match=recent``), a plug-in's by its class,
``path/to/file.py:Class[:key=value,...]`` or ``module:Class[...]``; configurations record it
with every parameter made concrete. The contract a drafter meets is ``bench.drafters.base``'s."""

from __future__ import annotations

import typing
from dataclasses import MISSING, is_dataclass

from bench.drafters.base import (
    DRAFT_MODELS,
    DRAFT_OUTPUTS,
    DRAFT_POLICIES,
    SPEED_PAGES,
    Draft,
    DraftContext,
    Drafter,
    DraftRow,
    check_draft_policy,
)
from bench.drafters.eagle import EagleDrafter
from bench.drafters.lookup import LookupTree, PromptLookup, lookup, lookup_tree
from bench.drafters.model import ModelDrafter
from bench.drafters.model_tree import ModelTree
from bench.drafters.suffix import SuffixDecoding
from bench.errors import BenchError
from bench.plugins import Registry, is_reference, load_class, parameters, typed_params
from bench.verifiers import VERIFIERS

DRAFTERS: Registry[Drafter] = Registry(
    "drafter", ModelDrafter, PromptLookup, LookupTree, SuffixDecoding, ModelTree, EagleDrafter
)
# What a verifier may read of a drafter, as a refusal names it.
_WHAT = {"q": "distribution q", "q_logits": "logits", "hidden": "hidden states"}


def drafter_class(name: str) -> type[Drafter]:
    """A drafter by registry name, ``module:Class`` or ``path/to/file.py:Class`` (the verifiers'
    loader): a dataclass subclass of ``Drafter`` whose fields are its parameters."""
    unknown = f"unknown drafter {name!r}: use --drafter {' or '.join(DRAFTERS)} (e.g. lookup:ngram=3), or path/to/file.py:Class"
    cls = load_class(name, Drafter, DRAFTERS, "drafter", unknown)
    if not is_dataclass(cls):
        raise BenchError(f"drafter {name!r}: declare it a @dataclass (its fields are its --drafter parameters)")
    return cls


def split_spec(text: str) -> tuple[str, str]:
    """``NAME[:params]`` or ``module:Class[:params]`` / ``file.py:Class[:params]`` -> (the
    drafter's name or reference, its parameters' text)."""
    head, _, rest = text.strip().partition(":")
    if head in DRAFTERS or not rest:
        return head, rest
    attr, _, params = rest.partition(":")
    return (f"{head}:{attr}", params) if is_reference(f"{head}:{attr}") else (head, rest)


def parse_drafter(text: str | None) -> tuple[str, dict[str, typing.Any]]:
    """A spec -> (its name or plug-in reference, every parameter with its value, defaults filled
    in), each value typed as its field declares and the whole validated by the class."""
    name, rest = split_spec(text or "model")
    cls = drafter_class(name)
    known = {f.name: f for f in parameters(cls)}
    params = {k: f.default for k, f in known.items() if f.default is not MISSING}
    given = {}
    for item in filter(None, (t.strip() for t in rest.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in known:
            allowed = ", ".join(known) or "none"
            raise BenchError(f"drafter {cls.name}: unknown or malformed parameter {item!r}; its parameters: {allowed}")
        given[key] = value
    params.update(typed_params(cls, f"drafter {cls.name}", given))
    cls(**params)  # validate every value before any model loads
    return name, params


def canonical_drafter(text: str | None) -> str:
    """A drafter spec as configurations record it: every parameter, sorted (``model`` has none)."""
    name, params = parse_drafter(text)
    return name + (":" + ",".join(f"{k}={v}" for k, v in sorted(params.items())) if params else "")


def drafter_label(text: str | None) -> str:
    """How labels and families name a drafter: empty for the draft model (every label before
    drafters existed), else its class's name (a plug-in's, not its path) and the parameters that
    differ from their defaults."""
    name, params = parse_drafter(text)
    if name == "model":
        return ""
    defaults = parse_drafter(name)[1]
    changed = [f"{k}={v}" for k, v in params.items() if v != defaults[k]]
    return " ".join([drafter_class(name).name, *changed])


def drafter_for(spec: str | None, method: str, reads: frozenset[str]) -> tuple[type[Drafter], dict[str, typing.Any]]:
    """The drafter class and parameters a spec names for a verifier that reads ``reads`` of the
    draft: the one place a pairing the drafter cannot serve (a lookup has no model behind it: no
    logits, no hidden states) is refused, naming the drafters and the rules that would serve."""
    name, params = parse_drafter(spec)
    cls = drafter_class(name)
    missing = sorted(reads - cls.supplies)
    if missing:
        what = " and ".join(_WHAT[m] for m in missing)
        serving = [n for n, c in DRAFTERS.items() if reads <= c.supplies]
        rules = [n for n, v in VERIFIERS.items() if v.uses_draft and v.draft_reads <= cls.supplies]
        raise BenchError(
            f"{method}: reads the draft model's {what}, which the {cls.name} drafter does not have; "
            f"use --drafter {' or '.join(serving)}, or a rule that reads only what it has ({', '.join(rules)})"
        )
    return cls, params


def make_drafter(spec: str | None, ctx: DraftContext, *, paired: bool = False) -> Drafter:
    """The drafter a decoder runs: its class looked up (``drafter_for``), built from its
    parameters and bound to the context; a context without a model it declares is refused.
    ``paired``: the spec comes from a resolved configuration, whose ``RunConfig.resolve`` already
    held the verifier's reads against this drafter (``drafter_for``): only the lookup is left, so
    a configuration's pairing is checked once, not again at every decoder it builds."""
    if paired:
        name, params = parse_drafter(spec)
        cls = drafter_class(name)
    else:
        cls, params = drafter_for(spec, ctx.method, ctx.reads)
    for model in sorted(cls.models):
        if getattr(ctx, model) is None:
            free = [n for n, c in DRAFTERS.items() if model not in c.models]
            raise BenchError(
                f"{ctx.method}: the {cls.name} drafter needs a {model} model, which this run has none of; "
                f"use --drafter {', '.join(free)} (they need none)"
            )
    return cls(**params).bind(ctx)


__all__ = [
    "DRAFTERS",
    "DRAFT_MODELS",
    "DRAFT_OUTPUTS",
    "DRAFT_POLICIES",
    "SPEED_PAGES",
    "Draft",
    "DraftContext",
    "DraftRow",
    "Drafter",
    "EagleDrafter",
    "LookupTree",
    "ModelDrafter",
    "ModelTree",
    "PromptLookup",
    "SuffixDecoding",
    "canonical_drafter",
    "check_draft_policy",
    "drafter_class",
    "drafter_for",
    "drafter_label",
    "lookup",
    "lookup_tree",
    "make_drafter",
    "parse_drafter",
    "split_spec",
]
