"""The loop on the architectures of the paper's other pairs (Qwen3, Gemma 3), built small and random.

Gemma 3 mixes sliding-window and full attention layers; with a window shorter than the sequence,
cache cropping after rejections must still give greedy ``sd`` == ``ar`` token for token.
"""

import pytest
import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig, Qwen3Config, Qwen3ForCausalLM

from bench.decoding import SpeculativeDecoder
from bench.distributions import Sampling
from bench.verifiers import make_verifier

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


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_greedy_sd_equals_ar(name):
    target, draft = ARCHITECTURES[name]()
    greedy = Sampling(temperature=0.0)
    ar = SpeculativeDecoder(target, None, make_verifier("ar"), sampling=greedy)
    g = torch.Generator().manual_seed(1)
    rates = []
    for _ in range(6):
        prompt = torch.randint(3, 300, (int(torch.randint(12, 30, (1,), generator=g)),), generator=g).tolist()
        reference = ar.generate(prompt, 40).token_ids
        for n in (1, 3, 5):
            gen = SpeculativeDecoder(
                target, draft, make_verifier("sd"), draft_len=n, sampling=greedy
            ).generate(prompt, 40)
            assert gen.token_ids == reference, f"{name}, draft length {n}"
            rates.append(gen.stats.acceptance_rate)
    mean = sum(rates) / len(rates)
    assert 0.2 < mean < 0.95, f"both accept and reject paths must run, got acceptance {mean:.2f}"
