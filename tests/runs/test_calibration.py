"""Calibrated sweeps: the search along a declared path (on formulas and on the shipped pair), the
declarations, examples that are never judged, the record in the results directory that reruns and
shards read back, and the line that says a candidate's sweep barely moves."""

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from bench.calibration import calibrate, calibrate_path, pending, targets
from bench.calibration import sweeps
from bench.calibration.notes import barely_moves, floor_point, reaches_floor
from bench.config import RunConfig, expand_methods
from bench.errors import BenchError
from bench.grid import configs_from_grid
from bench.verifiers import (
    CALIBRATED,
    VERIFIERS,
    Calibration,
    MethodInfo,
    SpeculativeDecoding,
    verifier_class,
)

PLUGIN = str(Path(__file__).parents[1] / "example_verifier.py") + ":ConfidenceEnsemble"


def _counted(f):
    calls = []

    def measure(x):
        calls.append(x)
        return f(x)

    return measure, calls


def test_the_search_lands_a_smooth_family_on_every_level_with_few_evaluations():
    # An ensemble-like family: w = 1 is SD (0.8), acceptance rises to 1 as w falls.
    path = Calibration("w", 0.01, 1.0, rising=False, lossless=1.0)
    measure, calls = _counted(lambda w: 0.8 + 0.2 * (1 - w) ** 2)
    levels, search = calibrate_path(path, measure, 0.8, 5, extra=[0.83])
    reached = [lv for lv in levels if lv.value is not None]
    assert len(reached) == len(levels) == 6  # 5 spread levels and the candidate's 0.83
    assert reached[0].value == 1.0 and min(lv.value for lv in reached) == 0.01  # both ends run
    step = (0.2 * 0.99**2) / 4
    assert all(abs(lv.acceptance - lv.target) <= step / 4 + 1e-12 for lv in reached)
    assert any(abs(lv.acceptance - 0.83) < 0.01 for lv in reached)
    assert len(calls) == len(set(calls)) <= 12  # every evaluation reused, none repeated
    # Acceptance rising with the parameter is searched the same way.
    rising = Calibration("d", 0.0, 1.0, rising=True)
    levels, _ = calibrate_path(rising, lambda d: 0.7 + 0.3 * d, 0.75, 4)
    assert [lv.value is not None for lv in levels] == [True] * 5
    assert levels[0].value == 0.0 and sorted(lv.acceptance for lv in levels) == [
        lv.acceptance for lv in levels
    ]


def test_a_family_that_jumps_says_which_levels_it_cannot_reach_instead_of_repeating_a_point():
    path = Calibration("d", 0.0, 1.0, rising=True)
    levels, _ = calibrate_path(path, lambda d: 0.8 if d < 0.5 else 0.95, 0.8, 5)
    reached = [lv for lv in levels if lv.value is not None]
    assert [lv.acceptance for lv in reached] == [0.8, 0.95]
    missed = [lv for lv in levels if lv.value is None]
    assert len(missed) == 3 and all("jumps from 80.0% to 95.0%" in lv.note for lv in missed)
    # Below the family's lowest acceptance nothing is searched: the level is out of its range.
    levels, _ = calibrate_path(path, lambda d: 0.85 + 0.1 * d, 0.7, 3)
    assert levels[0].value == 0.0 and all(lv.value is not None for lv in levels)
    flat, _ = calibrate_path(Calibration("d", 0.0, 1.0, rising=True), lambda d: 0.9, 0.8, 4)
    assert [lv.value for lv in flat] == [0.0, None]  # nothing to spread: one point, not four copies
    assert flat[1].note == "acceptance does not rise along d (90.0% at most)"


def test_target_levels_spread_and_take_the_candidates_range():
    assert targets(0.8, 1.0, 5) == pytest.approx([0.8, 0.85, 0.9, 0.95, 1.0])
    # A candidate level inside the range is added, one within a quarter spacing of another is not.
    assert targets(0.8, 1.0, 5, extra=[0.81, 0.87, 1.2]) == pytest.approx([0.8, 0.85, 0.87, 0.9, 0.95, 1.0])


def test_every_baseline_declares_a_path_and_rows_carry_it():
    for name, cls in VERIFIERS.items():
        if cls.baseline:
            path = cls.calibration
            assert path is not None, name
            info = MethodInfo.of(cls)
            assert MethodInfo.from_json(info.to_json()).calibrated == path
            # the path's parameters are swept: a family's points differ only there
            assert set(path.moved) <= set(info.swept)
            cls(**path.values(path.low)), cls(**path.values(path.high))  # both ends are valid settings
    typical = verifier_class("typical").calibration
    assert typical.values(0.09) == {"posterior_threshold": 0.09, "posterior_alpha": 0.3}
    assert MethodInfo.of(verifier_class("typical")).family({"posterior_threshold": 0.2}) == "typical"


def test_a_plugin_declares_its_path_like_a_builtin_and_a_wrong_one_is_refused():
    info = MethodInfo.of(verifier_class(PLUGIN))
    assert info.calibrated == Calibration("floor", 0.0, 1.0, rising=False, lossless=1.0)
    assert MethodInfo.from_json(info.to_json()) == info

    @dataclass(frozen=True)
    class Broken(SpeculativeDecoding):
        name: ClassVar[str] = "broken"
        calibration: ClassVar[Calibration] = Calibration("weight", 0.0, 1.0, rising=True)

    with pytest.raises(BenchError, match="calibration moves"):
        MethodInfo.of(Broken)
    with pytest.raises(BenchError, match="must be below"):
        Calibration("w", 1.0, 0.0, rising=True)
    with pytest.raises(BenchError, match="outside"):
        Calibration("w", 0.0, 1.0, rising=True, lossless=2.0)


def test_the_baselines_grid_leaves_calibrated_values_open_and_given_values_fixed():
    configs, _ = configs_from_grid("baselines", tasks=["arith"], pairs=["ref"], candidates=[PLUGIN])
    open_ = {verifier_class(c.method).name: c.params for c in configs if pending(c)}
    assert set(open_) == {
        *("ensemble", "lossy", "cascade", "typical", "threshold", "relaxed", "fuzzy", "mentored", "confidence"),
        *("diversed", "autojudge", "selfjudge"),  # the learned families, by their knobs
    }
    assert open_["relaxed"] == {"relaxed_topk": 4, "relaxed_delta": CALIBRATED}  # its fixed sweep stays
    assert open_["typical"] == {"posterior_threshold": CALIBRATED}  # alpha moves with it
    # --param values run as given; --no-calibrate runs the classes' fixed sweeps.
    given, _ = configs_from_grid(
        "baselines", tasks=["arith"], pairs=["ref"], candidates=[PLUGIN], params={"floor": ["0.1", "0.9"]}
    )
    assert [c.params for c in given if "Confidence" in c.method] == [{"floor": 0.1}, {"floor": 0.9}]
    fixed, _ = configs_from_grid("baselines", tasks=["arith"], pairs=["ref"], calibrate=False)
    assert not any(map(pending, fixed)) and [c.method for c in fixed].count("ensemble") == 5
    assert expand_methods(["ensemble"], params={"target_weight": ["0.5"]}, calibrate=True) == [
        ("ensemble", {"target_weight": 0.5}, None)
    ]
    with pytest.raises(BenchError, match="chosen by `run`"):
        [c for c in configs if pending(c)][0].resolve()


def _placeholder(method: str = "ensemble", **settings) -> RunConfig:
    ((m, params, _),) = expand_methods([method], calibrate=True)
    return RunConfig(task="arith", pair="ref", method=m, params=params, device="cpu", **settings)


def test_calibration_examples_are_never_the_judged_ones():
    cfg = _placeholder()
    judged = {e.example_id for e in sweeps.Task(sweeps.resolve_task("arith"), "hub").examples(500, 0)}
    picked = sweeps.calibration_examples(cfg, 50)
    assert len(picked) == sweeps.EXAMPLES and {s for s, _ in picked} == {"train"}  # another split
    # The train split's ids are its own: check the questions, not only the ids.
    test_questions = {e.doc["question"] for e in sweeps.Task(sweeps.resolve_task("arith"), "hub").examples()}
    assert not {e.doc["question"] for _, e in picked} & test_questions
    # A task whose few-shot split is all exemplars falls back to the evaluation split's tail.
    gsm = RunConfig(task="gsm8k", pair="tiny", method="sd", device="cpu")
    tail = sweeps.calibration_examples(gsm, 5, count=3)
    assert {s for s, _ in tail} == {"test"}
    first = {e.example_id for e in sweeps.Task(sweeps.resolve_task("gsm8k"), "fixture").examples(5, 0)}
    assert len(tail) == 3 and not {e.example_id for _, e in tail} & first
    assert len(sweeps.calibration_examples(gsm, 6, count=3)) == 2  # only two left past the judged six
    with pytest.raises(BenchError, match="no example left outside the judged ones"):
        sweeps.calibration_examples(gsm, None, count=3)
    assert judged  # the arith test split loaded


@pytest.fixture
def small(monkeypatch):
    """Three levels on four examples of twelve tokens: the same search, cheaper."""
    monkeypatch.setattr(sweeps, "LEVELS", 3)
    monkeypatch.setattr(sweeps, "EXAMPLES", 4)
    monkeypatch.setattr(sweeps, "BUDGET", 12)


def test_a_run_calibrates_on_the_shipped_pair_and_a_rerun_reads_the_values_back(small, tmp_path):
    from bench.runner import Runner

    logs: list[str] = []
    runner = Runner(
        tmp_path, limit=3, device="cpu", batch_size=4, timing_examples=0, progress=False, log=logs.append
    )
    plain = RunConfig(task="arith", pair="ref", method="sd", device="cpu")
    configs, notes = calibrate([plain, _placeholder()], runner, 3, log=logs.append)
    ensemble = [c for c in configs if c.method == "ensemble"]
    weights = [c.params["target_weight"] for c in ensemble]
    assert 1.0 in weights and 0.01 in weights and len(ensemble) >= 3  # lossless end, top, between
    (record_file,) = (tmp_path / "calibration").glob("*.json")
    record = json.loads(record_file.read_text())
    reached = [lv for lv in record["levels"] if lv["value"] is not None]
    assert sorted(lv["value"] for lv in reached) == sorted(weights)
    assert len({lv["acceptance"] for lv in reached}) == len(reached)  # distinct points
    assert record["examples"][0][0] == "train" and len(record["examples"]) == 4
    # A later level's measured acceptance on the calibration examples, decoded again, is the record's.
    calibrator = sweeps.Calibrator(runner, ensemble[0], 3)
    mid = next(c for c in ensemble if 0.01 < c.params["target_weight"] < 1)
    level = next(lv for lv in reached if lv["value"] == mid.params["target_weight"])
    assert calibrator.acceptance(mid) == pytest.approx(level["acceptance"])
    # Rerun: nothing searched, the same configurations (ids) and manifest entries.
    again, notes_again = calibrate([plain, _placeholder()], runner, 3, log=logs.append)
    assert [c.params for c in again] == [c.params for c in configs] and notes_again == notes
    assert any("read back" in line for line in logs)
    # The run writes each chosen configuration's manifest with its calibration.
    runner.notes = notes
    runner.run(again)
    written = runner.store.rows_written
    assert written == 3 * (1 + len(ensemble))  # sd and every chosen weight, 3 examples each
    runner.run(calibrate([plain, _placeholder()], runner, 3, log=logs.append)[0])
    assert runner.store.rows_written == written  # a rerun resumes: the same ids, nothing decoded again
    manifest = json.loads(next((tmp_path / "manifests").glob("*ensemble*.json")).read_text())
    assert manifest["calibration"]["record"] == record["key"]
    assert manifest["calibration"]["target"] in [lv["target"] for lv in reached]
    # A raised --limit that would judge calibration examples of the evaluation split is refused.
    resolved = ensemble[0].resolve()
    tail = {
        **record,
        "examples": [["test", e.example_id] for e in runner.task(resolved).examples(None, 0)[-2:]],
    }
    sweeps.check_disjoint(tail, resolved, 50)
    with pytest.raises(BenchError, match="now judges"):
        sweeps.check_disjoint(tail, resolved, None)


def test_another_writer_keeps_the_first_record(tmp_path):
    from bench.store import ResultStore

    first = ResultStore(tmp_path, "0of2").write_calibration({"key": "k", "levels": [1]})
    second = ResultStore(tmp_path, "1of2").write_calibration({"key": "k", "levels": [2]})
    assert first == second == {"key": "k", "levels": [1]}


def test_a_family_that_ran_its_floor_is_read_below_its_sweep():
    from bench.reports.verdicts import point_verdict

    info = MethodInfo.of(verifier_class("relaxed"))
    assert reaches_floor([info], [{"relaxed_delta": 0.0}, {"relaxed_delta": 0.7}])
    assert not reaches_floor([info], [{"relaxed_delta": 0.2}, {"relaxed_delta": 0.7}])
    n = 200
    family = [  # acceptance 0.5 and 0.8, quality 0.9 and 0.6
        {
            "accepted": np.full(n, k),
            "drafted": np.full(n, 10.0),
            "quality": (np.arange(n) < q * n).astype(float),
        }
        for k, q in ((5.0, 0.9), (8.0, 0.6))
    ]
    low = {
        "accepted": np.full(n, 3.0),
        "drafted": np.full(n, 10.0),
        "quality": (np.arange(n) < 0.5 * n) * 1.0,
    }
    assert point_verdict(low, family, margin=0.02)["verdict"] == "cannot judge"  # below a sweep that may go further
    known = point_verdict(low, [*family, floor_point(n)], margin=0.02)
    assert known["verdict"] == "below" and known["frontier_quality"] == pytest.approx(0.9)


def test_a_candidate_sweep_that_barely_moves_is_told_so_in_one_line():
    info = MethodInfo.of(verifier_class(PLUGIN))
    params = [{"floor": f} for f in (0.1, 0.5, 0.9)]
    line = barely_moves("confidence", info, params, [0.806, 0.805, 0.804])
    assert line == (
        "confidence: floor 0.1 ... 0.9 moved acceptance only from 80.4% to 80.6%; "
        "its class declares a calibration path: run it without --param to calibrate it"
    )
    assert "\n" not in line
    assert barely_moves("confidence", info, params, [0.70, 0.80, 0.90]) is None
    plain = replace(info, calibration=None)
    assert "declare `calibration`" in barely_moves("confidence", plain, params, [0.8, 0.8, 0.801])
    ends = barely_moves("confidence", info, [{"floor": 0.0}, {"floor": 1.0}], [0.806, 0.797])
    assert ends.endswith("that is the whole of its calibration path (floor 0 ... 1)")


@pytest.mark.parametrize("rule", ["chow", "diff", "opt", "token"])
def test_every_cascade_rule_is_lossless_at_the_low_end_of_its_path(rule):
    import torch

    from bench.distributions import Sampling
    from bench.verifiers import Round, make_verifier

    g = torch.Generator().manual_seed(0)
    p_logits, q_logits = torch.randn(64, 3, 50, generator=g) * 3, torch.randn(64, 3, 50, generator=g) * 3
    p, q = p_logits.softmax(-1), q_logits.softmax(-1)
    r = Round(torch.zeros(64, 3, dtype=torch.long), q, p, q_logits, p_logits, Sampling(1.0))
    assert torch.equal(make_verifier("cascade", cascade_rule=rule, cascade_alpha=-1.0).pi(r), p)
    assert not torch.equal(make_verifier("cascade", cascade_rule=rule, cascade_alpha=1.0).pi(r), p)


def test_calibration_decodes_with_the_configurations_drafter(tmp_path, monkeypatch):
    """A lookup configuration is calibrated on lookup drafts, not on the pair's draft model."""
    from bench.drafters import PromptLookup
    from bench.runner import Runner

    built = []
    real = sweeps.decoder_for
    monkeypatch.setattr(sweeps, "decoder_for", lambda *a, **k: built.append(real(*a, **k)) or built[-1])
    runner = Runner(tmp_path, limit=3, device="cpu", timing_examples=0, progress=False, log=lambda m: None)
    model = RunConfig(task="arith", pair="ref", method="sd", device="cpu", max_new_tokens=8)
    lookup = replace(model, drafter="lookup")
    calibrator = sweeps.Calibrator(runner, model, 3)
    calibrator.acceptance(model), calibrator.acceptance(lookup)
    assert [isinstance(d.drafter, PromptLookup) for d in built] == [False, True]


# Every RunConfig field, by where it acts. A field added to RunConfig must be sorted here (the test
# below fails until it is), and one that reaches the decoder is then checked on both paths.
DECODER_FIELDS = {"method", "params", "head", "draft_len", "temperature", "draft_policy", "drafter"}
OTHER_FIELDS = {  # the examples, their prompts and budget, seeds, where the models run, the row's id
    "task", "pair", "max_new_tokens", "seed", "data", "num_fewshot", "split", "chat_template",
    "device", "dtype", "engine", "truncate_prompt",
}  # fmt: skip


def _decoder_settings(decoder) -> dict:
    """What a decoder decodes with, as plain values (its head as its weights)."""
    from dataclasses import asdict, fields, is_dataclass

    drafter = decoder.drafter
    return {
        "verifier": (type(decoder.verifier).__name__, asdict(decoder.verifier)),
        "draft_len": decoder.draft_len,
        "sampling": decoder.sampling,
        "draft_policy": decoder.draft_policy,
        "drafter": type(drafter).__name__,
        "drafter_settings": {f.name: getattr(drafter, f.name) for f in fields(drafter)} if is_dataclass(drafter) else {},
        "head": {k: v.tolist() for k, v in decoder.head.state_dict().items()} if decoder.head is not None else None,
    }


def test_run_and_calibration_build_a_configurations_decoder_alike(tmp_path, monkeypatch):
    """`run` (Runner.job) and the calibration (Calibrator.acceptance) decode a configuration with
    the same decoder, and every RunConfig field that acts on decoding reaches it (review D2: the
    calibration rebuilt the decoder's arguments itself and dropped the drafter)."""
    from dataclasses import fields

    from bench.decoding import SpeculativeDecoder
    from bench.verifier_heads import required_head
    from bench.runner import Runner
    from bench.verifiers import make_verifier

    assert DECODER_FIELDS | OTHER_FIELDS == {f.name for f in fields(RunConfig)}, "sort the new RunConfig field"
    built: list = []
    init = SpeculativeDecoder.__init__
    monkeypatch.setattr(SpeculativeDecoder, "__init__", lambda self, *a, **k: init(self, *a, **k) or built.append(self))
    runner = Runner(tmp_path, limit=3, device="cpu", timing_examples=0, progress=False, log=lambda m: None)
    base = RunConfig(task="arith", pair="ref", method="sd", device="cpu", max_new_tokens=8)
    # Between them, every decoder field away from its default: a head-reading method with its head
    # and the greedy draft policy, and a lookup drafter with its own setting.
    head = "bench:reference/heads/arith-ref"
    configs = [
        replace(base, method="diversed", head=head, draft_len=3, temperature=0.7,
                draft_policy="greedy"),
        replace(base, method="ensemble", params={"target_weight": 0.6}, draft_len=4, temperature=0.5,
                drafter="lookup:ngram=3"),
    ]  # fmt: skip
    calibrator = sweeps.Calibrator(runner, base, 3)
    for cfg in configs:
        cfg = cfg.resolve()
        built.clear()
        job = runner.job(cfg, runner.task(cfg).examples(3, cfg.seed))
        calibrator.acceptance(cfg)
        assert len(built) == 2 and built[0] is job.decoder
        ran, calibrated = (_decoder_settings(d) for d in built)
        assert calibrated == ran, cfg.label
        # Each field as the configuration gives it (a deterministic drafter has no draft policy).
        assert ran["verifier"] == (type(make_verifier(cfg.method)).__name__, cfg.params)
        assert (ran["draft_len"], ran["sampling"].temperature) == (cfg.draft_len, cfg.temperature)
        assert ran["draft_policy"] == cfg.draft_policy or (cfg.draft_policy, ran["drafter"]) == (None, "PromptLookup")
        assert (ran["drafter"], ran["drafter_settings"].get("ngram")) in {("ModelDrafter", None), ("PromptLookup", 3)}
        assert (ran["drafter"] == "PromptLookup") == cfg.drafter.startswith("lookup")
        pair = runner.pair(cfg)
        want = cfg.head and required_head(cfg.head, pair.spec.name, pair.hidden_sizes, pair.device)
        assert ran["head"] == (want and {k: v.tolist() for k, v in want.state_dict().items()})
