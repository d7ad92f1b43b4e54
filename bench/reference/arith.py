"""The synthetic ``arith`` task: column addition of two 3-digit numbers, worked digit by digit.

A worked answer reads ``7+5=12, carry 1. 4+8+1=13, carry 1. 2+3+1=6. So 632.\\n#### 632``. Its
wording has equivalent variants at fixed slots (``carry``/``keep``, ``So``/``Thus``, ...): the
target and the draft are trained on opposite variant frequencies, so they disagree there
harmlessly. The digits of the sums must be right: there the weaker draft, trained on data whose
step sums are sometimes miswritten, makes the real errors.

Everything is a function of a seed; the train and test problems are disjoint.
"""

from __future__ import annotations

import random
from typing import Any

# Each slot: (variant the target mostly saw, variant the draft mostly saw).
SLOTS = {"carry": ("carry", "keep"), "sep": (".", ";"), "so": ("So", "Thus")}
TARGET_BIAS = 0.85  # probability of the first variant in the target's training data
DRAFT_BIAS = 0.15  # in the draft's
SPLIT_SIZES = {"train": 2000, "test": 500}
SEED = 12


def problems(seed: int = SEED) -> dict[str, list[tuple[int, int]]]:
    """Disjoint train and test problems (pairs of 3-digit numbers)."""
    rng = random.Random(seed)
    seen: set[tuple[int, int]] = set()
    out: dict[str, list[tuple[int, int]]] = {}
    for split, size in SPLIT_SIZES.items():
        rows: list[tuple[int, int]] = []
        while len(rows) < size:
            ab = (rng.randint(100, 999), rng.randint(100, 999))
            if ab not in seen:
                seen.add(ab)
                rows.append(ab)
        out[split] = rows
    return out


def question(a: int, b: int) -> str:
    return f"{a} + {b}"


def prompt(a: int, b: int) -> str:
    return f"Q: {question(a, b)}\nA: "


def _slip(total: int, noise: float, rng: random.Random | None) -> str:
    """A step's sum as written: each digit wrong with probability ``noise`` (the draft's data)."""
    digits = list(str(total))
    for i, d in enumerate(digits):
        if noise > 0 and rng is not None and rng.random() < noise:
            digits[i] = rng.choice([c for c in "0123456789" if c != d])
    return "".join(digits)


def worked(
    a: int, b: int, choose: dict[str, int], noise: float = 0.0, rng: random.Random | None = None
) -> str:
    """The worked answer; ``choose`` picks variant 0 or 1 at each slot, and with ``noise`` > 0
    the digits of each step's sum are sometimes miswritten (the rest stays right)."""
    carry_word = SLOTS["carry"][choose["carry"]]
    sep = SLOTS["sep"][choose["sep"]]
    steps, carry = [], 0
    da, db = str(a)[::-1], str(b)[::-1]
    for i in range(3):
        x, y = int(da[i]), int(db[i])
        total = x + y + carry
        step = f"{x}+{y}" + (f"+{carry}" if carry else "") + f"={_slip(total, noise, rng)}"
        carry = total // 10
        steps.append(step + (f", {carry_word} 1" if carry and i < 2 else "") + sep)
    return f"{' '.join(steps)} {SLOTS['so'][choose['so']]} {a + b}.\n#### {a + b}"


def sample_text(a: int, b: int, bias: float, rng: random.Random, noise: float = 0.0) -> str:
    """Prompt and worked answer with each slot's first variant drawn with probability ``bias``
    and each digit of a step's sum miswritten with probability ``noise``."""
    choose = {slot: 0 if rng.random() < bias else 1 for slot in SLOTS}
    return prompt(a, b) + worked(a, b, choose, noise, rng)


def rows(split: str, seed: int = SEED) -> list[dict[str, Any]]:
    """Task rows in GSM8K's schema: ``question`` and an ``answer`` ending in ``#### n``."""
    chooser = random.Random(seed + 1)
    return [
        {
            "id": f"{split}-{i}",
            "question": question(a, b),
            "answer": worked(a, b, {slot: chooser.randint(0, 1) for slot in SLOTS}),
        }
        for i, (a, b) in enumerate(problems(seed)[split])
    ]
