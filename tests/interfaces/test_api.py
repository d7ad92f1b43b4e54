"""The Python API and the method declarations it reads: a plug-in verifier is configured like a
built-in, grids never drop a flag, and a decoder is built in one place."""

from pathlib import Path

import pytest

from bench.config import RunSettings
from bench.errors import BenchError
from bench.grid import configs_from_grid
from bench.verifiers import MethodInfo, verifier_class

PLUGIN = str(Path(__file__).parents[1] / "example_verifier.py") + ":ConfidenceEnsemble"


def test_baselines_grid_sweeps_every_family_and_the_candidates_param():
    configs, limit = configs_from_grid(  # fixed sweeps; calibrated ones: tests/runs/test_calibration.py
        "baselines", tasks=["arith"], pairs=["ref"], candidates=[PLUGIN], params={"floor": ["0.1", "0.9"]},
        calibrate=False,
    )  # fmt: skip
    by_method: dict[str, list] = {}
    for c in configs:
        by_method.setdefault(verifier_class(c.method).name, []).append(c.params)
    # each baseline at the sweep its class declares, the candidate at the values given
    for name in ("ensemble", "lossy", "cascade", "typical", "threshold", "relaxed", "fuzzy", "mentored"):
        cls = verifier_class(name)
        (swept,) = [k for k in cls.sweep if len(cls.sweep[k]) > 1]
        assert [p[swept] for p in by_method[name]] == list(cls.sweep[swept])
    assert by_method["confidence"] == [{"floor": 0.1}, {"floor": 0.9}]
    # Both anchors twice: on sampled drafts, and on greedy drafts for threshold and relaxed (bench/lossless.py)
    assert by_method["ar"] == [{}] and by_method["sd"] == [{}, {}] and limit == 200
    assert by_method["accept_all"] == [{}, {}]


def test_baselines_grid_sweeps_a_candidate_over_its_declared_sweep():
    configs, _ = configs_from_grid("baselines", tasks=["arith"], pairs=["ref"], candidates=[PLUGIN], calibrate=False)
    assert [c.params for c in configs if "Confidence" in c.method] == [{"floor": v} for v in (0.2, 0.5, 0.8)]


def test_a_grid_refuses_what_it_sets_and_applies_what_it_leaves_open():
    with pytest.raises(BenchError, match="drop --target-weight"):
        configs_from_grid("demo", params={"target_weight": ["0.7"]})
    with pytest.raises(BenchError, match="drop --seed"):
        configs_from_grid("demo", settings=RunSettings(seed=3))
    configs, _ = configs_from_grid("tiny", settings=RunSettings(max_new_tokens=8, chat_template=True))
    assert {(c.max_new_tokens, c.chat_template) for c in configs} == {(8, True)}
    with pytest.raises(BenchError, match="goes to a candidate"):
        configs_from_grid("baselines", tasks=["arith"], pairs=["ref"], params={"target_weight": ["0.5"]})


def test_a_misspelt_setting_is_refused_at_the_api_boundary_in_one_line(tmp_path):
    from dataclasses import fields

    from bench import api
    from bench.config import RunConfig
    from bench.grid import GRID_KEYS

    refused = r"^settings: temprature is no run setting; the settings: draft_len, temperature,"
    with pytest.raises(BenchError, match=refused):
        api.configs(tasks=["arith"], settings={"temprature": 0.0, "seed": 1})
    with pytest.raises(BenchError, match=refused):
        api.run(tasks=["arith"], settings={"temprature": 0.0, "seed": 1}, output_dir=tmp_path)
    assert not tmp_path.joinpath("manifests").exists()
    configs, _ = api.configs(tasks=["arith"], methods=["sd"], settings={"temperature": 0.0, "seed": 1})
    assert [(c.temperature, c.seed, c.drafter) for c in configs] == [(0.0, 1, "model")] * 2  # sd, accept_all
    # Every setting is the RunConfig field of its name, and a grid key; each given one reaches it.
    names = {f.name for f in fields(RunSettings)}
    assert names <= {f.name for f in fields(RunConfig)} and names <= GRID_KEYS
    given = RunSettings(draft_len=7, temperature=0.3, max_new_tokens=11, seed=5, data="fixture", num_fewshot=2,
                        split="test", chat_template=True, truncate_prompt="left", draft_policy="greedy")  # fmt: skip
    cfg = given.config(task="arith", pair="ref", method="sd", params={}, head=None, drafter="lookup", device="cpu",
                       dtype=None, engine="eager")  # fmt: skip
    assert {k: getattr(cfg, k) for k in names - {"drafter"}} == given.given() and cfg.drafter == "lookup"
    assert RunSettings().config(task="arith", pair="ref", method="sd", params={}, head=None, drafter="model",
                                device="cpu", dtype=None, engine="eager") == RunConfig("arith", "ref", "sd", device="cpu")  # fmt: skip


def test_labels_and_families_come_from_the_class_declarations():
    info = MethodInfo.of(verifier_class("cascade"))
    params = {"cascade_rule": "opt", "cascade_alpha": 0.3}
    assert info.label(params) == "cascade (opt, a=0.3)" and info.family(params) == "cascade (opt)"
    ens = MethodInfo.of(verifier_class("ensemble"))
    assert ens.label({"target_weight": 0.2, "mix": "logit"}) == "ensemble (w=0.2, mix=logit)"
    assert ens.family({"target_weight": 0.2, "mix": "logit"}) == "ensemble (mix=logit)"
    assert ens.family({"target_weight": 0.2}) == "ensemble"  # mix at its default is not named
    plugin = MethodInfo.of(verifier_class(PLUGIN))
    assert plugin.swept == ("floor",) and plugin.label({"floor": 0.5}) == "confidence (floor=0.5)"
    assert MethodInfo.from_json(plugin.to_json()) == plugin  # rows carry it as JSON


def test_a_sweep_that_names_no_parameter_is_refused():
    from dataclasses import dataclass
    from typing import ClassVar

    from bench.verifiers import SpeculativeDecoding

    @dataclass(frozen=True)
    class Broken(SpeculativeDecoding):
        name: ClassVar[str] = "broken"
        sweep: ClassVar[dict] = {"weight": (0.1, 0.2)}

    with pytest.raises(BenchError, match="not its parameters"):
        MethodInfo.of(Broken)


def test_a_decoder_is_constructed_in_one_place():
    root = Path(__file__).resolve().parents[2] / "bench"
    found = [p.relative_to(root).as_posix() for p in root.rglob("*.py") if "SpeculativeDecoder(" in p.read_text()]
    assert found == ["build.py"]


def test_a_resolved_configuration_names_every_parameter():
    from bench.config import RunConfig

    cfg = RunConfig(task="arith", pair="ref", method="ensemble", device="cpu").resolve()
    assert cfg.params == {"target_weight": 0.7, "mix": "prob"}
    same = RunConfig(task="arith", pair="ref", method="ensemble", params={"target_weight": 0.7}, device="cpu")
    assert same.resolve().config_id == cfg.config_id  # a default given or left out is one configuration


PLUGIN_FILE = """
from dataclasses import dataclass
from typing import ClassVar

from bench.verifiers import MixtureVerifier


@dataclass(frozen=True)
class ScaledConfidence(MixtureVerifier):
    name: ClassVar[str] = "scaled"
    sweep: ClassVar[dict] = {"scale": (0.2, 0.5, 0.8)}
    shorthand: ClassVar[dict] = {"scale": "s"}
    style: ClassVar[dict] = {"marker": "P", "color": "#123456"}
    scale: float = 0.5

    def pi(self, r):
        w = self.scale * r.p.max(-1, keepdim=True).values
        return w * r.p + (1 - w) * r.q
"""


@pytest.mark.slow
def test_a_plugin_that_declares_its_sweep_is_reported_like_a_builtin(tmp_path):
    """A user's verifier in a file of its own, swept as it declares, beside the ensemble's sweep:
    table, plots, point and frontier verdicts and the HTML page name it and draw it in its style,
    with no edit anywhere else."""
    import json

    from bench import api

    (tmp_path / "scaled.py").write_text(PLUGIN_FILE)
    grid = tmp_path / "grid.yaml"  # baselines.yaml, cut to one family to stay cheap
    grid.write_text("methods: [ar, sd, ensemble]\nsweep: true\nlimit: 24\nseed: 0\ntemperature: 1.0\ndraft_len: 5\n")
    out = tmp_path / "results"
    result = api.run(
        grid=str(grid), tasks=["arith"], pairs=["ref"], methods=[f"{tmp_path}/scaled.py:ScaledConfidence"],
        device="cpu", output_dir=out, batch_size=24, timing_examples=0, progress=False, log=lambda m: None,
    )  # fmt: skip
    labels = [c.label for c in result.configs]
    assert labels[-4:] == ["scaled (s=0.2)", "scaled (s=0.5)", "scaled (s=0.8)", "accept_all"]  # the anchor last
    assert all(label in result.table for label in labels)
    from bench.reports.plots import write_plots

    assert {p.suffix for p in (out / "plots").iterdir()} == {".png", ".txt"}  # run: PNG; plot adds PDF, SVG
    write_plots(out, out / "figures")
    svg = (out / "figures" / "pareto_acceptance_ref.svg").read_text()
    assert "scaled, s swept" in svg and "ensemble, w swept" in svg and "#123456" in svg
    verdicts = json.loads(api.compare(out, ["scaled"], "json"))
    points, frontiers = verdicts["points"], verdicts["frontiers"]
    assert {p["candidate"] for p in points} == set(labels[-4:-1])
    # Judged against the one baseline family (with its anchors; one family: no pool), never against itself.
    assert {p["family"] for p in points} == {"ensemble"}
    assert [f["family"] for f in frontiers] == ["ensemble"]
    for frontier in frontiers:
        assert frontier["verdict"] in {"dominates", "dominated", "crosses", "equivalent", "inconclusive"}
    page = api.report(out, tmp_path / "report.html", ["scaled"]).read_text()
    assert "scaled (s=0.5)" in page and "scaled (3 pts)" in page  # its points and its frontier row


def test_every_run_adds_the_draft_alone_unless_told_not_to():
    """accept_all (every draft kept) joins each run once per way of drafting: beside sampled drafts,
    beside greedy drafts; never for a run that drafts nothing, never twice where the grid or the
    methods already hold it, and not with accept_all=False (--no-accept-all)."""
    from bench import api

    def methods(**kw):
        found, _ = api.configs(tasks=["arith"], pairs=["ref"], device="cpu", **kw)
        return [(c.method, c.draft_policy) for c in found]

    assert methods(methods=["ar", "sd", "ensemble"]) == [("ar", None), ("sd", None), ("ensemble", None),
                                                          ("accept_all", "sample")]  # fmt: skip
    assert methods(methods=["ar", "sd"], accept_all=False) == [("ar", None), ("sd", None)]
    assert methods(methods=["ar"]) == [("ar", None)]  # nothing drafted: no draft to accept
    assert methods(methods=["sd", "accept_all"]).count(("accept_all", None)) == 1
    greedy = methods(methods=["sd"], settings=RunSettings(draft_policy="greedy"))
    assert greedy[-1] == ("accept_all", "greedy")
    demo, _ = api.configs(grid="demo", device="cpu")
    assert [c.method for c in demo].count("accept_all") == 1 and demo[-1].method == "accept_all"
    baselines, _ = api.configs(grid="baselines", tasks=["arith"], pairs=["ref"], device="cpu", calibrate=False)
    grid_only, _ = configs_from_grid("baselines", tasks=["arith"], pairs=["ref"], calibrate=False)
    assert len(baselines) == len(grid_only)  # the grid's anchors already hold it
