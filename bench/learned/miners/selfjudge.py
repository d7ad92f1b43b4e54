"""SelfJudge's label mining, as its authors compute it (naver-aics/SelfJudge at commit c97c8e83,
src/compare_important_tokens_gsm8k.py, ``find_important_tokens``): at every position of the
target's greedy completion where the draft's proposal differs, swap the draft's token in (one swap
at a time, the rest of the completion kept) and score the swap by

    mean(top log p of the original over positions m-1 .. m+N-1)
    - mean([log p of the swapped-in token at m-1] + top log p of the swapped copy over m .. m+N-1)

("top log p": the target's max log-probability over the vocabulary at a position, teacher-forced;
N = 20 positions, fewer at the end; m the swap's position). The first term is the cost of the
swapped token itself, the rest how much less sure of its next tokens the target is after it. The
swap is important if the score exceeds tau, which the recipe applies (bench.learned.classifier:
the authors' per-task, per-model value where they publish one, else a documented quantile rule),
so every swap is returned with its score and no label. Each swap also yields the original token at
the same position as a negative (label 0), as the authors' classifier data holds the original
sequence's state there (notebooks/train_selfjudge-fulldata.ipynb, ``make_X_y``). Every swap of a
question is one ``Swapped`` call, which the pair answers with the prompt run once
(bench.learned.shared).
"""

from __future__ import annotations

import torch
from torch import Tensor

from bench.learned.miners import Drafted, Greedy, Mined, Steps, Swapped, mismatches

# The authors' window (``num_next_token`` 20: the notebook's and the shipped heads' ``num20``).
WINDOW = 20


def score(original: list[float], swapped: list[float]) -> float:
    """The authors' statistic on one swap's ``Swapped`` pair: the difference of the two means."""
    return sum(original) / len(original) - sum(swapped) / len(swapped)


def mine(
    prompt: list[int], max_new: int, window: int = WINDOW, temperature: float = 0.0, seed: int = 0,
    drafter: str = "model",
) -> Steps:  # fmt: skip
    (seq,) = yield [Greedy(prompt, max_new)]
    full, n = prompt + seq, len(prompt)
    (proposed,) = yield [Drafted(full, temperature, seed, drafter)]
    # The last token has nothing after it to judge by (the authors skip it too).
    sites = [(t, token) for t, token in mismatches(proposed, prompt, seq, 0) if n + t < len(full) - 1]
    (scores,) = yield [Swapped(full, [(n + t, token) for t, token in sites], window)]
    out = []
    for (t, token), (original, swapped) in zip(sites, scores):
        context = prompt + seq[:t]
        out.append(Mined(context, token, important=None, score=score(original.tolist(), swapped.tolist())))
        out.append(Mined(context, seq[t], important=False))
    return out


# The authors' tau at N = 20, per task and target model (notebooks/train_selfjudge-fulldata.ipynb,
# ``threshold_dict``; at N = 5 and 10 they give 0.14162/0.0912 for Qwen, 0.139116/0.099362 for
# Llama, and 0.1174 at N = 20 for LiveCodeBench, a task this harness lacks, its model not stated).
PUBLISHED_TAU = {
    ("gsm8k", "Qwen/Qwen2.5-7B-Instruct"): 0.0563,
    ("gsm8k", "meta-llama/Llama-3.1-8B-Instruct"): 0.066157,
}
# Where they publish none, tau is the score quantile that calls the authors' share of swaps
# important: in their notebook's output, 37,646 of the training split's 47,564 swaps (95,128
# rows, half of them the original-token negatives), 79.1%; 4,554 of 5,717 (79.7%) on validation.
IMPORTANT_SHARE = 37646 / 47564


def published_tau(task: str, target: str | None) -> float | None:
    """The authors' tau for this task and target model, None where they published none."""
    return PUBLISHED_TAU.get((task, target or ""))


def quantile_tau(scores: Tensor) -> float:
    """The rule for tasks and pairs the authors did not tune: the (1 - IMPORTANT_SHARE) quantile of
    the swaps' scores (the recipe takes them from the training questions and reports the share it
    gives on the held-out ones)."""
    return float(torch.quantile(scores.double(), 1 - IMPORTANT_SHARE))
