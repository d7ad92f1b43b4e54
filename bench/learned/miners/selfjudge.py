"""SelfJudge's label mining (arXiv 2510.02329; its code, naver-aics/SelfJudge, could not be had
here): the target's own likelihood decides whether a swapped-in token preserves the response, no
answer needed. Along the target's greedy completion, wherever the draft's proposal differs, swap
the draft's token in and run one teacher-forced target forward; the token is important if the
target's mean log-probability of the original next ``window`` tokens drops by more than
``threshold`` nats. (The max log-probability over those positions, another reading of the
paper, never drops on the shipped pair: its target stays sure of its next token after any swap,
so every label came out unimportant.) Every swap of a question is one ``Swapped`` call, which the
pair answers with the prompt run once (bench.learned.shared).
"""

from __future__ import annotations

from bench.learned.miners import Drafted, Greedy, Mined, Steps, Swapped, mismatches

WINDOW, THRESHOLD = 5, 0.5


def mine(
    prompt: list[int], max_new: int, window: int = WINDOW, threshold: float = THRESHOLD,
    temperature: float = 0.0, seed: int = 0, drafter: str = "model",
) -> Steps:  # fmt: skip
    (seq,) = yield [Greedy(prompt, max_new)]
    full, n = prompt + seq, len(prompt)
    (proposed,) = yield [Drafted(full, temperature, seed, drafter)]
    # The last token has nothing after it to judge by.
    sites = [(t, token) for t, token in mismatches(proposed, prompt, seq, 0) if n + t < len(full) - 1]
    (scores,) = yield [Swapped(full, [(n + t, token) for t, token in sites], window)]
    return [
        Mined(prompt + seq[:t], token, important=bool(original.mean() - swapped.mean() > threshold))
        for (t, token), (original, swapped) in zip(sites, scores)
    ]
