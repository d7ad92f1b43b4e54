"""EAGLE draft heads: ``heads`` (the published layouts, loading; bench.drafters.eagle drafts with
them) and their offline training (``train``: the stages of `train-draft`; ``ttt``: the unrolled
training-time test; ``shards``: the target's features as fp16 shards). The verifier heads are
bench.verifier_heads."""

from bench.eagle.heads import Eagle1Head, Eagle3Head, EagleHead, HeadConfig, load_eagle_head

__all__ = ["Eagle1Head", "Eagle3Head", "EagleHead", "HeadConfig", "load_eagle_head"]
