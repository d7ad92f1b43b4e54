"""Acceptance on real distributions: the smollm2 pair's p and q at real text positions.

Positions: the target's own T = 1 continuations (the harness's ``ar``, seeded) of the first test
example of each fixture task under the chat template; p and q there are the target's and the
early-exit draft's temperature-1 distributions over the full 49,152-token vocabulary.

At each position ``R`` independent one-token rounds (a draft token from q, or q's argmax for the
rules whose engines draft greedily, then the verifier's coin) give a measured acceptance, an exact
Binomial(R, a) / R draw when the rule's acceptance probability there is a. a comes from a closed
form written here from each rule's definition, not from the verifier's code:

- static ensemble, pi = w p + (1 - w) q: a = 1 - w TV(p, q) (the paper's Proposition);
- typical (vLLM): a = sum_x q(x) [p(x) > min(eps, alpha exp(-H(p)))];
- threshold (SGLang): a = sum_x d(x) (1 if p(x) >= single else min(1, p(x) / acc)), d the proposal;
- relaxed (TensorRT-LLM): a = sum_x d(x) [x in the top-k of p within delta of its max].

Tolerances: each position's count is tested exactly (two-sided binomial test) at level
``ALPHA / checks``, Bonferroni over every position of every case, so the chance that a correct
rule fails anywhere is below ``ALPHA`` = 1e-4; the pooled count of each case (variance sum R a(1-a))
must lie within 4.5 sigma. The seeds are fixed, so a pass is reproducible. Power: the same bounds
reject the wrong formula 1 - TV(p, q) for the ensemble (``test_the_bounds_reject_a_wrong_formula``).
"""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from bench.decoding import SpeculativeDecoder
from bench.distributions import Sampling, tv
from bench.tasks import Task, resolve_task
from bench.verifiers import Round, make_verifier, verify

TASKS = ("gsm8k", "cnndm", "xsum", "mbpp")
TOKENS = 8  # continuation positions per prompt
R = 64  # rounds per position
ALPHA = 1e-4
POOLED_Z = 4.5

CASES = [
    ("ensemble", {"target_weight": 0.3}, False),  # and w = 0.5 below
    ("typical", {}, False),
    (
        "threshold",
        {"speculative_accept_threshold_single": 0.3, "speculative_accept_threshold_acc": 0.5},
        False,
    ),
    ("threshold", {}, True),  # SGLang's defaults on a greedy draft: kept with probability p(x*)
    ("relaxed", {"relaxed_topk": 10, "relaxed_delta": 0.3}, False),
    ("relaxed", {"relaxed_topk": 10, "relaxed_delta": 0.3}, True),
]
CHECKS = (len(CASES) + 1) * len(TASKS) * TOKENS  # every position of every case, w = 0.5's too


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def positions(smollm2) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(p, q, p logits, q logits), each [positions, V], at the target's T = 1 continuations."""
    pair, tok = smollm2, smollm2.tokenizer
    decoder = SpeculativeDecoder(
        pair.target, None, make_verifier("ar"), sampling=Sampling(1.0), eos_token_ids=pair.eos_token_ids
    )
    ps, qs = [], []
    for seed, task in enumerate(TASKS):
        text = Task(resolve_task(task), "fixture").examples(1)[0].prompt
        chat = tok.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
        )
        prompt = list(tok(chat, add_special_tokens=False).input_ids)
        new = decoder.generate(prompt, TOKENS, seed=seed).token_ids
        assert len(new) == TOKENS, f"{task}: the continuation ended early; pick another seed"
        ids = torch.tensor([prompt + new[:-1]])
        with torch.inference_mode():
            ps.append(pair.target(input_ids=ids).logits[0, -TOKENS:])
            qs.append(pair.draft(input_ids=ids).logits[0, -TOKENS:])
    p_logits, q_logits = torch.cat(ps).float(), torch.cat(qs).float()
    return p_logits.softmax(-1), q_logits.softmax(-1), p_logits, q_logits


def unit(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float64, rescaled to sum to 1 over the vocabulary. An fp32 softmax over 49,152
    tokens sums to 1 only up to the rounding of its fp32 sums (about 1e-5 here), and that rounding
    depends on the CPU's kernels. The closed forms assume sums of exactly 1 (the verifier's
    sum min(q, pi) is 1 - w TV(p, q) only when sum p = sum q = 1): on an AVX2-only EPYC the logged
    and predicted acceptance differed by 2.6e-5, over the old 2e-5 tolerance, and by as much with
    the verifier run in float64 (reproduced here with ATEN_CPU_CAPABILITY=avx2). Rescaled in float64,
    both sides agree to 1e-9 on any CPU; a wrong formula misses by orders of magnitude more."""
    t = t.double()
    return t / t.sum(-1, keepdim=True)


def closed_form(method: str, params: dict, p: torch.Tensor, d: torch.Tensor) -> float:
    """The rule's acceptance probability at one position, d the law the draft token comes from."""
    p64, d64 = unit(p), unit(d)
    if method == "ensemble":
        return 1 - params["target_weight"] * tv(p64, d64).item()
    if method == "typical":
        entropy = -(p64 * (p64 + 1e-5).log()).sum().item()  # vLLM's eps inside the log
        threshold = min(
            params.get("posterior_threshold", 0.09), params.get("posterior_alpha", 0.3) * math.exp(-entropy)
        )
        return d64[p64 > threshold].sum().item()
    if method == "threshold":
        single = params.get("speculative_accept_threshold_single", 1.0)
        acc = params.get("speculative_accept_threshold_acc", 1.0)
        keep = torch.where(p64 >= single, 1.0, (p64 / acc).clamp(max=1))
        return (d64 * keep).sum().item()
    values, index = p64.topk(params["relaxed_topk"])
    allowed = index[values >= values[0] - params["relaxed_delta"]]
    return d64[allowed].sum().item()


def measure(
    method: str, params: dict, greedy_draft: bool, positions
) -> tuple[list[int], list[float], list[float]]:
    """Per position: accepted count of R rounds, the closed form, the verifier's expected acceptance
    (in float64: ``logged_in_float64``)."""
    p, q, lp, lq = positions
    verifier = make_verifier(method, **params)
    g = torch.Generator().manual_seed(1)
    counts, predicted, logged = [], [], []
    for j in range(len(p)):
        if greedy_draft:
            draft = q[j].argmax().expand(R, 1)
            proposal = torch.zeros_like(q[j]).scatter_(0, q[j].argmax().view(1), 1.0)
        else:
            draft = torch.multinomial(q[j], R, replacement=True, generator=g).view(R, 1)
            proposal = q[j]
        row = lambda t: t.view(1, 1, -1).expand(R, 1, -1)  # noqa: E731
        round_ = Round(
            draft, row(q[j]), row(p[j]), row(lq[j]), row(lp[j]), Sampling(1.0), greedy_draft=greedy_draft
        )
        verdict = verify(verifier, round_, p[j].expand(R, -1), g)
        counts.append(int(verdict.accepted.sum()))
        predicted.append(closed_form(method, params, p[j], proposal))
        logged.append(logged_in_float64(verifier, round_, p[j]))
    return counts, predicted, logged


def logged_in_float64(verifier, round_: Round, p: torch.Tensor) -> float:
    """The expected acceptance the verifier logs for the round's first row, given p and q as
    ``closed_form`` takes them (``unit``: float64, summing to 1). The counts come from the fp32
    round itself; this is the same verifier code on the same numbers, rounding aside."""
    one = Round(
        round_.draft[:1], unit(round_.q[:1]), unit(round_.p[:1]), round_.q_logits[:1].double(),
        round_.p_logits[:1].double(), round_.sampling, greedy_draft=round_.greedy_draft,
    )  # fmt: skip
    verdict = verify(verifier, one, unit(p).view(1, -1), torch.Generator().manual_seed(0))
    return verdict.expected_acceptance[0, 0].item()


def pooled_z(counts: list[int], predicted: list[float]) -> float:
    variance = sum(R * a * (1 - a) for a in predicted)
    return (sum(counts) - R * sum(predicted)) / math.sqrt(max(variance, 1e-12))


def binomial_pvalues(counts: list[int], predicted: list[float]) -> list[float]:
    out = []
    for k, a in zip(counts, predicted):
        a = min(max(a, 0.0), 1.0)
        if a in (0.0, 1.0):  # a certain event: any other count is impossible
            out.append(1.0 if k == R * a else 0.0)
        else:
            out.append(stats.binomtest(k, R, a).pvalue)
    return out


@pytest.fixture(scope="module")
def ensemble_half(positions):
    return measure("ensemble", {"target_weight": 0.5}, False, positions)


def test_real_positions_span_easy_and_hard_tokens(positions):
    p, q, _, _ = positions
    distance = tv(p.double(), q.double())
    assert len(p) == len(TASKS) * TOKENS
    assert distance.min() < 0.2 and distance.max() > 0.6, distance  # both agreement and disagreement


@pytest.mark.slow
@pytest.mark.parametrize("method,params,greedy_draft", CASES)
def test_measured_acceptance_follows_the_rules_formula(method, params, greedy_draft, positions):
    counts, predicted, logged = measure(method, params, greedy_draft, positions)
    f64 = torch.float64
    torch.testing.assert_close(
        torch.tensor(logged, dtype=f64), torch.tensor(predicted, dtype=f64), atol=1e-9, rtol=0
    )
    worst = min(binomial_pvalues(counts, predicted))
    assert worst > ALPHA / CHECKS, f"{method} {params}: a position's count has binomial p = {worst:.1e}"
    z = pooled_z(counts, predicted)
    assert abs(z) < POOLED_Z, f"{method} {params}: pooled z = {z:.2f}"
    assert 0.02 < sum(predicted) / len(predicted) < 0.98, (
        "a case that accepts everything or nothing tests little"
    )


def test_the_ensemble_follows_one_minus_w_tv_per_position(ensemble_half, positions):
    """The Proposition at w = 0.5, with the bounds above."""
    counts, _, _ = ensemble_half
    p, q, _, _ = positions
    theory = (1 - 0.5 * tv(p.double(), q.double())).tolist()
    assert min(binomial_pvalues(counts, theory)) > ALPHA / CHECKS
    assert abs(pooled_z(counts, theory)) < POOLED_Z


def test_the_bounds_reject_a_wrong_formula(ensemble_half, positions):
    """The bounds have power: sd's acceptance 1 - TV(p, q) (the ensemble with w forgotten) is
    rejected pooled by far, and position by position wherever the two formulas differ enough."""
    counts, _, _ = ensemble_half
    p, q, _, _ = positions
    distance = tv(p.double(), q.double())
    wrong = (1 - distance).tolist()
    assert abs(pooled_z(counts, wrong)) > 4 * POOLED_Z
    rejected = [pv < ALPHA / CHECKS for pv in binomial_pvalues(counts, wrong)]
    far = (0.5 * distance > 0.3).tolist()
    assert all(r for r, f in zip(rejected, far) if f) and sum(far) >= 5


def test_the_decoding_loop_accepts_as_its_logged_expectation(smollm2, positions):
    """The ensemble through the decoding loop on the real pair at T = 1: accepted drafts vs the
    sum of the logged per-position acceptance 1 - TV(q, pi) over reached positions. Each reached
    position's outcome is a coin with that probability given the past, so the difference is a
    martingale with variance at most reached / 4."""
    pair, tok = smollm2, smollm2.tokenizer
    decoder = SpeculativeDecoder(
        pair.target,
        pair.draft,
        make_verifier("ensemble", target_weight=0.5),
        draft_len=3,
        sampling=Sampling(1.0),
        eos_token_ids=pair.eos_token_ids,
    )
    prompts = []
    for task in TASKS:
        text = Task(resolve_task(task), "fixture").examples(2)[1].prompt
        chat = tok.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
        )
        prompts.append(list(tok(chat, add_special_tokens=False).input_ids))
    gens = decoder.generate_batch(prompts, 16, list(range(len(prompts))))
    accepted = sum(g.stats.accepted_tokens for g in gens)
    reached = sum(sum(g.stats.reached_per_position) for g in gens)
    expected = sum(sum(g.stats.expected_acceptance_sum) for g in gens)
    assert reached > 30
    assert abs(accepted - expected) < POOLED_Z * math.sqrt(reached / 4), (accepted, expected, reached)


def test_the_diversed_head_trains_on_the_real_pair(smollm2, tmp_path):
    """Two rollouts of 8 tokens and one update, as `diversed-bench train` runs them: the head is
    written and its logged expected acceptance is the mean of 1 - w TV(p, q)."""
    from bench.learned.reinforce import TrainConfig, Trainer

    spec = resolve_task("gsm8k")
    task = Task(spec, "fixture", split=spec.dataset["fewshot_split"])
    cfg = TrainConfig(batch_size=2, num_prompts=2, epochs=1, rollout_tokens=8, allow_flat_reward=True)
    record = Trainer(smollm2, task, cfg, tmp_path).train()
    assert (tmp_path / "head.safetensors").is_file()
    assert record["step"] == 1 and record["tokens"] > 0 and 0 < record["mean_w"] < 1
    assert 0 < record["expected_acceptance"] < 1 and math.isfinite(record["loss"])
