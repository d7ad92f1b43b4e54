"""`compare`: the frontier, the paired bootstrap (against a known answer), the demo's verdicts, the
baseline grid, and token traces (which must not change a decoded token)."""

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest

from bench.errors import BenchError
from bench.reports.compare import cells, compare, family_of, judge, render
from bench.reports.frontier import acceptance_at, hull_points, quality_at
from bench.store import load_results, load_traces


def test_frontier_is_the_upper_pareto_hull_read_both_ways():
    # (0.2, 0.9), (0.5, 0.8), (0.8, 0.2) and a dominated (0.5, 0.4): the hull runs through the first three.
    a = np.array([[0.2, 0.5, 0.8, 0.5]])
    q = np.array([[0.9, 0.8, 0.2, 0.4]])
    got = quality_at(a, q, np.array([0.35]))
    assert got == pytest.approx([0.85])
    assert quality_at(a, q, np.array([0.65])) == pytest.approx([0.5])
    assert math.isnan(quality_at(a, q, np.array([0.9]))[0])  # beyond the sweep
    assert acceptance_at(a, q, np.array([0.5])) == pytest.approx([0.65])
    # A dominated point never lowers the frontier, and a point above the chord lifts it.
    assert np.allclose(hull_points(a[0], q[0]), [(0.2, 0.9), (0.5, 0.8), (0.8, 0.2)])
    # Free disposal: a point with more acceptance and more quality sets the frontier to its left.
    assert quality_at(np.array([[0.2, 0.6]]), np.array([[0.3, 0.7]]), np.array([0.4])) == pytest.approx([0.7])


def _draw(rng, n: int, delta: float) -> tuple[dict, list[dict]]:
    """Synthetic paired results: a two-point family on the line q = 0.9 - 0.5 a and a candidate at
    a = 0.6 whose true quality is the line's plus ``delta``. Examples share their difficulty (u)
    and their acceptance noise (e) across methods, as decoding the same examples does."""
    u, e = rng.random(n), rng.uniform(-0.1, 0.1, n)

    def method(a: float, q: float) -> dict:
        drafted = np.full(n, 20.0)
        return {
            "accepted": rng.binomial(20, np.clip(a + e, 0, 1)).astype(float),
            "drafted": drafted,
            "quality": (u < q).astype(float),
        }

    line = lambda a: 0.9 - 0.5 * a  # noqa: E731
    return method(0.6, line(0.6) + delta), [method(0.3, line(0.3)), method(0.9, line(0.9))]


def test_paired_bootstrap_interval_covers_a_known_difference_at_its_nominal_rate():
    rng = np.random.default_rng(7)
    delta, draws = 0.1, 200
    covered = 0
    for i in range(draws):
        cand, family = _draw(rng, 150, delta)
        lo, hi = judge(cand, family, seed=i)["quality_diff_ci"]
        covered += lo <= delta <= hi
    # 95% nominal; three binomial standard deviations either side over ``draws`` draws.
    band = 3 * math.sqrt(0.95 * 0.05 / draws)
    assert 0.95 - band <= covered / draws <= min(1.0, 0.95 + band), covered / draws


def test_a_candidate_on_the_frontier_is_indistinguishable_at_the_nominal_rate():
    # Delta 0: the candidate lies on the family's frontier, so "above" or "below" is a false call.
    rng = np.random.default_rng(11)
    draws = 200
    calls = [judge(*_draw(rng, 150, 0.0), seed=i)["verdict"] for i in range(draws)]
    band = 3 * math.sqrt(0.95 * 0.05 / draws)
    assert calls.count("indistinguishable") / draws >= 0.95 - band, calls


def _fixed(accepted: list[int], quality: float, n: int = 200) -> dict:
    """n examples drafting 10 tokens each, accepting ``accepted`` in turn; a share ``quality`` correct."""
    return {
        "accepted": np.resize(np.array(accepted, float), n),
        "drafted": np.full(n, 10.0),
        "quality": (np.arange(n) < quality * n).astype(float),
    }


def test_resamples_beyond_the_sweep_withhold_the_verdict_they_could_flip():
    # The family spans acceptance [0.3, 0.6] exactly (no spread); quality 0.8 at 0.3, 0.6 at 0.6.
    family = [_fixed([3], 0.8), _fixed([6], 0.6)]
    # At the top end, half the resamples accept more than the family can: there its frontier is
    # unknown (nothing, or lower), so a clearly lower quality still cannot be called "below".
    top = judge(_fixed([5, 7], 0.3), family)
    assert top["acceptance"] == pytest.approx(0.6) and top["quality_diff_ci"][1] < 0
    assert top["verdict"] == "cannot judge" and "above the sweep's acceptance range" in top["reason"]
    assert 0.3 < top["beyond_sweep"] < 0.7
    # At the low end, a setting just below the sweep could reach more quality: no "above".
    low = judge(_fixed([2, 4], 0.95), family)
    assert low["quality_diff_ci"][0] > 0
    assert low["verdict"] == "cannot judge" and "below the sweep's acceptance range" in low["reason"]
    # Inside the range the same qualities get their verdicts.
    assert judge(_fixed([4, 5], 0.3), family)["verdict"] == "below"
    assert judge(_fixed([4, 5], 0.95), family)["verdict"] == "above"


def test_families_are_the_labels_without_their_swept_values():
    def fam(method: str, label: str) -> str:
        return family_of(pd.Series({"method": method, "label": label}))

    assert fam("cascade", "cascade (opt, a=0.5)") == "cascade (opt)"
    assert fam("ensemble", "ensemble (w=0.2, greedy draft)") == "ensemble (greedy draft)"
    assert fam("ensemble", "ensemble (w=0.2, mix=logit)") == "ensemble (mix=logit)"
    assert fam("typical", "typical (eps=0.09, alpha=0.3)") == "typical"
    assert (
        fam("diversed", "diversed (head=bench:reference/heads/arith-ref)")
        == fam("diversed", "diversed (head=bench:reference/heads/arith-ref)")
        != fam("diversed", "diversed (head=init)")
    )
    assert fam("sd", "sd") == "sd"


def test_demo_diversed_is_above_the_static_ensemble_and_an_ensemble_point_is_not(demo_results):
    rows = load_results(demo_results)
    result = compare(rows, ["diversed", "ensemble"])
    by = {
        (c.candidate.split(" ")[0] if c.candidate.startswith("diversed") else c.candidate): c for c in result
    }
    diversed = by["diversed"]
    assert diversed.family == "ensemble" and diversed.family_points == 4
    assert diversed.verdict == "above", diversed
    assert diversed.quality_diff_ci[0] > 0
    # Each sweep point on its own family's hull is indistinguishable from it; none is above it.
    ensemble = [c for c in result if c.candidate.startswith("ensemble") and c.family == "ensemble"]
    assert len(ensemble) == 4 and not any(c.verdict == "above" for c in ensemble)
    on_hull = [c for c in ensemble if c.quality_diff == 0]
    assert on_hull and all(c.verdict == "indistinguishable" for c in on_hull)
    text = render(result, "markdown")
    assert "| above |" in text and "--grid baselines" in text
    assert json.loads(render(result, "json"))[0]["verdict"] in {
        "above",
        "indistinguishable",
        "below",
        "cannot judge",
    }
    assert render(result, "csv").splitlines()[0].startswith("panel,task,candidate,family")
    assert "Δ" not in render(result, "latex") and r"$\Delta$ quality" in render(result, "latex")
    # An untrusted timing gives no speedup, as in the table.
    shaky = cells(dataclasses.replace(diversed, speedup=1.5, time_spread=3.0))
    assert shaky["speedup"] == "not shown: times vary 3.0x"
    assert cells(dataclasses.replace(diversed, speedup=1.5, time_spread=1.2))["speedup"] == "1.500"


def test_compare_reasons_and_bad_candidates(demo_results):
    rows = load_results(demo_results)
    few = rows[rows["example_id"].isin(sorted(rows["example_id"].unique())[:5])]
    (c,) = compare(few, ["diversed"])  # DIVERSED run once is a candidate, never a family
    assert c.verdict == "cannot judge" and "too few examples" in c.reason
    assert 0 < c.acceptance < 1 and 0 <= c.quality <= 1  # the candidate's own point is still given
    one = rows[(rows["label"] == "ensemble (w=0.4)") | (rows["method"] == "diversed")]
    (c,) = compare(one, ["diversed"])
    assert c.verdict == "cannot judge" and "--target-weight" in c.reason
    two = rows[rows["label"].isin(["ensemble (w=0.6)", "ensemble (w=0.8)"]) | (rows["method"] == "diversed")]
    (c,) = compare(two, ["diversed"])
    assert c.verdict == "cannot judge" and "outside the sweep's range" in c.reason
    with pytest.raises(BenchError, match="no such method or label"):
        compare(rows, ["nosuch"])


def test_baselines_grid_takes_any_candidate_task_and_pair():
    from bench.grid import configs_from_grid

    configs, limit = configs_from_grid(
        "baselines",
        device="cpu",
        dtype=None,
        limit=None,
        tasks=["arith"],
        pairs=["ref"],
        candidates=["example_verifier:ConfidenceEnsemble"],
    )
    methods = [c.method for c in configs]
    assert methods.count("ensemble") == 5 and methods.count("lossy") == 4 and methods.count("cascade") == 5
    assert methods[-1].endswith("ConfidenceEnsemble") and {c.task for c in configs} == {"arith"}
    with pytest.raises(BenchError, match="give --pair"):
        configs_from_grid("baselines", device="cpu", dtype=None, limit=None, tasks=["arith"])
    with pytest.raises(BenchError, match="not with --method"):
        configs_from_grid("demo", device="cpu", dtype=None, limit=None, candidates=["sd"])


def test_traces_match_the_rows_and_tracing_changes_no_token(demo_results):
    from bench.decoding import SpeculativeDecoder
    from bench.distributions import Sampling
    from bench.pairs import load_pair
    from bench.tasks import Task, resolve_task
    from bench.verifiers import make_verifier

    rows, traces = load_results(demo_results), load_traces(demo_results)
    assert set(traces["config_id"]) == set(rows["config_id"])
    for (cid, eid), t in traces.groupby(["config_id", "example_id"]):
        row = rows[(rows["config_id"] == cid) & (rows["example_id"] == eid)].iloc[0]
        assert (t["fate"] == "accepted").sum() == row["accepted_tokens"]
        assert len(t) == row["new_tokens"] and list(t["position"]) == list(range(len(t)))
    div = traces[traces["config_id"].str.contains("diversed")]
    assert div.loc[div["fate"] != "bonus", "weight"].between(0, 1).all()
    assert div.loc[div["fate"] == "bonus", "q"].isna().all()
    resampled = traces[traces["fate"] == "resampled"]
    assert len(resampled) and (resampled["rejected_token_id"] >= 0).all()
    assert traces["p"].between(0, 1).all()
    # Traced and untraced decoding give the same tokens (sampled ensemble, greedy sd).
    pair = load_pair("ref", device="cpu")
    prompts = [
        list(pair.tokenizer(e.prompt).input_ids) for e in Task(resolve_task("arith"), "hub").examples(4, 0)
    ]
    for method, params, temperature in [("ensemble", {"target_weight": 0.4}, 1.0), ("sd", {}, 0.0)]:
        outs = []
        for trace in (False, True):
            decoder = SpeculativeDecoder(
                pair.target,
                pair.draft,
                make_verifier(method, **params),
                sampling=Sampling(temperature),
                eos_token_ids=pair.eos_token_ids,
                trace=trace,
            )
            outs.append(decoder.generate_batch(prompts, 32, [1, 2, 3, 4]))
        assert [g.token_ids for g in outs[0]] == [g.token_ids for g in outs[1]]
        assert all(g.trace is None for g in outs[0])
        assert all([t[2] for t in g.trace] == g.token_ids for g in outs[1])
