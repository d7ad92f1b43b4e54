"""DIVERSED's recipe: training the weight head (docs/spec.md §4, the DIVERSED head and its
training) with REINFORCE and the acceptance regulariser, behind the Recipe interface
(``ReinforceRecipe``). Both models are frozen; only the head learns.

Policy: the ensemble pi_t = w_t p_t + (1 - w_t) q_t, w_t = head([h_draft ; h_target]). A rollout
samples up to ``rollout_tokens`` tokens from pi and keeps, per token, the two hidden states and the
scalars p_t(y_t), q_t(y_t), TV(p_t, q_t): the loss is then recomputed from the head alone, so a
step costs one small matrix product however large the models are. The head reads, at each drafted
position, the states decoding hands it there (``bench.learned.rollout_rounds``: on EAGLE drafts,
the head's fed-back states after a round's first draft). ``rollout="authors"`` (the default, the
authors' rollout) draws every token from pi; ``rollout="decoding"`` draws the token after a round
whose drafts were all accepted from p, as decoding's bonus token is: it carries no head term.

Objective (maximised): the task reward through sequence-level REINFORCE on sum_t log pi(y_t), plus
``reg_weight`` x expected acceptance sum_t (1 - TV(q_t, pi_t)) = sum_t (1 - w_t TV(p_t, q_t)).
Higher acceptance means smaller w, so the regulariser's gradient must push w DOWN (the authors'
release had the sign backwards; ``test_regulariser_pushes_w_down`` pins it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd
import torch
from torch import Tensor

from bench.atomic import write_atomic
from bench.context import Context, check_truncation, fit_prompt
from bench.distributions import Sampling, process, sample, tv
from bench.drafters.eagle import with_pair_head
from bench.engines import EagerEngine, EngineFactory, ModelEngine, open_engine
from bench.errors import BenchError
from bench.verifier_heads import WeightHead, save_head
from bench.learned import Recipe, TrainJob
from bench.learned.rollout_drafts import ModelDrafts, RolloutDrafts, drafter_setting, rollout_drafts
from bench.learned.rollout_rounds import BONUS, Rounds, check_rollout
from bench.pairs import Pair, encode_prompt
from bench.tasks import Example, Task

ALGORITHMS = ("reinforce", "reinforce++")
# The first step's rollouts must differ in reward by at least this standard deviation (rewards
# are in [0, 1]: accuracy, pass@1, ROUGE-2 / 100), else the reward gives the head nothing to learn
# and only the regulariser moves w. Chosen on the reward spreads in docs/methods.md ("Nothing to
# learn"): 0 on the tiny pair (random text), 0.3-0.5 on the ref pair's arith.
FLAT_REWARD = 1e-3


@dataclass(frozen=True)
class TrainConfig:
    """Defaults are the authors' schedule, comeusr/diversed@31115a2 ``train_config/config.yaml``
    (and ``run_rl.sh``): AdamW lr 5e-4, 400 prompts an epoch (``n_examples``) x 2 epochs
    (``global_epochs``), batch 8 (``model.batch_size``)."""

    algorithm: str = "reinforce"
    lr: float = 5e-4
    batch_size: int = 8
    epochs: int = 2
    num_prompts: int = 400
    reg_weight: float = 0.01
    temperature: float = 1.0
    rollout_tokens: int = 128
    clip: float = 0.2  # reinforce++: ratio clipping
    inner_steps: int = 2  # reinforce++: updates per batch of rollouts
    baseline_decay: float = 0.9  # running-mean baseline (ROUGE rewards)
    seed: int = 0
    truncate_prompt: str = "none"  # none: refuse prompt + rollout past a model's context; left: cut
    chat_template: bool = False  # prompts as the user turn of the pair's chat template, as `run` does
    drafter: str = "model"  # whose q and hidden states: the draft model's, or eagle:path=P (an EAGLE head's)
    rollout: str = "authors"  # authors: every token from pi; decoding: decoding's rounds, the bonus from p
    draft_len: int = 5  # decoding's drafted tokens per round (`run --draft-len`): where the rounds are
    allow_flat_reward: bool = False  # go on when the first step's rewards barely vary (FLAT_REWARD)

    def __post_init__(self) -> None:
        object.__setattr__(self, "drafter", drafter_setting(self.drafter))
        check_rollout(self.rollout)
        if self.draft_len < 1:
            raise BenchError(f"--draft-len must be >= 1, got {self.draft_len}")
        if self.algorithm not in ALGORITHMS:
            raise BenchError(f"--algorithm must be one of {', '.join(ALGORITHMS)}, got {self.algorithm!r}")
        if self.lr <= 0 or min(self.batch_size, self.epochs, self.num_prompts, self.rollout_tokens) < 1:
            raise BenchError(
                "--lr must be > 0 and --batch-size, --epochs, --num-prompts, --rollout-tokens >= 1"
            )
        if self.inner_steps < 1:
            raise BenchError(f"reinforce++ needs inner_steps >= 1, got {self.inner_steps}")
        if self.reg_weight < 0:
            raise BenchError(f"--reg-weight must be >= 0, got {self.reg_weight}")
        check_truncation(self.truncate_prompt)
        if self.temperature <= 0:
            raise BenchError(
                f"training samples from the policy: --temperature must be > 0, got {self.temperature}"
            )


@dataclass
class Rollout:
    """One sampled sequence and the per-token quantities the loss needs (all detached)."""

    tokens: list[int]
    h_draft: Tensor  # [T, Hd]
    h_target: Tensor  # [T, Ht]
    p_y: Tensor  # [T] target probability of the sampled token
    q_y: Tensor  # [T] draft probability of the sampled token
    tv: Tensor  # [T] TV(p_t, q_t)
    pi_y_old: Tensor  # [T] policy probability at sampling time (REINFORCE++ ratios)
    target_greedy: Tensor  # [T] bool: y_t == argmax p_t
    draft_greedy: Tensor  # [T] bool: y_t == argmax q_t
    drafted: Tensor  # [T] bool: y_t was drawn from pi at a drafted position (False: decoding's bonus, from p)


# What a rollout keeps per token, in Rollout's field order after ``tokens``.
ROLLOUT_KEYS = ("hd", "ht", "p_y", "q_y", "tv", "pi", "tg", "dg", "dr")


@torch.no_grad()
def rollouts(
    pair: Pair,
    head: WeightHead,
    prompts: list[list[int]],
    max_tokens: int,
    temperature: float,
    generators: list[torch.Generator],
    factory: EngineFactory = EagerEngine,
    drafts: RolloutDrafts | None = None,
    *,
    rollout: str = "authors",
    draft_len: int = 5,
) -> list[Rollout]:
    """Sample from the ensemble policy for a batch of prompts, one token a step, the target on the
    decoding loop's engine and the draft side ``drafts`` (the pair's draft model by default, or an
    EAGLE head), in decoding's rounds of ``draft_len`` drafts (``rollout``: whose rule draws the
    token after a round). Row b draws from ``generators[b]`` only, so its rollout does not depend
    on the other rows; rows ending on EOS leave the batch."""
    check_rollout(rollout)
    sampling = Sampling(temperature)
    drafts = drafts or ModelDrafts(pair)
    matched = rollout == "decoding"
    rounds = Rounds(draft_len, matched, drafts.positional or matched, max_tokens)
    longest = max(map(len, prompts)) + max_tokens + 1
    engines = [open_engine(factory, pair.target, (1,), states=drafts.layers)]  # the prompt, then a token a step
    engines += drafts.open(factory, engines[0], prompts, longest)
    for engine in engines:
        engine.start(len(prompts), longest)
    eos = set(pair.eos_token_ids)
    cols: list[dict[str, list[Tensor]]] = [{k: [] for k in ROLLOUT_KEYS} for _ in prompts]
    tokens: list[list[int]] = [[] for _ in prompts]
    alive = list(range(len(prompts)))
    feed = [list(p) for p in prompts]
    for _ in range(max_tokens):
        positions = rounds.positions(alive, tokens)
        mine = [generators[b] for b in alive]
        y, values = policy_step(pair, head, engines, feed, sampling, mine, drafts, alive, positions)
        for j, b in enumerate(alive):
            for key, value in values.items():
                cols[b][key].append(value[j])
        kept = rounds.verdicts(positions, values["pi"], values["q_y"], mine)
        drafts.confirm(alive, y.tolist())
        going = survivors(engines, alive, tokens, y.tolist(), eos)
        rounds.advance(alive, kept, tokens)
        alive = going
        if not alive:
            break
        feed = [[tokens[b][-1]] for b in alive]
    return [stacked(t, c) for t, c in zip(tokens, cols)]


def policy_step(
    pair: Pair,
    head: WeightHead,
    engines: list[ModelEngine],
    feed: list[list[int]],
    sampling: Sampling,
    generators: list[torch.Generator],
    drafts: RolloutDrafts,
    alive: list[int],
    positions: list[int],
) -> tuple[Tensor, dict[str, Tensor]]:
    """One token of every live row (``alive``, the batch's rows still going) drawn from
    pi = w p + (1 - w) q, or from p where the row's position is decoding's bonus (``feed``: each
    row's tokens not yet in the engines), and what the loss keeps of that step, per
    ``ROLLOUT_KEYS``."""
    ids = torch.tensor([f + [0] * (max(map(len, feed)) - len(f)) for f in feed], device=pair.device)
    rows = torch.arange(len(feed), device=pair.device)
    last = torch.tensor([len(f) - 1 for f in feed], device=pair.device)
    real = [len(f) for f in feed]
    p_logits, ht = engines[0].step(ids, real, keep=ids.shape[1], hidden=True)
    assert ht is not None  # hidden=True
    q, h_d = drafts.law(engines[0], ids, real, alive, positions, sampling)
    p = process(p_logits[rows, last], sampling)
    h_t = ht[rows, last]
    drafted = torch.tensor([k != BONUS for k in positions], device=pair.device)
    w = head(h_d, h_t).unsqueeze(-1)
    pi = torch.where(drafted.unsqueeze(-1), w * p + (1 - w) * q, p)
    y = sample(pi, generators)
    picked = y.unsqueeze(-1)
    values = {
        "hd": h_d,
        "ht": h_t,
        "p_y": p.gather(-1, picked).squeeze(-1),
        "q_y": q.gather(-1, picked).squeeze(-1),
        "tv": tv(p, q),
        "pi": pi.gather(-1, picked).squeeze(-1),
        "tg": y == p.argmax(-1),
        "dg": y == q.argmax(-1),
        "dr": drafted,
    }
    return y, values


def survivors(
    engines: list[ModelEngine], alive: list[int], tokens: list[list[int]], sampled: list[int], eos: set[int]
) -> list[int]:
    """Appends each live row's sampled token to ``tokens``; returns the rows that go on (those
    that did not sample an EOS), the engines cut to them when some ended."""
    keep = []
    for j, (b, token) in enumerate(zip(alive, sampled)):
        tokens[b].append(token)
        if token not in eos:
            keep.append(j)
    if keep and len(keep) < len(alive):
        for engine in engines:
            engine.select(keep)
    return [alive[j] for j in keep]


def stacked(tokens: list[int], cols: dict[str, list[Tensor]]) -> Rollout:
    """One row's per-step values as the Rollout's tensors (hidden states in float32)."""
    stack = {k: torch.stack(v).float() if k in ("hd", "ht") else torch.stack(v) for k, v in cols.items()}
    return Rollout(tokens, *(stack[k] for k in ROLLOUT_KEYS))


def policy_terms(head: WeightHead, r: Rollout) -> tuple[Tensor, Tensor, Tensor]:
    """Per drafted token (a bonus token from p has no head term), differentiable in the head:
    log pi(y_t), expected acceptance 1 - w_t TV_t, w_t."""
    m = r.drafted
    w = torch.sigmoid(head.logit(r.h_draft[m], r.h_target[m]))
    log_pi = torch.log((w * r.p_y[m] + (1 - w) * r.q_y[m]).clamp_min(1e-30))
    return log_pi, 1 - w * r.tv[m], w


def reinforce_loss(
    head: WeightHead, rollouts: list[Rollout], advantages: Tensor, reg_weight: float
) -> Tensor:
    """-mean_i [A_i sum_t log pi(y_it)] - reg_weight mean_i sum_t (1 - TV(q_it, pi_it))."""
    terms = [policy_terms(head, r) for r in rollouts]
    pg = torch.stack([a * lp.sum() for a, (lp, _, _) in zip(advantages, terms)]).mean()
    acc = torch.stack([ea.sum() for _, ea, _ in terms]).mean()
    return -pg - reg_weight * acc


def reinforce_pp_loss(
    head: WeightHead, rollouts: list[Rollout], rewards: Tensor, reg_weight: float, clip: float
) -> Tensor:
    """REINFORCE++: token-level advantages normalised over the batch, PPO-style clipped ratios."""
    terms = [policy_terms(head, r) for r in rollouts]
    adv = torch.cat([torch.full_like(lp, float(reward)) for reward, (lp, _, _) in zip(rewards, terms)])
    adv = (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-8)
    log_pi = torch.cat([lp for lp, _, _ in terms])
    old = torch.cat([r.pi_y_old[r.drafted].clamp_min(1e-30).log() for r in rollouts])
    ratio = torch.exp(log_pi - old)
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv).mean()
    acc = torch.stack([ea.sum() for _, ea, _ in terms]).mean()
    return -surrogate - reg_weight * acc


Reward = Callable[[Example, Rollout, str], float]


def task_reward(task: Task) -> Reward:
    """The task's primary metric on the cut completion: accuracy, pass@1, or ROUGE-2 / 100."""
    scale = 100.0 if task.spec.metric == "rouge" else 1.0

    def reward(example: Example, r: Rollout, completion: str) -> float:
        return float(task.score(example.doc, completion)["quality"]) / scale

    return reward


def reward_std(rewards: Tensor) -> Tensor:
    """The rollouts' reward spread: the population standard deviation (0 for one rollout)."""
    return rewards.float().std(unbiased=False)


def check_spread(rewards: Tensor) -> None:
    """Refuses a reward that barely varies across the first step's rollouts (``FLAT_REWARD``):
    REINFORCE learns from reward differences, so only the regulariser would move w."""
    spread = float(reward_std(rewards))
    if spread < FLAT_REWARD:
        raise BenchError(
            f"train: the reward barely varies across the first step's {len(rewards)} rollouts (std {spread:.2g} < "
            f"{FLAT_REWARD:g}; rewards in [0, 1]): the head has nothing to learn, only the regulariser would move w; "
            "use a task, prompts or --temperature where rollouts differ in reward, or --allow-flat-reward to go on"
        )


def same_training(config: dict[str, Any]) -> dict[str, Any]:
    """A config's settings that change the head: ``allow_flat_reward`` only lets a run go on."""
    return {k: v for k, v in config.items() if k != "allow_flat_reward"}


class Trainer:
    """Runs training with checkpoints after every step; a killed run resumes from the last one."""

    def __init__(
        self,
        pair: Pair,
        task: Task,
        cfg: TrainConfig,
        output: Path,
        *,
        reward: Reward | None = None,
        data: str = "",
        log: Callable[[dict[str, Any]], None] | None = None,
        engine: EngineFactory = EagerEngine,
    ) -> None:
        self.pair, self.task, self.cfg, self.output = pair, task, cfg, output
        self.reward = reward or task_reward(task)
        self.data = data
        self.log = log
        self.engine = engine
        self.rouge = task.spec.metric == "rouge"
        self.drafts = rollout_drafts(pair, cfg.drafter, cfg.temperature)
        self.head = WeightHead(self.drafts.width, pair.hidden_sizes[1]).to(pair.device)
        self.opt = torch.optim.AdamW(self.head.parameters(), lr=cfg.lr)
        self.step, self.baseline, self.history = 0, None, []
        self.ckpt = output / "checkpoint.pt"
        if self.ckpt.exists():
            state = torch.load(self.ckpt, map_location=pair.device)
            # A checkpoint written before a setting existed ran that setting's default.
            if same_training({**asdict(TrainConfig()), **state["config"]}) != same_training(asdict(cfg)):
                raise BenchError(
                    f"{self.ckpt} was written with other settings; use another --output-dir or delete it"
                )
            self.head.load_state_dict(state["head"])
            self.opt.load_state_dict(state["optimizer"])
            self.step, self.baseline = state["step"], state["baseline"]
            # A kill between the log's write and the checkpoint's leaves the log a step ahead.
            self.history = pd.read_parquet(output / "train_log.parquet").to_dict("records")[: self.step]

    def resumed(self) -> str | None:
        """One line saying what a resumed run found and what is left; None for a fresh start."""
        if not self.step:
            return None
        steps = len(self.batches())
        return (
            f"train: resuming from {self.ckpt}: {self.step} of {steps} steps done "
            f"({self.cfg.batch_size} prompts a step), {steps - self.step} left"
        )

    def batches(self) -> list[list[Example]]:
        examples = self.task.examples(self.cfg.num_prompts, self.cfg.seed)
        out = []
        for epoch in range(self.cfg.epochs):
            order = torch.randperm(
                len(examples), generator=torch.Generator().manual_seed(self.cfg.seed + epoch)
            )
            shuffled = [examples[i] for i in order]
            out += [
                shuffled[i : i + self.cfg.batch_size] for i in range(0, len(shuffled), self.cfg.batch_size)
            ]
        return out

    def prompts(self, batches: list[list[Example]]) -> dict[str, tuple[list[int], int]]:
        """Every training prompt's ids and dropped-token count, checked against the context of every
        model a rollout feeds (the target, and the draft model unless an EAGLE head drafts) before
        the first rollout."""
        tok, context = self.pair.tokenizer, Context.of(self.pair.target, self.drafts.model)
        return {
            e.example_id: fit_prompt(
                encode_prompt(self.pair, e.prompt, self.cfg.chat_template),
                self.cfg.rollout_tokens,
                context,
                self.cfg.truncate_prompt,
                example=f"{self.task.name} train example {e.example_id}",
                bos_token_id=tok.bos_token_id,
                budget_flag="--rollout-tokens",
            )
            for batch in batches
            for e in batch
        }

    def train(self, until: int | None = None) -> dict[str, Any]:
        """Train to the end (or to step ``until``), checkpointing after every step."""
        batches = self.batches()
        prompts = self.prompts(batches)
        for step in range(self.step, min(len(batches), until or len(batches))):
            start = time.perf_counter()
            batch = batches[step]
            sampled = rollouts(
                self.pair,
                self.head,
                [prompts[e.example_id][0] for e in batch],
                self.cfg.rollout_tokens,
                self.cfg.temperature,
                self.generators(step, len(batch)),
                self.engine,
                self.drafts,
                rollout=self.cfg.rollout,
                draft_len=self.cfg.draft_len,
            )
            reward_t = self.rewards(batch, sampled)
            if step == 0 and not self.cfg.allow_flat_reward:
                check_spread(reward_t)
            loss = self.learn(sampled, reward_t)
            mean_r = float(reward_t.mean())
            self.baseline = (
                mean_r
                if self.baseline is None
                else (self.cfg.baseline_decay * self.baseline + (1 - self.cfg.baseline_decay) * mean_r)
            )
            dropped = sum(prompts[e.example_id][1] for e in batch)
            record = self.record(step, len(batches), reward_t, loss, sampled, dropped, start)
            self.history.append(record)
            self.step = step + 1
            self._checkpoint()
            if self.log:
                self.log(record)
        return self.history[-1] if self.history else {}

    def generators(self, step: int, rows: int) -> list[torch.Generator]:
        """Row k of step ``step`` draws from its own seed: a resumed run samples what it would have."""
        return [
            torch.Generator(device=self.pair.device).manual_seed((self.cfg.seed * 100003 + step) * 1009 + k)
            for k in range(rows)
        ]

    def rewards(self, batch: list[Example], sampled: list[Rollout]) -> Tensor:
        """[B] the reward of each rollout's decoded completion."""
        rewards = [self.reward(e, r, self.pair.text(r.tokens)) for e, r in zip(batch, sampled)]
        return torch.tensor(rewards, device=self.pair.device)

    def learn(self, sampled: list[Rollout], reward_t: Tensor) -> Tensor:
        """The head's update on one batch of rollouts: one REINFORCE step against the baseline, or
        ``inner_steps`` clipped REINFORCE++ steps. Returns the last loss."""
        if self.cfg.algorithm == "reinforce":
            base = self.baseline if (self.rouge and self.baseline is not None) else float(reward_t.mean())
            loss = reinforce_loss(self.head, sampled, reward_t - base, self.cfg.reg_weight)
            self._update(loss)
            return loss
        for _ in range(self.cfg.inner_steps):
            loss = reinforce_pp_loss(self.head, sampled, reward_t, self.cfg.reg_weight, self.cfg.clip)
            self._update(loss)
        return loss

    def record(
        self, step: int, steps: int, reward_t: Tensor, loss: Tensor, sampled: list[Rollout], dropped: int, start: float
    ) -> dict[str, Any]:
        """The step's line of the training log (train_log.parquet), its terms read after the update."""
        with torch.no_grad():
            terms = [policy_terms(self.head, r) for r in sampled]
        return {
            "step": step + 1,
            "steps": steps,
            "reward": float(reward_t.mean()),
            "reward_std": float(reward_std(reward_t)),
            "loss": loss.item(),
            "expected_acceptance": float(torch.cat([t[1] for t in terms]).mean()),
            "mean_w": float(torch.cat([t[2] for t in terms]).mean()),
            "tokens": sum(len(r.tokens) for r in sampled),
            "prompt_tokens_dropped": dropped,
            "seconds": time.perf_counter() - start,
        }

    def _update(self, loss: Tensor) -> None:
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()

    def _checkpoint(self) -> None:
        self.output.mkdir(parents=True, exist_ok=True)
        log = pd.DataFrame(self.history)
        write_atomic(self.output / "train_log.parquet", lambda tmp: log.to_parquet(tmp, index=False))
        state = {
            "head": self.head.state_dict(),
            "optimizer": self.opt.state_dict(),
            "step": self.step,
            "baseline": self.baseline,
            "config": asdict(self.cfg),
        }
        write_atomic(self.ckpt, lambda tmp: torch.save(state, tmp))
        last = self.history[-1]
        save_head(
            self.head,
            self.output,
            {
                "pair": self.pair.spec.name,
                # whose q and hidden states it read (the pair's EAGLE head named): run refuses another kind
                "drafter": with_pair_head(self.cfg.drafter, self.pair.spec.eagle),
                "task": self.task.name,
                "data": self.data,
                "steps": self.step,
                "final_reward": last["reward"],
                "mean_w": last["mean_w"],
                "training": asdict(self.cfg),
                "trained": self.step == last["steps"],  # a killed run's head is resumed, not used
            },
        )


def describe(record: dict[str, Any]) -> str:
    """One progress line: reward, expected acceptance, mean w, time."""
    eta = record["seconds"] * (record["steps"] - record["step"])
    return (
        f"step {record['step']}/{record['steps']}  reward {record['reward']:.3f}  expected acceptance "
        f"{record['expected_acceptance']:.3f}  mean w {record['mean_w']:.3f}  "
        f"{record['seconds']:.1f} s/step, {eta / 60:.1f} min left"
    )


@dataclass(frozen=True)
class ReinforceRecipe(Recipe):
    """``Trainer`` behind the Recipe interface; its settings are the ``TrainConfig``."""

    name: ClassVar[str] = "reinforce"
    config: TrainConfig = field(default_factory=TrainConfig)

    @classmethod
    def of(cls, **settings: Any) -> ReinforceRecipe:
        return cls(TrainConfig(**settings))

    def settings(self) -> dict[str, Any]:
        """The config's settings that change the head; the drafter only when it is not the draft
        model, and the rounds only when they change the rollouts (an EAGLE head's, or decoding's
        rollout), so that every head trained before EAGLE drafts or rounds existed keeps its cache
        key."""
        settings = same_training(asdict(self.config))
        if settings["drafter"] == "model" and settings["rollout"] == "authors":
            del settings["rollout"], settings["draft_len"]  # such rollouts have no rounds (Rounds.tracked)
        if settings["drafter"] == "model":
            del settings["drafter"]
        return settings

    def takes(self) -> set[str]:
        return {f.name for f in fields(TrainConfig)}

    def configure(self, **settings: Any) -> ReinforceRecipe:
        unknown = set(settings) - {f.name for f in fields(TrainConfig)}
        if unknown:
            raise BenchError(f"the reinforce recipe takes no {sorted(unknown)}")
        return ReinforceRecipe(TrainConfig(**{**asdict(self.config), **settings}))

    def steps(self, job: TrainJob) -> int:
        prompts = min(self.config.num_prompts, len(job.task.rows()))
        return math.ceil(prompts / self.config.batch_size) * self.config.epochs

    def plan(self, job: TrainJob) -> str:
        c = self.config
        return (
            f"{self.steps(job)} REINFORCE steps of {c.batch_size} rollouts of up to {c.rollout_tokens} tokens "
            f"({'the target and the EAGLE head' if c.drafter != 'model' else 'both models'}, a token a step); "
            "the first step's time gives the estimate"
        )

    def train(self, job: TrainJob) -> dict[str, Any]:
        trainer = Trainer(
            job.pair, job.task, self.config, job.folder, data=job.data,
            log=lambda r: job.log(describe(r)), engine=job.engine,
        )  # fmt: skip
        if line := trainer.resumed():
            job.log(line)
        return trainer.train()
