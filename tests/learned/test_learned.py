"""Learned verifiers end to end on the shipped pair: DIVERSED through the recipe path equals
the Trainer's head, a judge that always rejects decodes SD's tokens, a target-only judge runs on
prompt lookup, and a learned plug-in trains (by `train --method`), sweeps and is compared."""

from pathlib import Path

import pytest
import torch

from bench import api
from bench.build import build_decoder
from bench.learned.recipes import cached_folder, head_key, recipe_of
from bench.verifier_heads import JudgeHead
from bench.pairs import load_pair
from bench.tasks import Task, resolve_task
from bench.learned.reinforce import TrainConfig, Trainer

PLUGIN = str(Path(__file__).parents[1] / "learned_verifier.py") + ":ConfidentJudge"


@pytest.fixture(scope="module")
def ref():
    return load_pair("ref", device="cpu")


def test_diversed_through_the_recipe_equals_todays_head(tmp_path, ref):
    settings = dict(num_prompts=8, batch_size=4, epochs=1, rollout_tokens=8, lr=0.01, allow_flat_reward=True)
    folder = api.train(task="arith", pair="ref", method="diversed", output_dir=tmp_path / "new", device="cpu", log=lambda m: None, **settings)
    spec = resolve_task("arith")
    old = Trainer(ref, Task(spec, "hub", split="train"), TrainConfig(**settings), tmp_path / "old")
    old.train()
    from bench.verifier_heads import load_head

    new = load_head(str(folder), "ref", ref.hidden_sizes)[0]
    for k, v in old.head.state_dict().items():
        assert torch.equal(v, new.state_dict()[k]), k


def always(importance: float, ref) -> JudgeHead:
    head = JudgeHead("target", *ref.hidden_sizes)
    head.bias.fill_(importance)  # weight 0: the same score on every token
    return head


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_judge_that_always_rejects_decodes_sds_tokens(ref, temperature):
    from bench.distributions import Sampling

    prompt = ref.tokenizer("Q: 123 + 456 = ?").input_ids
    sd = build_decoder(ref, "sd", sampling=Sampling(temperature)).generate(prompt, 40, seed=3)
    judged = build_decoder(ref, "autojudge", {"tau": 0.9}, head=always(50.0, ref), sampling=Sampling(temperature))
    out = judged.generate(prompt, 40, seed=3)
    assert out.token_ids == sd.token_ids
    keep_all = build_decoder(ref, "selfjudge", {"tau": 0.5}, head=always(-50.0, ref), sampling=Sampling(temperature))
    stats = keep_all.generate(prompt, 40, seed=3).stats
    assert stats.accepted_tokens == stats.drafted_tokens


def test_a_target_only_judge_runs_on_prompt_lookup(ref):
    prompt = ref.tokenizer("Q: 123 + 456 = ? 123 + 456 = 579 123 + 456").input_ids
    decoder = build_decoder(ref, "selfjudge", {"tau": 0.5}, head=always(-50.0, ref), drafter="lookup")
    stats = decoder.generate(prompt, 30).stats
    assert stats.drafted_tokens > 0 and stats.accepted_tokens == stats.drafted_tokens
    from bench.errors import BenchError

    with pytest.raises(BenchError, match="hidden"):
        build_decoder(ref, "autojudge", {"tau": 0.5}, head=always(-50.0, ref), drafter="lookup")


def test_heads_are_cached_by_what_made_them():
    a = cached_folder(head_key("autojudge", recipe_of("autojudge"), "arith", "ref", "hub"))
    b = cached_folder(head_key("autojudge", recipe_of("autojudge", {"features": "target"}), "arith", "ref", "hub"))
    c = cached_folder(head_key("autojudge", recipe_of("autojudge", {"tau": 0.9}), "arith", "ref", "hub"))
    assert a != b and a == c  # the features change the head, the knob does not


@pytest.mark.slow
def test_a_learned_plugin_trains_sweeps_and_is_compared(tmp_path):
    head = api.train(task="arith", pair="ref", method=PLUGIN, num_prompts=20, output_dir=tmp_path / "head", device="cpu", log=lambda m: None)
    assert (head / "judge.safetensors").is_file()
    api.run(
        tasks=["arith"], pairs=["ref"], methods=["ar", "sd", "ensemble", PLUGIN], heads=[str(head)],
        params={"tau": [0.0, 0.5, 1.0], "target_weight": [0.3, 0.7]}, limit=6, output_dir=tmp_path / "r",
        device="cpu", timing_examples=0, progress=False, log=lambda m: None,
    )  # fmt: skip
    text = api.compare(tmp_path / "r", ["confident-judge"])
    assert "confident-judge" in text and "ensemble" in text


def test_judge_training_resumes_from_its_mined_labels(tmp_path, ref, monkeypatch):
    from bench.errors import BenchError
    from bench.learned import TrainJob
    from bench.learned.classifier import ClassifierRecipe

    recipe = ClassifierRecipe(miner="selfjudge", features="target", questions=8, draft_temperature=1.0)
    job = TrainJob(ref, Task(resolve_task("arith"), "hub", split="train"), "hub", tmp_path, log=lambda m: None)
    first = recipe.train(job)
    calls = []
    monkeypatch.setattr(ClassifierRecipe, "miner_of", lambda self, *args: calls.append(args))
    assert recipe.train(job) == first and calls == []  # every question was mined already
    with pytest.raises(BenchError, match="other settings"):
        ClassifierRecipe(miner="selfjudge", features="target", questions=9, draft_temperature=1.0).train(job)


def test_no_train_skips_the_learned_families_in_one_line(tmp_path, monkeypatch):
    from bench.grid import configs_from_grid
    from bench.learned.cache import provide_heads
    from bench.verifiers import verifier_class

    monkeypatch.setenv("DIVERSED_BENCH_CACHE", str(tmp_path))
    configs, _ = configs_from_grid("baselines", tasks=["arith"], pairs=["ref"])
    lines = []
    kept = provide_heads(configs, None, lines.append)
    names = {verifier_class(c.method).name for c in kept}
    assert not names & {"diversed", "autojudge", "selfjudge"} and {"sd", "ensemble"} <= names
    assert lines == ["--no-train: skipped the learned families autojudge, diversed, selfjudge (no trained head cached)"]


def test_verifiers_name_their_recipe_and_import_nothing_of_training():
    """A verifier returns a recipe's name and settings; the one registry turns it into the recipe.
    Building every shipped verifier and asking its recipe loads no module of bench.learned."""
    import subprocess
    import sys

    probe = (
        "import sys; from bench.verifiers import VERIFIERS, make_verifier; "
        "named = [make_verifier(n).recipe() for n in VERIFIERS]; "
        "assert ('reinforce', {}) in named, named; "
        "print(sorted(m for m in sys.modules if m.startswith('bench.learned')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=Path(__file__).parents[2])
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr + out.stdout


def test_the_registry_resolves_a_named_recipe_and_refuses_a_bad_one():
    from bench.errors import BenchError
    from bench.learned.classifier import ClassifierRecipe
    from bench.learned.recipes import resolve_recipe

    assert recipe_of("selfjudge") == ClassifierRecipe(miner="selfjudge", features="target")
    assert recipe_of("autojudge", {"features": "target"}).features == "target"
    assert resolve_recipe(("reinforce", {"lr": 0.01}), "mine").config == TrainConfig(lr=0.01)
    own = ClassifierRecipe(questions=5)
    assert resolve_recipe(own, "mine") is own and resolve_recipe(None, "mine") is None
    for bad, match in (
        (("nope", {}), "the recipes are classifier, reinforce"), (("classifier", {"questionz": 3}), "refuses the settings"),
        ("reinforce", r"must return \(NAME, settings\)"),
    ):  # fmt: skip
        with pytest.raises(BenchError, match=match):
            resolve_recipe(bad, "mine")


def test_the_command_line_trains_the_head_the_baselines_grid_trains(tmp_path, monkeypatch):
    """`train --method selfjudge` (flags left out: the recipe's own defaults) and --grid baselines
    train one judge on the same data: the same settings, into the same cached folder, so the grid
    finds the head the command trained. (The command once passed REINFORCE's 400 prompts, and the
    judge mined 400 questions by hand and 1000 by the grid.)"""
    from typer.testing import CliRunner

    from bench.cli import app
    from bench.grid import configs_from_grid
    from bench.learned.cache import provide_heads
    from bench.learned.classifier import ClassifierRecipe
    from bench.runner import Runner

    monkeypatch.setenv("DIVERSED_BENCH_CACHE", str(tmp_path))
    trained = []
    monkeypatch.setattr(ClassifierRecipe, "train", lambda self, job: trained.append((self.settings(), job.folder)) or {})
    # The grid decodes at temperature 1 and mines the draft's samples there: the command is told so.
    args = ["train", "--method", "selfjudge", "--task", "arith", "--pair", "ref", "--device", "cpu", "--draft-temperature", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    configs, _ = configs_from_grid("baselines", tasks=["arith"], pairs=["ref"])
    judged = [c for c in configs if c.method == "selfjudge"]
    host = Runner(tmp_path / "results", device="cpu", progress=False, log=lambda m: None)
    provide_heads(judged, host, lambda m: None)
    (by_hand, folder), (by_grid, grid_folder) = trained[0], trained[1]
    assert by_hand == by_grid and by_hand["questions"] == ClassifierRecipe().questions
    assert folder == grid_folder


def test_batched_mining_gives_the_labels_of_one_call_at_a_time(ref):
    """Many questions' calls in one batch (left-padded greedy decodes, right-padded forwards) label
    the shipped pair's train questions exactly as each call alone does."""
    from bench.pairs import encode_prompt
    from bench.learned import TrainJob
    from bench.learned.classifier import ClassifierRecipe
    from bench.learned.features import PairOracle
    from bench.learned.miners import run, run_many

    job = TrainJob(ref, Task(resolve_task("arith"), "hub", split="train"), "hub", Path("unused"))
    oracle = PairOracle(ref)
    for miner in ("autojudge", "selfjudge"):
        recipe = ClassifierRecipe(miner=miner, questions=6, draft_temperature=1.0)
        questions = [(encode_prompt(ref, e.prompt, False), e.doc, q) for q, e in enumerate(recipe.examples(job))]
        alone = [run(oracle, recipe.miner_of(job, *question)) for question in questions]
        batched = run_many(oracle, [recipe.miner_of(job, *question) for question in questions])
        assert batched == alone and sum(map(len, alone)) > 10
        if miner == "autojudge":
            assert any(m.important for labels in alone for m in labels)  # sampled drafts change answers
        else:  # each swap scored, then its original token as a negative
            mined = [m for labels in alone for m in labels]
            assert all(m.important is None and m.score is not None for m in mined[::2])
            assert all(m.important is False and m.score is None for m in mined[1::2])


def test_a_judge_for_lookup_drafts_mines_where_lookup_proposes(ref):
    """``--drafter lookup``: the labels sit where prompt lookup's first proposal differs from the
    target's greedy text, each on lookup's token; model-only settings are refused in one line."""
    from bench.pairs import encode_prompt
    from bench.drafters.lookup import first_proposals
    from bench.errors import BenchError
    from bench.learned import TrainJob
    from bench.learned.classifier import ClassifierRecipe
    from bench.learned.features import PairOracle
    from bench.learned.miners import run

    recipe = ClassifierRecipe(miner="selfjudge", features="target", questions=4, drafter="lookup:ngram=3")
    assert recipe.drafter == "lookup:match=first,min_ngram=1,ngram=3,schedule=constant"
    job = TrainJob(ref, Task(resolve_task("arith"), "hub", split="train"), "hub", Path("unused"))
    eos, labels = frozenset(ref.eos_token_ids), []
    for q, e in enumerate(recipe.examples(job)):
        labels += run(PairOracle(ref), recipe.miner_of(job, encode_prompt(ref, e.prompt, False), e.doc, q))
    assert labels
    for swap, negative in zip(labels[::2], labels[1::2]):  # each swap, then the target's own token there
        assert first_proposals(swap.context, 3, "first", eos)[-1] == swap.token
        assert negative.context == swap.context and negative.token != swap.token and negative.important is False
    for bad, match in (
        (dict(features="draft+target"), "target features"), (dict(draft_temperature=1.0), "draft-temperature 0"),
        (dict(drafter="suffix"), "train with --drafter lookup"),
    ):  # fmt: skip
        with pytest.raises(BenchError, match=match):
            ClassifierRecipe(**{"miner": "selfjudge", "features": "target", "drafter": "lookup", **bad})
    with pytest.raises(BenchError, match="trains on --drafter model or eagle"):
        recipe_of("diversed").configure(drafter="lookup")


def test_a_grid_judge_mines_the_drafts_its_configuration_decodes_with():
    from bench.config import RunConfig
    from bench.learned.cache import _drafts

    recipe = recipe_of("selfjudge")
    assert _drafts(recipe, RunConfig(task="arith", pair="ref", method="selfjudge", temperature=1.0)) == {
        "drafter": "model", "draft_temperature": 1.0
    }
    tree = RunConfig(task="arith", pair="ref", method="selfjudge", drafter="lookup_tree:matches=8,ngram=3", temperature=1.0)
    assert _drafts(recipe, tree) == {"drafter": "lookup:match=first,min_ngram=1,ngram=3,schedule=constant", "draft_temperature": 0.0}


def test_selfjudge_scores_are_the_authors_statistic_on_full_forwards(ref):
    """naver-aics/SelfJudge@c97c8e83 src/compare_important_tokens_gsm8k.py, ``num_next_token`` 20, on
    the shipped pair: a forward of the original and of each swapped sequence, whole, then their
    ``joint_logp_orig_20 - joint_logp_alter_20`` (both branches: a window that fits, one the end cuts),
    against the scores mined with the prompt run once and the copies cut after their window."""
    from bench.learned.features import PairOracle
    from bench.learned.miners import Greedy, Swapped, selfjudge

    prompt = ref.tokenizer("Q: 123 + 456 = ?").input_ids
    full = prompt + PairOracle(ref).greedy([Greedy(prompt, 40)])[0]
    n, length = len(prompt), len(full)
    sites = [(n, 7), (n + 3, 11), (length - 6, 5)]  # the last one's window is cut by the sequence's end
    answers = PairOracle(ref).swapped([Swapped(full, sites, selfjudge.WINDOW)])[0]

    def logp(ids):
        with torch.no_grad():
            return torch.log_softmax(ref.target(input_ids=torch.tensor([ids])).logits.float(), -1)

    logp_orig, N = logp(full), 20
    for (m, token), (original, swapped) in zip(sites, answers):
        logp_alter = logp(full[:m] + [token] + full[m + 1 :])
        stop = m + N if m + N < logp_orig.shape[1] else -1
        orig = torch.max(logp_orig[0, m - 1 : stop], dim=-1)[0].mean()
        alter = torch.cat([logp_alter[0, m - 1, token][None], torch.max(logp_alter[0, m:stop], dim=-1)[0]]).mean()
        assert selfjudge.score(original.tolist(), swapped.tolist()) == pytest.approx(float(orig - alter), abs=1e-4)
    assert len(answers[0][0]) == N + 1 and len(answers[-1][0]) == 6
