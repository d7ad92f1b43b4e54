"""The training-free newcomers, fuzzy SD and mentored decoding: the emitted law by sampling against
the closed form each rule implies, the lossless ends equal to SD, monotone acceptance along the
calibration paths, the KL budget met (and mentored's optimum against a generic solver), greedy
keeps, drafters and bad values refused in one line."""

import math

import numpy as np
import pytest
import torch
from scipy import optimize, stats
from scipy.spatial.distance import jensenshannon

from bench.config import expand_methods, parse_params
from bench.distributions import Sampling, normalise, process
from bench.drafters import drafter_for
from bench.errors import BenchError
from bench.verifiers import Round, make_verifier, verify
from bench.verifiers.newcomers import js_divergence_bits

DRAWS = 100_000
P = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])
Q = torch.tensor([0.10, 0.35, 0.05, 0.30, 0.15, 0.05])  # JS(P, Q) = 0.147 bits, KL(P || Q) = 0.461
BONUS = torch.tensor([0.05, 0.05, 0.30, 0.30, 0.20, 0.10])


def one(d):
    return d.view(1, 1, -1)


def batched(p, q, *, greedy_draft=False, seed=0):
    """DRAWS one-token rounds at temperature 1: the drafted token drawn from q (or q's argmax)."""
    g = torch.Generator().manual_seed(seed)
    if greedy_draft:
        draft = torch.full((DRAWS, 1), int(q.argmax()))
    else:
        draft = torch.multinomial(q, DRAWS, replacement=True, generator=g).view(DRAWS, 1)
    expand = lambda d: d.view(1, 1, -1).expand(DRAWS, 1, -1)  # noqa: E731
    logits = (expand(q.log()), expand(p.log()))
    r = Round(draft, expand(q), expand(p), *logits, Sampling(1.0), greedy_draft=greedy_draft)
    return r, g


def emitted(verifier, r, g):
    verdict = verify(verifier, r, BONUS.expand(r.draft.shape[0], -1), g)
    return torch.where(verdict.accepted >= 1, r.draft[:, 0], verdict.next_token), verdict


def chi2_pvalue(tokens, law):
    counts = torch.bincount(tokens, minlength=len(law)).double()
    expected = law.double() * len(tokens)
    keep = expected > 1e-9
    assert counts[~keep].sum() == 0, "emitted a token the law gives probability 0"
    if keep.sum() == 1:
        return 1.0
    scaled = expected[keep] * counts.sum() / expected[keep].sum()
    return stats.chisquare(counts[keep].numpy(), scaled.numpy()).pvalue


def check_acceptance(verdict, predicted):
    """The measured acceptance against the closed form's 1 - (rejected mass)."""
    assert verdict.expected_acceptance[0, 0].item() == pytest.approx(predicted, abs=1e-5)
    sigma = math.sqrt(max(predicted * (1 - predicted), 1e-12) / DRAWS)
    assert abs(verdict.accepted.double().mean().item() - predicted) < 5 * sigma + 1e-9


def random_rows(n=64, v=12, seed=0, top_k=None):
    """n random (p, q) pairs of width v; with top_k both are truncated (zeros in each)."""
    g = torch.Generator().manual_seed(seed)
    lp, lq = (torch.randn(n, 1, v, generator=g) * 2 for _ in range(2))
    s = Sampling(1.0, top_k=top_k) if top_k else Sampling(1.0)
    p, q = process(lp, s), process(lq, s)
    draft = torch.multinomial(q.view(n, v), 1, generator=g)
    return Round(draft, q, p, lq, lp, s)


# --- Fuzzy SD ----------------------------------------------------------------------------------


def test_js_divergence_is_scipys_in_bits():
    rows = random_rows(top_k=4)
    ours = js_divergence_bits(rows.p1, rows.q1).view(-1)
    pairs = zip(rows.p1.view(64, -1).numpy(), rows.q1.view(64, -1).numpy())
    theirs = [jensenshannon(a, b, base=2) ** 2 for a, b in pairs]
    assert ours.numpy() == pytest.approx(np.array(theirs), abs=1e-6)
    assert js_divergence_bits(P, P).item() == pytest.approx(0.0, abs=1e-12)
    assert js_divergence_bits(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])).item() == 1.0


def fuzzy_by_hand(p, q, threshold, g):
    """The TensorRT-LLM procedure step by step: SD's coin, then the JS test, then SD's residual."""
    x = torch.multinomial(q, DRAWS, replacement=True, generator=g)
    sd_keeps = torch.rand(DRAWS, generator=g) < (p[x] / q[x]).clamp(max=1)
    keeps = sd_keeps | (js_divergence_bits(p, q) <= threshold)
    residual = torch.multinomial((p - q).clamp_min(0), DRAWS, replacement=True, generator=g)
    return torch.where(keeps, x, residual)


@pytest.mark.parametrize("threshold", [0.0, 0.1, 0.2, 1.0])
def test_fuzzy_emits_q_where_js_is_within_t_and_p_elsewhere(threshold):
    fuzzy_keeps = js_divergence_bits(P, Q).item() <= threshold and threshold > 0
    law, acceptance = (Q, 1.0) if fuzzy_keeps else (P, 1 - 0.5 * (P - Q).abs().sum().item())
    r, g = batched(P, Q)
    tokens, verdict = emitted(make_verifier("fuzzy", threshold=threshold), r, g)
    assert chi2_pvalue(tokens, law) > 1e-3
    assert chi2_pvalue(fuzzy_by_hand(P, Q, threshold, g), law) > 1e-3  # the stated procedure, drawn
    check_acceptance(verdict, acceptance)


def test_fuzzy_at_zero_is_sd_tensor_for_tensor():
    for rows in (random_rows(), random_rows(top_k=3, seed=1)):
        p = rows.p  # and a batch where q = p
        rows_equal = Round(rows.draft, p, p, rows.p_logits, rows.p_logits, rows.sampling)
        for r in (rows, rows_equal):
            mass, residual = make_verifier("fuzzy", threshold=0.0).rule(r)
            sd_mass, sd_residual = make_verifier("sd").rule(r)
            assert torch.equal(mass, sd_mass) and torch.equal(residual, sd_residual)


def acceptance_along_path(method, seed, slack):
    """Each row's kept mass at 21 steps along ``method``'s calibration path, asserted non-decreasing."""
    rows = random_rows(n=256, seed=seed)
    path = make_verifier(method).calibration
    steps = np.linspace(path.low, path.high, 21)
    accept = [make_verifier(method, **path.values(t)).rule(rows)[0].sum(-1) for t in steps]
    for lower, higher in zip(accept, accept[1:]):
        assert bool((higher >= lower - slack).all())
    return accept


def test_fuzzy_acceptance_rises_along_its_calibration_path():
    accept = acceptance_along_path("fuzzy", seed=2, slack=1e-6)
    assert torch.allclose(accept[-1], torch.ones_like(accept[-1]))  # T = 1 keeps every drafted token


def greedy(p, q, draft):
    logits = (one(q.log()), one(p.log()))
    return Round(torch.tensor([[draft]]), one(q), one(p), *logits, Sampling(0.0), greedy_draft=True)


def test_fuzzy_greedy_keeps_argmax_p_or_a_close_pair():
    # argmax p = 0, argmax q = 1; JS(P, Q) = 0.147 bits
    for threshold, keeps_q_choice in [(0.0, False), (0.1, False), (0.15, True), (0.5, True)]:
        verdict = verify(make_verifier("fuzzy", threshold=threshold), greedy(P, Q, 1), BONUS.view(1, -1))
        assert verdict.accepted.item() == int(keeps_q_choice)
        assert verdict.next_token.item() == (int(BONUS.argmax()) if keeps_q_choice else 0)
        kept = verify(make_verifier("fuzzy", threshold=threshold), greedy(P, Q, 0), BONUS.view(1, -1))
        assert kept.accepted.item() == 1  # argmax p is always kept


# --- Mentored decoding --------------------------------------------------------------------------


def mentored_by_hand(p, q, budget):
    """The proof's definitions solved directly in float64, independent of the sorted closed forms:
    for alpha, R = sum q min(1, p / (alpha q)), beta solves sum relu(p / beta - q) = 1 - R, and
    pi = q min(1, p / (alpha q)) + relu(p / beta - q); alpha is the smallest with KL(p || pi) <= D."""
    p, q = p.double().numpy(), q.double().numpy()
    kl = lambda pi: float(np.sum(np.where(p > 0, p * np.log(p / np.maximum(pi, 1e-300)), 0.0)))  # noqa: E731
    if kl(q) <= budget:
        return q, 1.0

    def law(alpha):
        mass = np.minimum(q, p / alpha)
        rest = 1 - mass.sum()
        if rest < 1e-12:  # every drafted token kept
            return mass / mass.sum(), 1.0
        beta = optimize.brentq(lambda b: np.maximum(p / b - q, 0).sum() - rest, 0.5, 1e12, xtol=1e-15)
        return mass + np.maximum(p / beta - q, 0), mass.sum()

    alpha = optimize.brentq(lambda a: kl(law(a)[0]) - budget, 1e-12, 1.0, xtol=1e-15)
    return law(alpha)


@pytest.mark.parametrize("budget", [0.02, 0.1, 0.3, 0.5])
def test_mentored_emits_the_proofs_optimum(budget):
    law, acceptance = mentored_by_hand(P, Q, budget)
    r, g = batched(P, Q)
    tokens, verdict = emitted(make_verifier("mentored", budget=budget), r, g)
    assert chi2_pvalue(tokens, torch.from_numpy(law)) > 1e-3
    check_acceptance(verdict, acceptance)


def test_mentored_on_a_point_mass_proposal():
    """A greedy draft or a lookup proposes one token: the optimum keeps it with min(1, p(x) / alpha)."""
    x = int(Q.argmax())
    point = torch.nn.functional.one_hot(torch.tensor(x), len(P)).double()
    law, acceptance = mentored_by_hand(P, point, 0.1)
    r, g = batched(P, Q, greedy_draft=True)
    tokens, verdict = emitted(make_verifier("mentored", budget=0.1), r, g)
    assert chi2_pvalue(tokens, torch.from_numpy(law)) > 1e-3
    check_acceptance(verdict, acceptance)


def test_mentored_is_as_good_as_a_generic_solver():
    """Max sum q r subject to KL(p || pi) <= D over every (r, s) (proof.pdf eq. 1-4), by SLSQP."""
    p, q, budget, v = P.double().numpy(), Q.double().numpy(), 0.1, len(P)

    def kl(x):
        r, s = x[:v], x[v:]
        pi = q * r + s * (1 - (q * r).sum())
        return float((p * np.log(p / np.maximum(pi, 1e-300))).sum())

    best = 0.0
    for seed in range(4):
        x0 = np.concatenate([np.random.default_rng(seed).uniform(0.3, 1, v), np.full(v, 1 / v)])
        res = optimize.minimize(
            lambda x: -(q * x[:v]).sum(), x0, method="SLSQP", bounds=[(0, 1)] * (2 * v),
            constraints=[
                {"type": "ineq", "fun": lambda x: budget - kl(x)},
                {"type": "eq", "fun": lambda x: x[v:].sum() - 1},
            ],
            options={"maxiter": 500, "ftol": 1e-12},
        )
        if res.success and kl(res.x) <= budget + 1e-7:
            best = max(best, -res.fun)
    r = Round(torch.tensor([[0]]), one(Q), one(P), None, one(P.log()), Sampling(1.0))
    ours = make_verifier("mentored", budget=budget).rule(r)[0].sum().item()
    assert best > 0.6 and ours == pytest.approx(best, abs=1e-5)


@pytest.mark.parametrize("top_k", [None, 3])
def test_mentored_meets_its_budget_and_spends_it(top_k):
    rows = random_rows(n=128, seed=3, top_k=top_k)
    for budget in (0.01, 0.1, 1.0):
        mass, residual = make_verifier("mentored", budget=budget).rule(rows)
        law = mass + (1 - mass.sum(-1, keepdim=True)) * normalise(residual, rows.p)
        assert torch.allclose(law.sum(-1), torch.ones(128, 1), atol=1e-5)
        p = rows.p.double()
        kl = torch.where(p > 0, p * (p / law.double().clamp_min(1e-300)).log(), 0.0).sum(-1)
        assert bool((kl <= budget + 1e-5).all())
        # the constraint is saturated wherever some drafted token can still be rejected (proof §3)
        open_ = mass.sum(-1) < 1 - 1e-4
        assert torch.allclose(kl[open_], torch.full_like(kl[open_], budget), atol=1e-4)


def test_mentored_at_zero_is_sd_tensor_for_tensor_and_greedy_is_exact_match():
    for rows in (random_rows(), random_rows(top_k=3, seed=1)):
        mass, residual = make_verifier("mentored", budget=0.0).rule(rows)
        sd_mass, sd_residual = make_verifier("sd").rule(rows)
        assert torch.equal(mass, sd_mass) and torch.equal(residual, sd_residual)
    for budget in (0.0, 0.5, 100.0):
        for x, kept in [(0, 1), (1, 0)]:  # argmax p = 0
            verdict = verify(make_verifier("mentored", budget=budget), greedy(P, Q, x), BONUS.view(1, -1))
            replacement = int(BONUS.argmax()) if kept else 0
            assert (verdict.accepted.item(), verdict.next_token.item()) == (kept, replacement)


def test_mentored_acceptance_rises_along_its_calibration_path():
    accept = acceptance_along_path("mentored", seed=4, slack=1e-5)
    assert bool((accept[-1] > accept[0] + 0.05).any())


# --- Drafters, parameters -----------------------------------------------------------------------


def test_fuzzy_refuses_a_lookup_draft_and_mentored_takes_it():
    with pytest.raises(BenchError) as err:
        drafter_for("lookup", "fuzzy", make_verifier("fuzzy").reads())
    assert "fuzzy: reads the draft model's" in str(err.value) and "\n" not in str(err.value)
    drafter_for("lookup", "mentored", make_verifier("mentored").reads())


@pytest.mark.parametrize(
    "method,params,needle",
    [
        ("fuzzy", ["threshold=-0.1"], "threshold must be [0, 1]"),
        ("fuzzy", ["threshold=1.5"], "threshold must be [0, 1]"),
        ("fuzzy", ["threshold=nan"], "threshold must be [0, 1]"),
        ("mentored", ["budget=-1"], "budget must be >= 0"),
        ("mentored", ["budget=inf"], "budget must be >= 0"),
    ],
)
def test_bad_parameter_values_are_one_clear_line(method, params, needle):
    with pytest.raises(BenchError) as err:
        expand_methods([method], params=parse_params(params))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_lossless_ends_equal_sd_under_greedy_decoding(tiny_pair):
    from tests.decoding.test_decoding import decoder, prompts

    for prompt in prompts(tiny_pair.tokenizer, 2):
        sd = decoder(tiny_pair, "sd").generate(prompt, 16)
        for method, params in [("fuzzy", {"threshold": 0.0}), ("mentored", {"budget": 1.0})]:
            ours = decoder(tiny_pair, method, **params).generate(prompt, 16)
            assert ours.token_ids == sd.token_ids and ours.stats.accepted_tokens == sd.stats.accepted_tokens
        everything = decoder(tiny_pair, "fuzzy", threshold=1.0).generate(prompt, 16)
        assert everything.stats.accepted_tokens == everything.stats.drafted_tokens
