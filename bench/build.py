"""From a configuration and a loaded pair to what decodes it: the one place a decoder is built,
for ``run``, ``generate``, ``speed`` and the lm-eval backend alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from bench.decoding import SpeculativeDecoder, draft_context
from bench.distributions import Sampling
from bench.drafters import drafter_class, make_drafter, parse_drafter
from bench.drafters.eagle import draft_head_source, with_pair_head
from bench.eagle.heads import resolve_head
from bench.engines import EagerEngine, EngineFactory
from bench.errors import BenchError

from bench.verifier_heads import VerifierHead, read_card, required_head, trained_on
from bench.pairs import Pair
from bench.verifiers import Verifier, make_verifier

if TYPE_CHECKING:
    from bench.config import RunConfig


def build_decoder(
    pair: Pair,
    method: str,
    params: dict | None = None,
    *,
    head: str | VerifierHead | None = None,
    draft_len: int = 5,
    sampling: Sampling = Sampling(),
    engine: EngineFactory = EagerEngine,
    draft_policy: str | None = None,
    trace: bool = False,
    drafter: str | None = None,
    paired: bool = False,
) -> SpeculativeDecoder:
    """The decoder of one method on one pair. ``head`` is a head folder (or ``init``), loaded for
    the pair, or a loaded head; a method that reads no head refuses one instead of ignoring it.
    ``drafter``: what drafts (``model``, the pair's draft model, by default; ``lookup[:...]``);
    ``paired``: a resolved configuration's, whose pairing with the method was checked there."""
    verifier: Verifier = make_verifier(method, **(params or {}))
    bound = None  # the drafter, bound before the head: what the drafts lack is refused first
    if verifier.uses_draft and draft_len >= 1:
        ctx = draft_context(pair.target, pair.draft, verifier, draft_len=draft_len, sampling=sampling, engine=engine,
                            draft_policy=draft_policy, eos=frozenset(pair.eos_token_ids))  # fmt: skip
        bound = make_drafter(with_pair_head(drafter or "model", pair.spec.eagle), ctx, paired=paired)
    if isinstance(head, str):  # a head it does not read, or none where it reads one: the decoder refuses
        head = pair_head(head, method, pair, drafter)
    elif head is not None:
        check_drafts(getattr(head, "drafter", None), drafter, pair, method)
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
        drafter=bound,
    )


def pair_head(path: str, method: str, pair: Pair, drafter: str | None) -> VerifierHead:
    """The head at ``path`` for this pair and drafter: trained on this drafter's drafts (its card,
    checked first: another drafter's widths would fail the width check confusingly), reading the
    draft's state at its width, an EAGLE head's own (its config.json) under ``--drafter eagle``."""
    card = read_card(path)
    if card is not None:
        check_drafts(trained_on(card), drafter, pair, method)
    name, params = parse_drafter(with_pair_head(drafter or "model", pair.spec.eagle))
    sizes = pair.hidden_sizes
    if name == "eagle" and params["path"]:  # no path: the drafter refuses in one line when it binds
        config = json.loads((resolve_head(draft_head_source(params["path"])) / "config.json").read_text())
        sizes = (int(config["hidden_size"]), sizes[1])
    return required_head(path, pair.spec.name, sizes, pair.device)


def check_drafts(trained: str | None, drafter: str | None, pair: Pair, method: str) -> None:
    """A head (DIVERSED's weight head, a judge's) is asked only about drafts like those it was
    trained on (``trained``, its card's drafter): a weight head reads that drafter's q and hidden
    states, a judge's p(important) is fitted to which tokens it proposes and to its states; on
    smollm2 the draft model's and the EAGLE head's states are both 576 wide, so only the card
    tells them apart. A head serves its own drafter's drafts and those its class declares
    (``Drafter.serves``); an EAGLE head's, that EAGLE head only. Others are refused in one line. A
    head built by hand (None) claims none."""
    if trained is None:
        return
    was_spec, now_spec = (with_pair_head(d, pair.spec.eagle) for d in (trained, drafter or "model"))
    (was, before), (now, params) = parse_drafter(was_spec), parse_drafter(now_spec)
    other_eagle = was == now == "eagle" and _resolved(before["path"]) != _resolved(params["path"])
    if (now != was and now not in drafter_class(was).serves) or other_eagle:
        raise BenchError(
            f"this head was trained on the drafts of {was_spec}, not of {now_spec}: decode it with --drafter "
            f"{was if was != 'eagle' else 'eagle:path=' + before['path']}, or train one with "
            f"`diversed-bench train --method {method} --drafter {now}`"
        )


def _resolved(path: str) -> str:
    """An EAGLE head path as the drafter loads it (a folder, resolved; else a hub id)."""
    folder = draft_head_source(path)
    return str(Path(folder).resolve()) if Path(folder).is_dir() else folder


def decoder_for(
    cfg: RunConfig, pair: Pair, engine: EngineFactory = EagerEngine, *, trace: bool = False
) -> SpeculativeDecoder:
    """The decoder of a resolved configuration: the one place a ``RunConfig``'s fields become a
    decoder's settings, so that ``run`` and the calibration (and any later entry point) decode every
    configuration alike; a field added to ``RunConfig`` reaches them all here, or none. Its drafter
    was checked against its method when it resolved, and is not checked again."""
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
        paired=True,
    )
