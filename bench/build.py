"""From a configuration and a loaded pair to what decodes it: the one place a decoder is built,
for ``run``, ``generate``, ``speed`` and the lm-eval backend alike."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from bench.decoding import SpeculativeDecoder
from bench.distributions import Sampling
from bench.drafters import parse_drafter
from bench.drafters.eagle import head_folder, with_pair_head
from bench.eagle.heads import resolve_head
from bench.engines import EagerEngine, EngineFactory
from bench.errors import BenchError
from torch import nn

from bench.head import required_head
from bench.pairs import Pair
from bench.verifiers import Verifier, make_verifier

if TYPE_CHECKING:
    from bench.config import RunConfig


def build_decoder(
    pair: Pair,
    method: str,
    params: dict | None = None,
    *,
    head: str | nn.Module | None = None,
    draft_len: int = 5,
    sampling: Sampling = Sampling(),
    engine: EngineFactory = EagerEngine,
    draft_policy: str | None = None,
    trace: bool = False,
    drafter: str | None = None,
) -> SpeculativeDecoder:
    """The decoder of one method on one pair. ``head`` is a head folder (or ``init``), loaded for
    the pair, or a loaded head; a method that reads no head refuses one instead of ignoring it.
    ``drafter``: what drafts (``model``, the pair's draft model, by default; ``lookup[:...]``)."""
    verifier: Verifier = make_verifier(method, **(params or {}))
    if head is not None and not verifier.needs_hidden:
        raise BenchError(f"{verifier.name}: reads no weight head; drop the head or use --method diversed")
    if isinstance(head, str) or (head is None and verifier.needs_hidden):
        head = pair_head(head, method, pair, drafter)
    return SpeculativeDecoder(
        pair.target,
        pair.draft,
        verifier,
        draft_len=draft_len,
        sampling=sampling,
        eos_token_ids=pair.eos_token_ids,
        head=head,
        engine=engine,
        draft_policy=draft_policy,
        trace=trace,
        drafter=with_pair_head(drafter or "model", pair.spec.eagle),
    )


def pair_head(path: str | None, method: str, pair: Pair, drafter: str | None) -> nn.Module:
    """The head at ``path`` for this pair and drafter: a weight head must have been trained on the
    drafter's kind of states (the card's ``drafter``) and reads the draft's at its width, an EAGLE
    head's own (its config.json) under ``--drafter eagle``."""
    name, params = parse_drafter(with_pair_head(drafter or "model", pair.spec.eagle))
    sizes = pair.hidden_sizes
    if name == "eagle" and params["path"]:  # no path: the drafter refuses in one line when it binds
        config = json.loads((resolve_head(head_folder(params["path"])) / "config.json").read_text())
        sizes = (int(config["hidden_size"]), sizes[1])
    return required_head(path, method, pair.spec.name, sizes, pair.device, drafter=name)


def decoder_for(
    cfg: RunConfig, pair: Pair, engine: EngineFactory = EagerEngine, *, trace: bool = False
) -> SpeculativeDecoder:
    """The decoder of a resolved configuration: the one place a ``RunConfig``'s fields become a
    decoder's settings, so that ``run`` and the calibration (and any later entry point) decode every
    configuration alike; a field added to ``RunConfig`` reaches them all here, or none."""
    return build_decoder(
        pair,
        cfg.method,
        cfg.params,
        head=cfg.head,
        draft_len=cfg.draft_len,
        sampling=Sampling(cfg.temperature),
        engine=engine,
        draft_policy=cfg.draft_policy,
        trace=trace,
        drafter=cfg.drafter,
    )
