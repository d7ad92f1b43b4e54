"""DIVERSED's head on EAGLE drafts: training rollouts read the q and hidden states the decoding
drafter hands the verifier, `train --drafter eagle` writes a head whose card names its drafter,
and a run refuses a head trained on another drafter's states (on smollm2 the draft model's and
the EAGLE head's are both 576 wide, so only the card tells them apart)."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from bench.build import build_decoder
from bench.cli import app
from bench.distributions import Sampling, process, tv
from bench.drafters.eagle import DraftContext, EagleDrafter
from bench.errors import BenchError
from bench.verifier_heads import WeightHead, save_head
from bench.learned.reinforce import rollouts
from bench.learned.rollout_drafts import EagleDrafts, _Row
from tests.eagle_checkpoints import write_eagle_head

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def eagle(tmp_path, tiny_pair):
    """An EAGLE-3 head for the tiny pair's target, over a draft vocabulary lacking some tokens."""
    return write_eagle_head(tmp_path / "eagle", tiny_pair.target.config, "eagle3", draft_vocab=400, seed=1)


def decoding_law(pair, folder, seq: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q and hidden of the token after ``seq`` as `run --drafter eagle` drafts it (a fresh
    EagleDrafter handed the target's states of every token but the last, its chain's first step),
    and the target's p there."""
    drafter = EagleDrafter(path=str(folder)).bind(DraftContext(target=pair.target, sampling=Sampling(1.0)))
    layers = drafter.target_layers(pair.target.config.num_hidden_layers)
    with torch.no_grad():
        out = pair.target(torch.tensor([seq]), output_hidden_states=True)
        states = torch.cat([out.hidden_states[i] for i in layers], dim=-1)[0]
        row = _Row(0, list(seq), generator=torch.Generator().manual_seed(0))
        drafter.take_states([row], [states[:-1]])
        chain = drafter.chain(row, 1)
    assert chain is not None
    return chain["q"][0], chain["hidden"][0], process(out.logits[0, -1], Sampling(1.0))


def check_rollouts(pair, spec: str, path: str, prompts: list[list[int]], tokens: int) -> list:
    """At every step of the rollouts on ``spec``'s drafts, the rollout's q(y), TV(p, q) and h_draft
    are those of EagleDrafter (the head at ``path``) decoding the same tokens."""
    torch.manual_seed(0)
    draft_hidden, target_hidden = EagleDrafts(pair, spec, 1.0).width, pair.hidden_sizes[1]
    head = WeightHead(draft_hidden, target_hidden).to(pair.device)
    torch.nn.init.normal_(head.linear.weight, std=0.05)  # w varies: the policy mixes the two laws
    gens = [torch.Generator().manual_seed(3 + b) for b in range(len(prompts))]
    out = rollouts(pair, head, prompts, tokens, 1.0, gens, drafts=EagleDrafts(pair, spec, 1.0))
    for prompt, r in zip(prompts, out):
        for t, token in enumerate(r.tokens):
            q, hidden, p = decoding_law(pair, path, prompt + r.tokens[:t])
            torch.testing.assert_close(r.q_y[t], q[token], rtol=1e-4, atol=1e-6)
            torch.testing.assert_close(r.tv[t], tv(p, q), rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(r.h_draft[t], hidden.float(), rtol=1e-4, atol=1e-4)
    return out


def test_eagle_rollouts_read_the_q_and_hidden_states_decoding_hands(tiny_pair, eagle):
    """Two prompts of different lengths, batched: every step reads what decoding reads."""
    prompts = [[1, 17, 250, 3, 99, 41], [7, 300, 12]]
    out = check_rollouts(tiny_pair, f"eagle:path={eagle}", str(eagle), prompts, 6)
    assert sum(len(r.tokens) for r in out) >= 8 and out[0].tv.min() > 0.05  # q is not p: the head's own law
    model = rollouts(tiny_pair, WeightHead(64, 64), prompts, 6, 1.0, [torch.Generator().manual_seed(s) for s in (3, 4)])
    assert not torch.equal(model[0].h_draft[0], out[0].h_draft[0])


def test_eagle_rollouts_on_smollm2_read_its_shipped_head_as_decoding_does(smollm2):
    """The pair's own head (``--drafter eagle``, bench/reference/smollm2-eagle), fp32."""
    prompts = [smollm2.tokenizer(text).input_ids for text in ("The capital of France is", "Write one sentence about rain:")]
    out = check_rollouts(smollm2, "eagle", "reference/smollm2-eagle", prompts, 4)
    assert all(len(r.tokens) == 4 for r in out)


def test_train_on_eagle_drafts_names_them_and_run_refuses_another_drafter(tmp_path, tiny_pair, eagle):
    """`train --drafter eagle:path=...` (one step) writes a head whose card says eagle; decoding
    with it on model drafts is refused in one line, as is a model-drafts head (a card from before
    the field existed) under eagle, while the matching pairings decode."""
    spec = f"eagle:path={eagle}"
    args = ["train", "--method", "diversed", "--drafter", spec, "--task", "gsm8k", "--pair", "tiny", "--data", "fixture",
            "--num-prompts", "2", "--batch-size", "2", "--epochs", "1", "--rollout-tokens", "4", "--device", "cpu",
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
