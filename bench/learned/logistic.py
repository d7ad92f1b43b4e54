"""The judges' classifier, as their authors fit it: features standardised (StandardScaler),
L2-regularised logistic regression (sklearn's LogisticRegression, lbfgs: minimise 0.5 |w|^2 + C sum
log(1 + exp(-y (x.w + b))), the bias not penalised), C picked from the authors' grid by validation
ROC-AUC on a split by question. Fitted in torch so that training needs no scikit-learn;
tests/learned/test_judges.py shows it equal to scikit-learn's on a fixture. The two authors differ after
that (``Style``):

- AutoJudge (garipovroma/autojudge src/train_head_gsm8k.py): C from (10 ** 0.5) ** -arange(1,
  15)[::-1] then 1, 3, 10, 50, 100; refit on every question with that C (their
  --train_on_all_data); thresholds swept at quantiles of the validation scores.
- SelfJudge (naver-aics/SelfJudge at commit c97c8e83, notebooks/train_selfjudge-fulldata.ipynb,
  ``train_head_and_search_best_hparam``): C from (10 ** 0.5) ** -arange(10)[::-1] (3.2e-5 .. 1);
  the scaler and the model of the training split kept (no refit); decision thresholds
  np.quantile(val_probs, q) for the 20 levels q in np.linspace(0, 1, 20).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from bench.errors import BenchError

# AutoJudge's grid: (10 ** 0.5) ** -arange(1, 15)[::-1], then 1, 3, 10, 50, 100.
C_GRID = tuple(float(10 ** (-0.5 * k)) for k in range(14, 0, -1)) + (1.0, 3.0, 10.0, 50.0, 100.0)
# SelfJudge's grid: (10 ** 0.5) ** -arange(10)[::-1], smallest C first.
SELFJUDGE_C_GRID = tuple(float(10 ** (-0.5 * k)) for k in range(9, -1, -1))
SELFJUDGE_LEVELS = 20  # np.linspace(0, 1, 20)


@dataclass(frozen=True)
class Style:
    """How an author fits: the C grid, whether the chosen C is refit on every question, and how
    many quantile levels of the validation scores are the head's thresholds (0: every score)."""

    grid: tuple[float, ...]
    refit: bool
    levels: int


AUTOJUDGE = Style(C_GRID, refit=True, levels=0)
SELFJUDGE = Style(SELFJUDGE_C_GRID, refit=False, levels=SELFJUDGE_LEVELS)


@dataclass(frozen=True)
class Fit:
    mean: Tensor  # [F] standardiser
    scale: Tensor  # [F]
    weight: Tensor  # [F] on standardised features
    bias: float
    C: float
    val_auc: float
    # [n] sorted thresholds on p(important), the scale a judge's tau is read on (JudgeHead.ranks):
    # the fitted model's scores of the validation questions' tokens (AutoJudge sweeps quantiles of
    # these, src/train_head_gsm8k.py: thr = np.quantile(val_probs, q)), or SelfJudge's 20 quantiles
    # of them, tau in (i / 21, (i + 1) / 21] then picking the authors' i-th threshold.
    val_scores: Tensor = field(default_factory=lambda: torch.empty(0))


def standardiser(x: Tensor) -> tuple[Tensor, Tensor]:
    """StandardScaler's mean and scale (population std; a constant feature keeps scale 1)."""
    mean, std = x.mean(0), x.std(0, unbiased=False)
    return mean, torch.where(std > 0, std, torch.ones_like(std))


def logistic_fit(x: Tensor, y: Tensor, C: float) -> tuple[Tensor, float]:
    """(w, b) minimising 0.5 |w|^2 + C sum softplus(-(2y - 1)(x.w + b)), in float64 by L-BFGS."""
    x, sign = x.double(), y.double() * 2 - 1
    params = torch.zeros(x.shape[1] + 1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS(
        [params], lr=1, max_iter=2000, tolerance_grad=1e-12, tolerance_change=1e-15,
        history_size=20, line_search_fn="strong_wolfe",
    )  # fmt: skip

    def objective() -> Tensor:
        opt.zero_grad()
        w, b = params[:-1], params[-1]
        loss = 0.5 * w.dot(w) + C * torch.nn.functional.softplus(-sign * (x @ w + b)).sum()
        loss.backward()
        return loss

    opt.step(objective)
    return params[:-1].detach().float(), float(params[-1].detach())


def roc_auc(y: Tensor, score: Tensor) -> float:
    """ROC-AUC by the Mann-Whitney statistic, ties counted one half (sklearn's roc_auc_score)."""
    pos, neg = score[y.bool()].double(), score[~y.bool()].double()
    if not len(pos) or not len(neg):
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).double().sum() + 0.5 * (pos[:, None] == neg[None, :]).double().sum()
    return float(greater / (len(pos) * len(neg)))


def validation_questions(y: Tensor, groups: Tensor, seed: int, share: float) -> Tensor:
    """The questions held out to pick C: ``share`` of them, shuffled by ``seed`` as the authors do,
    but drawn separately from the questions with an important token and those without (at least
    one of each), so that rare important labels (a strong draft) still leave both classes on both
    sides of the split."""
    questions = groups.unique()
    with_important = torch.isin(questions, groups[y.bool()])
    g = torch.Generator().manual_seed(seed)
    held = []
    for part in (questions[with_important], questions[~with_important]):
        order = part[torch.randperm(len(part), generator=g)]
        held.append(order[len(order) - max(1, round(len(order) * share)) :] if len(order) > 1 else order[:0])
    return torch.cat(held)


def fit_judge(
    x: Tensor, y: Tensor, groups: Tensor, seed: int = 0, val_share: float = 0.1, style: Style = AUTOJUDGE,
    val: Tensor | None = None,
) -> Fit:  # fmt: skip
    """The authors' fit: questions (``groups``) split (``validation_questions``, or the mask
    ``val`` given), C by validation ROC-AUC, then (``style.refit``) the standardiser and the model
    refit on every question."""
    if y.min() == y.max():
        kind = "important" if y[0] else "unimportant"
        raise BenchError(
            f"every one of the {len(y)} mined labels says {kind}: no judge can be fit; mine more questions "
            "(--num-prompts) or the draft's samples (--draft-temperature 1)"
        )
    if val is None:
        val = torch.isin(groups, validation_questions(y, groups, seed, val_share))
    if y[val].min() == y[val].max() or y[~val].min() == y[~val].max():
        raise BenchError(
            f"{len(groups.unique())} questions give no validation split with both labels on each side: "
            "mine more questions (--num-prompts)"
        )
    mean, scale = standardiser(x[~val])
    best = (-1.0, style.grid[0], torch.empty(0), 0.0)
    for C in style.grid:
        w, b = logistic_fit((x[~val] - mean) / scale, y[~val], C)
        auc = roc_auc(y[val], ((x[val] - mean) / scale) @ w + b)
        if auc > best[0]:  # the first C of the grid wins a tie, as in the authors' loops
            best = (auc, C, w, b)
    auc, C, w, b = best
    if style.refit:
        mean, scale = standardiser(x)
        w, b = logistic_fit((x - mean) / scale, y, C)
    scores = torch.sigmoid(((x[val] - mean) / scale).float() @ w + b).sort().values
    if style.levels:
        scores = torch.quantile(scores.double(), torch.linspace(0, 1, style.levels, dtype=torch.float64)).float()
    return Fit(mean.float(), scale.float(), w, b, C, auc, scores)
