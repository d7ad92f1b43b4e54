"""DIVERSED's head on EAGLE drafts: training rollouts read, at every drafted position, the q and
hidden states decoding hands the verifier (replayed against decoding itself, position by position), `train --drafter eagle` writes a head whose card names its drafter,
and a run refuses a head trained on another drafter's states (on smollm2 the draft model's and
the EAGLE head's are both 576 wide, so only the card tells them apart)."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from bench.build import build_decoder
from bench.cli import app
from bench.distributions import Sampling, tv
from bench.errors import BenchError
from bench.verifier_heads import WeightHead, save_head
import bench.learned.reinforce
import bench.learned.rollout_rounds
import bench.verify_step
from bench.learned.reinforce import rollouts
from bench.learned.rollout_drafts import EagleDrafts
from tests.eagle_checkpoints import write_eagle_head

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def eagle(tmp_path, tiny_pair):
    """An EAGLE-3 head for the tiny pair's target, over a draft vocabulary lacking some tokens."""
    return write_eagle_head(tmp_path / "eagle", tiny_pair.target.config, "eagle3", draft_vocab=400, seed=1)


class RecordingHead(WeightHead):
    """A weight head that keeps the (h_draft, h_target) decoding hands it, a round per call."""

    def __init__(self, draft_hidden: int, target_hidden: int) -> None:
        super().__init__(draft_hidden, target_hidden)
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []

    def forward(self, h_draft, h_target):
        self.calls.append((h_draft[0].float().clone(), h_target[0].float().clone()))
        return super().forward(h_draft, h_target)


def decoded(pair, spec: str, head: RecordingHead, prompt: list[int], budget: int, monkeypatch) -> tuple[list, list]:
    """`run --method diversed --drafter SPEC` on one prompt at T = 1: the emitted tokens, and per
    round the drafted count k, the accepted count a and the q, p the verifier read."""
    rounds = []
    real_verify = bench.verify_step.verify

    def spy(verifier, round_, bonus, generators):
        verdict = real_verify(verifier, round_, bonus, generators)
        rounds.append((round_.draft.shape[1], int(verdict.accepted[0]), round_.q[0].float(), round_.p[0].float()))
        return verdict

    monkeypatch.setattr(bench.verify_step, "verify", spy)
    decoder = build_decoder(pair, "diversed", head=head, drafter=spec, sampling=Sampling(1.0), draft_len=5)
    tokens = decoder.generate_batch([prompt], budget, [11])[0].token_ids
    monkeypatch.undo()
    return tokens, rounds


def replayed(pair, spec: str, head: WeightHead, prompt: list[int], tokens: list[int], rounds: list, monkeypatch):
    """The decoding-matched rollout forced to decoding's tokens and verdicts (``sample`` and
    ``accept`` replay them): everything else, the rounds, the states, q and p, it computes."""
    verdicts = iter([v for k, a, _, _ in rounds for v in [True] * a + [False] * (a < k)])
    drawn = iter(tokens)
    monkeypatch.setattr(bench.learned.reinforce, "sample", lambda pi, gens: torch.tensor([next(drawn)]))
    monkeypatch.setattr(bench.learned.rollout_rounds, "accept", lambda pi_y, q_y, gens: torch.tensor([next(verdicts)]))
    out = rollouts(pair, head, [prompt], len(tokens), 1.0, [torch.Generator()], drafts=EagleDrafts(pair, spec, 1.0), rollout="decoding")
    monkeypatch.undo()
    return out[0]


def check_as_decoding(pair, spec: str, prompt: list[int], budget: int, monkeypatch) -> tuple:
    """Every position decoding's head reads (each round's drafts up to its first rejection), in
    order: the trainer's rollout reads the same h_draft, h_target, q(y) and TV(p, q) there, and
    draws from p exactly where decoding emits its bonus."""
    torch.manual_seed(0)
    head = RecordingHead(EagleDrafts(pair, spec, 1.0).width, pair.hidden_sizes[1]).to(pair.device)
    torch.nn.init.normal_(head.linear.weight, std=0.05)  # w varies: the policy mixes the two laws
    tokens, rounds = decoded(pair, spec, head, prompt, budget, monkeypatch)
    r = replayed(pair, spec, head, prompt, tokens, rounds, monkeypatch)
    assert r.tokens == tokens
    reached = [min(a + 1, k) for k, a, _, _ in rounds]
    hd = torch.cat([h[:n] for (h, _), n in zip(head.calls, reached)])
    ht = torch.cat([h[:n] for (_, h), n in zip(head.calls, reached)])
    q = torch.cat([q[:n] for (_, _, q, _), n in zip(rounds, reached)])
    p = torch.cat([p[:n] for (_, _, _, p), n in zip(rounds, reached)])
    at = torch.tensor(tokens)[r.drafted]
    assert int(r.drafted.sum()) == len(hd) and int((~r.drafted).sum()) == len(tokens) - len(hd)
    torch.testing.assert_close(r.h_draft[r.drafted], hd, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(r.h_target[r.drafted], ht, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(r.q_y[r.drafted], q.gather(-1, at[:, None])[:, 0], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(r.tv[r.drafted], tv(p, q), rtol=1e-4, atol=1e-5)
    return r, rounds


def test_eagle_rollouts_read_every_drafted_positions_states_as_decoding_hands_them(eagle, monkeypatch):
    """Rounds with fed-back positions (2-5) and with a bonus: position by position, the trainer's
    rollout reads what decoding reads. On a pair of its own: the engines a model has served keep
    caches sized to the longest sequence met, and a cache's size moves float sums in the last bit,
    so after other tests a T = 1 draw here could differ and the rounds below lose their mix."""
    from bench.pairs import load_pair

    tiny_pair = load_pair("tiny", device="cpu")
    r, rounds = check_as_decoding(tiny_pair, f"eagle:path={eagle}", [1, 17, 250, 3, 99, 41], 24, monkeypatch)
    assert max(a for _, a, _, _ in rounds) >= 1 and r.tv.min() > 0.05  # fed-back positions ran; q is the head's own law
    first = [a < k for k, a, _, _ in rounds]
    assert any(first) and not all(first)  # rejections and full rounds (bonus tokens from p) both occur
    model = rollouts(tiny_pair, WeightHead(64, 64), [[1, 17, 250, 3, 99, 41]], 6, 1.0, [torch.Generator().manual_seed(3)])
    assert not torch.equal(model[0].h_draft[0], r.h_draft[0])


def test_eagle_rollouts_on_smollm2_read_its_shipped_head_as_decoding_does(smollm2, monkeypatch):
    """The pair's own head (``--drafter eagle``, bench/reference/smollm2-eagle), fp32."""
    prompt = smollm2.tokenizer("The capital of France is").input_ids
    r, rounds = check_as_decoding(smollm2, "eagle", prompt, 12, monkeypatch)
    assert len(r.tokens) == 12 and max(a for _, a, _, _ in rounds) >= 1


def test_train_on_eagle_drafts_names_them_and_run_refuses_another_drafter(tmp_path, tiny_pair, eagle):
    """`train --drafter eagle:path=...` (one step) writes a head whose card says eagle; decoding
    with it on model drafts is refused in one line, as is a model-drafts head (a card from before
    the field existed) under eagle, while the matching pairings decode."""
    spec = f"eagle:path={eagle}"
    args = ["train", "--method", "diversed", "--drafter", spec, "--task", "gsm8k", "--pair", "tiny", "--data", "fixture",
            "--num-prompts", "2", "--batch-size", "2", "--epochs", "1", "--rollout-tokens", "4", "--device", "cpu", "--allow-flat-reward",
            "--output-dir", str(tmp_path / "head")]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "the target and the EAGLE head" in result.output and f"--drafter {spec} --head" in result.output
    card = json.loads((tmp_path / "head" / "card.json").read_text())
    assert card["drafter"] == spec and card["training"]["drafter"] == spec and card["trained"]
    with pytest.raises(BenchError, match="trained on the drafts of eagle:path=.*, not of model: decode it with --drafter eagle:path="):
        build_decoder(tiny_pair, "diversed", head=str(tmp_path / "head"), drafter="model")
    sd = build_decoder(tiny_pair, "diversed", head=str(tmp_path / "head"), drafter=spec, sampling=Sampling(1.0))
    assert len(sd.generate_batch([[1, 17, 250, 3]], 6, [0])[0].token_ids) == 6
    old = WeightHead(*tiny_pair.hidden_sizes)
    save_head(old, tmp_path / "old", {"pair": "tiny", "task": "gsm8k", "trained": True})  # no drafter field
    with pytest.raises(BenchError, match="trained on the drafts of model, not of eagle:.*--method diversed --drafter eagle"):
        build_decoder(tiny_pair, "diversed", head=str(tmp_path / "old"), drafter=spec)
    build_decoder(tiny_pair, "diversed", head=str(tmp_path / "old"), drafter="model")
    # Another EAGLE head of the same width: its states are not the ones the head learned to read.
    other = write_eagle_head(tmp_path / "other", tiny_pair.target.config, "eagle3", draft_vocab=400, seed=2)
    with pytest.raises(BenchError, match=f"not of eagle:path={other}.*decode it with --drafter eagle:path={eagle}"):
        build_decoder(tiny_pair, "diversed", head=str(tmp_path / "head"), drafter=f"eagle:path={other}")
    loaded = build_decoder(tiny_pair, "diversed", head=str(tmp_path / "head"), drafter=spec).head
    with pytest.raises(BenchError, match="not of model"):  # a loaded head (the Python API's) is held to its card too
        build_decoder(tiny_pair, "diversed", head=loaded, drafter="model")


def test_the_drafter_keys_a_head_only_when_it_is_not_the_draft_model():
    """Heads trained before EAGLE drafts keep their cache keys; an EAGLE head's key names the head
    it read (a chain's other parameters change nothing a rollout reads); a grid passes its drafter."""
    from bench.config import RunConfig
    from bench.learned.cache import _drafts
    from bench.learned.recipes import recipe_of

    recipe = recipe_of("diversed")
    assert "drafter" not in recipe.settings()
    assert recipe.configure(drafter="model").settings() == recipe.settings()
    assert recipe.configure(drafter="eagle:topk=3").settings()["drafter"] == "eagle:path="
    cfg = RunConfig(task="arith", pair="smollm2", method="diversed", drafter="eagle", temperature=1.0)
    assert recipe.configure(**_drafts(recipe, cfg)).settings()["drafter"] == "eagle:path="
    with pytest.raises(BenchError, match="trains on --drafter model or eagle, not lookup"):
        recipe.configure(drafter="lookup")
