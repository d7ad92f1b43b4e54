"""DIVERSED head training on the tiny pair: loss, regulariser sign, known optima, save/load, resume."""

import pandas as pd
import pytest
import torch

from bench.errors import BenchError
from bench.verifier_heads import WeightHead, load_head, save_head
from bench.tasks import Task, resolve_task
from bench.learned.reinforce import Rollout, TrainConfig, Trainer, reinforce_loss, reinforce_pp_loss


def fake_rollout(t=5, hidden=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    p, q = torch.rand(t, generator=g), torch.rand(t, generator=g)
    return Rollout(
        list(range(t)),
        torch.randn(t, hidden, generator=g),
        torch.randn(t, hidden, generator=g),
        p,
        q,
        torch.rand(t, generator=g),
        0.5 * (p + q),
        torch.zeros(t, dtype=torch.bool),
        torch.zeros(t, dtype=torch.bool),
        torch.ones(t, dtype=torch.bool),
    )


def test_fresh_head_is_one_half():
    head = WeightHead(4, 4)
    assert torch.equal(head(torch.randn(3, 4), torch.randn(3, 4)), torch.full((3,), 0.5))


def test_reinforce_loss_matches_the_formula():
    head = WeightHead(4, 4)
    with torch.no_grad():
        head.linear.bias.fill_(0.3)
    rollouts = [fake_rollout(seed=s) for s in range(3)]
    adv = torch.tensor([0.5, -1.0, 2.0])
    lam = 0.1
    w = torch.sigmoid(torch.tensor(0.3))
    pg = sum(a * torch.log(w * r.p_y + (1 - w) * r.q_y).sum() for a, r in zip(adv, rollouts)) / 3
    acc = sum((1 - w * r.tv).sum() for r in rollouts) / 3
    assert reinforce_loss(head, rollouts, adv, lam).item() == pytest.approx(
        (-pg - lam * acc).item(), rel=1e-5
    )


@pytest.mark.parametrize("loss_fn", ["reinforce", "reinforce++"])
def test_regulariser_pushes_w_down(loss_fn):
    """Rewarding expected acceptance sum_t (1 - w_t TV_t) must lower w (the authors had it backwards)."""
    head = WeightHead(4, 4)
    rollouts = [fake_rollout(seed=s) for s in range(4)]
    zero = torch.zeros(4)
    loss = (
        reinforce_loss(head, rollouts, zero, 1.0)
        if loss_fn == "reinforce"
        else reinforce_pp_loss(head, rollouts, zero, 1.0, 0.2)
    )
    loss.backward()
    assert head.linear.bias.grad.item() > 0  # gradient descent lowers the bias, so w falls


def mean_w_after(tiny_pair, reward, algorithm="reinforce", steps=8):
    task = Task(resolve_task("gsm8k"), "fixture", split="train", num_fewshot=0)
    cfg = TrainConfig(
        algorithm=algorithm,
        lr=0.05,
        batch_size=4,
        epochs=steps,
        num_prompts=4,
        reg_weight=0.0,
        rollout_tokens=24,
    )
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        trainer = Trainer(tiny_pair, task, cfg, Path(d), reward=reward)
        trainer.train()
        return trainer.history[0]["mean_w"], trainer.history[-1]["mean_w"]


def match_target(example, r, completion):
    """+1 per token equal to the target's greedy choice, -1 per token equal to the draft's, where
    the two differ (they cancel where they agree). With a = argmax p, b = argmax q, the expected
    reward per disagreeing token is w(p_a - p_b) + (1 - w)(q_a - q_b), increasing in w: optimum w = 1."""
    return (r.target_greedy.float() - r.draft_greedy.float()).mean().item()


def follow_draft(example, r, completion):
    """The same reward negated: optimum w = 0."""
    return -match_target(example, r, completion)


def test_rewarding_the_draft_drives_w_down(tiny_pair):
    first, last = mean_w_after(tiny_pair, follow_draft)
    assert last < first - 0.05 and last < 0.45


def test_rewarding_the_target_drives_w_up(tiny_pair):
    first, last = mean_w_after(tiny_pair, match_target)
    assert last > first + 0.05 and last > 0.55


def rewarded_rollout(target_likes: bool, seed: int, t: int = 6, hidden: int = 4) -> Rollout:
    """A rollout whose tokens the target (or the draft) made likely: p_y >> q_y (or the reverse)."""
    g = torch.Generator().manual_seed(seed)
    hi, lo = torch.full((t,), 0.8), torch.full((t,), 0.1)
    p, q = (hi, lo) if target_likes else (lo, hi)
    return Rollout(
        list(range(t)),
        torch.randn(t, hidden, generator=g),
        torch.randn(t, hidden, generator=g),
        p,
        q,
        torch.full((t,), 0.7),
        0.5 * (p + q),  # sampled by the fresh head, w = 0.5: every ratio starts at 1
        torch.zeros(t, dtype=torch.bool),
        torch.zeros(t, dtype=torch.bool),
        torch.ones(t, dtype=torch.bool),
    )


@pytest.mark.parametrize("rewarded", ["target", "draft"])
def test_reinforce_pp_step_moves_w_towards_the_rewarded_model(rewarded):
    """Rollouts made of the target's likely tokens earn 1, the draft's 0 (or the reverse): one
    REINFORCE++ step must raise (lower) w. Deterministic, unlike a short training run, whose
    direction over 8-16 steps of 4 tiny-pair rollouts depended on the seed before and after
    batched rollouts."""
    head = WeightHead(4, 4)
    rollouts = [rewarded_rollout(target_likes=s % 2 == 0, seed=s) for s in range(4)]
    rewards = torch.tensor([1.0 if (s % 2 == 0) == (rewarded == "target") else 0.0 for s in range(4)])
    reinforce_pp_loss(head, rollouts, rewards, 0.0, 0.2).backward()
    bias_grad = head.linear.bias.grad.item()
    assert bias_grad < 0 if rewarded == "target" else bias_grad > 0  # descent moves w that way


def test_checkpoint_resume_gives_the_uninterrupted_head(tiny_pair, tmp_path):
    task = Task(resolve_task("gsm8k"), "fixture", split="train", num_fewshot=0)
    cfg = TrainConfig(lr=0.05, batch_size=2, epochs=2, num_prompts=4, rollout_tokens=12, allow_flat_reward=True)
    whole = Trainer(tiny_pair, task, cfg, tmp_path / "whole", reward=match_target)
    whole.train()
    Trainer(tiny_pair, task, cfg, tmp_path / "cut", reward=match_target).train(
        until=2
    )  # "killed" after 2 steps
    resumed = Trainer(tiny_pair, task, cfg, tmp_path / "cut", reward=match_target)
    assert resumed.step == 2
    resumed.train()
    assert resumed.step == whole.step == 4
    for a, b in zip(whole.head.state_dict().values(), resumed.head.state_dict().values()):
        torch.testing.assert_close(a, b)
    assert len(resumed.history) == 4


def test_save_load_round_trip_and_pair_check(tmp_path):
    head = WeightHead(8, 16)
    with torch.no_grad():
        head.linear.weight.normal_()
    save_head(head, tmp_path, {"pair": "tiny", "task": "gsm8k"})
    loaded, card = load_head(str(tmp_path), "tiny", (8, 16))
    torch.testing.assert_close(loaded.linear.weight, head.linear.weight)
    assert card["task"] == "gsm8k"
    with pytest.raises(BenchError, match="trained for pair tiny"):
        load_head(str(tmp_path), "llama3", (2048, 4096))
    with pytest.raises(BenchError, match="diversed-bench train"):
        load_head(str(tmp_path / "missing"), "tiny", (8, 16))


def test_bad_training_settings():
    with pytest.raises(BenchError, match="reinforce, reinforce\\+\\+"):
        TrainConfig(algorithm="ppo")
    with pytest.raises(BenchError, match="temperature"):
        TrainConfig(temperature=0)
    with pytest.raises(BenchError, match="--rollout-tokens >= 1"):  # else a traceback after loading the pair
        TrainConfig(rollout_tokens=0)
    with pytest.raises(BenchError, match="inner_steps >= 1"):
        TrainConfig(algorithm="reinforce++", inner_steps=0)


def test_train_says_when_the_split_has_fewer_prompts_than_asked(tmp_path):
    from bench import api

    said: list[str] = []
    api.train(
        task="gsm8k", pair="tiny", data="fixture", output_dir=tmp_path, device="cpu", log=said.append,
        num_prompts=50, epochs=1, batch_size=8, rollout_tokens=2, allow_flat_reward=True,
    )  # fmt: skip
    available = len(Task(resolve_task("gsm8k"), "fixture", split="train").rows())
    assert said[0] == (
        f"train: gsm8k's train split in fixture has {available} prompts, fewer than --num-prompts 50: "
        f"training on all {available}"
    )
    assert len(pd.read_parquet(tmp_path / "train_log.parquet")) == 1  # one batch of all of them
