"""The anchors of a configuration's drafts: the two points every frontier holds, one rule.

A per-request random mix of any two settings is attainable (send a share of the requests to one,
the rest to the other), and two settings are open to every verifier on the same drafts: lossless
speculative decoding (``sd``: it keeps the target's law whatever drafted; the bottom of the
acceptance range) and accepting every draft (``accept_all``, bench/verifiers/anchors.py:
acceptance 1, its quality measured like any setting's; the top). So every family's frontier, a
candidate's included, holds both anchors of its drafts and spans the same range, [SD's acceptance,
1]; without them a comparison measures sweep ranges, not methods: a frontier that happens to reach
lossless SD or the far end (a calibrated ensemble's w = 1 and w = 0.01) beats a fixed sweep that
stops short of either (share 0.1 ... 0.9), on a convex trade-off (docs/compare.md).

The anchors run on the same drafts: the same drafter and the same draft policy (sampled drafts:
``sd`` and ``accept_all``; greedy drafts: both verifying the draft's argmax; prompt lookup: both on
lookup drafts). ``--grid baselines`` runs each one its configurations need (``anchors: true``,
``bench.grid``); ``compare``, ``plot`` and ``report`` add them to each family
(``bench.reports.compare.with_anchors``). Under greedy decoding every draft is the argmax, and a
deterministic drafter (prompt lookup) has one draft whatever the policy: both read ``policy=None``.
"""

from __future__ import annotations

from dataclasses import dataclass

LOSSLESS_METHOD = "sd"  # the bottom anchor
ACCEPT_ALL_METHOD = "accept_all"  # the top anchor
ANCHORS = (LOSSLESS_METHOD, ACCEPT_ALL_METHOD)


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


def anchors(drafts: Drafts) -> list[tuple[str, Drafts]]:
    """(method, drafts) of each anchor a configuration with ``drafts`` gets: ``sd`` and
    ``accept_all`` on the same drafts (the same drafter, the same policy); none for a
    configuration that drafts nothing."""
    return [(method, drafts) for method in ANCHORS] if drafts.drafter else []
