"""The contracts every drafter and every verifier meets, parametrised from the registries (and the
plug-ins beside this file), so that a newcomer's class is tested on arrival, on the shipped `ref`
pair. A drafter: greedy lossless ``sd`` on its drafts equals ``ar``, alone and in a batch; a row of
a sampled batch decodes as it does alone (unless the drafter learns from finished examples); no row drafts past its cap; what it declares is honoured (bound with
only the models it declares, it drafts; what it supplies reaches the rule; a rule reading more, or
a context lacking a model it declares, is refused in one line). A verifier: its emitted law is its
declared rule's (tests/verifiers/test_verifiers.py), a chain is a one-wide tree (tests/verifiers/test_tree_verify.py),
and a lossless setting keeps greedy ``sd`` == ``ar`` (here). A drafter written as one file runs
under every rule and meets the same contract (the last test)."""

import shutil
from pathlib import Path

import pytest

from bench.decoding import SpeculativeDecoder
from bench.distributions import Sampling
from bench.drafters import DRAFT_OUTPUTS, DRAFTERS, DraftContext, Drafter, drafter_class, drafter_for, make_drafter, split_spec
from bench.errors import BenchError
from bench.verifiers import VERIFIERS, SpeculativeDecoding, make_verifier
from tests.eagle_checkpoints import write_eagle_head

HERE = Path(__file__).resolve().parents[1]  # the helpers' folder, tests/
EXAMPLE = str(HERE / "example_drafter.py") + ":BigramChain"
N, BUDGET, GREEDY = 4, 12, Sampling(0.0)
TEXTS = [
    "123+456=579. 123+456=579. 123+",
    "the sum of 12 and 34 is 46. the sum of 12 and 34 is",
    "7+8=",
]


@pytest.fixture(scope="module")
def ref():
    from bench.pairs import load_pair

    return load_pair("ref", device="cpu")


@pytest.fixture(scope="module")
def prompts(ref) -> list[list[int]]:
    return [list(ref.tokenizer(t).input_ids) for t in TEXTS]


@pytest.fixture(scope="module")
def eagle_head(ref, tmp_path_factory) -> Path:
    """A random EAGLE-3 head for the ref target: the eagle drafter's one required parameter."""
    return write_eagle_head(tmp_path_factory.mktemp("eagle") / "head", ref.target.config, "eagle3", draft_vocab=200, seed=1)


def spec_of(name: str, eagle_head: Path) -> str:
    """A drafter's spec under test: its defaults, and the head the eagle drafter needs."""
    return f"eagle:path={eagle_head}" if name == "eagle" else name


def decoder(ref, method: str, spec: str, sampling: Sampling, verifier=None, **params) -> SpeculativeDecoder:
    """A decoder whose drafter's context holds the draft model only if the drafter declares it."""
    cls = drafter_class(split_spec(spec)[0])
    draft = ref.draft if "draft" in cls.models else None
    return SpeculativeDecoder(ref.target, draft, verifier or make_verifier(method, **params), draft_len=N,
                              sampling=sampling, eos_token_ids=ref.eos_token_ids, drafter=spec)  # fmt: skip


def recorded(dec: SpeculativeDecoder) -> list:
    """The (caps, draft) of every round the decoder's drafter drafts from now on."""
    seen = []
    draft = dec.drafter.draft
    dec.drafter.draft = lambda rows, caps: seen.append((list(caps), d := draft(rows, caps))) or d
    return seen


DRAFTER_NAMES = [*DRAFTERS, EXAMPLE]


@pytest.mark.parametrize("name", DRAFTER_NAMES, ids=lambda n: n.rpartition("/")[2])
def test_every_drafter_meets_the_contract(ref, prompts, eagle_head, name):
    drafter_contract(ref, prompts, spec_of(name, eagle_head))


def drafter_contract(ref, prompts, spec: str) -> None:
    """The drafter contract on one spec (the module docstring's four checks)."""
    cls = drafter_class(split_spec(spec)[0])
    want = [decoder(ref, "ar", spec, GREEDY).generate(p, BUDGET).token_ids for p in prompts]
    sd = decoder(ref, "sd", spec, GREEDY)
    seen = recorded(sd)
    greedy = [sd.generate(p, BUDGET).token_ids for p in prompts]
    assert greedy == want, f"{spec}: greedy sd on its drafts differs from ar"
    assert [g.token_ids for g in sd.generate_batch(prompts, BUDGET, [0] * len(prompts))] == want
    assert sum(d.counts[0] for _, d in seen) > 0, f"{spec}: drafted nothing on these prompts"
    # Sampled, reading all it supplies: a row of a batch decodes as alone, caps kept, reads served.
    reads_all = type("ReadsAll", (SpeculativeDecoding,), {"name": "reads_all", "draft_reads": cls.supplies})()
    sampled = decoder(ref, "sd", spec, Sampling(1.0), verifier=reads_all)
    alone = [sampled.generate(p, BUDGET, seed=s).token_ids for s, p in enumerate(prompts)]
    seen = recorded(sampled)
    batch = sampled.generate_batch(prompts, BUDGET, list(range(len(prompts))))
    # A drafter that learns from finished examples (``finish``: SuffixDecoding's global tree) drafts
    # for a row what the rows finished before it taught it: alone and in a batch differ by design.
    if type(sampled.drafter).finish is Drafter.finish:
        assert [g.token_ids for g in batch] == alone, f"{spec}: a row of a batch decodes otherwise than alone"
    assert any(min(caps) < N for caps, _ in seen)  # the budget's end capped some rows
    for caps, d in seen:
        assert all(0 <= c <= cap for c, cap in zip(d.counts, caps)), f"{spec}: drafted past a cap {caps}: {d.counts}"
        assert d.tokens.shape[0] == len(caps) and d.tokens.shape[1] >= max(d.counts)
        assert ("q_logits" not in cls.supplies or d.q_logits is not None) and ("hidden" not in cls.supplies or d.hidden is not None)
        assert cls.deterministic or "q" not in cls.supplies or d.q is not None or d.parents is not None
    check_refusals(ref, spec, cls)


def check_refusals(ref, spec: str, cls) -> None:
    """What it does not supply is refused with the rule that reads it; a context without a model
    it declares, when it binds: one line each."""
    for output in set(DRAFT_OUTPUTS) - cls.supplies:
        with pytest.raises(BenchError, match="which the .* drafter does not have") as err:
            drafter_for(spec, "a_rule", frozenset({output}))
        assert "\n" not in str(err.value)
    for model in cls.models:
        with pytest.raises(BenchError, match=f"needs a {model} model") as err:
            make_drafter(spec, DraftContext(**{m: ref.target for m in cls.models if m != model}, method="sd"))
        assert "\n" not in str(err.value)


# A lossless setting of each registered rule (its calibration's lossless end, sd itself); the rules
# that read a trained head are left to their own tests (tests/learned/test_judges.py, test_learned.py).
LOSSLESS = [("sd", {})] + [
    (name, cls.calibration.values(cls.calibration.lossless))
    for name, cls in VERIFIERS.items()
    if cls.calibration is not None and cls.calibration.lossless is not None and not cls.needs_hidden
]


@pytest.mark.parametrize("method,params", LOSSLESS)
def test_a_lossless_setting_keeps_greedy_sd_equal_to_ar(ref, prompts, method, params):
    want = [decoder(ref, "ar", "model", GREEDY).generate(p, BUDGET).token_ids for p in prompts]
    dec = decoder(ref, method, "model", GREEDY, **params)
    assert [dec.generate(p, BUDGET).token_ids for p in prompts] == want


def test_a_drafter_written_as_one_file_runs_under_every_rule_and_meets_the_contract(ref, prompts, tmp_path, monkeypatch):
    from bench.config import RunSettings
    from bench.grid import configs_from_flags
    from bench.runner import Runner
    from bench.store import load_results

    folder = tmp_path / "elsewhere"
    folder.mkdir()
    shutil.copy(HERE / "example_drafter.py", folder / "my_drafter.py")
    monkeypatch.chdir(tmp_path)
    spec = "elsewhere/my_drafter.py:BigramChain:limit=3"
    drafter_contract(ref, prompts, spec)
    cls = drafter_class(split_spec(spec)[0])
    for method, verifier in VERIFIERS.items():  # decodes under every rule it can serve, refuses the others
        if not verifier.uses_draft or verifier.needs_hidden:
            continue
        if make_verifier(method).reads() <= cls.supplies:
            out = decoder(ref, method, spec, Sampling(1.0)).generate(prompts[0], BUDGET, seed=1)
            assert len(out.token_ids) == BUDGET, method
        else:
            with pytest.raises(BenchError, match="bigram drafter does not have"):
                decoder(ref, method, spec, Sampling(1.0))
    settings = RunSettings(max_new_tokens=4, drafter=spec)
    Runner(tmp_path / "results", limit=1, progress=False, log=lambda m: None).run(
        configs_from_flags(tasks=["arith"], pairs=["ref"], methods=["sd"], device="cpu", settings=settings)
    )
    rows = load_results(tmp_path / "results")
    assert set(rows["drafter"]) == {"elsewhere/my_drafter.py:BigramChain:limit=3"}
    assert set(rows["label"]) >= {"sd (bigram limit=3)"}
    with pytest.raises(BenchError, match="limit must be an integer >= 1"):
        drafter_class(split_spec(spec)[0])(limit=0)


def _verifier_classes() -> list:
    from bench.verifiers import verifier_class

    return [*VERIFIERS.values(), verifier_class(str(HERE / "example_verifier.py") + ":ConfidenceEnsemble")]


@pytest.mark.parametrize("cls", _verifier_classes(), ids=lambda c: c.name)
def test_every_verifier_declares_well_formed_facts(cls):
    """What a class declares about its method (read generically by grids, `run`, plots and
    `recommend`) names its own parameters and the keys that exist, so a plug-in's facts are held
    to the same form as a built-in's."""
    from dataclasses import fields

    import matplotlib.lines

    from bench.reports.deploy import ENGINE_CALLS
    from bench.verifiers import MethodInfo

    own = {f.name for f in fields(cls)}
    info = MethodInfo.of(cls)  # refuses a sweep or calibration that names no parameter
    assert set(cls.aliases) <= own, f"{cls.name}: aliases name no parameter"
    assert cls.shade is None or cls.shade in own
    assert cls.shipped_in is None or cls.shipped_in in ENGINE_CALLS
    assert isinstance(cls.default_run, bool) and isinstance(cls.trains_in_run, bool) and isinstance(cls.order, int)
    assert info.shipped_in == cls.shipped_in and info.shade == cls.shade  # rows carry them
    matplotlib.lines.Line2D([], [], **dict(cls.style))  # every style key is a line property


def test_runs_alias_flags_are_the_registered_classes_aliases():
    """`run --target-weight` and its kind are spelled in bench/cli.py (typer's flags are static):
    they are exactly the aliases the registered classes declare, which grids take as keys."""
    import inspect

    from bench import cli, cli_options
    from bench.grid import param_aliases

    flags = {n for n, p in inspect.signature(cli.run).parameters.items() if p.annotation in ("o.Alias", cli_options.Alias)}
    assert flags == set(param_aliases())
