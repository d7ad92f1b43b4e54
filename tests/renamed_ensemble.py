"""The static ensemble under another name: a plug-in for checking that ``compare`` judges a method
against itself fairly (tests/reports/test_compare.py, docs/compare.md).

pi = share p + (1 - share) q, the same rule as ``ensemble`` (bench/verifiers/paper.py), swept at
fixed values of its own (no calibration declared): ``--method tests/renamed_ensemble.py:RenamedEnsemble``
with ``--grid baselines`` runs share = 0.1, 0.3, 0.5, 0.7, 0.9.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor

from bench.verifiers import MixtureVerifier, Round


@dataclass(frozen=True)
class RenamedEnsemble(MixtureVerifier):
    name: ClassVar[str] = "renamed"
    sweep: ClassVar[Mapping[str, Sequence[Any]]] = {"share": (0.1, 0.3, 0.5, 0.7, 0.9)}
    share: float = 0.5  # the target's share of pi

    def pi(self, r: Round) -> Tensor:
        return self.share * r.p + (1 - self.share) * r.q
