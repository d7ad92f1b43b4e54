"""Verifiers checked without a model: statistics of the sampler, greedy rules, bad arguments."""

import math
from dataclasses import replace

import pytest
import torch
from scipy import stats

from bench.distributions import Sampling, normalise, process, tv
from bench.errors import BenchError
from bench.verifiers import (
    VERIFIERS,
    LossySD,
    Round,
    SpecCascade,
    make_verifier,
    mixture,
    verifier_class,
    verify,
)

DRAWS = 200_000
P = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])
Q = torch.tensor([0.10, 0.35, 0.05, 0.30, 0.15, 0.05])
BONUS = torch.tensor([0.05, 0.05, 0.30, 0.30, 0.20, 0.10])


def batched_round(p, q, *, weights=None, temperature=1.0, seed=0):
    """DRAWS independent one-token rounds, the drafted token sampled from q."""
    g = torch.Generator().manual_seed(seed)
    draft = torch.multinomial(q, DRAWS, replacement=True, generator=g).view(DRAWS, 1)
    expand = lambda d: d.view(1, 1, -1).expand(DRAWS, 1, -1)  # noqa: E731
    w = None if weights is None else torch.full((DRAWS, 1), weights)
    return (
        Round(draft, expand(q), expand(p), expand(q.log()), expand(p.log()), Sampling(temperature), w),
        g,
    )


def first_token(verdict, r):
    return torch.where(verdict.accepted >= 1, r.draft[:, 0], verdict.next_token)


def declared_law(verifier, r):
    """What the rule declares of one position, from its (m, r) on a round drafting each token x in
    turn (a judge's or relaxed's mass depends on the drafted token): x, drawn from the proposal,
    is kept with probability min(1, m_x(x) / q(x)), else the token is drawn from norm(r_x).
    Returns (the emitted token's law, the acceptance probability); for a rule whose (m, r) does
    not depend on the draft, m + (1 - sum m) norm(r) and sum m."""
    v = r.p.shape[-1]
    one = lambda t: None if t is None else t[:1].expand(v, *t.shape[1:])  # noqa: E731
    each = replace(r, draft=torch.arange(v).view(v, 1), q=one(r.q), p=one(r.p), q_logits=one(r.q_logits),
                   p_logits=one(r.p_logits), weights=one(r.weights))  # fmt: skip
    mass, residual = verifier.rule(each)
    proposal, x = each.proposal[:, 0], torch.arange(v)
    keep = (mass[x, 0, x] / proposal[x, x]).clamp(max=1)
    q = r.proposal[0, 0]
    law = (q * keep) @ torch.eye(v) + ((q * (1 - keep)).unsqueeze(-1) * normalise(residual[:, 0], each.p[:, 0])).sum(0)
    return law, (q * keep).sum().item()


# Every registered rule that verifies drafts at its defaults (a rule reading a learned head gets a
# head output, WEIGHT), so that a newly registered one is tested on arrival; then the settings
# whose rule differs from the defaults', and the verifier of tests/example_verifier.py.
WEIGHT = 0.4
VARIANTS = [
    ("lossy", {"lenience": 0.9}),
    ("cascade", {"cascade_rule": "chow", "cascade_alpha": 0.7}),
    ("cascade", {"cascade_rule": "diff", "cascade_alpha": 0.1}),
    ("cascade", {"cascade_rule": "token", "cascade_alpha": 0.5}),
    ("ensemble", {"target_weight": 0.3, "mix": "logit"}),
]
SAMPLING_CASES = [
    (name, params, WEIGHT if verifier_class(name).needs_hidden else None)
    for name, params in [*((n, {}) for n, c in VERIFIERS.items() if c.uses_draft), *VARIANTS]
] + [("example_verifier:ConfidenceEnsemble", {}, None)]


@pytest.mark.parametrize("method,params,weight", SAMPLING_CASES)
def test_emitted_token_follows_the_verification_law(method, params, weight):
    verifier = make_verifier(method, **params)
    r, g = batched_round(P, Q, weights=weight)
    verdict = verify(verifier, r, BONUS.expand(DRAWS, -1), g)
    law, predicted = declared_law(verifier, r)
    if hasattr(verifier, "pi"):  # a mixture: the law is pi itself
        torch.testing.assert_close(law, verifier.pi(r)[0, 0], atol=1e-6, rtol=0)
    counts = torch.bincount(first_token(verdict, r), minlength=len(P)).double()
    expected = law.double() * DRAWS
    keep = expected > 0
    assert counts[~keep].sum() == 0, "emitted a token the law gives probability 0"
    if keep.sum() > 1:  # a point mass (relaxed here: the argmax) is the check above alone
        chi2 = stats.chisquare(
            counts[keep].numpy(), expected[keep].numpy() * counts.sum().item() / expected.sum().item()
        )
        assert chi2.pvalue > 1e-3, f"{method}: emitted tokens do not follow its law (p = {chi2.pvalue:.2e})"

    measured = verdict.accepted.double().mean().item()
    sigma = math.sqrt(max(predicted * (1 - predicted), 1e-12) / DRAWS)
    assert abs(measured - predicted) < 5 * sigma + 1e-9, (method, measured, predicted)


def test_lossy_acceptance_matches_leviathans_formula():
    for lenience in (0.3, 0.5, 1.0):
        r, g = batched_round(P, Q)
        verdict = verify(LossySD(lenience), r, BONUS.expand(DRAWS, -1), g)
        formula = (Q * torch.clamp(P / (lenience * Q), max=1)).sum().item()
        assert verdict.expected_acceptance[0, 0].item() == pytest.approx(formula, abs=1e-6)
        sigma = math.sqrt(formula * (1 - formula) / DRAWS)
        assert abs(verdict.accepted.double().mean().item() - formula) <= 5 * sigma


@pytest.mark.parametrize("w", [0.3, 0.5, 0.7, 0.9, 1.0])
def test_static_ensemble_sits_on_the_pareto_line(w):
    r, g = batched_round(P, Q)
    verdict = verify(make_verifier("ensemble", target_weight=w), r, BONUS.expand(DRAWS, -1), g)
    d = tv(P, Q).item()
    assert verdict.expected_acceptance[0, 0].item() == pytest.approx(1 - w * d, abs=1e-6)
    assert verdict.bias[0, 0].item() == pytest.approx((1 - w) * d, abs=1e-6)
    measured_acc = verdict.accepted.double().mean().item()
    assert abs(measured_acc - (1 - w * d)) < 5 * math.sqrt(0.25 / DRAWS)
    emitted = torch.bincount(first_token(verdict, r), minlength=len(P)).double() / DRAWS
    assert tv(emitted, P.double()).item() == pytest.approx((1 - w) * d, abs=0.01)
    # rejection rate + bias = TV(p, q): the paper's Pareto line
    assert (1 - measured_acc) + tv(emitted, P.double()).item() == pytest.approx(d, abs=0.01)


def test_bonus_token_follows_p_when_everything_is_accepted():
    r, g = batched_round(Q, Q)  # pi = p = q: every draft accepted
    verdict = verify(make_verifier("sd"), r, BONUS.expand(DRAWS, -1), g)
    assert bool((verdict.accepted == 1).all())
    counts = torch.bincount(verdict.next_token, minlength=len(P)).numpy()
    expected = BONUS.double().numpy() / BONUS.double().sum().item() * DRAWS
    assert stats.chisquare(counts, expected).pvalue > 1e-3


def test_multi_token_round_stops_at_the_first_rejection():
    g = torch.Generator().manual_seed(1)
    n, v = 4, len(P)
    p = torch.stack([P, Q, P, Q]).unsqueeze(0).expand(DRAWS, n, v)
    q = torch.stack([Q, Q, Q, P]).unsqueeze(0).expand(DRAWS, n, v)
    draft = torch.multinomial(q.reshape(-1, v), 1, generator=g).view(DRAWS, n)
    r = Round(draft, q, p, q.log(), p.log(), Sampling(1.0))
    verdict = verify(make_verifier("sd"), r, BONUS.expand(DRAWS, -1), g)
    alpha = 1 - tv(p[0], q[0])  # per-position acceptance, independent of context here
    for k in range(n + 1):
        want = math.prod(alpha[:k].tolist()) * (1 - alpha[k].item() if k < n else 1)
        got = (verdict.accepted == k).double().mean().item()
        assert got == pytest.approx(want, abs=5 * math.sqrt(0.25 / DRAWS)), k


def greedy_round(p, q, draft):
    one = lambda d: d.view(1, 1, -1)  # noqa: E731
    return Round(torch.tensor([[draft]]), one(q), one(p), one(q.log()), one(p.log()), Sampling(0.0))


def test_greedy_rules():
    # argmax p = 0, argmax q = 1; the 0.3-ensemble's argmax is 1 (0.3*0.25 + 0.7*0.35 > 0.3*0.4+0.7*0.1)
    bonus = BONUS.view(1, -1)
    assert verify(make_verifier("sd"), greedy_round(P, Q, 1), bonus).accepted.item() == 0
    assert verify(make_verifier("sd"), greedy_round(P, Q, 1), bonus).next_token.item() == 0
    assert verify(make_verifier("lossy", lenience=0.1), greedy_round(P, Q, 1), bonus).accepted.item() == 0
    ens = verify(make_verifier("ensemble", target_weight=0.3), greedy_round(P, Q, 1), bonus)
    assert (ens.accepted.item(), ens.next_token.item()) == (1, int(bonus.argmax()))
    ens = verify(make_verifier("ensemble", target_weight=0.9), greedy_round(P, Q, 1), bonus)
    assert (ens.accepted.item(), ens.next_token.item()) == (0, 0)


# --- SpecCascade deferral rules on hand-made distributions -----------------------------------

CONFIDENT = torch.tensor([0.90, 0.05, 0.05])
UNSURE = torch.tensor([0.40, 0.35, 0.25])


@pytest.mark.parametrize(
    "rule,alpha,p,q,keeps",
    [
        ("chow", 0.2, UNSURE, CONFIDENT, True),  # max q 0.9 >= 0.8
        ("chow", 0.2, CONFIDENT, UNSURE, False),  # max q 0.4 < 0.8
        ("diff", 0.1, UNSURE, CONFIDENT, True),  # 0.9 >= 0.4 - 0.1
        ("diff", 0.1, CONFIDENT, UNSURE, False),  # 0.4 < 0.9 - 0.1
        ("diff", 0.6, CONFIDENT, UNSURE, True),  # 0.4 >= 0.9 - 0.6
        ("opt", 0.5, CONFIDENT, UNSURE, False),  # TV = 0.5: 0.4 < 0.9 - 0.25
        ("opt", 1.0, CONFIDENT, UNSURE, True),  # 0.4 >= 0.9 - 0.5
        ("opt", 0.0, UNSURE, UNSURE, True),  # identical models always keep
    ],
)
def test_cascade_deferral_rules(rule, alpha, p, q, keeps):
    cascade = SpecCascade(cascade_rule=rule, cascade_alpha=alpha)
    assert bool(cascade.keep_draft(p.view(1, 1, -1), q.view(1, 1, -1))) is keeps
    r = greedy_round(p, q, 0)
    torch.testing.assert_close(cascade.pi(r)[0, 0], q if keeps else p)


def test_cascade_token_rule():
    p = torch.tensor([0.50, 0.30, 0.15, 0.05])
    q = torch.tensor([0.10, 0.20, 0.30, 0.40])
    cascade = SpecCascade(cascade_rule="token", cascade_alpha=0.5)  # A = {v : p(v) >= 0.25} = {0, 1}
    assert cascade.token_accept_set(p).tolist() == [True, True, False, False]
    pi = cascade.pi(greedy_round(p, q, 0))[0, 0]
    torch.testing.assert_close(pi, torch.tensor([0.1, 0.2, 0, 0]) + 0.7 * p)
    assert pi.sum().item() == pytest.approx(1.0)


def test_cascade_deferral_reads_temperature_one_probabilities():
    # Processed at T = 0.5 the draft looks confident; at T = 1 it is not, so chow must defer.
    q1, p1 = torch.tensor([0.6, 0.4]), torch.tensor([0.5, 0.5])
    q_t = (q1.log() / 0.5).softmax(-1)
    one = lambda d: d.view(1, 1, -1)  # noqa: E731
    r = Round(torch.tensor([[0]]), one(q_t), one(p1), one(q1.log()), one(p1.log()), Sampling(0.5))
    cascade = SpecCascade(cascade_rule="chow", cascade_alpha=0.35)  # keep iff max q >= 0.65
    assert q_t.max() > 0.65
    torch.testing.assert_close(cascade.pi(r)[0, 0], p1)


# --- Mixtures --------------------------------------------------------------------------------


def logit_round(lp, lq, sampling):
    one = lambda d: d.view(1, 1, -1)  # noqa: E731
    p, q = process(lp, sampling), process(lq, sampling)
    return Round(torch.tensor([[0]]), one(q), one(p), one(lq), one(lp), sampling)


def test_logit_mix_is_the_authors_formula():
    t = 0.7
    lp, lq = torch.randn(10), torch.randn(10)
    w = 0.6
    authors = (w * lp / t + (1 - w) * lq / t**2).softmax(-1)  # m = w*z_p + (1-w)*(z_q/T), z = l/T
    r = logit_round(lp, lq, Sampling(t))
    torch.testing.assert_close(mixture(r, w, "logit")[0, 0], authors)


def test_logit_mix_truncates_the_mixed_scores_not_p_and_q():
    # The authors applied top-k/top-p to the mixed logits. Here p's and q's top-1 differ from the
    # mixture's top-1, so truncating p and q first would leave pi no mass on the mixture's choice.
    lp = torch.tensor([3.0, 0.0, 2.5, -2.0])
    lq = torch.tensor([0.0, 3.0, 2.5, -2.0])
    w, t = 0.5, 1.0
    for sampling in (Sampling(t, top_k=1), Sampling(t, top_p=0.3)):
        r = logit_round(lp, lq, sampling)
        pi = make_verifier("ensemble", target_weight=w, mix="logit").pi(r)[0, 0]
        authors = process(w * lp / t + (1 - w) * lq / t**2, Sampling(1.0, sampling.top_k, sampling.top_p))
        torch.testing.assert_close(pi, authors)
        assert pi.argmax().item() == 2 and pi[2].item() == pytest.approx(1.0)


def test_ensemble_weight_one_is_sd():
    r = greedy_round(P, Q, 1)
    assert torch.equal(make_verifier("ensemble", target_weight=1.0).pi(r), r.p)


# --- Bad arguments: one clear error naming the allowed values ---------------------------------


@pytest.mark.parametrize(
    "method,params,needle",
    [
        ("ensemble", {"target_weight": 0.0}, "(0, 1]"),
        ("ensemble", {"target_weight": 1.5}, "(0, 1]"),
        ("ensemble", {"mix": "geometric"}, "prob, logit"),
        ("lossy", {"lenience": 0.0}, "(0, 1]"),
        ("lossy", {"lenience": 2.0}, "(0, 1]"),
        ("cascade", {"cascade_rule": "vote"}, "chow, diff, opt, token"),
        ("cascade", {"cascade_alpha": -1.1}, "[-1, 1]"),
        ("diversed", {"mix": "logit"}, "--mix prob"),
        ("medusa", {}, "ar, sd, lossy, cascade, ensemble, diversed"),
        ("sd", {"target_weight": 0.5}, "unknown parameter"),
        ("no_such_module:Thing", {}, "module:Class or path/to/file.py:Class"),
    ],
)
def test_bad_arguments_raise_one_clear_error(method, params, needle):
    with pytest.raises(BenchError) as err:
        make_verifier(method, **params)
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_plugin_verifier_by_path():
    cls = verifier_class("example_verifier:ConfidenceEnsemble")
    assert cls.name == "confidence"


@pytest.mark.parametrize("greedy_draft", [False, True])
def test_accept_all_keeps_every_draft_and_its_bonus_follows_p(greedy_draft):
    """The top anchor of every frontier (bench/lossless.py): acceptance 1 on sampled and on greedy
    drafts, the emitted token the drafted one (its law the proposal's), the bonus token from p;
    under greedy decoding too, with a drafted token that is not q's argmax (a lookup's match)."""
    r, g = batched_round(P, Q)
    r = Round(r.draft, r.q, r.p, r.q_logits, r.p_logits, r.sampling, greedy_draft=greedy_draft)
    verdict = verify(make_verifier("accept_all"), r, BONUS.expand(DRAWS, -1), g)
    assert bool((verdict.accepted == 1).all()) and bool((verdict.expected_acceptance == 1).all())
    counts = torch.bincount(verdict.next_token, minlength=len(P)).numpy()
    expected = BONUS.double().numpy() / BONUS.double().sum().item() * DRAWS
    assert stats.chisquare(counts, expected).pvalue > 1e-3
    greedy = Round(r.draft[:50], r.q[:50], r.p[:50], r.q_logits[:50], r.p_logits[:50], Sampling(0.0))
    assert bool((verify(make_verifier("accept_all"), greedy, BONUS.expand(50, -1)).accepted == 1).all())
