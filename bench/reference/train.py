"""Train the reference pair from scratch: ``python -m bench.reference.train`` (minutes on 2 CPU cores).

One byte-level BPE tokenizer (digits kept one per token) and two ``LlamaForCausalLM`` models, both
trained on worked additions from ``bench.reference.arith``: the target (2 layers, width 96) on
data whose wording slots take their first variant 85% of the time, the draft (2 layers, width 64)
on data where they take it 15% of the time and where each digit of a step's sum is miswritten with
probability 0.1. The draft then disagrees with the target on the wording, where both are right, and
is clearly weaker on the digits. (Smaller drafts trained on clean data stayed near 0% accuracy:
the models learn the addition abruptly, so capacity alone gave no useful in-between draft.) Every random choice
is seeded, so the shipped weights are reproduced by running this again.
"""

from __future__ import annotations

import argparse
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from bench.reference import DRAFT_DIR, TARGET_DIR, TOKENIZER_DIR
from bench.reference.arith import DRAFT_BIAS, TARGET_BIAS, problems, prompt, sample_text

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>")


@dataclass(frozen=True)
class ModelRecipe:
    """Shape and training budget of one model."""

    hidden: int
    layers: int
    heads: int
    intermediate: int
    steps: int
    bias: float  # probability of each wording slot's first variant in this model's data
    noise: float = 0.0  # probability that a digit of a step's sum is miswritten in its data
    lr: float = 3e-3
    batch: int = 32


TARGET = ModelRecipe(hidden=96, layers=2, heads=4, intermediate=256, steps=1200, bias=TARGET_BIAS)
DRAFT = ModelRecipe(hidden=64, layers=2, heads=4, intermediate=128, steps=900, bias=DRAFT_BIAS, noise=0.1)


def build_tokenizer(seed: int) -> PreTrainedTokenizerFast:
    """BPE over worked answers; ``<bos>`` in front of every encoded text, digits one per token."""
    rng = random.Random(seed)
    corpus = [sample_text(rng.randint(100, 999), rng.randint(100, 999), 0.5, rng) for _ in range(2000)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    bos = tok.token_to_id("<bos>")
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", bos)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>"
    )


def encode(tok: PreTrainedTokenizerFast, text: str) -> tuple[list[int], int]:
    """Token ids of prompt + answer + <eos> as the decoder sees them (the prompt encoded alone,
    as at inference), and the prompt's length (no loss there: its numbers are random)."""
    head, answer = text.split("A: ", 1)
    p = tok(head + "A: ").input_ids
    a = tok(answer, add_special_tokens=False).input_ids
    return p + a + [tok.eos_token_id], len(p)


def batch(tok: PreTrainedTokenizerFast, recipe: ModelRecipe, rng: random.Random, test: set) -> tuple:
    seqs: list[tuple[list[int], int]] = []
    while len(seqs) < recipe.batch:
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        if (a, b) not in test:
            seqs.append(encode(tok, sample_text(a, b, recipe.bias, rng, recipe.noise)))
    width = max(len(s) for s, _ in seqs)
    ids = torch.full((len(seqs), width), tok.pad_token_id)
    labels = torch.full((len(seqs), width), -100)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, (s, n_prompt) in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        labels[i, n_prompt : len(s)] = torch.tensor(s[n_prompt:])
        mask[i, : len(s)] = 1
    return ids, labels, mask


def train_model(
    tok: PreTrainedTokenizerFast, recipe: ModelRecipe, seed: int, steps: int, log: bool = True
) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=recipe.hidden,
        intermediate_size=recipe.intermediate,
        num_hidden_layers=recipe.layers,
        num_attention_heads=recipe.heads,
        num_key_value_heads=recipe.heads,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + math.cos(math.pi * s / steps))
    )
    rng = random.Random(seed + 1)
    test = set(problems()["test"])
    start = time.perf_counter()
    model.train()
    for step in range(steps):
        ids, labels, mask = batch(tok, recipe, rng, test)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if log and (step % 100 == 0 or step == steps - 1):
            print(
                f"  step {step + 1}/{steps}  loss {loss.item():.4f}  {time.perf_counter() - start:.0f} s",
                flush=True,
            )
    model.eval()
    model.generation_config.do_sample = False
    return model


@torch.no_grad()
def greedy_accuracy(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast, n: int, seed: int) -> float:
    """Greedy exact-answer rate on fresh train-distribution problems (a sanity check, not the test)."""
    rng = random.Random(seed)
    test, right = set(problems()["test"]), 0
    done = 0
    while done < n:
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        if (a, b) in test:
            continue
        ids = torch.tensor([tok(prompt(a, b)).input_ids])
        out = model.generate(ids, max_new_tokens=60, do_sample=False, eos_token_id=tok.eos_token_id)
        text = tok.decode(out[0, ids.shape[1] :].tolist(), skip_special_tokens=True)
        assert isinstance(text, str)  # one sequence decodes to a str (transformers types a batch's too)
        right += text.strip().endswith(f"#### {a + b}")
        done += 1
    return right / n


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=None, help="Folder (default: the package's own).")
    parser.add_argument("--steps-scale", type=float, default=1.0, help="Scale both step counts (CI: 0.01).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", type=int, default=50, help="Fresh problems for the greedy sanity check.")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # one thread: bounded on shared cores, and the same sums on every machine
    tok = build_tokenizer(args.seed)
    dirs = (
        (TOKENIZER_DIR, TARGET_DIR, DRAFT_DIR)
        if args.output is None
        else (args.output / "tokenizer", args.output / "target", args.output / "draft")
    )
    tok.save_pretrained(dirs[0])
    for recipe, folder, seed in ((TARGET, dirs[1], args.seed), (DRAFT, dirs[2], args.seed + 1)):
        steps = max(1, round(recipe.steps * args.steps_scale))
        print(f"training {folder.name}: {asdict(recipe)} for {steps} steps", flush=True)
        model = train_model(tok, recipe, seed, steps)
        model.save_pretrained(folder)
        accuracy = greedy_accuracy(model, tok, args.check, 99)
        print(f"  greedy accuracy on {args.check} fresh problems: {accuracy:.0%}", flush=True)


if __name__ == "__main__":
    main()
