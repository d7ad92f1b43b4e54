"""Drafters: what proposes a round's tokens (docs/spec.md §3). ``model`` is the pair's draft model,
``lookup`` prompt lookup (no model), ``lookup_tree`` several lookups merged into a token tree,
``suffix`` SuffixDecoding's suffix trees (no model), ``eagle`` an EAGLE draft head reading the target's states. A drafter is named on the command line and in grids by a spec
string, ``NAME[:key=value,...]`` (``lookup:ngram=3,match=recent``); configurations record it with
every parameter made concrete."""

from __future__ import annotations

import typing
from dataclasses import MISSING, fields

import torch
from transformers import PreTrainedModel

from bench.distributions import Sampling
from bench.drafters.base import DRAFT_OUTPUTS, DRAFT_POLICIES, Draft, Drafter, DraftRow, check_draft_policy
from bench.drafters.eagle import EagleDrafter
from bench.drafters.lookup import LookupTree, PromptLookup, lookup, lookup_tree
from bench.drafters.model import ModelDrafter
from bench.drafters.model_tree import ModelTree
from bench.drafters.suffix import SuffixDecoding
from bench.engines import EngineFactory
from bench.errors import BenchError

DRAFTERS: dict[str, type[Drafter]] = {
    "model": ModelDrafter,
    "lookup": PromptLookup,
    "lookup_tree": LookupTree,
    "suffix": SuffixDecoding,
    "model_tree": ModelTree,
    "eagle": EagleDrafter,
}
# What a verifier may read of a drafter, as a refusal names it.
_WHAT = {"q": "distribution q", "q_logits": "logits", "hidden": "hidden states"}


def parse_drafter(text: str | None) -> tuple[str, dict[str, typing.Any]]:
    """``NAME[:key=value,...]`` -> (name, every parameter with its value, defaults filled in)."""
    name, _, rest = (text or "model").strip().partition(":")
    if name not in DRAFTERS:
        raise BenchError(f"unknown drafter {name!r}: use --drafter {' or '.join(DRAFTERS)} (e.g. lookup:ngram=3)")
    cls = DRAFTERS[name]
    known = {f.name: f for f in fields(cls)} if name != "model" else {}  # type: ignore[arg-type]
    kinds = typing.get_type_hints(cls)
    params = {k: f.default for k, f in known.items() if f.default is not MISSING}
    for item in filter(None, (t.strip() for t in rest.split(","))):
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in known:
            allowed = ", ".join(known) or "none"
            raise BenchError(f"drafter {name}: unknown or malformed parameter {item!r}; its parameters: {allowed}")
        key = key.strip()
        kind = kinds.get(key)
        try:
            params[key] = kind(value) if kind in (int, float) else value.strip()
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise BenchError(f"drafter {name}: {key} takes {what}, got {value!r}") from None
    if known:
        cls(**params)  # validate every value before any model loads
    return name, params


def canonical_drafter(text: str | None) -> str:
    """A drafter spec as configurations record it: every parameter, sorted (``model`` has none)."""
    name, params = parse_drafter(text)
    return name + (":" + ",".join(f"{k}={v}" for k, v in sorted(params.items())) if params else "")


def drafter_label(text: str | None) -> str:
    """How labels and families name a drafter: empty for the draft model (every label before
    drafters existed), else its name and the parameters that differ from their defaults."""
    name, params = parse_drafter(text)
    if name == "model":
        return ""
    defaults = parse_drafter(name)[1]
    changed = [f"{k}={v}" for k, v in params.items() if v != defaults[k]]
    return " ".join([name, *changed])


def check_reads(method: str, reads: frozenset[str], drafter: str | None) -> None:
    """Refuse a verifier that reads what the drafter cannot supply (a lookup draft has no model
    behind it: no logits, no hidden states)."""
    name, _ = parse_drafter(drafter)
    missing = sorted(reads - DRAFTERS[name].supplies)
    if missing:
        what = " and ".join(_WHAT[m] for m in missing)
        raise BenchError(
            f"{method}: reads the draft model's {what}, which the {name} drafter does not have; "
            "use --drafter model, or a rule that reads only the drafted tokens (sd, lossy, typical, "
            "threshold, relaxed, mentored, ensemble with mix=prob)"
        )


def make_drafter(
    spec: str,
    *,
    draft: PreTrainedModel | None,
    engine: EngineFactory,
    sampling: Sampling,
    greedy: bool,
    hidden: bool,
    method: str,
    reads: frozenset[str] = frozenset(),
    device: torch.device = torch.device("cpu"),
    eos: frozenset[int] = frozenset(),
    draft_len: int = 1,
    target: PreTrainedModel | None = None,
) -> Drafter:
    """The drafter a decoder runs; ``greedy``: a model drafts its argmax; ``hidden``: the verifier
    reads the draft's hidden states; ``reads``: what the verifier reads of the draft."""
    name, params = parse_drafter(spec)
    check_reads(method, reads, spec)
    if name == "eagle":
        return EagleDrafter(**params).bind(target, sampling, greedy)
    if name not in ("model", "model_tree"):  # a drafter without a model
        return DRAFTERS[name](**params).bind(device, eos, draft_len)  # type: ignore[attr-defined]
    if draft is None:
        raise BenchError(f"{method}: needs a draft model (or --drafter lookup, lookup_tree or suffix, which need none)")
    if name == "model_tree":
        return ModelTree(**params).bind(draft, engine, sampling, greedy)
    return ModelDrafter(draft, engine, sampling, greedy, hidden)


__all__ = [
    "DRAFTERS",
    "DRAFT_OUTPUTS",
    "DRAFT_POLICIES",
    "Draft",
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
    "check_reads",
    "drafter_label",
    "lookup",
    "lookup_tree",
    "make_drafter",
    "parse_drafter",
]
