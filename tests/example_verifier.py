"""A user's own verifier, as the README shows it: one small class plus a name.

Confidence ensemble: trust the target in proportion to its own confidence,
pi = m p + (1 - m) q with m = max(floor, max_v p(v)). Used as
``--method tests/example_verifier.py:ConfidenceEnsemble``; ``--grid baselines`` calibrates ``floor``
along its declared path (or runs ``--param floor=...`` when given).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor

from bench.verifiers import Calibration, MixtureVerifier, Round


@dataclass(frozen=True)
class ConfidenceEnsemble(MixtureVerifier):
    name: ClassVar[str] = "confidence"
    # What the harness needs to sweep, table, plot and compare it like a built-in:
    sweep: ClassVar[Mapping[str, Sequence[Any]]] = {"floor": (0.2, 0.5, 0.8)}  # its family's points
    # floor = 1 is SD; acceptance rises as the floor falls: calibrated sweeps move it over [0, 1].
    calibration: ClassVar[Calibration] = Calibration("floor", 0.0, 1.0, rising=False, lossless=1.0)
    baseline: ClassVar[bool] = False  # a candidate, not a family to judge others against
    floor: float = 0.2  # never trust the target less than this

    def pi(self, r: Round) -> Tensor:
        w = r.p.max(-1, keepdim=True).values.clamp_min(self.floor)
        return w * r.p + (1 - w) * r.q
