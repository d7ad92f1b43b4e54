"""How a model step runs on a batch of rows and how its KV cache is kept.

The decoding loop (``bench.decoding``) owns verification, bookkeeping and counters; an engine owns
one model and its cache. Every engine keeps the same contract (``ModelEngine``): row ``b``'s token
at position ``t`` lives at cache slot ``t``, a step writes each row's new tokens at that row's own
positions and attends causally BY POSITION (plus the sliding window on sliding layers), and rolling
a row back only lowers its length: rejected slots are hidden by causality and overwritten by the
next step. So a row sees exactly the tokens it would see decoded alone, whatever shares its batch.
"""

from bench.engines.base import ModelEngine
from bench.engines.eager import EagerEngine

__all__ = ["EagerEngine", "ModelEngine"]
