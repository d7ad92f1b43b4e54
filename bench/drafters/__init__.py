"""Drafters: what proposes a round's tokens (docs/spec.md §3). ``model`` is the pair's draft model;
a drafter is named on the command line and in grids by a spec string, ``NAME[:key=value,...]``."""

from __future__ import annotations

from transformers import PreTrainedModel

from bench.distributions import Sampling
from bench.drafters.base import DRAFT_OUTPUTS, Draft, Drafter, DraftRow
from bench.drafters.model import ModelDrafter
from bench.engines import EngineFactory
from bench.errors import BenchError

DRAFTERS = ("model",)


def canonical_drafter(text: str | None) -> str:
    """A drafter spec as configurations record it."""
    name = (text or "model").strip()
    if name not in DRAFTERS:
        raise BenchError(f"unknown drafter {name!r}: use --drafter {' or '.join(DRAFTERS)}")
    return name


def make_drafter(
    spec: str,
    *,
    draft: PreTrainedModel | None,
    engine: EngineFactory,
    sampling: Sampling,
    greedy: bool,
    hidden: bool,
    method: str,
) -> Drafter:
    """The drafter a decoder runs; ``greedy``: a model drafts its argmax; ``hidden``: the verifier
    reads the draft's hidden states."""
    canonical_drafter(spec)
    if draft is None:
        raise BenchError(f"{method}: needs a draft model")
    return ModelDrafter(draft, engine, sampling, greedy, hidden)


__all__ = ["DRAFTERS", "DRAFT_OUTPUTS", "Draft", "DraftRow", "Drafter", "ModelDrafter", "canonical_drafter", "make_drafter"]
