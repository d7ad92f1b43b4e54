"""What reports need to know about calibration: whether a family's frontier extends below its
sweep (it ran its path's lowest-acceptance end), and whether a candidate's sweep barely moves.

Both read a family's summary rows (``method_info`` and ``params`` as ``bench.reports.summary``
gives them), so ``compare`` can call them without knowing how a sweep was chosen.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from bench.verifiers.base import MethodInfo

# A sweep whose points span less acceptance than this barely moves.
BARELY = 0.02


def reaches_floor(infos: Sequence[MethodInfo], params: Sequence[dict[str, Any]]) -> bool:
    """Whether a family ran the end of its declared calibration path with the lowest acceptance.

    No setting of the family accepts less (its acceptance is monotone along the path), so below
    its lowest point its frontier is known exactly: by free disposal, its best quality."""
    path = infos[0].calibrated if infos else None
    return path is not None and any(p.get(path.param) == path.floor for p in params)


def floor_point(examples: int) -> dict[str, np.ndarray]:
    """A point at acceptance 0 and quality 0, per example. Added to a family that reaches its
    floor, it moves the frontier's free-disposal corner (lowest acceptance, best quality) to
    acceptance 0: the frontier is then read below the family's sweep, at its best quality."""
    zeros = np.zeros(examples)
    return {"accepted": zeros, "drafted": np.ones(examples), "quality": zeros}


def barely_moves(
    family: str, info: MethodInfo, params: Sequence[dict[str, Any]], acceptance: Sequence[float]
) -> str | None:
    """One line when a swept candidate's points span under 2 points of acceptance: the parameter's
    range, the acceptance it produced, and how to sweep it by acceptance instead."""
    finite = [a for a in acceptance if np.isfinite(a)]
    if len(finite) < 2 or max(finite) - min(finite) >= BARELY:
        return None
    ranges = []
    for name in info.swept:
        values = sorted({p[name] for p in params if isinstance(p.get(name), (int, float))})
        if len(values) > 1:
            ranges.append(f"{name} {values[0]:g} ... {values[-1]:g}")
    path = info.calibrated
    ran = {p.get(path.param) for p in params} if path else set()
    if path and {path.low, path.high} <= ran:
        how = f"that is the whole of its calibration path ({path.param} {path.low:g} ... {path.high:g})"
    elif path:
        how = "its class declares a calibration path: run it without --param to calibrate it"
    else:
        how = "declare `calibration` on its class (docs/methods.md) or sweep another parameter"
    return (
        f"{family}: {' and '.join(ranges) or 'its sweep'} moved acceptance only from {min(finite):.1%} to "
        f"{max(finite):.1%}; {how}"
    )
