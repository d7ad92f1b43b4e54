"""Pairs built in code: the offline ``tiny`` pair, and ``synthetic`` pairs at real shapes.

The ``tiny`` pair is a tokenizer and two Llama models built in code from a seed.

Random models give meaningless acceptance, so the pair follows the recipe of docs/spec.md §6,
model pairs: the draft is the target's first ``draft_layers`` layers (sharing embeddings, final
norm and lm_head), the target's deeper layers have their ``o_proj``/``down_proj`` weights multiplied by ``damping`` (a
small perturbation of the draft), and the lm_head is scaled by ``logit_scale`` so the
distributions are peaked like a trained model's. ``damping`` then tunes the acceptance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel, PreTrainedTokenizerFast

from bench.errors import BenchError

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>")

# A fixed corpus, so the tokenizer is the same on every machine. Byte-level BPE encodes any text.
_CORPUS = """
Question: A farmer has 12 cows and buys 7 more. How many cows does the farmer have now?
Answer: Let's think step by step. The farmer starts with 12 cows. He buys 7 more, so 12 + 7 = 19.
#### 19
Article: The city council voted on Tuesday to build a new bridge over the river. Officials said
the project would cost 40 million dollars and take three years to complete.
Highlights: The council approved a new bridge. It will cost 40 million dollars.
Document: Researchers at the university have found that people who walk every day sleep better.
Summary: A daily walk helps people sleep, a study says.
def add_numbers(a, b):
    return a + b
assert add_numbers(2, 3) == 5
Write a function to find the largest number in a list.
def max_of_list(items):
    result = items[0]
    for item in items:
        if item > result:
            result = item
    return result
the of and to in is was for on that with as by at from it he she they we you this be are have
"""


@dataclass(frozen=True)
class TinyConfig:
    """Shape and acceptance knobs of the tiny pair (the fields of ``pairs/tiny.yaml``)."""

    seed: int = 0
    vocab_size: int = 512
    hidden_size: int = 64
    intermediate_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    draft_layers: int = 1
    damping: float = 0.1
    logit_scale: float = 20.0
    max_positions: int = 8192


def build_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on the fixed corpus; adds <bos> in front of every encoded text."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([_CORPUS], trainer=trainer)
    bos = tok.token_to_id("<bos>")
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", bos)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>"
    )


def build_tiny_pair(cfg: TinyConfig) -> tuple[LlamaForCausalLM, LlamaForCausalLM, PreTrainedTokenizerFast]:
    """(target, draft, tokenizer), deterministic in ``cfg``; built in well under a second."""
    tokenizer = build_tokenizer(cfg.vocab_size)
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(cfg.seed)
    target = LlamaForCausalLM(LlamaConfig(num_hidden_layers=cfg.num_layers, **common))
    draft = LlamaForCausalLM(LlamaConfig(num_hidden_layers=cfg.draft_layers, **common))
    with torch.no_grad():
        target.lm_head.weight.mul_(cfg.logit_scale)
        for layer in target.model.layers[cfg.draft_layers :]:
            layer.self_attn.o_proj.weight.mul_(cfg.damping)
            layer.mlp.down_proj.weight.mul_(cfg.damping)
    draft.model.embed_tokens = target.model.embed_tokens
    draft.model.norm = target.model.norm
    draft.lm_head = target.lm_head
    for i in range(cfg.draft_layers):
        draft.model.layers[i] = target.model.layers[i]
    for model in (target, draft):
        model.generation_config.do_sample = False
        model.eval()
    return target, draft, tokenizer


def build_synthetic_pair(
    target_config: dict[str, Any],
    draft_config: dict[str, Any],
    *,
    seed: int,
    damping: float,
    logit_scale: float,
    device: torch.device,
    dtype: torch.dtype,
) -> tuple[PreTrainedModel, PreTrainedModel]:
    """Two models at real architectures' shapes with random weights and a tunable acceptance.

    Both compute the same base "bigram" logits: the draft's embedding E and head U (width d) and
    the target's embedding [E, E] and head [U, U] / 2 (width 2d) agree after RMSNorm. Each model's
    layers then add a perturbation damped by ``damping`` (o_proj and down_proj scaled), so the two
    distributions differ by an amount ``damping`` controls, as for the tiny pair. Needs the target
    to be exactly twice as wide as the draft (Llama-3.1-8B: 4096, Llama-3.2-1B: 2048).
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    t_cfg = AutoConfig.for_model(**{**target_config, "tie_word_embeddings": False})
    d_cfg = AutoConfig.for_model(**{**draft_config, "tie_word_embeddings": False})
    if t_cfg.hidden_size != 2 * d_cfg.hidden_size or t_cfg.vocab_size != d_cfg.vocab_size:
        raise BenchError(
            "synthetic pair: the target must be twice as wide as the draft, with the same vocabulary"
        )
    torch.manual_seed(seed)
    with torch.device(device):
        target = AutoModelForCausalLM.from_config(t_cfg, dtype=dtype)
        draft = AutoModelForCausalLM.from_config(d_cfg, dtype=dtype)
    with torch.no_grad():
        # Unit-scale embeddings keep the shared bigram logits the signal at any width: at the init's
        # 0.02 the damped layers' outputs (which grow with the width) swamp them at 4096 wide, and
        # draft and target agreed on no token (seen on an H200).
        embed = draft.get_input_embeddings().weight.normal_(0, 1)
        head = draft.get_output_embeddings().weight
        head.normal_(0, 1 / d_cfg.hidden_size**0.5).mul_(logit_scale)
        target.get_input_embeddings().weight.copy_(torch.cat([embed, embed], dim=1))
        target.get_output_embeddings().weight.copy_(torch.cat([head, head], dim=1) / 2)
        for model in (target, draft):
            # A layer's output grows with init_std^2 * width: scaled so that ``damping`` means the
            # same (a layer's share of the residual stream) at every width.
            scale = damping / (model.config.initializer_range**2 * model.config.hidden_size)
            for layer in model.model.layers:
                layer.self_attn.o_proj.weight.mul_(scale)
                layer.mlp.down_proj.weight.mul_(scale)
    for model in (target, draft):
        model.config.eos_token_id = model.generation_config.eos_token_id = None  # fixed-length timing runs
        model.generation_config.do_sample = False
        model.eval()
    return target, draft
