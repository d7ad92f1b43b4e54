"""The offline ``tiny`` pair: a tokenizer and two Llama models built in code from a seed.

Random models give meaningless acceptance, so the pair follows SPEC section 6's recipe: the draft
is the target's first ``draft_layers`` layers (sharing embeddings, final norm and lm_head), the
target's deeper layers have their ``o_proj``/``down_proj`` weights multiplied by ``damping`` (a
small perturbation of the draft), and the lm_head is scaled by ``logit_scale`` so the
distributions are peaked like a trained model's. ``damping`` then tunes the acceptance.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

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
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", bos)]
    )
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
