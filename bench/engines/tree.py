"""Token trees in one forward: which earlier tokens each tree token sees, and at which position.

A round's tree for a row is its last emitted token (the root) and n drafted nodes in topological
order, ``parents[b, j]`` the parent of node j (an earlier node, or -1 for a child of the root). The
engines feed the n + 1 tokens into the contiguous slots start .. start + n, at RoPE positions
start + depth, under a 4-D mask where each token sees the row's cache (slots below start) and its
own ancestors and itself, as SpecInfer's tree attention (arXiv 2305.09781) and EAGLE's tree mask do.
transformers takes such a mask as is: a 4-D ``attention_mask`` (or a dict of them per layer type)
skips its own mask building (``masking_utils._preprocess_mask_arguments``: "If the mask is already
4D, simply return as-is"; Qwen3 and Gemma 3 forwards take the dict, ``modeling_qwen3.py``:
``if not isinstance(causal_mask_mapping := attention_mask, dict)``), eager attention adds it to the
scores (``modeling_llama.eager_attention_forward``: ``attn_weights + attention_mask``) and SDPA
passes it as ``attn_mask`` with ``is_causal`` off (``integrations/sdpa_attention.py``); the
``position_ids`` go to the rotary embedding as given (transformers 5.24).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def ancestors(parents: Tensor) -> Tensor:
    """[B, n + 1, n + 1] bool: token t sees token s (s is t itself or an ancestor; token 0 is the
    root, token j + 1 node j). Reached by squaring the parent relation ceil(log2(n + 1)) times: a
    fixed number of batched products, so no host sync and a static graph for a compiled engine."""
    count, n = parents.shape
    up = torch.cat([parents.new_zeros(count, 1), parents + 1], dim=1)  # the root is its own parent
    eye = torch.eye(n + 1, device=parents.device)
    reach = torch.maximum(torch.nn.functional.one_hot(up, n + 1).float(), eye)
    for _ in range(math.ceil(math.log2(n + 1))):
        reach = (reach @ reach).clamp(max=1.0)
    return reach > 0


def depths(seen: Tensor) -> Tensor:
    """[B, n + 1] depth of each token: its ancestors counted (the root 0)."""
    return seen.sum(-1) - 1


def tree_allowed(start: Tensor, seen: Tensor, visible: int) -> tuple[Tensor, Tensor, Tensor]:
    """(allowed [B, n + 1, visible] bool, query positions [B, n + 1], key positions [B, visible]):
    row b's token t sees every slot below start[b] and the tree slots of its ancestors."""
    count, width = seen.shape[:2]
    slot = torch.arange(visible, device=start.device)
    tree_slots = start.unsqueeze(1) + torch.arange(width, device=start.device)  # [B, T]
    allowed = (slot < start.unsqueeze(1)).unsqueeze(1).expand(count, width, visible).clone()
    allowed.scatter_(2, tree_slots.unsqueeze(1).expand(count, width, width), seen)
    positions = start.unsqueeze(1) + depths(seen)
    keys = slot.expand(count, visible).clone().scatter_(1, tree_slots, positions)
    return allowed, positions, keys
