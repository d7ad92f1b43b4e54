"""Judges trained on EAGLE drafts (``--drafter eagle``): the miners' teacher-forced proposals are
the first tokens the decoding drafter drafts after the same prefixes, a draft+target judge reads
the state the drafter supplies (``Draft.hidden``), `train --method autojudge --drafter eagle` runs
end to end, and a judge head is refused with drafts other than those it was trained on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from scipy import stats

from bench.build import build_decoder
from bench.distributions import Sampling
from bench.drafters.eagle import EagleDrafter
from bench.errors import BenchError
from bench.verifier_heads import JudgeHead
from bench.learned.classifier import ClassifierRecipe
from bench.learned.features import PairOracle, eagle_outputs, token_features
from bench.learned.miners import Drafted
from bench.pairs import load_pair
from tests.eagle_checkpoints import write_eagle_head

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ref():
    """The shipped pair: its draft model (width 64) is narrower than its target (96), so an EAGLE
    head (the target's width) and the draft model have states of different widths."""
    return load_pair("ref", device="cpu")


@pytest.fixture(scope="module")
def eagle(ref, tmp_path_factory) -> str:
    folder = write_eagle_head(tmp_path_factory.mktemp("eagle") / "h", ref.target.config, "eagle3", draft_vocab=200, seed=1)
    return f"eagle:path={folder}"


def decoded_chains(ref, spec: str, prompts: list[list[int]], temperature: float) -> list[tuple[list[int], int, torch.Tensor]]:
    """Decode with sd and one-token chains; every (row's tokens so far, its first drafted token,
    that token's ``Draft.hidden``) the drafter produced."""
    sd = build_decoder(ref, "sd", draft_len=1, sampling=Sampling(temperature), drafter=spec)
    seen, chain = [], sd.drafter.chain

    def record(row, cap):
        out = chain(row, cap)
        if out is not None:
            seen.append((list(row.seq), int(out["tokens"][0]), out["hidden"][0]))
        return out

    sd.drafter.chain = record
    sd.generate_batch(prompts, 24, list(range(len(prompts))))
    return seen


def test_teacher_forced_eagle_proposals_are_the_drafters_first_tokens(ref, eagle):
    """Greedy: after each prefix the decoder drafted from, the oracle's teacher-forced proposal
    (one target forward, one head forward over the whole sequence) is the token chain(cap=1)
    drafted; the first position proposes nothing (the head reads a state and the next token)."""
    prompts = [ref.tokenizer("Q: 123 + 456 = ?").input_ids, ref.tokenizer("Q: 7 + 8 = ?").input_ids]
    seen = decoded_chains(ref, eagle, prompts, 0.0)
    assert len(seen) > 20
    finals = [max((s for s, _, _ in seen if s[: len(p)] == p), key=len) for p in prompts]  # per prompt, its last prefix
    proposed = PairOracle(ref).drafted([Drafted(final, 0.0, 0, eagle) for final in finals])
    assert all(p[0] == -1 for p in proposed)
    for seq, token, _ in seen:
        b = next(i for i, final in enumerate(finals) if final[: len(seq)] == seq)
        assert proposed[b][len(seq) - 1] == token


def test_teacher_forced_proposals_of_the_shipped_head_on_smollm2(smollm2):
    """Real weights, fp32, the pair's own head (``--drafter eagle``, no path): the same equality on
    two prompts, and the state a draft+target judge reads is the drafter's ``Draft.hidden``."""
    if not smollm2.spec.eagle or not (Path(__file__).resolve().parents[2] / "bench" / smollm2.spec.eagle).is_dir():
        pytest.skip("the smollm2 EAGLE head is not shipped in this checkout (docs/eagle.md)")
    prompts = [list(smollm2.tokenizer("The capital of France is").input_ids), list(smollm2.tokenizer("def add(a, b):").input_ids)]
    seen = decoded_chains(smollm2, "eagle", prompts, 0.0)
    finals = [max((s for s, _, _ in seen if s[: len(p)] == p), key=len) for p in prompts]
    oracle = PairOracle(smollm2)
    proposed = oracle.drafted([Drafted(final, 0.0, 0, "eagle") for final in finals])
    for seq, token, _ in seen:
        assert proposed[next(i for i, f in enumerate(finals) if f[: len(seq)] == seq)][len(seq) - 1] == token
    xs = token_features(smollm2, "draft+target", [(seq, token) for seq, token, _ in seen[::4]], oracle.eagle("eagle"))
    for x, (_, _, hidden) in zip(xs, seen[::4]):
        torch.testing.assert_close(x[:576], hidden.float(), rtol=1e-4, atol=1e-4)


def test_draft_target_features_read_the_eagle_state_the_drafter_supplies(ref, eagle):
    """features draft+target at a drafted token: the EAGLE head's ``head_input`` where it drafted
    it (the decoder's ``Draft.hidden``, the head's width 96, not the draft model's 64), then the
    target's state on the token."""
    prompt = ref.tokenizer("Q: 31 + 52 = ?").input_ids
    seen = decoded_chains(ref, eagle, [prompt], 0.0)[::5]
    oracle = PairOracle(ref)
    xs = token_features(ref, "draft+target", [(seq, token) for seq, token, _ in seen], oracle.eagle(eagle))
    for x, (_, _, hidden) in zip(xs, seen):
        assert x.shape == (96 + 96,)
        torch.testing.assert_close(x[:96], hidden.float(), rtol=1e-4, atol=1e-4)


def test_sampled_eagle_proposals_follow_the_heads_law(ref, eagle):
    """At draft temperature 0.7 the proposal after a prefix is a draw from the head's q there
    (``EagleDrafter.law`` at that temperature), each seed its own draw (chi-square)."""
    ids = ref.tokenizer("Q: 123 + 456 = ?").input_ids
    oracle = PairOracle(ref)
    draws = [p[-1] for p in oracle.drafted([Drafted(ids, 0.7, seed, eagle) for seed in range(1500)])]
    drafter = oracle.eagle(eagle, 0.7)
    with torch.no_grad():
        q = drafter.law(eagle_outputs(drafter, ref.target, [ids])[0][-1])[1].double()
    q = q / q.sum()  # float32 sums to 1 within 1e-7; scipy asks 1e-8
    counts = torch.bincount(torch.tensor(draws), minlength=q.shape[-1]).double()
    assert counts[q == 0].sum() == 0
    expected = q * len(draws)
    big = expected > 5
    observed = torch.cat([counts[big], counts[~big].sum(0, keepdim=True)])
    expected = torch.cat([expected[big], expected[~big].sum(0, keepdim=True)])
    assert big.sum() > 3 and stats.chisquare(observed.numpy(), expected.numpy()).pvalue > 1e-3


def test_eagle_specs_are_canonical_chains(eagle):
    """Tree options do not change a chain's first token: one head per EAGLE head; trees refused."""
    a = ClassifierRecipe(drafter=eagle + ",topk=2,depth=3")
    assert a.drafter == ClassifierRecipe(drafter=eagle).drafter == f"eagle:depth=5,{eagle[6:]},topk=4,total=16,tree=0"
    assert ClassifierRecipe(drafter="eagle", draft_temperature=1.0).drafter == "eagle:depth=5,path=,topk=4,total=16,tree=0"
    with pytest.raises(BenchError, match="chain drafts only"):
        ClassifierRecipe(drafter=eagle + ",tree=1")
    # --grid baselines: a configuration decoding EAGLE chains mines them at its temperature.
    from bench.config import RunConfig
    from bench.learned.cache import _drafts
    from bench.learned.recipes import recipe_of

    cfg = RunConfig(task="arith", pair="smollm2", method="autojudge", drafter="eagle:topk=2", temperature=1.0)
    recipe = recipe_of("autojudge").configure(**_drafts(recipe_of("autojudge"), cfg))
    assert (recipe.drafter, recipe.draft_temperature) == ("eagle:depth=5,path=,topk=4,total=16,tree=0", 1.0)


@pytest.mark.parametrize("method, features", [("autojudge", "draft+target"), ("selfjudge", "target")])
def test_train_a_judge_on_eagle_drafts_end_to_end_and_the_drafter_guard(ref, eagle, tmp_path, method, features):
    """`train --method autojudge|selfjudge --drafter eagle:path=...` writes a judge (AutoJudge's
    reads the EAGLE state) whose card names the drafter and the EAGLE head; it decodes with those
    drafts, and `run` refuses it in one line with the draft model's or another EAGLE head's."""
    from typer.testing import CliRunner

    from bench.cli import app
    from tests.conftest import cli_error

    out = tmp_path / "judge"
    args = ["train", "--method", method, "--drafter", eagle, "--task", "arith", "--pair", "ref", "--device", "cpu",
            "--num-prompts", "12", "--draft-temperature", "1", "--output-dir", str(out)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    card = json.loads((out / "card.json").read_text())
    path = eagle.partition("=")[2]
    assert card["recipe"]["drafter"] == f"eagle:depth=5,path={path},topk=4,total=16,tree=0" and card["eagle_head"] == path
    assert (card["features"], card["draft_hidden"], card["target_hidden"]) == (features, 96, 96)
    prompt = ref.tokenizer("Q: 123 + 456 = ?").input_ids
    decoder = build_decoder(ref, method, {"tau": 0.5}, head=str(out), sampling=Sampling(1.0), drafter=eagle)
    assert isinstance(decoder.drafter, EagleDrafter) and decoder.generate(prompt, 16).stats.drafted_tokens > 0
    other = write_eagle_head(tmp_path / "other", ref.target.config, "eagle3", draft_vocab=200, seed=2)
    for drafter in ("model", f"eagle:path={other}"):
        message = cli_error("run", "--method", method, "--head", str(out), "--pair", "ref", "--task", "arith",
                            "--drafter", drafter, "--limit", "1", "--device", "cpu", "--output-dir", str(tmp_path / "r"))  # fmt: skip
        assert "was trained on the drafts of eagle" in message and "decode it with --drafter eagle:path=" in message


def test_a_judge_trained_on_model_drafts_is_refused_with_others(ref):
    """The guard on heads trained before EAGLE: the draft model's (cards without a drafter say so
    too) refuses lookup; lookup's serves lookup_tree and suffix but not the draft model."""
    model, lookup = JudgeHead("target", *ref.hidden_sizes), JudgeHead("target", *ref.hidden_sizes)
    model.drafter, lookup.drafter = "model", "lookup:match=first,min_ngram=1,ngram=3,schedule=constant"
    with pytest.raises(BenchError, match="trained on the drafts of model, not of lookup"):
        build_decoder(ref, "selfjudge", head=model, drafter="lookup")
    for drafter in ("lookup", "suffix"):
        build_decoder(ref, "selfjudge", head=lookup, drafter=drafter)
    with pytest.raises(BenchError, match="decode it with --drafter lookup"):
        build_decoder(ref, "selfjudge", head=lookup, drafter="model")
    build_decoder(ref, "selfjudge", head=JudgeHead("target", *ref.hidden_sizes), drafter="lookup")  # by hand: claims none
