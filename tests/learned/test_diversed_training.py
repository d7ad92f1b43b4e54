"""DIVERSED's training as it decodes (issue 59, item 5): decoding's rounds in the rollouts (the
bonus token from p in the decoding-matched rollout), the refusal of a reward that gives nothing to
learn, the regulariser's documented direction, and a head that learns a per-token choice."""

from __future__ import annotations

import pytest
import torch

from bench.build import build_decoder
from bench.distributions import Sampling
from bench.errors import BenchError
from bench.verifier_heads import WeightHead
from bench.learned.reinforce import FLAT_REWARD, Rollout, TrainConfig, Trainer, policy_terms, reinforce_loss, rollouts
from bench.learned.rollout_rounds import BONUS, Rounds
from bench.tasks import Task, resolve_task

pytestmark = pytest.mark.usefixtures("one_thread")


def walk(rounds: Rounds, verdicts: list[bool]) -> list[int]:
    """The positions one row goes through, a token per verdict (a bonus token's verdict unread)."""
    emitted: list[list[int]] = [[]]
    seen = []
    for verdict in verdicts:
        seen += rounds.positions([0], emitted)
        emitted[0].append(0)
        rounds.advance([0], [verdict], emitted)
    return seen


def test_rounds_follow_decoding():
    """Decoding-matched: drafts 1..N, the bonus after N accepted, a new round after a rejection or
    a bonus, and the last round cut to the budget (N = min(N, budget - emitted - 1), none left:
    the token is from p). The authors' rollout opens a new round instead of a bonus."""
    matched = Rounds(draft_len=3, bonus=True, tracked=True, budget=10)
    assert walk(matched, [True, True, True, True, True, False, True, True, True, True]) == [1, 2, 3, BONUS, 1, 2, 1, 2, 3, BONUS]
    assert walk(Rounds(3, bonus=True, tracked=True, budget=7), [True] * 7) == [1, 2, 3, BONUS, 1, 2, BONUS]
    assert walk(Rounds(3, bonus=True, tracked=True, budget=5), [True] * 5) == [1, 2, 3, BONUS, BONUS]
    authors = Rounds(draft_len=3, bonus=False, tracked=True, budget=10)
    assert walk(authors, [True, True, True, True, False, True]) == [1, 2, 3, 1, 2, 1]
    assert walk(Rounds(3, bonus=False, tracked=False, budget=10), [True, False, True]) == [1, 1, 1]


def test_decoding_rollout_draws_decodings_bonus_from_p(tiny_pair):
    """A head with w ~ 0 makes pi = q, so decoding accepts every draft: the decoding-matched
    rollout's rounds are then N = 5 drafts and a bonus from p, the last cut to the budget; the
    authors' rollout draws every token from pi. A bonus token has no head term."""
    head = WeightHead(*tiny_pair.hidden_sizes)
    torch.nn.init.constant_(head.linear.bias, -40.0)
    prompt = [[1, 17, 250, 3]]
    matched = rollouts(tiny_pair, head, prompt, 20, 1.0, [torch.Generator().manual_seed(5)], rollout="decoding")[0]
    pattern = ([True] * 5 + [False]) * 3 + [True, False]
    assert matched.drafted.tolist() == pattern[: len(matched.tokens)] and len(matched.tokens) >= 12
    bonus = ~matched.drafted
    torch.testing.assert_close(matched.pi_y_old[bonus], matched.p_y[bonus])  # drawn from p
    torch.testing.assert_close(matched.pi_y_old[~bonus], matched.q_y[~bonus])  # drawn from pi = q
    authors = rollouts(tiny_pair, head, prompt, 20, 1.0, [torch.Generator().manual_seed(5)])[0]
    assert authors.drafted.all()
    assert len(policy_terms(head, matched)[2]) == int(matched.drafted.sum())


def gsm8k_train() -> Task:
    return Task(resolve_task("gsm8k"), "fixture", split="train", num_fewshot=0)


def test_a_flat_reward_is_refused_in_one_line_and_the_flag_goes_on(tiny_pair, tmp_path):
    """Every rollout earning the same reward leaves only the regulariser to move w: refused
    before the first update (no checkpoint), unless the expert asks to go on."""
    cfg = TrainConfig(batch_size=2, epochs=1, num_prompts=2, rollout_tokens=4)
    with pytest.raises(BenchError, match=r"^train: the reward barely varies .* \(std 0 < 0\.001;.* --allow-flat-reward to go on$") as err:
        Trainer(tiny_pair, gsm8k_train(), cfg, tmp_path / "a", reward=lambda e, r, text: 0.25).train()
    assert "\n" not in str(err.value) and not (tmp_path / "a" / "checkpoint.pt").exists()
    spread = iter([0.25, 0.25 + 2 * FLAT_REWARD])  # std FLAT_REWARD: enough
    Trainer(tiny_pair, gsm8k_train(), cfg, tmp_path / "b", reward=lambda e, r, text: next(spread)).train()
    flag = TrainConfig(**{**cfg.__dict__, "allow_flat_reward": True})
    record = Trainer(tiny_pair, gsm8k_train(), flag, tmp_path / "c", reward=lambda e, r, text: 0.25).train()
    assert record["step"] == 1 and record["reward_std"] == 0.0


def noise(example, r: Rollout, text: str) -> float:
    """A reward with spread that says nothing about w: the policy-gradient term is noise."""
    return (sum(r.tokens) % 7) / 6


def acceptance(pair, head: WeightHead) -> float:
    """Accepted over drafted tokens decoding held-out prompts with DIVERSED and this head, T = 1."""
    decoder = build_decoder(pair, "diversed", head=head, sampling=Sampling(1.0))
    prompts = [[1, 40 + k, 300 - k, 7] for k in range(4)]
    stats = [g.stats for g in decoder.generate_batch(prompts, 24, list(range(4)))]
    return sum(s.accepted_tokens for s in stats) / sum(s.drafted_tokens for s in stats)


def test_a_larger_reg_weight_lowers_w_and_raises_acceptance(tiny_pair, tmp_path):
    """docs/methods.md: the regulariser rewards expected acceptance, pushing w down. Equal
    training under a reward that favours neither model: the larger --reg-weight ends with the
    lower mean w and expected acceptance closer to 1, and decodes held-out prompts accepting more."""
    ends = {}
    for reg in (0.0, 2.0):
        cfg = TrainConfig(lr=0.05, batch_size=4, epochs=6, num_prompts=4, rollout_tokens=16, reg_weight=reg)
        trainer = Trainer(tiny_pair, gsm8k_train(), cfg, tmp_path / str(reg), reward=noise)
        trainer.train()
        ends[reg] = (trainer.history[-1], acceptance(tiny_pair, trainer.head))
    (low, low_acc), (high, high_acc) = ends[0.0], ends[2.0]
    assert high["mean_w"] < low["mean_w"] - 0.1 and high["expected_acceptance"] > low["expected_acceptance"]
    assert high_acc > low_acc


def synthetic_batch(head: WeightHead, g: torch.Generator, rows: int = 16, t: int = 16) -> tuple[list[Rollout], torch.Tensor]:
    """Rollouts of a two-token task: the target puts 0.9 on token 0, the draft 0.9 on token 1; a
    token's context h (4 features) says which one the task wants: token 0 where h[0] > 0, token 1
    elsewhere. The reward is the share of wanted tokens, so the right w is high where h[0] > 0 and
    low elsewhere. Tokens are drawn from pi under the current head, as the trainer's rollouts are."""
    out, rewards = [], []
    p = torch.tensor([0.9, 0.1])
    q = torch.tensor([0.1, 0.9])
    for _ in range(rows):
        h = torch.randn(t, 4, generator=g)
        hd = torch.zeros(t, 1)
        with torch.no_grad():
            w = head(hd, h).unsqueeze(-1)
        pi = w * p + (1 - w) * q
        y = torch.multinomial(pi, 1, generator=g)[:, 0]
        wanted = (h[:, 0] <= 0).long()
        rewards.append((y == wanted).float().mean())
        tv = torch.full((t,), 0.8)
        out.append(Rollout(y.tolist(), hd, h, p[y], q[y], tv, pi.gather(-1, y[:, None])[:, 0], y == 0, y == 1, torch.ones(t, dtype=torch.bool)))
    return out, torch.stack(rewards)


def test_the_trained_head_learns_which_tokens_want_the_target():
    """REINFORCE as the trainer runs it (``reinforce_loss`` against the batch mean, AdamW) on the
    synthetic task: the head's w must follow the token's context, not settle on one value."""
    g = torch.Generator().manual_seed(0)
    head = WeightHead(1, 4)
    opt = torch.optim.AdamW(head.parameters(), lr=0.05)
    for _ in range(150):
        batch, rewards = synthetic_batch(head, g)
        loss = reinforce_loss(head, batch, rewards - rewards.mean(), 0.01)
        opt.zero_grad()
        loss.backward()
        opt.step()
    h = torch.randn(2000, 4, generator=g)
    with torch.no_grad():
        w = head(torch.zeros(2000, 1), h)
    wants_target = h[:, 0] > 0
    assert w[wants_target].mean() > 0.8 and w[~wants_target].mean() < 0.2
