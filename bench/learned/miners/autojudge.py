"""AutoJudge's label mining (garipovroma/autojudge src/find_important_tokens.py): take the
target's greedy answer; at the first position where the draft's argmax differs, put the draft's
token there and let the target regenerate greedily. The token is unimportant if the final answer
is unchanged (``agree``), and then the swapped text is kept; either way go on from the next
mismatch. ``agree`` compares with the target's first answer, as the authors' evaluator does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.errors import BenchError
from bench.learned.miners import Drafted, Greedy, Mined, Steps, mismatches
from bench.tasks import Task

# ROUGE tasks have no answer to compare: a swap is unimportant while the completion's ROUGE-2
# against the reference moves by at most this many points (of 100).
ROUGE_TOLERANCE = 1.0


def mine(
    prompt: list[int], max_new: int, agree: Callable[[list[int], list[int]], bool], eos: frozenset[int],
    temperature: float = 0.0, seed: int = 0, drafter: str = "model",
) -> Steps:  # fmt: skip
    """The labels of one question; ``temperature`` > 0 mines the draft's samples instead of its
    argmax (the tokens a sampling decoder's judge is asked about), each draw seeded from ``seed``;
    ``drafter`` a lookup or eagle spec mines that drafter's proposals instead."""
    (reference,) = yield [Greedy(prompt, max_new)]
    seq, start, draws = list(reference), 0, 0
    labels: list[Mined] = []
    while True:
        (proposed,) = yield [Drafted(prompt + seq, temperature, seed + draws, drafter)]
        draws += 1
        found = mismatches(proposed, prompt, seq, start)
        if not found:
            return labels
        t, token = found[0]
        prefix = seq[:t] + [token]
        rest = max_new - len(prefix)
        alternative = prefix
        if token not in eos and rest >= 1:
            (more,) = yield [Greedy(prompt + prefix, rest)]
            alternative = prefix + more
        same = agree(reference, alternative)
        labels.append(Mined(prompt + seq[:t], token, important=not same))
        if same:
            seq = alternative
        start = t + 1


def answers_agree(task: Task, doc: dict[str, Any], first: str, second: str) -> bool:
    """Whether two completions end the same: the extracted number (arith, GSM8K), the sandbox's
    verdict (MBPP, HumanEval), ROUGE-2 within ``ROUGE_TOLERANCE`` points (summaries)."""
    from bench.metrics import extract_flexible

    metric = task.spec.metric
    if metric == "gsm8k":
        return extract_flexible(task.cut(first)) == extract_flexible(task.cut(second))
    if metric in ("mbpp", "humaneval"):
        return task.score(doc, first)["quality"] == task.score(doc, second)["quality"]
    if metric == "rouge":
        a, b = task.score(doc, first)["rouge2"], task.score(doc, second)["rouge2"]
        return abs(a - b) <= ROUGE_TOLERANCE
    raise BenchError(
        f"autojudge mines labels by answer change, and task {task.name} (metric {metric}) has no answer "
        "to compare; use selfjudge, whose labels need none"
    )
