"""EAGLE draft heads (``heads``: the published layouts, loading) and their drafter (bench.drafters.eagle)."""

from bench.eagle.heads import Eagle1Head, Eagle3Head, EagleHead, HeadConfig, load_eagle_head

__all__ = ["Eagle1Head", "Eagle3Head", "EagleHead", "HeadConfig", "load_eagle_head"]
