"""SelfJudge's label mining (arXiv 2510.02329; naver-aics/SelfJudge, not reachable from here, so
this follows the paper's description): the target's own likelihood decides, no answer needed. Along
the target's greedy completion, wherever the draft's argmax differs, swap the draft's token in and
run one teacher-forced target forward; the token is important if the mean over the next
``window`` positions of the target's max log-probability drops by more than ``threshold`` nats.
"""

from __future__ import annotations

from bench.learned.miners import Mined, Oracle, mismatches

WINDOW, THRESHOLD = 5, 0.5


def mine(
    oracle: Oracle, prompt: list[int], max_new: int, window: int = WINDOW, threshold: float = THRESHOLD
) -> list[Mined]:
    seq = oracle.greedy(prompt, max_new)
    full, n = prompt + seq, len(prompt)
    confidence = oracle.target_logprobs(full).max(-1).values
    labels = []
    for t, token in mismatches(oracle, prompt, seq, 0):
        after = slice(n + t, min(n + t + window, len(full) - 1))  # rows predicting the tokens after it
        if after.stop <= after.start:
            continue  # the last token: nothing after it to judge by
        swapped = full[: n + t] + [token] + full[n + t + 1 :]
        drop = confidence[after].mean() - oracle.target_logprobs(swapped).max(-1).values[after].mean()
        labels.append(Mined(prompt + seq[:t], token, important=bool(drop > threshold)))
    return labels
