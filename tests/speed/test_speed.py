"""The speed benchmark's arithmetic and agreement checks (timings are reported, never asserted)."""

import pytest

from bench.speed.report import steps_markdown
from bench.speed.steps import ideal_speedup, measure


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
    text = steps_markdown(result, "diversed-bench speed")
    assert "| 3 |" in text
    # The floor divides the weights by the read bandwidth, each measured before and after.
    reads = result["read_bandwidth_gb_s"]
    assert len(reads) == 2 and len(result["bandwidth_gb_s"]) == 2 and min(reads) > 0
    weights = sum(p.numel() * p.element_size() for p in tiny_pair.target.parameters())
    assert result["floor_ms"] == pytest.approx(weights / (sum(reads) / 2 * 1e9) * 1e3)
    assert f"read {reads[0]:.1f}, {reads[1]:.1f} GB/s" in text


def test_speed_and_the_runner_time_with_one_clock(tiny_pair, monkeypatch):
    """`speed`'s step timings and the runner's decodes read the same clock (bench.clock): with
    its readings replaced by a counter, both report whole counts of readings."""
    import torch

    from bench import clock
    from bench.build import build_decoder
    from bench.speed.runs import median_seconds, run_harness

    readings = iter(range(10_000))
    monkeypatch.setattr(clock.Clock, "read", lambda self: float(next(readings)))
    assert median_seconds(lambda: None, torch.device("cpu"), 3) == 1.0
    gen = build_decoder(tiny_pair, "ar", {}, draft_len=1).generate([1, 2, 3], 4)
    assert (gen.stats.prefill_time_s, gen.stats.wall_time_s) == (1.0, 2.0)
    assert run_harness(tiny_pair, "sd", [[1, 2, 3], [4, 5]], 2, 4).seconds == 4.0
