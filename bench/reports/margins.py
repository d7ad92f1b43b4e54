"""Equivalence margins: per metric, the largest difference that counts as none.

A verdict of "equivalent" is a claim about a margin: the paired 95% interval of the difference lies
inside ±margin (``settle`` below; bench.reports.verdicts applies it). There is no margin-free "no difference", so every
verdict names its margin, and ``--margin NAME=VALUE`` (compare, report, recommend, table) replaces
a default:

- shares (accuracy, pass@1, Spec-Bench's exact and hit): 0.02, two points. A deployment that loses
  two points of accuracy to go faster has changed its answer on one question in fifty; less than
  that is within what re-sampling the same model at temperature 1 moves on a few hundred examples.
- ROUGE F1 x 100 (rouge1, rouge2, rougeL): 0.5 points. Summarisation papers report ROUGE to one
  decimal and treat differences of a few tenths as noise; the DIVERSED paper's own gains are 2 to 3
  points (CNN/DM ROUGE-2 9.46 -> 12.11).
- ``fidelity``: 0.1 nats per token of the zero-mean divergence (``target_divergence``: log p(y) +
  H(p) of each emitted token, whose mean is 0 when y is drawn from the target), against ``ar``'s. A
  shift of 0.1 nats per token is a perplexity ratio of e^0.1 = 1.105: text the target finds 10%
  more (or less) surprising than its own is no longer the target's distribution.

The rule (``settle``): "equivalent" when the 95% interval of a paired difference lies inside
±margin (two one-sided tests at 2.5% each: a true difference at the margin is called equivalent at
most 2.5% of the time), else "above" or "below" when it excludes 0, else "inconclusive", reported
with the smallest difference the sample could detect (``detectable``).

A metric without a default (a task's own, Spec-Bench's pooled ``reference_score``) is refused in
one line with the flag that gives it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bench.errors import BenchError

FIDELITY = "fidelity"  # the margin's name for the zero-mean divergence
SHARE = 0.02
ROUGE = 0.5
DEFAULT_MARGINS: dict[str, float] = {
    "exact_flexible": SHARE,
    "exact_strict": SHARE,
    "pass@1": SHARE,
    "exact": SHARE,
    "hit": SHARE,
    "rouge1": ROUGE,
    "rouge2": ROUGE,
    "rougeL": ROUGE,
    FIDELITY: 0.1,
}
Z_TAIL = 1.959964  # the standard normal's 0.975 quantile: each tail of a 95% interval
Z_POWER = 0.841621  # its 0.8 quantile: the detectable difference is quoted at 80% power
EQUIVALENT, INCONCLUSIVE = "equivalent", "inconclusive"


def detectable(ci: tuple[float, float]) -> float:
    """The smallest true difference this sample would call above or below with 80% power:
    (z_0.975 + z_0.8) standard errors, the standard error read off the 95% interval's width. What an
    "inconclusive" verdict reports, so a reader knows what more examples would have to buy."""
    low, high = ci
    return float((Z_TAIL + Z_POWER) * (high - low) / (2 * Z_TAIL))


def settle(ci: tuple[float, float], margin: float) -> str:
    """A difference's verdict from its 95% interval: "equivalent" when it lies inside ±``margin``
    (a difference smaller than the margin counts as none, even one the sample can tell from 0),
    else "above" or "below" when it excludes 0, else "inconclusive"."""
    low, high = ci
    if -margin < low and high < margin:
        return EQUIVALENT
    return "above" if low > 0 else "below" if high < 0 else INCONCLUSIVE


SYNTAX = "NAME=VALUE, NAME a metric (exact_flexible, pass@1, rouge2, ...) or fidelity, VALUE > 0 in its unit"


@dataclass(frozen=True)
class Margins:
    """The margins in force: the defaults, with those given on the command line over them."""

    given: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def parse(cls, texts: Sequence[str] | None) -> Margins:
        """``--margin NAME=VALUE`` values (repeatable, or comma-separated), refused in one line each."""
        given: dict[str, float] = {}
        for text in (part for t in texts or () for part in t.split(",") if part):
            name, _, body = text.partition("=")
            try:
                value = float(body)
            except ValueError:
                value = math.nan
            if not name or not math.isfinite(value) or value <= 0:
                raise BenchError(f"--margin {text!r}: give {SYNTAX}")
            given[name.strip()] = value
        return cls(given)

    def of(self, metric: str) -> float:
        """The margin of ``metric``; refused, with the flag, where it has none."""
        value = self.given.get(metric, DEFAULT_MARGINS.get(metric))
        if value is None:
            raise BenchError(
                f"no equivalence margin for {metric!r}: give --margin {metric}=VALUE (the largest difference "
                "in its unit that counts as none)"
            )
        return value

    def named(self, metric: str) -> str:
        """How a verdict names its margin's source: ``rouge2, default`` or ``rouge2, given``."""
        self.of(metric)  # refused here too where there is none
        return f"{metric}, {'given' if metric in self.given else 'default'}"
