"""The judges' recipe: mine labels on the train split's questions (a miner from
bench.learned.miners), read the features at each mined token, fit the classifier
(bench.learned.logistic) and write a judge head. Mined labels are checkpointed per question, so a
killed run resumes where it stopped."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from bench.atomic import write_atomic
from bench.pairs import encode_prompt
from bench.errors import BenchError
from bench.learned import Recipe, TrainJob
from bench.learned.features import PairOracle, token_features
from bench.verifier_heads import JudgeHead, check_features
from bench.learned.logistic import AUTOJUDGE, SELFJUDGE, fit_judge, validation_questions
from bench.learned.miners import Steps, autojudge, run_many, selfjudge
from bench.tasks import Example

MINERS = ("autojudge", "selfjudge")
LABELS = "labels.pt"
# labels.pt's layout: 2 keeps SelfJudge's scores (``score``; ``y`` -1 where tau decides the label).
LABELS_FORMAT = 2
BATCH = 64  # questions mined in lockstep, their model calls batched
# The `train` flags this recipe takes, each to its own setting. Any other flag given (REINFORCE's)
# is refused, never ignored; a flag left out never reaches ``configure``.
_SHARED = {
    "num_prompts": "questions", "seed": "seed", "chat_template": "chat_template",
    "draft_temperature": "draft_temperature", "drafter": "drafter",
}  # fmt: skip


@dataclass(frozen=True)
class ClassifierRecipe(Recipe):
    name: ClassVar[str] = "classifier"
    miner: str = "autojudge"
    features: str = "draft+target"
    # Train-split questions mined (the authors mined GSM8K's 7.5k): on the shipped pair 1 token in
    # ~300 changes the answer, so fewer leave too few important labels to validate a fit on.
    questions: int = 1000
    # Mining stops once both classes hold this many labels (0: mine every question).
    enough: int = 200
    # 0 mines the draft's argmax, as the authors do; a sampling decoder's judge is asked about the
    # draft's samples, so ``--grid baselines`` mines at the temperature it decodes at.
    draft_temperature: float = 0.0
    # Whose proposals are mined: the draft model's, prompt lookup's (a spec, lookup[:ngram=...]),
    # the tokens a target-only judge serving lookup drafts is asked about, or an EAGLE head's
    # (eagle[:path=...]; no path: the pair's head), the first token of each of its chains.
    drafter: str = "model"
    seed: int = 0
    val_share: float = 0.1
    chat_template: bool = False

    def __post_init__(self) -> None:
        if self.miner not in MINERS:
            raise BenchError(f"miner must be one of {', '.join(MINERS)}, got {self.miner!r}")
        check_features(self.features)
        self._check_drafter()
        if self.questions < 2:
            raise BenchError(f"the classifier recipe needs >= 2 questions (a validation split), got {self.questions}")

    def _check_drafter(self) -> None:
        """Refuse drafts a judge cannot be trained on; write the spec canonically (it keys the head).
        An EAGLE judge reads chains (a judge is defined on chain drafts only), and a chain's first
        token is the head's choice after the prefix whatever ``topk``/``depth``/``total`` (they
        shape trees): they are written at their defaults, one head per EAGLE head."""
        from bench.drafters import canonical_drafter, parse_drafter

        name, params = parse_drafter(self.drafter)
        if name not in ("model", "lookup", "eagle"):
            raise BenchError(f"judges mine the proposals of the draft model, of lookup or of an EAGLE head, not {name}: train "
                             "with --drafter lookup (its head serves lookup_tree and suffix drafts too)")  # fmt: skip
        if name == "lookup" and (self.features != "target" or self.draft_temperature):
            raise BenchError("lookup drafts have no model behind them: mine them with target features and --draft-temperature 0")
        if name == "eagle" and params["tree"]:
            raise BenchError("a judge verifies chain drafts only: train it (and decode) with --drafter eagle (tree=0), not EAGLE-2's tree")
        spec = f"eagle:path={params['path']}" if name == "eagle" else self.drafter
        object.__setattr__(self, "drafter", canonical_drafter(spec))

    def settings(self) -> dict[str, Any]:
        return asdict(self)

    def configure(self, **settings: Any) -> ClassifierRecipe:
        stray = sorted(k for k in settings if k not in _SHARED)
        if stray:
            flags = ", ".join("--" + k.replace("_", "-") for k in stray)
            raise BenchError(
                f"{flags}: REINFORCE's; the classifier recipe takes --num-prompts, --seed, --chat-template, "
                "--draft-temperature, --drafter"
            )
        mapped = {_SHARED[k]: v for k, v in settings.items() if k in _SHARED}
        return ClassifierRecipe(**{**asdict(self), **mapped})

    def examples(self, job: TrainJob) -> list[Example]:
        return job.task.examples(min(self.questions, len(job.task.rows())), self.seed)

    def plan(self, job: TrainJob) -> str:
        per = "a greedy target decode per mismatch" if self.miner == "autojudge" else "one tree forward for its swaps"
        drafts = "the draft model's" if self.drafter == "model" else f"{self.drafter}'s"
        return (
            f"{self.miner} labels where {drafts} proposals differ, on up to {len(self.examples(job))} train questions, "
            f"{BATCH} at a time ({per}, batched), until both classes hold {self.enough}; then {self.features} "
            "features and a logistic fit; the first batch's time gives the estimate"
        )

    def miner_of(self, job: TrainJob, prompt: list[int], doc: dict[str, Any], q: int) -> Steps:
        """Question ``q``'s miner; its draft samples (``draft_temperature`` > 0) are seeded by ``q``."""
        budget, seed = job.task.spec.max_new_tokens, self.seed * 1_000_003 + q * 1_009
        if self.miner == "selfjudge":
            return selfjudge.mine(prompt, budget, temperature=self.draft_temperature, seed=seed, drafter=self.drafter)
        def agree(a: list[int], b: list[int]) -> bool:
            text = [job.pair.text(x) for x in (a, b)]
            return autojudge.answers_agree(job.task, doc, *text)

        eos = frozenset(job.pair.eos_token_ids)
        return autojudge.mine(prompt, budget, agree, eos, temperature=self.draft_temperature, seed=seed, drafter=self.drafter)

    def train(self, job: TrainJob) -> dict[str, Any]:
        state = self.mine_all(job)
        x, group = torch.stack(state["x"]), torch.tensor(state["group"])
        y, val, labelling = self.labels(job, state)
        style = SELFJUDGE if self.miner == "selfjudge" else AUTOJUDGE
        fit = fit_judge(x, y, group, self.seed, self.val_share, style, val)
        width, drafts = self.drafts(job)
        head = JudgeHead(self.features, width, job.pair.hidden_sizes[1])
        head.mean.copy_(fit.mean), head.scale.copy_(fit.scale), head.weight.copy_(fit.weight)
        head.bias.fill_(fit.bias)
        head.ranks = fit.val_scores
        share = float(y.float().mean())
        card = {
            "pair": job.pair.spec.name, "task": job.task.name, "data": job.data, "recipe": self.settings(),
            "labels": len(y), "important_share": share, "C": fit.C, "val_auc": fit.val_auc, "trained": True, **labelling, **drafts,
        }  # fmt: skip
        head.save(job.folder, card)
        job.log(f"fit: {len(y)} labels ({share:.1%} important), C {fit.C:.3g}, validation ROC-AUC {fit.val_auc:.3f}")
        return card

    def drafts(self, job: TrainJob) -> tuple[int, dict[str, Any]]:
        """The width of the draft state a draft+target head reads (the EAGLE head's ``head_input``
        for EAGLE drafts, else the draft model's) and, for EAGLE drafts, the card's line naming
        the head they came from."""
        if not self.drafter.startswith("eagle"):
            return job.pair.hidden_sizes[0], {}
        drafter = PairOracle(job.pair).eagle(self.drafter)
        return drafter.head.config.hidden_size, {"eagle_head": drafter.path}

    def labels(self, job: TrainJob, state: dict[str, list[Any]]) -> tuple[Tensor, Tensor, dict[str, Any]]:
        """The labels, the validation questions' mask, and for SelfJudge the tau its swaps are
        thresholded at: the authors' for this task and target, else ``selfjudge.quantile_tau`` of
        the training questions' swaps (the split drawn on the labels of every swap's quantile), its
        share of important swaps reported on the held-out questions too."""
        published = selfjudge.published_tau(job.task.name, job.pair.spec.target)
        y, group = torch.tensor(state["y"]), torch.tensor(state["group"])
        provisional = torch.tensor(self.provisional(state, published))
        val = torch.isin(group, validation_questions(provisional, group, self.seed, self.val_share))
        swap = y < 0
        if not swap.any():  # AutoJudge, or no swap mined (the fit then refuses the single class)
            return provisional, val, {}
        score = torch.tensor(state["score"], dtype=torch.float64)
        tau = published if published is not None else selfjudge.quantile_tau(score[swap & ~val])
        y = torch.where(swap, score > tau, y.bool()).long()
        shares = {k: float(y[swap & side].float().mean()) for k, side in (("train", ~val), ("val", val))}
        return y, val, {
            "tau": tau, "tau_rule": "the authors'" if published is not None else "quantile", "window": selfjudge.WINDOW,
            "important_share_of_swaps_train": shares["train"], "important_share_of_swaps_val": shares["val"],
        }  # fmt: skip

    def mine_all(self, job: TrainJob) -> dict[str, list[Any]]:
        """Labels and features, mined ``BATCH`` questions at a time and saved after each batch (a
        re-run skips the questions done). Stops at the first question after which both classes hold
        ``enough`` labels: where it stops depends on the questions alone, not on the batching."""
        store = job.folder / LABELS
        empty: dict[str, Any] = {"done": [], "x": [], "y": [], "group": [], "score": [], "format": LABELS_FORMAT}
        state: dict[str, Any] = torch.load(store) if store.exists() else empty
        if state.get("format") != LABELS_FORMAT:
            raise BenchError(f"{store} holds labels an older harness mined; delete it or use another --output-dir")
        if state.get("settings", self.settings()) != self.settings():
            raise BenchError(f"{store} was mined with other settings; use another --output-dir or delete it")
        examples, oracle = self.examples(job), PairOracle(job.pair)
        eagle = oracle.eagle(self.drafter, self.draft_temperature) if self.drafter.startswith("eagle") else None
        tau = selfjudge.published_tau(job.task.name, job.pair.spec.target)
        todo = [(q, e) for q, e in enumerate(examples) if e.example_id not in state["done"]]
        if state["done"]:
            found = f"found {len(state['done'])} of {len(examples)} questions' labels in {store}"
            job.log(f"mining: {found}; up to {len(todo)} left")
        start, fresh = time.perf_counter(), 0
        for b in range(0, len(todo), BATCH):
            if self.satisfied(state, tau):
                break
            batch = todo[b : b + BATCH]
            miners = [self.miner_of(job, encode_prompt(job.pair, e.prompt, self.chat_template), e.doc, q) for q, e in batch]
            for (q, example), labels in zip(batch, run_many(oracle, miners, _every_minute(job, len(batch)))):
                if self.satisfied(state, tau):
                    break
                xs = token_features(job.pair, self.features, [(m.context, m.token) for m in labels], eagle)
                state["x"] += xs
                state["y"] += [-1 if m.important is None else int(m.important) for m in labels]
                state["score"] += [float("nan") if m.score is None else m.score for m in labels]
                state["group"] += [q] * len(labels)
                state["done"].append(example.example_id)
                fresh += 1
            job.folder.mkdir(parents=True, exist_ok=True)
            write_atomic(store, lambda tmp: torch.save({**state, "settings": self.settings()}, tmp))
            left = (time.perf_counter() - start) / fresh * (len(examples) - len(state["done"]))
            job.log(
                f"question {len(state['done'])}/{len(examples)}: {len(state['y'])} labels, {sum(self.provisional(state, tau))} "
                f"important, at most ~{left / 60:.1f} min left (stops once both classes hold {self.enough})"
            )
        return state

    def provisional(self, state: dict[str, list[Any]], tau: float | None) -> list[int]:
        """The labels so far, SelfJudge's swaps thresholded at ``tau`` or, where the authors give
        none, at the quantile rule's tau over every swap so far (the fit draws it anew)."""
        swaps = [s for y, s in zip(state["y"], state["score"]) if y < 0]
        if not swaps:
            return list(state["y"])
        cut = tau if tau is not None else selfjudge.quantile_tau(torch.tensor(swaps))
        return [int(s > cut) if y < 0 else y for y, s in zip(state["y"], state["score"])]

    def satisfied(self, state: dict[str, list[Any]], tau: float | None) -> bool:
        important = sum(self.provisional(state, tau))
        return bool(self.enough) and min(important, len(state["y"]) - important) >= self.enough


def _every_minute(job: TrainJob, questions: int) -> Callable[[int, int], None]:
    """``run_many``'s progress, logged at most once a minute: a batch of questions mines for many
    minutes on a CPU before its labels are saved, and its rounds are not known ahead."""
    start = last = time.perf_counter()

    def log(rounds: int, mining: int) -> None:
        nonlocal last
        if time.perf_counter() - last >= 60:
            last = time.perf_counter()
            minutes = (last - start) / 60
            job.log(f"  mining: {mining} of {questions} questions still mining after {rounds} rounds, {minutes:.1f} min")

    return log
