"""`compare`: the frontier, the paired bootstrap (against a known answer), frontier against frontier
(calibrated on simulated sweeps), the demo's verdicts (whatever the labels say), the baseline grid,
and token traces (which must not change a decoded token)."""

import dataclasses
import functools
import io
import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest

from bench.drafters import canonical_drafter
from bench.errors import BenchError
from bench.lossless import Drafts
from bench.reports.compare import compare, sweep_hint
from bench.reports.compare_format import cells, frame, render, verdict_text
from bench.reports.verdicts import point_verdict as verdict_at
from bench.reports.verdicts import frontier_verdict as frontiers_at
from bench.reports.frontier import acceptance_at, gaps, hull_points, quality_at
from bench.reports.margins import EQUIVALENT, INCONCLUSIVE, Margins, detectable, settle
from bench.reports.summary import summarise
from bench.store import load_results, load_traces
from bench.verifiers.base import MethodInfo
from bench.verifiers.paper import StaticEnsemble

MARGIN = 0.05  # the simulations' equivalence margin: five points of a share
point_verdict = functools.partial(verdict_at, margin=MARGIN)
frontier_verdict = functools.partial(frontiers_at, margin=MARGIN)
NOT_DIFFERENT = (EQUIVALENT, INCONCLUSIVE)  # neither above nor below: what "holds 0" means now


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
        lo, hi = point_verdict(cand, family, seed=i)["quality_diff_ci"]
        covered += lo <= delta <= hi
    # 95% nominal; three binomial standard deviations either side over ``draws`` draws.
    band = 3 * math.sqrt(0.95 * 0.05 / draws)
    assert 0.95 - band <= covered / draws <= min(1.0, 0.95 + band), covered / draws


def test_a_candidate_on_the_frontier_is_not_called_above_or_below_beyond_the_nominal_rate():
    # Delta 0: the candidate lies on the family's frontier, so "above" or "below" is a false call.
    rng = np.random.default_rng(11)
    draws = 200
    calls = [point_verdict(*_draw(rng, 150, 0.0), seed=i)["verdict"] for i in range(draws)]
    band = 3 * math.sqrt(0.95 * 0.05 / draws)
    assert sum(calls.count(v) for v in NOT_DIFFERENT) / draws >= 0.95 - band, calls


@pytest.mark.parametrize("delta", [MARGIN, -MARGIN])
def test_a_true_difference_at_the_margin_is_called_equivalent_at_most_the_nominal_rate(delta):
    """Equivalence is two one-sided tests at 2.5% each: with the true difference exactly at the
    margin, "equivalent" is a false call, and its rate must stay within 2.5% plus three binomial
    standard deviations (Monte-Carlo slack) over the draws."""
    rng = np.random.default_rng(13 if delta > 0 else 17)
    draws, nominal = 300, 0.025
    calls = [point_verdict(*_draw(rng, 150, delta), seed=i)["verdict"] for i in range(draws)]
    assert calls.count(EQUIVALENT) / draws <= nominal + 3 * math.sqrt(nominal * (1 - nominal) / draws), {
        v: calls.count(v) for v in set(calls)
    }


def test_no_difference_on_enough_examples_is_called_equivalent_most_of_the_time():
    """The other side of the test: with no true difference and 600 paired examples (the interval's
    half-width about half the margin), "equivalent" is the usual call; on 40 examples the same
    truth is "inconclusive", with a detectable difference larger than the margin."""
    rng = np.random.default_rng(19)
    draws = 100
    calls = [point_verdict(*_draw(rng, 600, 0.0), seed=i)["verdict"] for i in range(draws)]
    assert calls.count(EQUIVALENT) / draws >= 0.8, {v: calls.count(v) for v in set(calls)}
    few = [point_verdict(*_draw(rng, 40, 0.0), seed=i) for i in range(20)]
    inconclusive = [r for r in few if r["verdict"] == INCONCLUSIVE]
    assert len(inconclusive) >= 15 and all(r["detectable"] > MARGIN for r in inconclusive)


def test_the_rule_and_its_words_name_the_margin():
    assert settle((0.01, 0.2), 0.05) == "above" and settle((-0.2, -0.01), 0.05) == "below"
    assert settle((-0.04, 0.03), 0.05) == EQUIVALENT
    assert settle((-0.04, 0.06), 0.05) == INCONCLUSIVE  # holds 0, reaches past the margin
    assert settle((0.01, 0.03), 0.05) == EQUIVALENT  # told from 0, but smaller than the margin: none
    assert detectable((-0.1, 0.1)) == pytest.approx((1.959964 + 0.841621) * 0.1 / 1.959964)
    margins = Margins.parse(["rouge2=1", "fidelity=0.05"])
    assert margins.of("rouge2") == 1 and margins.of("exact_flexible") == 0.02 and margins.of("fidelity") == 0.05
    assert margins.named("rouge2") == "rouge2, given" and margins.named("pass@1") == "pass@1, default"
    for bad in ("rouge2", "rouge2=-1", "=0.1", "rouge2=x"):
        with pytest.raises(BenchError, match="--margin"):
            Margins.parse([bad])
    with pytest.raises(BenchError, match="--margin reference_score=VALUE"):
        Margins().of("reference_score")  # Spec-Bench's pooled scores: no default, the flag named


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
    top = point_verdict(_fixed([5, 7], 0.3), family)
    assert top["acceptance"] == pytest.approx(0.6) and top["quality_diff_ci"][1] < 0
    assert top["verdict"] == "cannot judge" and "above the sweep's acceptance range" in top["reason"]
    assert 0.3 < top["beyond_sweep"] < 0.7
    # At the low end, a setting just below the sweep could reach more quality: no "above".
    low = point_verdict(_fixed([2, 4], 0.95), family)
    assert low["quality_diff_ci"][0] > 0
    assert low["verdict"] == "cannot judge" and "below the sweep's acceptance range" in low["reason"]
    # Inside the range the same qualities get their verdicts.
    assert point_verdict(_fixed([4, 5], 0.3), family)["verdict"] == "below"
    assert point_verdict(_fixed([4, 5], 0.95), family)["verdict"] == "above"


def test_two_frontiers_are_compared_over_the_range_they_share():
    # Candidate: (0.2, 0.9) to (0.8, 0.6), the line 1 - a/2. Baseline: (0.4, 0.75) to (0.7, 0.55).
    # Over the shared [0.4, 0.7] the gap rises linearly from 0.05 to 0.10: mean 0.075.
    cand_a, cand_q = np.array([[0.2, 0.8]]), np.array([[0.9, 0.6]])
    low, high, mean, lead, deficit = gaps(cand_a, cand_q, np.array([[0.4, 0.7]]), np.array([[0.75, 0.55]]))
    assert (low[0], high[0]) == (0.4, 0.7)
    assert (
        mean == pytest.approx([0.075]) and lead == pytest.approx([0.10]) and deficit == pytest.approx([-0.05])
    )
    # A baseline starting higher crosses the candidate: it leads by 0.05 at 0.4, trails by 0.10 at 0.7.
    _, _, mean, lead, deficit = gaps(cand_a, cand_q, np.array([[0.4, 0.7]]), np.array([[0.85, 0.55]]))
    assert (
        mean == pytest.approx([0.025]) and lead == pytest.approx([0.10]) and deficit == pytest.approx([0.05])
    )
    # A kink inside the range counts: a middle baseline point (0.55, 0.8) is 0.075 above the line.
    _, _, _, _, deficit = gaps(cand_a, cand_q, np.array([[0.4, 0.55, 0.7]]), np.array([[0.5, 0.8, 0.5]]))
    assert deficit == pytest.approx([0.075])
    # No shared range: nothing to compare.
    _, _, mean, lead, _ = gaps(cand_a, cand_q, np.array([[0.85, 0.95]]), np.array([[0.5, 0.4]]))
    assert np.isnan(mean[0]) and np.isnan(lead[0])
    # Several places per replicate read the same frontier as one place each.
    a, q, at = np.array([[0.2, 0.5, 0.8]]), np.array([[0.9, 0.8, 0.2]]), np.array([[0.35, 0.65]])
    assert quality_at(a, q, at) == pytest.approx(np.array([[0.85, 0.5]]))


def _family(accepts: list[int], qualities: list[float], n: int = 400) -> list[dict]:
    return [_fixed([k], quality, n) for k, quality in zip(accepts, qualities)]


def test_frontier_verdicts_follow_the_rule():
    # Acceptance 0.3 and 0.6 for every family; qualities decide.
    base = _family([3, 6], [0.7, 0.7])
    assert frontier_verdict(_family([3, 6], [0.9, 0.8]), base)["verdict"] == "dominates"
    assert frontier_verdict(base, _family([3, 6], [0.9, 0.8]))["verdict"] == "dominated"
    crossing = frontier_verdict(_family([3, 6], [0.9, 0.5]), base)
    assert crossing["verdict"] == "crosses"
    assert crossing["largest_lead_ci"][0] > 0 and crossing["largest_deficit_ci"][0] > 0
    assert frontier_verdict(_family([3, 6], [0.7, 0.7]), base)["verdict"] == EQUIVALENT  # the same frontier
    apart = frontier_verdict(_family([7, 9], [0.5, 0.4]), base)
    assert apart["verdict"] == "cannot judge" and "no shared acceptance range" in apart["reason"]


SETTINGS = np.linspace(0.55, 0.95, 8)  # a sweep's acceptance rates


def _sweep(rng, n: int, shift: float) -> tuple[list[dict], list[dict]]:
    """A simulated sweep of eight settings on the smooth frontier q = 0.95 - 1.2 (a - 0.5)^2, split in
    two: the even-indexed settings (the candidate, its quality raised by ``shift``) and the odd ones.
    Examples share an acceptance noise, and 70% of each method's correct/wrong draws share the
    example's difficulty, the rest are the method's own: paired, but not perfectly."""
    u, e = rng.random(n), rng.uniform(-0.1, 0.1, n)
    out = []
    for k, a in enumerate(SETTINGS):
        draw = np.where(rng.random(n) < 0.7, u, rng.random(n))
        quality = 0.95 - 1.2 * (a - 0.5) ** 2 + (shift if k % 2 == 0 else 0.0)
        out.append(
            {
                "accepted": rng.binomial(20, np.clip(a + e, 0, 1)).astype(float),
                "drafted": np.full(n, 20.0),
                "quality": (draw < quality).astype(float),
            }
        )
    return out[0::2], out[1::2]


def test_a_sweep_split_in_two_is_not_called_different_from_itself_beyond_about_the_nominal_rate():
    rng = np.random.default_rng(5)
    draws = 200
    calls = [frontier_verdict(*_sweep(rng, 150, 0.0), seed=i)["verdict"] for i in range(draws)]
    false = (calls.count("dominates") + calls.count("dominated")) / draws
    assert false <= 0.08, {v: calls.count(v) for v in set(calls)}
    assert sum(calls.count(v) for v in NOT_DIFFERENT) / draws >= 0.85


def test_a_margin_tighter_than_the_interval_is_never_called_equivalent():
    # Level sweeps on 150 examples: their mean gap's interval is wider than a 0.1-point margin.
    rng = np.random.default_rng(23)
    calls = [frontiers_at(*_sweep(rng, 150, 0.0), margin=0.001, seed=i) for i in range(20)]
    assert not any(c["verdict"] == EQUIVALENT for c in calls)
    level = [c for c in calls if c["verdict"] == INCONCLUSIVE]
    assert level and all(c["mean_gap_ci"][1] - c["mean_gap_ci"][0] > 0.002 for c in level)


def _calibrated_sweep(rng, n: int, shift: float) -> tuple[list[dict], list[dict]]:
    """Two families on the frontier of ``_sweep``, each swept by calibration (bench.calibration):
    five acceptance levels from 0.55 to 0.95 searched along a path t in [0, 1] (acceptance
    0.55 + 0.4 t) on 16 calibration examples of its own (their noise fixed, so each search sees one
    monotone-ish curve), then run on the n judged examples shared by both. The candidate's quality
    is raised by ``shift``."""
    from bench.calibration import calibrate_path
    from bench.verifiers import Calibration

    path = Calibration("t", 0.0, 1.0, rising=True, lossless=0.0)
    u, e = rng.random(n), rng.uniform(-0.1, 0.1, n)

    def family(up: float) -> list[dict]:
        calib_e, seed = rng.uniform(-0.1, 0.1, 16), int(rng.integers(1 << 30))

        def measure(t: float) -> float:
            draws = np.random.default_rng(seed).binomial(20, np.clip(0.55 + 0.4 * t + calib_e, 0, 1))
            return draws.mean() / 20

        levels, _ = calibrate_path(path, measure, measure(0.0), 5)
        out = []
        for level in (lv for lv in levels if lv.value is not None):
            a = 0.55 + 0.4 * level.value
            draw = np.where(rng.random(n) < 0.7, u, rng.random(n))
            out.append(
                {
                    "accepted": rng.binomial(20, np.clip(a + e, 0, 1)).astype(float),
                    "drafted": np.full(n, 20.0),
                    "quality": (draw < 0.95 - 1.2 * (a - 0.5) ** 2 + up).astype(float),
                }
            )
        return out

    return family(shift), family(0.0)


@pytest.mark.slow
def test_calibrated_sweeps_keep_the_frontier_verdicts_false_call_rate_and_power():
    rng = np.random.default_rng(8)
    draws = 200
    calls = [frontier_verdict(*_calibrated_sweep(rng, 150, 0.0), seed=i)["verdict"] for i in range(draws)]
    false = (calls.count("dominates") + calls.count("dominated")) / draws
    assert false <= 0.08, {v: calls.count(v) for v in set(calls)}
    assert sum(calls.count(v) for v in NOT_DIFFERENT) / draws >= 0.85
    up = [frontier_verdict(*_calibrated_sweep(rng, 150, 0.1), seed=i)["verdict"] for i in range(60)]
    assert up.count("dominates") / len(up) >= 0.95, {v: up.count(v) for v in set(up)}


def test_a_frontier_shifted_up_is_called_dominating_nearly_always_and_the_mirror_dominated():
    rng = np.random.default_rng(6)
    up = [frontier_verdict(*_sweep(rng, 150, 0.1), seed=i) for i in range(60)]
    assert sum(r["verdict"] == "dominates" for r in up) / len(up) >= 0.95
    # Swapping the two families mirrors everything: the gap's sign, lead and deficit, the verdict.
    cand, base = _sweep(rng, 150, -0.1)
    there, back = frontier_verdict(cand, base), frontier_verdict(base, cand)
    assert there["verdict"] == "dominated" and back["verdict"] == "dominates"
    assert there["mean_gap"] == pytest.approx(-back["mean_gap"])
    assert there["largest_lead"] == pytest.approx(back["largest_deficit"])


def _against(frontiers: list, family: str) -> list:
    """The frontier verdicts against one baseline family (DIVERSED's is one too in the demo)."""
    return [f for f in frontiers if f.family == family]


def _labels(rows: pd.DataFrame, method: str) -> set[str]:
    return set(rows.loc[rows["method"] == method, "label"])


def test_demo_diversed_is_above_the_static_ensemble_and_an_ensemble_point_is_not(demo_results):
    rows = load_results(demo_results)
    result = compare(rows, ["diversed", "ensemble"])
    # DIVERSED is a baseline family too, but a candidate run once is never judged against itself.
    (diversed,) = [c for c in result.points if c.candidate in _labels(rows, "diversed")]
    assert diversed.family == "ensemble" and diversed.family_points == 4
    assert diversed.verdict == "above", diversed
    assert diversed.quality_diff_ci[0] > 0
    # Each sweep point on its own family's hull is not below it (equivalent or inconclusive on 50
    # examples); none is above it.
    ensemble = [
        c for c in result.points if c.candidate in _labels(rows, "ensemble") and c.family == "ensemble"
    ]
    assert len(ensemble) == 4 and not any(c.verdict == "above" for c in ensemble)
    on_hull = [c for c in ensemble if c.quality_diff == 0]
    assert on_hull and all(c.verdict in NOT_DIFFERENT for c in on_hull)
    assert all(c.metric == "exact_flexible, default" and c.margin == 0.02 for c in ensemble)
    # The ensemble sweep is a candidate family too, never judged against itself: its frontier goes
    # against DIVERSED's (a baseline family, one point), and DIVERSED, run at one setting, gets
    # point verdicts only.
    assert [(f.candidate, f.family) for f in result.frontiers] == [("ensemble", diversed.candidate_family)]
    text = render(result, "markdown")
    assert "| above |" in text and "--grid baselines" in text
    assert json.loads(render(result, "json"))["points"][0]["verdict"] in {
        "above",
        EQUIVALENT,
        INCONCLUSIVE,
        "below",
        "cannot judge",
    }
    assert render(result, "csv").splitlines()[0].startswith("comparison,panel,task,candidate,family")
    assert "Δ" not in render(result, "latex") and r"$\Delta$ quality" in render(result, "latex")
    # An untrusted timing gives no speedup, as in the table.
    shaky = cells(dataclasses.replace(diversed, speedup=1.5, time_spread=3.0))
    assert shaky["speedup"] == "not shown: repeats disagree 3.00x"
    assert cells(dataclasses.replace(diversed, speedup=1.5, time_spread=1.2))["speedup"] == "1.500"


def _split(rows: pd.DataFrame, weights: tuple[float, ...]) -> pd.DataFrame:
    """The demo with the ensemble's settings at ``weights`` made a family of their own,
    "ensemble-half" (a copy of the ensemble's method_info under another name): half a sweep."""
    rows = rows.copy()
    pick = (rows["method"] == "ensemble") & rows["params"].map(
        lambda p: json.loads(p).get("target_weight") in weights
    )
    info = json.loads(rows.loc[pick, "method_info"].iloc[0])
    rows.loc[pick, "method_info"] = json.dumps({**info, "name": "ensemble-half"})
    rows.loc[pick, "method"] = "ensemble-half"
    return rows


def test_the_demo_ensemble_split_in_two_is_not_told_apart_from_itself(demo_results):
    rows = _split(load_results(demo_results), (0.2, 0.6))
    result = compare(rows, ["ensemble-half", "diversed"])
    # ensemble-half (w=0.2, 0.6) against ensemble (w=0.4, 0.8), and against DIVERSED's single point
    (f,) = _against(result.frontiers, "ensemble")
    assert (f.candidate, f.family, f.candidate_points, f.family_points) == ("ensemble-half", "ensemble", 2, 2)
    assert f.mean_gap_ci[0] < 0 < f.mean_gap_ci[1]
    assert f.verdict == settle(f.mean_gap_ci, f.margin) and f.verdict in NOT_DIFFERENT, f
    assert f"±{f.margin * 100:.1f}% (exact_flexible, default)" in verdict_text(f)
    lo, hi = f.shared_acceptance
    assert lo < hi and f.largest_lead >= f.mean_gap >= -f.largest_deficit
    # The other way round, the same comparison mirrored.
    (back,) = _against(compare(rows, ["ensemble"]).frontiers, "ensemble-half")
    assert back.family == "ensemble-half" and back.verdict == f.verdict
    assert back.mean_gap == pytest.approx(-f.mean_gap) and back.largest_lead == pytest.approx(
        f.largest_deficit
    )
    # Both tables in every format.
    assert "Frontier against frontier:" in render(result, "markdown")
    assert f"| {verdict_text(f)} |" in render(result, "markdown").split("Frontier against frontier:")[1]
    assert set(pd.read_csv(io.StringIO(render(result, "csv")))["comparison"]) == {"point", "frontier"}
    assert json.loads(render(result, "json"))["frontiers"][0]["mean_gap_ci_low"] == f.mean_gap_ci[0]
    assert "% frontier against frontier" in render(result, "latex")


def test_verdicts_do_not_depend_on_labels_and_read_schema_3_rows(demo_results, tmp_path):
    # Every configuration renamed to a random string, in the parquet files themselves.
    renamed = tmp_path / "renamed"
    shutil.copytree(demo_results, renamed)
    rng = np.random.default_rng(0)
    for path in renamed.glob("*.parquet"):
        part = pd.read_parquet(path)
        names = {cid: "".join(rng.choice(list("xyz() =,"), 12)) for cid in part["config_id"].unique()}
        part.assign(label=part["config_id"].map(names)).to_parquet(path)
    rows = _split(load_results(demo_results), (0.2, 0.6))
    other = _split(load_results(renamed), (0.2, 0.6))
    assert not set(other["label"]) & set(rows["label"])
    before, after = (
        compare(rows, ["diversed", "ensemble-half"]),
        compare(other, ["diversed", "ensemble-half"]),
    )
    # DIVERSED against the two ensemble families, ensemble-half's two points against them and DIVERSED;
    # ensemble-half's frontier against ensemble's and DIVERSED's.
    assert len(before.points) == 8 and len(before.frontiers) == 2
    points = [frame(v.points).drop(columns="candidate") for v in (before, after)]
    pd.testing.assert_frame_equal(*points)
    pd.testing.assert_frame_equal(frame(before.frontiers), frame(after.frontiers))
    # Rows of schema 3 (no method_info, no verifier, only the parameters given) read alike.
    rows = load_results(demo_results)
    given = rows["params"].map(lambda p: json.dumps({k: v for k, v in json.loads(p).items() if k != "mix"}))
    old = rows.drop(columns=["method_info", "verifier"]).assign(schema=3, params=given)
    pd.testing.assert_frame_equal(
        frame(compare(old, ["diversed", "ensemble"]).points),
        frame(compare(rows, ["diversed", "ensemble"]).points),
    )


def test_compare_reasons_and_bad_candidates(demo_results):
    rows = load_results(demo_results)
    few = rows[rows["example_id"].isin(sorted(rows["example_id"].unique())[:5])]
    (c,) = compare(few, ["diversed"]).points  # DIVERSED run once is a candidate, never its own family
    assert c.verdict == "cannot judge" and "too few examples" in c.reason
    assert 0 < c.acceptance < 1 and 0 <= c.quality <= 1  # the candidate's own point is still given
    weight = rows["params"].map(lambda p: json.loads(p).get("target_weight"))
    one = rows[(weight == 0.4) | (rows["method"] == "diversed")]
    (c,) = compare(one, ["diversed"]).points
    assert c.verdict == "cannot judge" and "--param target_weight=0.1,0.3,0.5,0.7,0.9" in c.reason
    assert "--grid baselines calibrates it by acceptance" in c.reason  # the sweep that moves acceptance
    two = rows[weight.isin([0.6, 0.8]) | (rows["method"] == "diversed")]
    (c,) = compare(two, ["diversed"]).points
    assert c.verdict == "cannot judge" and "outside the sweep's range" in c.reason
    # A swept candidate against a baseline run once: no frontier, and how to sweep it.
    split = _split(rows[rows["method"] == "ensemble"], (0.2, 0.6, 0.8))
    (f,) = compare(split, ["ensemble-half"]).frontiers
    assert f.verdict == "cannot judge" and "ensemble ran one setting" in f.reason
    few = _split(rows[rows["example_id"].isin(sorted(rows["example_id"].unique())[:5])], (0.2, 0.6))
    (f,) = _against(compare(few, ["ensemble-half"]).frontiers, "ensemble")
    assert f.verdict == "cannot judge" and "too few examples" in f.reason
    with pytest.raises(BenchError, match="no such method, family or label"):
        compare(rows, ["nosuch"])


def test_baselines_grid_takes_any_candidate_task_and_pair():
    from bench.grid import configs_from_grid

    configs, limit = configs_from_grid(
        "baselines",
        device="cpu",
        dtype=None,
        tasks=["arith"],
        pairs=["ref"],
        candidates=["example_verifier:ConfidenceEnsemble"],
        calibrate=False,  # the classes' fixed sweeps (calibrated ones: tests/runs/test_calibration.py)
    )
    methods = [c.method for c in configs]
    assert methods.count("ensemble") == 5 and methods.count("lossy") == 4 and methods.count("cascade") == 5
    assert methods[-4].endswith("ConfidenceEnsemble") and {c.task for c in configs} == {"arith"}
    # Both anchors of every configuration's drafts run (bench/lossless.py): sd (in the grid) and
    # accept_all on sampled drafts and, for threshold and relaxed, which draft greedily, on greedy drafts.
    assert [c.drafts().policy for c in configs if c.method == "sd"] == ["sample", "greedy"]
    assert [c.drafts().policy for c in configs if c.method == "accept_all"] == ["sample", "greedy"]
    assert configs[-1] in configs[-1].anchors()  # an anchor is its own anchor
    lookup, _ = configs_from_grid(
        "baselines", device="cpu", tasks=["arith"], pairs=["ref"], settings={"drafter": "lookup"}, calibrate=False
    )
    for anchor in ("sd", "accept_all"):
        assert [c.drafts() for c in lookup if c.method == anchor] == [Drafts(None, canonical_drafter("lookup"))]
    with pytest.raises(BenchError, match="give --pair"):
        configs_from_grid("baselines", device="cpu", dtype=None, tasks=["arith"])
    with pytest.raises(BenchError, match="not with --method"):
        configs_from_grid("demo", device="cpu", dtype=None, candidates=["sd"])


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


def test_all_baselines_pools_every_family_and_lossless_sd_and_leaves_candidates_out(demo_results):
    rows = load_results(demo_results)
    whole = compare(rows, ["diversed"])
    (alone,) = whole.points  # one baseline family and no sd: nothing to pool
    assert alone.family == "ensemble" and all(v.family != "all baselines" for v in whole.families)
    # The sweep cut in two families, and w=0.8 relabelled lossless sd (a family of one setting, no
    # baseline): pooled, they are the same four points, so the same hull and the same numbers.
    rows = _split(rows, (0.2, 0.6))
    sd = rows["params"].map(lambda p: json.loads(p).get("target_weight") == 0.8)
    info = {**json.loads(rows.loc[sd, "method_info"].iloc[0]), "name": "sd", "baseline": False, "sweep": {}}
    rows.loc[sd, ["method", "method_info", "params"]] = ["sd", json.dumps(info), "{}"]
    result = compare(rows, ["diversed"])
    pooled, *rest = result.points
    assert (pooled.family, pooled.family_points) == ("all baselines", 4)
    assert sorted(c.family for c in rest) == ["ensemble", "ensemble-half"]  # sd is pooled, never a family
    for key in ("frontier_quality", "quality_diff", "quality_diff_ci", "verdict"):
        assert getattr(pooled, key) == getattr(alone, key), key
    # A candidate is never part of the pool it is judged against (here ensemble's and DIVERSED's).
    # The ensemble family and the candidate's own frontier each hold their drafts' lossless point
    # (sd, bench/lossless.py): both frontiers start at its acceptance.
    fronts = compare(rows, ["ensemble-half"]).frontiers
    assert [f.family for f in fronts] == ["all baselines", "ensemble", "diversed (head=bench:reference/heads/arith-ref)"]
    (half,) = _against(fronts, "ensemble")
    assert (half.family, half.family_points, half.candidate_points) == ("ensemble", 2, 2)
    sd_acceptance = summarise(rows).set_index("method").loc["sd", "acceptance_rate"]
    assert half.shared_acceptance[0] == pytest.approx(sd_acceptance)
    # The family lines come first: one per candidate family and baseline family.
    lines = [v.family for v in result.families]
    assert lines == ["all baselines", *(c.family for c in rest)]
    assert result.families[0].kind == "point" and result.families[0].verdict == "above"
    text = render(result, "markdown")
    assert text.index("Verdicts, arith:") < text.index("- diversed") < text.index("Points:")
    assert "vs all baselines (4 pts): above, Δ quality" in text
    assert json.loads(render(result, "json"))["verdicts"][0]["family"] == "all baselines"


def test_sweep_hint_names_calibration_only_where_the_class_declares_one():
    """A family run once is told how to sweep it: by acceptance where its class says how, else the
    fixed values its class declares (or a placeholder)."""
    info = MethodInfo.of(StaticEnsemble)
    hint = sweep_hint(info)
    assert hint.startswith("--grid baselines calibrates it by acceptance; or fixed: --param target_weight=")
    fixed = dataclasses.replace(info, calibration=None)
    values = ",".join(str(v) for v in info.sweep["target_weight"])
    assert sweep_hint(fixed) == f"--param target_weight={values}"
    assert sweep_hint(dataclasses.replace(fixed, sweep={})) == "--param NAME=v1,v2,v3"


def _curve(t: np.ndarray) -> np.ndarray:
    """Quality along a mixing path t in [0, 1] (t = 0: lossless SD, t = 1: every draft kept), shaped
    as the static ensemble's on the shipped pair: it falls fast from SD's 97% and levels off near 55%
    (convex), so the upper hull of a sweep that holds both ends is the chord between them."""
    return 0.55 + 0.42 * np.exp(-t / 0.15)


def _renamed_copy(rng, n: int, anchors: int) -> tuple[list[dict], list[dict]]:
    """One method twice on the same n examples: its calibrated family (t = 0 ... 0.99, lossless SD to
    w = 0.01, as ``--grid baselines`` runs the ensemble) and a renamed copy swept at fixed values of
    its own that reach neither end (t = 0.1 ... 0.9, as shares 0.9 ... 0.1), acceptance 0.8 + 0.2 t.
    Each frontier holds the first ``anchors`` of its drafts' anchors, each one run, shared: lossless
    SD (t = 0) and accepting every draft (t = 1, acceptance exactly 1). Examples share an acceptance
    noise and, 70% of the time, their difficulty."""
    u, e = rng.random(n), rng.uniform(-0.05, 0.05, n)

    def run(t: float) -> dict:
        draw = np.where(rng.random(n) < 0.7, u, rng.random(n))
        drafted = np.full(n, 20.0)
        accepted = drafted if t == 1 else rng.binomial(20, np.clip(0.8 + 0.2 * t + e, 0, 1)).astype(float)
        return {"accepted": accepted, "drafted": drafted, "quality": (draw < _curve(t)).astype(float)}

    shared = [run(t) for t in (0.0, 1.0)[:anchors]]
    copy, original = (0.1, 0.3, 0.5, 0.7, 0.9), (0.0, 0.25, 0.5, 0.75, 0.99)
    return [run(t) for t in copy] + shared, [run(t) for t in original] + shared


def test_a_renamed_copy_of_a_baseline_is_judged_like_itself_at_the_nominal_rate():
    """The verdict calibrated against itself: a renamed copy of a baseline, swept at fixed values
    of its own that reach neither end of its range, against its original (calibrated) family.
    "dominates" or "dominated" are false calls: at most the nominal 5% plus three Monte-Carlo
    standard errors once every frontier holds both anchors of its drafts (bench/lossless.py). With
    lossless SD alone the copy's hull stops at its last setting, below the chord from SD to the
    original's far end, and on more examples it is called "dominated" more and more often."""
    rng, draws, nominal = np.random.default_rng(44), 200, 0.05
    calls = [frontier_verdict(*_renamed_copy(rng, 50, 2), seed=i)["verdict"] for i in range(draws)]
    false = (calls.count("dominates") + calls.count("dominated")) / draws
    tally = {v: calls.count(v) for v in set(calls)}
    assert false <= nominal + 3 * math.sqrt(nominal * (1 - nominal) / draws), tally
    bottom = [frontier_verdict(*_renamed_copy(rng, 400, 1), seed=i)["verdict"] for i in range(40)]
    assert bottom.count("dominated") / len(bottom) >= 0.2, {v: bottom.count(v) for v in set(bottom)}


@pytest.mark.slow
def test_the_static_ensemble_renamed_is_not_told_apart_from_itself_on_the_shipped_pair(tmp_path):
    """The shipped-pair case: tests/renamed_ensemble.py (pi = share p + (1 - share) q, swept at
    share = 0.1 ... 0.9) beside the calibrated ensemble and both anchors, 50 arith examples as
    `run --grid baselines --method tests/renamed_ensemble.py:RenamedEnsemble --task arith --pair ref
    --limit 50` decodes them. Before every frontier held its anchors: "dominated", -6.6%."""
    from pathlib import Path

    from bench import api

    plugin = str(Path(__file__).parents[1] / "renamed_ensemble.py") + ":RenamedEnsemble"
    api.run(
        tasks=["arith"],
        pairs=["ref"],
        methods=["sd", "accept_all", "ensemble", plugin],
        sweep=True,
        calibrate=True,
        device="cpu",
        limit=50,
        timing_examples=0,
        output_dir=tmp_path,
        progress=False,
        report=False,
        log=lambda m: None,
    )
    result = compare(load_results(tmp_path), ["renamed"])
    (line,) = [v for v in result.families if v.family == "ensemble"]
    assert line.kind == "frontier" and line.verdict in NOT_DIFFERENT, line
    sd = summarise(load_results(tmp_path)).set_index("method").loc["sd", "acceptance_rate"]
    assert line.acceptance == pytest.approx((sd, 1.0))  # both frontiers span [SD's acceptance, 1]
    assert not any("no anchor" in note for *_, note in result.notes)


def _config(cid: str, family: str, method: str, policy: str | None, baseline: bool) -> dict:
    return {
        "config_id": cid,
        "family": family,
        "label": cid,
        "method": method,
        "draft_policy": policy,
        "drafter": "model",
        "baseline": baseline,
    }


def test_every_family_holds_both_anchors_of_its_drafts_and_pools_split_by_draft_policy():
    from bench.reports.compare import baseline_families, missing_anchors

    part = pd.DataFrame(
        [
            _config("sd", "sd", "sd", "sample", False),
            _config("sd-greedy", "sd (greedy draft)", "sd", "greedy", False),
            _config("all", "accept_all", "accept_all", "sample", False),
            _config("all-greedy", "accept_all (greedy draft)", "accept_all", "greedy", False),
            _config("ens1", "ensemble", "ensemble", "sample", True),
            _config("ens2", "ensemble", "ensemble", "sample", True),
            _config("lossy1", "lossy", "lossy", "sample", True),
            _config("thr1", "threshold", "threshold", "greedy", True),
            _config("rel1", "relaxed", "relaxed", "greedy", True),
            _config("mine1", "mine", "mine", "sample", False),
        ]
    )
    families = {name: set(members["config_id"]) for name, members in baseline_families(part, ["mine"])}
    assert list(families) == [
        "all baselines",
        "all baselines, sampled drafts",
        "all baselines, greedy drafts",
        "ensemble",
        "lossy",
        "threshold",
        "relaxed",
    ]
    assert families["ensemble"] == {"ens1", "ens2", "sd", "all"}
    assert families["threshold"] == {"thr1", "sd-greedy", "all-greedy"}
    anchors = {"sd", "sd-greedy", "all", "all-greedy"}
    assert families["all baselines"] == {"ens1", "ens2", "lossy1", "thr1", "rel1"} | anchors
    assert families["all baselines, greedy drafts"] == {"thr1", "rel1", "sd-greedy", "all-greedy"}
    assert missing_anchors(part, ["mine"]) is None
    # Without an anchor the families judge what they have, and a note says what is missing.
    note = missing_anchors(part[~part["config_id"].isin(["sd-greedy", "all"])], ["mine"])
    assert "sd on greedy drafts (threshold, relaxed) (--draft-policy greedy)" in note
    assert "accept_all on sampled drafts (ensemble, lossy, mine)" in note
    # One way of drafting: no pools per way (they would repeat "all baselines").
    sampled = part[part["draft_policy"] == "sample"]
    assert [name for name, _ in baseline_families(sampled, ["mine"])] == ["all baselines", "ensemble", "lossy"]


def test_verdict_lines_name_each_sides_drafts_where_they_differ():
    from bench.reports.compare import FamilyVerdict
    from bench.reports.compare_format import family_line

    nan = float("nan")
    line = FamilyVerdict(
        "panel", "arith", "diversed", "threshold", 1, 7, "point", "below", "", -0.1, (-0.18, -0.02),
        (0.915, 0.915), {"below": 1}, True, 0.02, "exact_flexible, default", 0.1, [], "sampled drafts",
        "greedy drafts",
    )
    assert family_line(line).startswith("diversed (1 setting, sampled drafts) vs threshold (7 pts, greedy drafts): below")
    pool = dataclasses.replace(line, family="all baselines, greedy drafts")
    assert "vs all baselines, greedy drafts (7 pts):" in family_line(pool)  # named by its drafts once
    same = dataclasses.replace(line, family_drafts="sampled drafts", gap=nan)
    assert family_line(same) == "diversed (1 setting) vs threshold (7 pts): below"
    off = dataclasses.replace(same, off_distribution=["diversed (head=h): below"])
    assert family_line(off).endswith("below; off the target's distribution: diversed (head=h): below")
    level = dataclasses.replace(same, verdict="inconclusive")
    assert family_line(level) == (
        "diversed (1 setting) vs threshold (7 pts): inconclusive: the interval reaches past ±2.0% "
        "(exact_flexible, default); this sample detects differences of about 10.0% (80% power)"
    )
    from bench.reports.compare import Verdicts

    (got,) = json.loads(render(Verdicts([], [], [line]), "json"))["verdicts"]
    assert (got["candidate_drafts"], got["family_drafts"]) == ("sampled drafts", "greedy drafts")
