"""From a configuration and a loaded pair to what decodes it: the one place a decoder is built,
for ``run``, ``generate``, ``speed`` and the lm-eval backend alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from bench.decoding import SpeculativeDecoder
from bench.distributions import Sampling
from bench.drafters import parse_drafter
from bench.drafters.eagle import head_folder, with_pair_head
from bench.eagle.heads import resolve_head
from bench.engines import EagerEngine, EngineFactory
from bench.errors import BenchError
from torch import nn

from bench.head import JudgeHead, required_head
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
    drafter = with_pair_head(drafter or "model", pair.spec.eagle)
    if isinstance(head, JudgeHead):
        check_judge_drafts(head, drafter, pair.spec.eagle)
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
        drafter=drafter,
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


# The drafters a judge trained on a drafter's proposals is asked about: lookup's head serves the
# model-free drafters too (their first tokens are lookup-like matches).
SERVES = {"model": ("model",), "lookup": ("lookup", "lookup_tree", "suffix"), "eagle": ("eagle",)}


def check_judge_drafts(head: JudgeHead, drafter: str, pair_head: str | None) -> None:
    """A judge head is asked only about drafts like those it was trained on (its card's drafter):
    the draft model's, model-free ones, or one EAGLE head's. Its p(important) is fitted to which
    tokens that drafter proposes and, for draft+target, to its states: another drafter's are
    refused in one line. A head built by hand (``drafter`` None) claims none and is not checked."""
    if head.drafter is None:
        return
    (was, trained), (now, params) = parse_drafter(with_pair_head(head.drafter, pair_head)), parse_drafter(drafter)
    other_eagle = was == now == "eagle" and _resolved(trained["path"]) != _resolved(params["path"])
    if now not in SERVES.get(was, (was,)) or other_eagle:
        raise BenchError(
            f"this judge head was trained on the drafts of {with_pair_head(head.drafter, pair_head)}, not of {drafter}: "
            f"decode it with --drafter {was if was != 'eagle' else 'eagle:path=' + trained['path']}, or train one "
            f"with `diversed-bench train --method autojudge|selfjudge --drafter {now}`"
        )


def _resolved(path: str) -> str:
    """An EAGLE head path as the drafter loads it (a folder, resolved; else a hub id)."""
    folder = head_folder(path)
    return str(Path(folder).resolve()) if Path(folder).is_dir() else folder


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
