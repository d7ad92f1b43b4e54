"""SelfJudge's label mining (arXiv 2510.02329; its code, naver-aics/SelfJudge, could not be had
here): the target's own likelihood decides whether a swapped-in token preserves the response, no
answer needed. Along the target's greedy completion, wherever the draft's proposal differs, swap
the draft's token in and run one teacher-forced target forward; the token is important if the
target's mean log-probability of the original next ``window`` tokens drops by more than
``threshold`` nats. (The max log-probability over those positions, another reading of the
paper, never drops on the shipped pair: its target stays sure of its next token after any swap,
so every label came out unimportant.) Every swap of a question goes in one batch.
"""

from __future__ import annotations

from bench.learned.miners import Drafted, Greedy, Likelihood, Mined, Steps, mismatches

WINDOW, THRESHOLD = 5, 0.5


def mine(
    prompt: list[int], max_new: int, window: int = WINDOW, threshold: float = THRESHOLD,
    temperature: float = 0.0, seed: int = 0,
) -> Steps:  # fmt: skip
    (seq,) = yield [Greedy(prompt, max_new)]
    full, n = prompt + seq, len(prompt)
    original, proposed = yield [Likelihood(full), Drafted(full, temperature, seed)]
    # The last token has nothing after it to judge by.
    sites = [(t, token) for t, token in mismatches(proposed, prompt, seq, 0) if n + t < len(full) - 1]
    swapped = yield [Likelihood(full[: n + t] + [token] + full[n + t + 1 :]) for t, token in sites]
    labels = []
    for (t, token), after_swap in zip(sites, swapped):
        after = slice(n + t, min(n + t + window, len(full) - 1))  # log p of the original tokens after it
        drop = original[after].mean() - after_swap[after].mean()
        labels.append(Mined(prompt + seq[:t], token, important=bool(drop > threshold)))
    return labels
