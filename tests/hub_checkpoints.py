"""Tiny random checkpoints of the real pairs' architectures, saved in a Hugging Face hub cache layout.

Each family gets the real repo ids, its real special tokens, EOS lists and a chat template in its
format, and the architecture details that have tripped loaders: Llama 3.1's ``llama3`` rope scaling
and the 1B draft's tied embeddings, Qwen3, and Gemma 3 ``-it`` as the multimodal
``Gemma3ForConditionalGeneration`` with sliding-window layers. Point ``HF_HUB_CACHE`` at the folder
and set ``HF_HUB_OFFLINE=1``: the pair files then load them through the real code.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    GenerationConfig,
    PreTrainedTokenizerFast,
)

CORPUS = ["Question: what is 12 + 7? Answer: 19. The quick brown fox jumps over the lazy dog. " * 4]
WINDOW = 8  # Gemma 3 sliding window: shorter than any test prompt
BLOCKS = (4.0, 0.25)  # Llama and Qwen: scales of each attention block's and MLP's output
SMALL = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=8)

FAMILIES: dict[str, dict[str, Any]] = {
    "llama3": dict(
        repos=("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"),
        special=[
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|eot_id|>",
            "<|eom_id|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
        ],
        bos="<|begin_of_text|>",
        eos="<|eot_id|>",
        generation_eos=["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"],
        chat_template=(
            "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
            "{{ m['content'] }}<|eot_id|>{% endfor %}"
            "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
        ),
    ),
    "qwen3": dict(
        repos=("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B"),
        special=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        bos=None,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        generation_eos=["<|im_end|>", "<|endoftext|>"],
        chat_template=(
            "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
        ),
    ),
    "gemma3": dict(
        repos=("google/gemma-3-12b-it", "google/gemma-3-4b-it"),
        special=[
            "<pad>",
            "<eos>",
            "<bos>",
            "<start_of_turn>",
            "<end_of_turn>",
            "<start_of_image>",
            "<end_of_image>",
            "<image_soft_token>",
        ],
        bos="<bos>",
        eos="<eos>",
        pad="<pad>",
        generation_eos=["<eos>", "<end_of_turn>"],
        chat_template=(
            "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' "
            "else m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}"
            "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
        ),
    ),
}


def tokenizer(family: dict[str, Any]) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=family["special"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=family["bos"],
        eos_token=family["eos"],
        pad_token=family.get("pad"),
        add_bos_token=family["bos"] is not None,
    )
    fast.chat_template = family["chat_template"]
    return fast


def config(name: str, layers: int, vocab: int, tied: bool, ids: dict[str, int]) -> Any:
    """A small config of the family's real architecture."""
    if name == "llama3":
        return AutoConfig.for_model(
            "llama",
            num_hidden_layers=layers,
            vocab_size=vocab,
            tie_word_embeddings=tied,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
            rope_theta=500000.0,
            max_position_embeddings=1024,
            **SMALL,
        )
    if name == "qwen3":
        return AutoConfig.for_model(
            "qwen3", num_hidden_layers=layers, vocab_size=vocab, tie_word_embeddings=tied, **SMALL
        )
    text = dict(
        num_hidden_layers=layers,
        vocab_size=vocab,
        sliding_window=WINDOW,
        layer_types=(["sliding_attention", "full_attention"] * layers)[:layers],
        # gemma-3-12b-it's RoPE: local layers base 10k unscaled, global layers base 1M scaled 8x
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
        },
        **SMALL,
    )
    vision = dict(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=28,
        patch_size=14,
    )
    return AutoConfig.for_model(
        "gemma3",
        text_config=text,
        vision_config=vision,
        mm_tokens_per_image=1,
        boi_token_index=ids["<start_of_image>"],
        eoi_token_index=ids["<end_of_image>"],
        image_token_index=ids["<image_soft_token>"],
        tie_word_embeddings=tied,
    )


def save_snapshot(cache: Path, repo: str, files: dict[str, Any]) -> Path:
    """``models--ORG--NAME/snapshots/COMMIT`` plus ``refs/main``, the layout the hub client reads."""
    commit = hashlib.sha1(repo.encode()).hexdigest()
    root = cache / ("models--" + repo.replace("/", "--"))
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    for save in files.values():
        save(snapshot)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(commit)
    return snapshot


def build_family(cache: Path, name: str, target_vocab_padding: int = 0) -> None:
    """Target (2 layers, untied) and draft (1 layer, tied) of one family, same tokenizer.

    Random tiny models easily repeat one token whatever the prompt. Llama and Qwen blocks here
    weigh attention up and the MLP down (``BLOCKS``), so what comes next depends on the context and
    not only on the last token; Gemma's scaled embeddings and normalised blocks already do.
    """
    family = FAMILIES[name]
    tok = tokenizer(family)
    vocab = len(tok)
    ids = {t: tok.convert_tokens_to_ids(t) for t in family["special"]}
    for repo, layers, tied, padding in (
        (family["repos"][0], 2, False, target_vocab_padding),
        (family["repos"][1], 1, True, 0),
    ):
        torch.manual_seed(layers)
        model = AutoModelForCausalLM.from_config(config(name, layers, vocab + padding, tied, ids))
        with torch.no_grad():
            model.get_output_embeddings().weight.mul_(20)  # peaked, like a trained model's
            if name != "gemma3":
                for layer in model.get_decoder().layers:
                    layer.self_attn.o_proj.weight.mul_(BLOCKS[0])
                    layer.mlp.down_proj.weight.mul_(BLOCKS[1])
        model.generation_config = GenerationConfig(
            bos_token_id=ids.get(family["bos"]),
            eos_token_id=[ids[t] for t in family["generation_eos"]],
            do_sample=True,  # the real -it configs sample by default; the harness must ignore it
            top_k=20,
            top_p=0.95,
        )
        save_snapshot(
            cache,
            repo,
            {"model": lambda d: model.save_pretrained(d), "tokenizer": lambda d: tok.save_pretrained(d)},
        )
