"""The speed benchmark's arithmetic and agreement checks (timings are reported, never asserted)."""

import pytest

from bench.speed import ideal_speedup, markdown, measure


def test_ideal_speedup_formula():
    assert ideal_speedup(0.0, 5, 0.1) == pytest.approx(1 / 1.5)
    assert ideal_speedup(1.0, 4, 0.0) == pytest.approx(5.0)
    alpha, n, c = 0.8, 5, 0.2
    assert ideal_speedup(alpha, n, c) == pytest.approx((1 - alpha**6) / ((1 - alpha) * 2.0))


def test_measure_agrees_with_transformers_on_the_tiny_pair(tiny_pair):
    prompts = [
        list(tiny_pair.tokenizer(t).input_ids) for t in ("Question: one two", "Article: the city council")
    ]
    result = measure(tiny_pair, prompts, [3], max_new=16, repeats=1, ensemble_weight=0.7, log=lambda m: None)
    assert result["ar_equals_hf"]
    row = result["rows"][0]
    assert row["sd_equals_hf"] and row["sd_equals_ar"] and row["ensemble_equals_hf"]
    assert 0 < row["alpha"] <= 1 and 0 < result["c"] and 0 < row["forward_share"] <= 1
    assert "| 3 |" in markdown(result, "diversed-bench speed")
