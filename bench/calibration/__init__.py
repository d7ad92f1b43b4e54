"""Calibrated sweeps: a family swept at target acceptance levels instead of fixed values.

``search`` finds the values along the path a verifier class declares (``Calibration``), on any
measure of acceptance; ``sweeps`` runs that search in `run` on examples that are not judged and
keeps its record in the results directory; ``notes`` says when a candidate's sweep barely moves.
"""

from bench.calibration.search import Level, calibrate_path, targets
from bench.calibration.sweeps import calibrate, pending

__all__ = ["Level", "calibrate", "calibrate_path", "pending", "targets"]
