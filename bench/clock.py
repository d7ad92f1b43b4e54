"""The one clock the harness times with: the runner's decodes (``SpeculativeDecoder.generate_batch``)
and `speed`'s runs and steps (bench.speed) read it, so their times are measured the same way. A
CUDA reading waits for the device first: a clock read without it times the launch, not the work."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")


class Clock:
    """Seconds on ``device``: every reading synchronises it (a no-op on a CPU)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def read(self) -> float:
        """The time now, once the device's queued work is done."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def timed(self, fn: Callable[[], T]) -> tuple[T, float]:
        """``fn()``'s result and its seconds, the device synchronised on both sides."""
        start = self.read()
        out = fn()
        return out, self.read() - start
