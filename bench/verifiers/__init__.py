"""Verifiers: the template and ``verify`` (base), the paper's six methods (paper), the serving
engines' lossy acceptance rules (engines), the training-free newcomers (newcomers: fuzzy SD,
mentored decoding), the learned judges (judges) and every frontier's top anchor (anchors: accept
every draft), all reachable by name through one registry, and the rules on token trees (tree:
``verify_tree``)."""

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
from bench.verifiers.judges import AutoJudge, Judge, SelfJudge
from bench.verifiers.tree import (
    TREE_RULES,
    TreeRound,
    TreeVerdict,
    check_tree_method,
    tree_methods,
    verify_tree,
    without_earlier_siblings,
)
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
    Judge,
    AutoJudge,
    SelfJudge,
    AcceptAll,
):
    register(_cls)

__all__ = [
    "AutoJudge",
    "Judge",
    "SelfJudge",
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
    "TREE_RULES",
    "TreeRound",
    "TreeVerdict",
    "Verdict",
    "Verifier",
    "make_verifier",
    "method_info",
    "mixture",
    "register",
    "verifier_class",
    "check_tree_method",
    "tree_methods",
    "verify",
    "verify_tree",
    "without_earlier_siblings",
]
