"""Synthetic EAGLE heads in exactly the published layouts (config.json + weights), for any target.

EAGLE-3 as ``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B`` ships it (``cnets.py`` keys: ``fc``,
``midlayer.*``, ``norm``, ``lm_head``, ``d2t``, ``t2d``; no ``embed_tokens``, the target's is
used), EAGLE-1 as ``yuhuili/EAGLE-LLaMA3-Instruct-8B`` (``cnets1.py`` keys: ``embed_tokens``,
``fc`` with bias, ``layers.0.*`` without ``input_layernorm``), in model.safetensors or
pytorch_model.bin. The weights are random but scaled so the drafts are neither uniform nor one-hot.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file


def eagle_config(target: Any, kind: str, draft_vocab: int | None = None, rope_theta: float = 500000.0) -> dict[str, Any]:
    """The head's config.json for a target config (an EConfig: LlamaForCausalLM fields)."""
    config = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": target.hidden_size,
        "intermediate_size": 2 * target.hidden_size,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 1,
        "rms_norm_eps": 1e-5,
        "rope_theta": rope_theta,
        "hidden_act": "silu",
        "vocab_size": target.vocab_size,
        "max_position_embeddings": 2048,
        "pretraining_tp": 1,
        "bias": True,
    }
    if kind == "eagle3":
        config["draft_vocab_size"] = draft_vocab or target.vocab_size
    return config


def eagle_state(config: dict[str, Any], kind: str, seed: int = 0, vocab_ids: list[int] | None = None) -> dict[str, torch.Tensor]:
    """Random weights under the published key names; an EAGLE-3 head's draft vocabulary
    ``vocab_ids`` (target ids) or a random one."""
    g = torch.Generator().manual_seed(seed)
    h, i, heads, kv = (config[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads"))
    dim, width = h // heads, 2 * h if kind == "eagle3" else h

    def w(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * scale / shape[-1] ** 0.5

    def norm() -> torch.Tensor:
        return 1 + 0.1 * torch.randn(h, generator=g)

    layer = {
        "self_attn.q_proj.weight": w(heads * dim, width, scale=3.0),
        "self_attn.k_proj.weight": w(kv * dim, width, scale=3.0),
        "self_attn.v_proj.weight": w(kv * dim, width),
        "self_attn.o_proj.weight": w(h, heads * dim),
        "mlp.gate_proj.weight": w(i, h),
        "mlp.up_proj.weight": w(i, h),
        "mlp.down_proj.weight": w(h, i),
        "post_attention_layernorm.weight": norm(),
    }
    if kind == "eagle1":
        state = {f"layers.0.{k}": v for k, v in layer.items()}
        return state | {"embed_tokens.weight": w(config["vocab_size"], h, scale=4.0), "fc.weight": w(h, 2 * h), "fc.bias": 0.1 * torch.randn(h, generator=g)}
    layer |= {"hidden_norm.weight": norm(), "input_layernorm.weight": norm()}
    vocab, draft = config["vocab_size"], config["draft_vocab_size"]
    ids = torch.randperm(vocab, generator=g)[:draft] if vocab_ids is None else torch.tensor(vocab_ids)
    kept = ids.sort().values  # the draft vocabulary: target ids, ascending
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[kept] = True
    state = {f"midlayer.{k}": v for k, v in layer.items()}
    return state | {
        "fc.weight": w(h, 3 * h),
        "norm.weight": norm(),
        "lm_head.weight": w(draft, h, scale=8.0),
        "d2t": kept - torch.arange(draft),
        "t2d": t2d,
    }


def write_eagle_head(
    folder: Path, target: Any, kind: str, *, draft_vocab: int | None = None, seed: int = 0, binary: bool = False,
    kept: list[int] | None = None,
) -> Path:  # fmt: skip
    """A head folder as published: config.json and model.safetensors (or pytorch_model.bin); an
    EAGLE-3 head's draft vocabulary the target ids ``kept`` when given."""
    folder.mkdir(parents=True, exist_ok=True)
    config = eagle_config(target, kind, len(kept) if kept else draft_vocab)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    state = eagle_state(config, kind, seed, kept)
    if binary:
        torch.save(state, folder / "pytorch_model.bin")
    else:
        save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    return folder
