"""What the engines must know of a model to decode it exactly: its attention layout, and where each
layer lives.

The engines run the model's own transformers forward (projections, norms, query scaling, RoPE,
softcapping are transformers' code) and supply only what a batched, rolled-back cache changes: the
position ids, the K/V cache and the 4-D masks. A mask is right only if it is the layer's own: full
attention is causal by position, sliding attention also hides keys ``window`` or more positions
back. Every field is read from the TEXT config (``get_text_config``), where a multimodal wrapper
such as ``Gemma3ForConditionalGeneration`` keeps ``layer_types`` and ``sliding_window``. A field
whose effect the masks or positions would not reproduce is refused at load, never approximated.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel

from bench.errors import BenchError

FULL, SLIDING = "full_attention", "sliding_attention"
# RoPE types whose frequencies depend on the position alone. ``dynamic`` and ``longrope`` rescale by
# the longest position in the forward, so a row would depend on the rows sharing its batch.
STATIC_ROPE = ("default", "linear", "llama3", "yarn")
# Attention implementations that apply the 4-D masks the engines pass (flash kernels ignore them).
MASKED_ATTENTION = ("eager", "sdpa")


@dataclass(frozen=True)
class AttentionLayout:
    """The attention kind of every layer, and the sliding window (None when no layer slides)."""

    kinds: tuple[str, ...]
    window: int | None


def _rope_types(parameters: Any) -> Iterable[tuple[str, dict[str, Any]]]:
    """(where, parameters) of each RoPE: one dict, or one per layer type (Gemma 3: local and global
    layers have their own base, and only the global ones are scaled)."""
    if not isinstance(parameters, dict):
        return []
    if all(isinstance(v, dict) for v in parameters.values()) and parameters:
        return [(f"rope_parameters[{k!r}]", v) for k, v in parameters.items()]
    return [("rope_parameters", parameters)]


def attention_layout(model: PreTrainedModel) -> AttentionLayout:
    """The layout the engines' masks reproduce, or a one-line refusal naming the model and field."""
    config = model.config.get_text_config()
    name = getattr(model.config, "_name_or_path", "") or config.model_type

    def refuse(field: str, value: object, why: str) -> BenchError:
        return BenchError(f"{name}: {field} = {value!r} is not supported by the decoding engines ({why})")

    implementation = getattr(config, "_attn_implementation", None) or "eager"
    if implementation not in MASKED_ATTENTION:
        raise refuse(
            "attn_implementation",
            implementation,
            f"it ignores the engines' masks; set attn_implementation to {' or '.join(MASKED_ATTENTION)}",
        )
    if getattr(config, "attn_logit_softcapping", None) and implementation != "eager":
        raise refuse(
            "attn_logit_softcapping",
            config.attn_logit_softcapping,
            f"{implementation} attention cannot cap scores; set attn_implementation: eager in the pair file",
        )
    for field in ("attention_chunk_size", "use_bidirectional_attention"):
        if getattr(config, field, None):
            raise refuse(field, getattr(config, field), "only causal full and sliding-window attention are")
    for where, rope in _rope_types(getattr(config, "rope_parameters", None)):
        kind = rope.get("rope_type", "default")
        if kind not in STATIC_ROPE:
            raise refuse(f"{where}.rope_type", kind, f"RoPE types {', '.join(STATIC_ROPE)} are")
        if "mrope_section" in rope:
            raise refuse(f"{where}.mrope_section", rope["mrope_section"], "positions are one index per token")
    kinds = tuple(getattr(config, "layer_types", None) or [FULL] * config.num_hidden_layers)
    unknown = sorted(set(kinds) - {FULL, SLIDING})
    if unknown:
        raise refuse("layer_types", unknown, f"{FULL} and {SLIDING} are")
    window = getattr(config, "sliding_window", None)
    if SLIDING in kinds and not window:
        raise refuse("sliding_window", window, "sliding layers need a window")
    if window and SLIDING not in kinds:
        raise refuse("sliding_window", window, "a window without per-layer layer_types is ambiguous")
    return AttentionLayout(kinds, window if SLIDING in kinds else None)


def layer_devices(model: PreTrainedModel) -> dict[int, torch.device]:
    """The device of each attention layer's weights, by ``layer_idx``: where its K/V cache is
    written, and so where the cache's index tensors must be. A ``device_map`` spreads layers over
    GPUs; a model on one device maps every layer to it."""
    devices: dict[int, torch.device] = {}
    for module in model.get_decoder().modules():  # the text model's layers, not a vision tower's
        index = getattr(module, "layer_idx", None)
        weight = next(module.parameters(), None)
        if isinstance(index, int) and weight is not None:
            devices.setdefault(index, weight.device)
    return devices
