"""Progress of one configuration: a live bar on a terminal, one summary line in a log file or pipe.

A bar's carriage-return updates fill a redirected log with noise, so away from a terminal each
configuration (and each timing pass) is reported once, when it ends.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from bench.decoding import DecodeStats


class Progress:
    """Counts examples and drafted/accepted/emitted tokens; throughput is over elapsed time."""

    def __init__(
        self,
        total: int,
        desc: str,
        log: Callable[[str], None],
        live: bool | None = None,
        quiet: bool = False,
    ) -> None:
        self.desc, self.log, self.total, self.quiet = desc, log, total, quiet
        self.examples = self.drafted = self.accepted = self.tokens = 0
        self.start = time.perf_counter()
        self.bar: Any = None
        if not quiet and (sys.stderr.isatty() if live is None else live):
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="ex", dynamic_ncols=True)

    def _figures(self) -> dict[str, str]:
        elapsed = time.perf_counter() - self.start
        return {
            "acc": f"{self.accepted / self.drafted:.3f}" if self.drafted else "-",
            "tok_s": f"{self.tokens / elapsed:.0f}" if elapsed > 0 else "-",
        }

    def update(self, stats: DecodeStats) -> None:
        self.examples += 1
        self.drafted, self.accepted = (
            self.drafted + stats.drafted_tokens,
            self.accepted + stats.accepted_tokens,
        )
        self.tokens += stats.new_tokens
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
            f"{self.desc}: {self.examples}/{self.total} examples in {time.perf_counter() - self.start:.1f} s, "
            f"acceptance {f['acc']}, {f['tok_s']} tokens/s" + (f", {note}" if note else "")
        )
