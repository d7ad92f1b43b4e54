"""A user's own verifier, as the README shows it: one small class plus a name.

Confidence ensemble: trust the target in proportion to its own confidence,
pi = m p + (1 - m) q with m = max_v p(v). Used as ``--method example_verifier:ConfidenceEnsemble``.
"""

from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor

from bench.verifiers import MixtureVerifier, Round


@dataclass(frozen=True)
class ConfidenceEnsemble(MixtureVerifier):
    name: ClassVar[str] = "confidence"
    floor: float = 0.2  # never trust the target less than this

    def pi(self, r: Round) -> Tensor:
        w = r.p.max(-1, keepdim=True).values.clamp_min(self.floor)
        return w * r.p + (1 - w) * r.q
