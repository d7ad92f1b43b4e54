"""Prompt + budget against the models' context: refuse before decoding, or truncate when asked.

A model knows positions below its text config's ``max_position_embeddings``; past them its
positional encoding was never trained, and decoding there gives fluent-looking garbage without an
error. The decoding loop feeds a model at most ``prompt + budget - 1`` positions (the last emitted
token is never fed back, and a round drafts at most ``remaining - 1`` tokens, so the draft's
lookahead never goes past the budget), so ``prompt + budget <= context`` is the whole condition, for
the target and for the draft alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from transformers import PreTrainedModel

from bench.errors import BenchError

TRUNCATIONS = ("none", "left")  # none: refuse a prompt that does not fit; left: keep its last tokens


def check_truncation(mode: str) -> str:
    if mode not in TRUNCATIONS:
        raise BenchError(f"--truncate-prompt takes {' or '.join(TRUNCATIONS)}, got {mode!r}")
    return mode


def context_length(model: PreTrainedModel, role: str) -> int:
    """``max_position_embeddings`` of the model's text config (multimodal wrappers keep it there)."""
    config = model.config.get_text_config()
    length = getattr(config, "max_position_embeddings", None)
    if not isinstance(length, int) or length < 1:
        name = getattr(model.config, "_name_or_path", "") or type(model).__name__
        raise BenchError(
            f"the {role} model {name} has no max_position_embeddings in its text config, so its context "
            "is unknown; set it in the model's config.json"
        )
    return length


@dataclass(frozen=True)
class Context:
    """The tightest context of the models a decode feeds, and which model sets it."""

    tokens: int
    model: str  # e.g. "draft (Qwen/Qwen3-0.6B)", for the refusal line

    @classmethod
    def of(cls, target: PreTrainedModel, draft: PreTrainedModel | None) -> Context:
        """The smaller context of the target and (when the method drafts) the draft."""
        models = [("target", target)] + ([("draft", draft)] if draft is not None else [])
        role, model = min(models, key=lambda rm: context_length(rm[1], rm[0]))
        name = getattr(model.config, "_name_or_path", "")
        return cls(context_length(model, role), f"{role} model {name}" if name else f"{role} model")


def fit_prompt(
    ids: Sequence[int],
    budget: int,
    context: Context,
    truncate: str,
    *,
    example: str,
    bos_token_id: int | None = None,
    budget_flag: str = "--max-new-tokens",
) -> tuple[list[int], int]:
    """(prompt ids to decode, prompt tokens dropped). A prompt that fits is returned whole; one that
    does not is refused with one line, or with ``truncate="left"`` cut to its last tokens (a leading
    BOS is kept, as a tokenizer truncating from the left keeps it)."""
    limit = context.tokens
    if len(ids) + budget <= limit:
        return list(ids), 0
    head = 1 if bos_token_id is not None and ids and ids[0] == bos_token_id else 0
    room = limit - budget - head
    if truncate == "left" and room >= 1:
        kept = list(ids[:head]) + list(ids[len(ids) - room :])
        return kept, len(ids) - len(kept)
    where = (
        f"{example}: prompt {len(ids)} tokens + {budget} new tokens ({budget_flag}) = {len(ids) + budget} "
        f"> {limit}, the context (max_position_embeddings) of the {context.model}"
    )
    if room < 1:
        raise BenchError(
            f"{where}; {budget_flag} alone leaves no room for the prompt: lower it below {limit - head}"
        )
    raise BenchError(
        f"{where}; shorten the prompt (e.g. fewer exemplars), lower {budget_flag}, or pass "
        f"--truncate-prompt left to keep its last {room} tokens{' after the BOS' if head else ''}"
    )
