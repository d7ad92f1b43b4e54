"""A user's own verifier, as the README shows it: one small class plus a name.

Confidence ensemble: trust the target in proportion to its own confidence,
pi = m p + (1 - m) q with m = max(floor, max_v p(v)). Used as
``--method tests/example_verifier.py:ConfidenceEnsemble``; ``--grid baselines`` sweeps ``floor``
over its declared sweep unless ``--param floor=...`` says otherwise.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor

from bench.verifiers import MixtureVerifier, Round


@dataclass(frozen=True)
class ConfidenceEnsemble(MixtureVerifier):
    name: ClassVar[str] = "confidence"
    # What the harness needs to sweep, table, plot and compare it like a built-in:
    sweep: ClassVar[Mapping[str, Sequence[Any]]] = {"floor": (0.2, 0.5, 0.8)}  # its family's points
    baseline: ClassVar[bool] = False  # a candidate, not a family to judge others against
    floor: float = 0.2  # never trust the target less than this

    def pi(self, r: Round) -> Tensor:
        w = r.p.max(-1, keepdim=True).values.clamp_min(self.floor)
        return w * r.p + (1 - w) * r.q
