"""Progress of one configuration: a live bar on a terminal, one summary line in a log file or pipe.

A bar's carriage-return updates fill a redirected log with noise, so away from a terminal each
configuration (and each timing pass) is reported once, when it ends.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.decode_stats import DecodeStats


class Progress:
    """Counts examples and drafted/accepted/emitted tokens; throughput is over elapsed time."""

    def __init__(
        self,
        total: int,
        desc: str,
        log: Callable[[str], None],
        live: bool | None = None,
        quiet: bool = False,
        own_time: bool = False,
    ) -> None:
        self.desc, self.log, self.total, self.quiet = desc, log, total, quiet
        self.examples = self.drafted = self.accepted = self.tokens = 0
        self.start = time.perf_counter()
        # Interleaved configurations share the clock: each reports its own examples' decode time.
        self.own_time, self.decode_s = own_time, 0.0
        self.bar: Any = None
        if not quiet and (sys.stderr.isatty() if live is None else live):
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="ex", dynamic_ncols=True)

    def _elapsed(self) -> float:
        return self.decode_s if self.own_time else time.perf_counter() - self.start

    def _figures(self) -> dict[str, str]:
        elapsed = self._elapsed()
        return {
            "acc": f"{self.accepted / self.drafted:.3f}" if self.drafted else "-",
            "tok_s": f"{self.tokens / elapsed:.0f}" if elapsed > 0 else "-",
        }

    def describe(self, desc: str) -> None:
        """Name what is decoding now (a bar shared by interleaved configurations)."""
        self.desc = desc
        if self.bar is not None:
            self.bar.set_description(desc, refresh=False)

    def update(self, stats: DecodeStats) -> None:
        self.examples += 1
        self.drafted, self.accepted = (
            self.drafted + stats.drafted_tokens,
            self.accepted + stats.accepted_tokens,
        )
        self.tokens += stats.new_tokens
        if not math.isnan(stats.wall_time_s):  # NaN: decoded in a batch, untimed
            self.decode_s += stats.wall_time_s
        if self.bar is not None:
            self.bar.set_postfix(**self._figures())
            self.bar.update()

    def close(self, note: str = "") -> None:
        if self.bar is not None:
            self.bar.close()
        if self.quiet or (self.bar is not None and not note):
            return
        f = self._figures()
        self.log(
            f"{self.desc}: {self.examples}/{self.total} examples in {self._elapsed():.1f} s"
            + (" of its own decoding, " if self.own_time else ", ")
            + f"acceptance {f['acc']}, {f['tok_s']} tokens/s"
            + (f", {note}" if note else "")
        )
