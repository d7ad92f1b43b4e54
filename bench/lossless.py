"""The lossless point of a configuration's drafts: the one rule every frontier follows.

A per-request random mix of any two settings is attainable (send a share of the requests to one,
the rest to the other), and lossless speculative decoding on the same drafts is open to every
verifier: it keeps the target's law whatever drafted. So every family's frontier, a candidate's
included, holds the lossless point of its drafts; without it, a frontier that happens to reach
lossless SD (a calibrated ensemble's w = 1) beats one that does not (a fixed sweep stopping at
w = 0.9), and a comparison measures sweep ranges, not methods (docs/compare.md).

The lossless point is ``sd`` on the same drafts: the same drafter and the same draft policy
(sampled drafts: ``sd``; greedy drafts: ``sd`` verifying the draft's argmax, which is ``threshold``
at acc = 1, single = 1; prompt lookup: lookup ``sd``). ``--grid baselines`` runs each one its
configurations need (``bench.grid``); ``compare``, ``plot`` and ``report`` add it to each family
(``bench.reports.compare.with_lossless``). Under greedy decoding every draft is the argmax, and a
deterministic drafter (prompt lookup) has one draft whatever the policy: both read ``policy=None``.
"""

from __future__ import annotations

from dataclasses import dataclass

LOSSLESS_METHOD = "sd"


@dataclass(frozen=True)
class Drafts:
    """What a configuration's drafts are: its draft policy ("sample", "greedy", or None where the
    policy changes nothing) and its drafter (a canonical spec; None for ``ar``)."""

    policy: str | None
    drafter: str | None

    @property
    def text(self) -> str:
        """How verdict lines name them: "sampled drafts", "greedy drafts", "lookup drafts"."""
        from bench.drafters import drafter_label

        source = drafter_label(self.drafter) if self.drafter else ""
        # No policy on a model's drafts: greedy decoding, where every draft is the argmax.
        how = {"sample": "sampled", "greedy": "greedy"}.get(self.policy or "", "" if source else "greedy")
        return " ".join(p for p in (how, source, "drafts") if p)


def lossless_drafts(drafts: Drafts) -> Drafts | None:
    """The drafts of the lossless point a configuration with ``drafts`` gets: ``sd`` on the same
    drafts (the same drafter, the same policy); None for a configuration that drafts nothing."""
    return drafts if drafts.drafter else None
