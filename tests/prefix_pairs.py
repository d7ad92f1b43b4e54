"""Draft/target pairs of the Qwen3 and Gemma 3 (text-only) architectures, built small and random,
the draft being the target's first layers so that drafts are often but not always accepted.
Checked against transformers itself on the real pairs' checkpoints in tests/engines/test_fidelity.py."""

import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig, Qwen3Config, Qwen3ForCausalLM

COMMON = dict(
    vocab_size=300,
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=512,
    tie_word_embeddings=False,  # the head is scaled below; tied embeddings would scale too
)


def prefix_pair(model_cls, config_cls, layers=4, draft_layers=1, damping=0.15, **extra):
    """The tiny pair's recipe on another architecture: the draft is the target's first layers."""
    torch.manual_seed(0)
    kinds = extra.pop("layer_types", None)
    lt = (lambda n: {"layer_types": (kinds * n)[:n]}) if kinds else (lambda n: {})
    target = model_cls(config_cls(num_hidden_layers=layers, **lt(layers), **COMMON, **extra)).eval()
    draft = model_cls(
        config_cls(num_hidden_layers=draft_layers, **lt(draft_layers), **COMMON, **extra)
    ).eval()
    with torch.no_grad():
        target.lm_head.weight.mul_(20)
        for layer in target.model.layers[draft_layers:]:
            layer.self_attn.o_proj.weight.mul_(damping)
            layer.mlp.down_proj.weight.mul_(damping)
            if hasattr(layer, "post_feedforward_layernorm"):  # Gemma normalises each block's output,
                layer.post_attention_layernorm.weight.fill_(damping - 1)  # scaled by (1 + weight)
                layer.post_feedforward_layernorm.weight.fill_(damping - 1)
    draft.model.embed_tokens, draft.model.norm, draft.lm_head = (
        target.model.embed_tokens,
        target.model.norm,
        target.lm_head,
    )
    for i in range(draft_layers):
        draft.model.layers[i] = target.model.layers[i]
    return target, draft


ARCHITECTURES = {
    "qwen3": lambda **shape: prefix_pair(Qwen3ForCausalLM, Qwen3Config, **shape),
    "gemma3": lambda **shape: prefix_pair(
        Gemma3ForCausalLM,
        Gemma3TextConfig,
        layer_types=["sliding_attention", "full_attention"],
        sliding_window=8,
        **shape,
    ),
}
