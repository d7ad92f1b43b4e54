"""Verifiers: the template and ``verify`` (base), the paper's six methods (paper), the serving
engines' lossy acceptance rules (engines), the training-free newcomers (newcomers: fuzzy SD,
mentored decoding) and every frontier's top anchor (anchors: accept every draft), all reachable by
name through one registry."""

from bench.verifiers.anchors import AcceptAll
from bench.verifiers.base import (
    CALIBRATED,
    VERIFIERS,
    Calibration,
    MethodInfo,
    MixtureVerifier,
    Round,
    Verdict,
    Verifier,
    make_verifier,
    method_info,
    register,
    verifier_class,
    verify,
)
from bench.verifiers.engines import RelaxedAcceptance, ThresholdAcceptance, TypicalAcceptance
from bench.verifiers.newcomers import FuzzySD, MentoredDecoding
from bench.verifiers.paper import (
    CASCADE_RULES,
    MIX_MODES,
    Autoregressive,
    Diversed,
    LossySD,
    SpecCascade,
    SpeculativeDecoding,
    StaticEnsemble,
    mixture,
)

for _cls in (
    Autoregressive,
    SpeculativeDecoding,
    LossySD,
    SpecCascade,
    StaticEnsemble,
    Diversed,
    TypicalAcceptance,
    ThresholdAcceptance,
    RelaxedAcceptance,
    FuzzySD,
    MentoredDecoding,
    AcceptAll,
):
    register(_cls)

__all__ = [
    "AcceptAll",
    "CASCADE_RULES",
    "MIX_MODES",
    "CALIBRATED",
    "VERIFIERS",
    "Calibration",
    "Autoregressive",
    "Diversed",
    "FuzzySD",
    "LossySD",
    "MentoredDecoding",
    "MethodInfo",
    "MixtureVerifier",
    "RelaxedAcceptance",
    "Round",
    "SpecCascade",
    "SpeculativeDecoding",
    "StaticEnsemble",
    "ThresholdAcceptance",
    "TypicalAcceptance",
    "Verdict",
    "Verifier",
    "make_verifier",
    "method_info",
    "mixture",
    "register",
    "verifier_class",
    "verify",
]
