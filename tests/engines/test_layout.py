"""The attention layout the engines reproduce, and what they refuse; per-layer placement.

Refusals: a field whose effect the engines' masks and positions would not reproduce stops the load
with one line naming the model and the field. Placement: with ``device_map`` a layer's K/V cache lives on that layer's device, and
so must the positions and row indices that write and reorder it. Two devices on a CPU machine:
``cpu`` and ``meta`` (shape-only tensors), which are enough to see which device each index is on."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from bench.engines.compiled import StaticSlotCache
from bench.engines.eager import SlotCache
from bench.engines.layout import FULL, SLIDING, attention_layout, layer_devices
from bench.errors import BenchError
from bench.pairs import load_pair


def tiny_llama(**overrides) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        **overrides,
    )
    config._name_or_path = "my-org/my-model"
    return LlamaForCausalLM(config)


def test_the_layout_is_read_per_layer():
    layout = attention_layout(tiny_llama(layer_types=[SLIDING, FULL], sliding_window=4))
    assert layout.kinds == (SLIDING, FULL) and layout.window == 4
    assert attention_layout(tiny_llama()).kinds == (FULL, FULL)


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), "rope_type"),
        (
            dict(rope_scaling={"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [1.0] * 4}),
            "rope_type",
        ),
        (dict(attention_chunk_size=8), "attention_chunk_size"),
        (dict(layer_types=["chunked_attention", FULL]), "layer_types"),
        (dict(sliding_window=4), "sliding_window"),
    ],
)
def test_what_the_engines_would_not_reproduce_is_refused_naming_model_and_field(overrides, field):
    try:
        model = tiny_llama(**overrides)
    except (ValueError, ImportError) as exc:  # a transformers release that validates the field itself
        pytest.skip(f"transformers refuses this config first: {exc}")
    with pytest.raises(BenchError) as refusal:
        attention_layout(model)
    line = str(refusal.value)
    assert "\n" not in line and line.startswith("my-org/my-model: ") and field in line, line


def test_layer_devices_follow_each_layers_weights():
    model = load_pair("tiny", device="cpu").target  # its own copy: a layer is moved away below
    layers = model.get_decoder().layers
    assert set(layer_devices(model).values()) == {torch.device("cpu")}
    assert sorted(layer_devices(model)) == list(range(len(layers)))
    layers[-1].to("meta")
    mapping = layer_devices(model)
    assert mapping[len(layers) - 1] == torch.device("meta")
    assert all(mapping[i] == torch.device("cpu") for i in range(len(layers) - 1))


def test_each_layers_cache_is_written_and_reordered_on_its_own_device():
    devices = [torch.device("cpu"), torch.device("meta")]
    for cache in (SlotCache(2, 8, devices), StaticSlotCache(2, 8, devices)):
        cache.place(torch.tensor([[3, 4], [5, 6]]))
        assert {p.device for p in cache.positions.values()} == set(devices)
        cache.visible = 7
        for layer, device in enumerate(devices):
            key = torch.zeros(2, 1, 2, 4, device=device)
            k, _ = cache.update(key, key.clone(), layer)
            assert k.device == device
        if isinstance(cache, SlotCache) and not isinstance(cache, StaticSlotCache):
            cache.select(torch.tensor([1]))
        else:
            cache.compact(torch.tensor([1]))
        assert [cache.keys[i].device for i in range(2)] == devices


def test_an_attention_kernel_that_ignores_masks_is_refused():
    model = tiny_llama()
    model.config._attn_implementation = (
        "flash_attention_2"  # set as from_pretrained would, without the package
    )
    with pytest.raises(BenchError, match="^my-org/my-model: attn_implementation = 'flash_attention_2'"):
        attention_layout(model)
