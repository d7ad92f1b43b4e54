"""The serving engines' lossy acceptance rules (vLLM typical, SGLang thresholds, TensorRT-LLM relaxed):
decisions on hand-made distributions, the emitted law by sampling, lossless settings, bad values."""

import math

import pytest
import torch
from scipy import stats
from typer.testing import CliRunner

from bench.distributions import Sampling
from bench.errors import BenchError
from bench.config import expand_methods, parse_params
from bench.verifiers import Round, make_verifier, verify

DRAWS = 200_000
P = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])
Q = torch.tensor([0.10, 0.35, 0.05, 0.30, 0.15, 0.05])
BONUS = torch.tensor([0.05, 0.05, 0.30, 0.30, 0.20, 0.10])


def one(d):
    return d.view(1, 1, -1)


def round_with(p, q, draft, temperature=1.0):
    """A one-token round with a hand-picked drafted token; logits are log-probabilities."""
    return Round(torch.tensor([[draft]]), one(q), one(p), one(q.log()), one(p.log()), Sampling(temperature))


def decide(method, params, p, q, draft, temperature=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    bonus = torch.full((1, len(p)), 1 / len(p))
    verdict = verify(make_verifier(method, **params), round_with(p, q, draft, temperature), bonus, g)
    return verdict.accepted.item(), verdict.next_token.item()


# --- Decisions and replacement tokens on hand-made distributions -------------------------------


@pytest.mark.parametrize(
    "p,accepted",
    [
        # H = 1.142, 0.3 * exp(-H) = 0.096 > 0.09: threshold 0.09, so 0.05 is the only token refused
        (torch.tensor([0.50, 0.30, 0.15, 0.05]), [True, True, True, False]),
        # peaked: threshold 0.09 keeps only the top token
        (torch.tensor([0.97, 0.01, 0.01, 0.01]), [True, False, False, False]),
        # flat: H = ln 4, 0.3 / 4 = 0.075 < 0.09 is the threshold and every token clears it
        (torch.full((4,), 0.25), [True, True, True, True]),
    ],
)
def test_typical_accept_set_and_replacement(p, accepted):
    typical = make_verifier("typical")
    assert typical.accept_set(one(p))[0, 0].tolist() == accepted
    q = torch.full((4,), 0.25)
    for x, keep in enumerate(accepted):
        for seed in range(3):  # deterministic whatever the coin
            accepted, token = decide("typical", {}, p, q, x, seed=seed)
            assert accepted == int(keep)
            if not keep:
                assert token == 0  # vLLM's recovered token: argmax p


def test_typical_decisions_are_deterministic_and_replace_with_argmax():
    p, q = torch.tensor([0.50, 0.30, 0.15, 0.05]), torch.full((4,), 0.25)
    for seed in range(20):
        assert decide("typical", {}, p, q, 3, seed=seed) == (0, 0)  # refused -> argmax p
        assert decide("typical", {}, p, q, 2, seed=seed)[0] == 1
    # min(0.2, 1.0 * exp(-H) = 0.32) = 0.2 refuses 0.15 too; with alpha 0.3 the cap 0.096 keeps it
    assert decide("typical", {"posterior_threshold": 0.2, "posterior_alpha": 1.0}, p, q, 2) == (0, 0)
    assert decide("typical", {"posterior_threshold": 0.2}, p, q, 2)[0] == 1


def test_threshold_single_accepts_outright_and_acc_scales_the_coin():
    p, q = torch.tensor([0.50, 0.30, 0.15, 0.05]), torch.full((4,), 0.25)
    rule = make_verifier("threshold", speculative_accept_threshold_single=0.3)
    assert rule.accept_prob(one(p))[0, 0].tolist() == pytest.approx([1.0, 1.0, 0.15, 0.05])
    rule = make_verifier(
        "threshold", speculative_accept_threshold_single=1.0, speculative_accept_threshold_acc=0.2
    )
    assert rule.accept_prob(one(p))[0, 0].tolist() == pytest.approx([1.0, 1.0, 0.75, 0.25])
    for seed in range(10):
        assert decide("threshold", {"speculative_accept_threshold_single": 0.3}, p, q, 1, seed=seed)[0] == 1


def test_threshold_rejected_token_is_never_the_replacement():
    # one drafted token with certainty: a rejection must resample p without it
    p, q = torch.tensor([0.50, 0.30, 0.15, 0.05]), torch.tensor([1.0, 0.0, 0.0, 0.0])
    m, r = make_verifier("threshold").rule(round_with(p, q, 0))
    assert m[0, 0].tolist() == pytest.approx([0.5, 0, 0, 0])
    assert r[0, 0, 0].item() == 0 and (r[0, 0] / r[0, 0].sum()).tolist() == pytest.approx([0, 0.6, 0.3, 0.1])


@pytest.mark.parametrize(
    "topk,delta,candidates",
    [
        (1, 0.0, [True, False, False, False]),
        (10, 0.0, [True, False, False, False]),
        (3, 0.15, [True, True, False, False]),  # 0.4 - 0.15 = 0.25: 0.3 in, 0.2 out
        (1, 0.6, [True, False, False, False]),  # topk bounds the set
        (2, 1.0, [True, True, False, False]),
        (10, 1.0, [True, True, True, True]),
    ],
)
def test_relaxed_candidates_and_replacement(topk, delta, candidates):
    p, q = torch.tensor([0.4, 0.3, 0.2, 0.1]), torch.full((4,), 0.25)
    params = {"relaxed_topk": topk, "relaxed_delta": delta}
    assert make_verifier("relaxed", **params).candidates(one(p))[0, 0].tolist() == candidates
    for x, keep in enumerate(candidates):
        for temperature in (0.0, 1.0):  # the same decision greedy or sampled: TensorRT-LLM reads T = 1
            accepted, token = decide("relaxed", params, p, q, x, temperature)
            assert accepted == int(keep)
            if not keep:
                assert token == 0


def test_relaxed_reads_temperature_one_probabilities():
    # at T = 0.3 the processed p would put 0.25 far below 0.4 - 0.2; at T = 1 it is inside
    p1 = torch.tensor([0.40, 0.25, 0.20, 0.15])
    pt = (p1.log() / 0.3).softmax(-1)
    r = Round(torch.tensor([[1]]), one(p1), one(pt), one(p1.log()), one(p1.log()), Sampling(0.3))
    verdict = verify(make_verifier("relaxed", relaxed_topk=4, relaxed_delta=0.2), r, one(p1)[0])
    assert verdict.accepted.item() == 1


# --- The emitted law, by sampling ---------------------------------------------------------------


def stated_law(method, params, p, q):
    """Each rule's law, written from the engines' descriptions (not from the verifier's code)."""
    top = torch.zeros_like(p)
    top[p.argmax()] = 1
    if method == "typical":
        eps, alpha = params.get("posterior_threshold", 0.09), params.get("posterior_alpha", 0.3)
        entropy = -(p * (p + 1e-5).log()).sum()
        keep = (p > min(eps, alpha * math.exp(-entropy.item()))).float()
        return q * keep + (1 - (q * keep).sum()) * top
    if method == "relaxed":
        order = p.argsort(descending=True)[: params["relaxed_topk"]]
        keep = torch.zeros_like(p)
        keep[order[p[order] >= p.max() - params["relaxed_delta"]]] = 1
        keep[p.argmax()] = 1
        return q * keep + (1 - (q * keep).sum()) * top
    single, acc = (
        params.get("speculative_accept_threshold_single", 1.0),
        params.get("speculative_accept_threshold_acc", 1.0),
    )
    a = torch.where(p >= single, 1.0, (p / acc).clamp(max=1))
    law = q * a
    for x in range(len(p)):  # drafted x rejected: p with x removed, renormalised
        rest = p.clone()
        rest[x] = 0
        law += q[x] * (1 - a[x]) * rest / rest.sum()
    return law


def sglang_kernel(p, q, params, g):
    """SGLang's chain verification as its kernel does it: the replacement depends on the drafted x."""
    single, acc = (
        params.get("speculative_accept_threshold_single", 1.0),
        params.get("speculative_accept_threshold_acc", 1.0),
    )
    x = torch.multinomial(q, DRAWS, replacement=True, generator=g)
    px = p[x]
    keep = (torch.rand(DRAWS, generator=g) <= px / max(acc, 1e-9)) | (px >= single)
    rest = p.expand(DRAWS, -1).clone()
    rest[torch.arange(DRAWS), x] = 0
    replacement = torch.multinomial(rest, 1, generator=g).squeeze(1)
    return torch.where(keep, x, replacement)


ENGINE_CASES = [
    ("typical", {}),
    ("typical", {"posterior_threshold": 0.2, "posterior_alpha": 0.9}),
    ("threshold", {}),
    ("threshold", {"speculative_accept_threshold_single": 0.2}),
    ("threshold", {"speculative_accept_threshold_acc": 0.3}),
    ("relaxed", {"relaxed_topk": 1, "relaxed_delta": 0.0}),
    ("relaxed", {"relaxed_topk": 10, "relaxed_delta": 0.2}),
]


def chi2_pvalue(tokens, law):
    counts = torch.bincount(tokens, minlength=len(law)).double()
    expected = law.double() * len(tokens)
    keep = expected > 0
    assert counts[~keep].sum() == 0, "emitted a token the law gives probability 0"
    if keep.sum() == 1:  # a point mass: nothing left to test
        return 1.0
    scaled = expected[keep] * counts.sum() / expected[keep].sum()
    return stats.chisquare(counts[keep].numpy(), scaled.numpy()).pvalue


@pytest.mark.parametrize("method,params", ENGINE_CASES)
def test_emitted_token_follows_the_rules_stated_law(method, params):
    g = torch.Generator().manual_seed(7)
    draft = torch.multinomial(Q, DRAWS, replacement=True, generator=g).view(DRAWS, 1)
    expand = lambda d: d.view(1, 1, -1).expand(DRAWS, 1, -1)  # noqa: E731
    r = Round(draft, expand(Q), expand(P), expand(Q.log()), expand(P.log()), Sampling(1.0))
    verdict = verify(make_verifier(method, **params), r, BONUS.expand(DRAWS, -1), g)
    emitted = torch.where(verdict.accepted >= 1, draft[:, 0], verdict.next_token)
    law = stated_law(method, params, P, Q)
    assert law.sum().item() == pytest.approx(1.0, abs=1e-6)
    assert chi2_pvalue(emitted, law) > 1e-3, method
    # logged bias is TV(law, p); logged expected acceptance matches the measured rate
    assert verdict.bias[0, 0].item() == pytest.approx((law - P).clamp_min(0).sum().item(), abs=1e-5)
    predicted = verdict.expected_acceptance[0, 0].item()
    sigma = math.sqrt(max(predicted * (1 - predicted), 1e-12) / DRAWS)
    assert abs(verdict.accepted.double().mean().item() - predicted) < 5 * sigma + 1e-9
    if method == "threshold":  # the kernel's own procedure gives the same law
        assert chi2_pvalue(sglang_kernel(P, Q, params, g), law) > 1e-3


def test_sglang_defaults_are_lossless_under_sampling():
    law = stated_law("threshold", {}, P, Q)
    torch.testing.assert_close(law, P)
    r = round_with(P, Q, 0)
    verdict = verify(make_verifier("threshold"), r, one(BONUS)[0])
    assert verdict.bias.item() == pytest.approx(0.0, abs=1e-6)
    assert verdict.expected_acceptance.item() == pytest.approx((P * Q).sum().item(), abs=1e-6)


# --- Lossless settings reproduce sd token for token under greedy decoding ----------------------


LOSSLESS_UNDER_GREEDY = [
    ("typical", {}),  # vLLM's greedy target is one-hot: only argmax p clears the threshold
    ("typical", {"posterior_threshold": 0.0}),
    ("threshold", {}),  # SGLang verifies greedy batches by argmax, thresholds unused
    ("threshold", {"speculative_accept_threshold_single": 0.1, "speculative_accept_threshold_acc": 0.1}),
    ("relaxed", {}),  # TensorRT-LLM's defaults: relaxed_topk=1, relaxed_delta=0
    ("relaxed", {"relaxed_topk": 10, "relaxed_delta": 0.0}),
]


@pytest.mark.slow
def test_lossless_settings_equal_sd_under_greedy_and_relaxed_delta_is_lossy(tiny_pair):
    from tests.decoding.test_decoding import decoder, prompts

    relaxed_differs = 0
    for prompt in prompts(tiny_pair.tokenizer, 2):
        sd = decoder(tiny_pair, "sd").generate(prompt, 24)
        for method, params in LOSSLESS_UNDER_GREEDY:
            ours = decoder(tiny_pair, method, **params).generate(prompt, 24)
            assert ours.token_ids == sd.token_ids, (method, params)
            assert ours.stats.accepted_tokens == sd.stats.accepted_tokens, (method, params)
        lossy = decoder(tiny_pair, "relaxed", relaxed_topk=10, relaxed_delta=0.6).generate(prompt, 24)
        assert lossy.stats.accepted_tokens >= sd.stats.accepted_tokens or lossy.token_ids != sd.token_ids
        relaxed_differs += lossy.token_ids != sd.token_ids
    assert relaxed_differs, "relaxed_delta = 0.6 never changed an output: the test pair cannot tell"


# --- Parameters: engines' names and defaults, one clear line for bad values ---------------------


def test_list_shows_the_engines_rules_with_their_defaults():
    from bench.cli import app

    out = CliRunner().invoke(app, ["list"]).output
    for text in (
        "posterior_threshold=0.09",
        "posterior_alpha=0.3",
        "speculative_accept_threshold_single=1.0",
        "speculative_accept_threshold_acc=1.0",
        "relaxed_topk=1",
        "relaxed_delta=0.0",
    ):
        assert text in out


def test_param_option_reaches_every_rule():
    expanded = expand_methods(
        ["typical", "threshold", "relaxed"],
        params=parse_params(
            ["posterior_alpha=0.3,0.5", "relaxed_topk=10", "speculative_accept_threshold_acc=0.5"]
        ),
    )
    assert expanded == [
        ("typical", {"posterior_alpha": 0.3}, None),
        ("typical", {"posterior_alpha": 0.5}, None),
        ("threshold", {"speculative_accept_threshold_acc": 0.5}, None),
        ("relaxed", {"relaxed_topk": 10}, None),
    ]


def test_each_learned_method_reads_its_own_head():
    """``--head METHOD=PATH`` routes a head to one method: DIVERSED and a judge in one run each read
    theirs (a plain path still goes to every head-reading method without one of its own)."""
    both = expand_methods(["diversed", "autojudge"], heads=["diversed=h/div", "autojudge=h/aj"])
    assert both == [("diversed", {}, "h/div"), ("autojudge", {}, "h/aj")]
    mixed = expand_methods(["diversed", "judge"], heads=["diversed=h/div", "h/any", "odd=name"])
    assert mixed == [("diversed", {}, "h/div"), ("judge", {}, "h/any"), ("judge", {}, "odd=name")]


@pytest.mark.parametrize(
    "methods,params,needle",
    [
        (["typical"], ["posterior_threshold=-0.1"], "posterior_threshold must be >= 0"),
        (["typical"], ["posterior_alpha=nan"], "posterior_alpha must be >= 0"),
        (["threshold"], ["speculative_accept_threshold_single=1.5"], "must be in [0, 1]"),
        (["threshold"], ["speculative_accept_threshold_acc=-1"], "must be in [0, 1]"),
        (["relaxed"], ["relaxed_topk=0"], "relaxed_topk must be an integer >= 1"),
        (["relaxed"], ["relaxed_topk=2.5"], "relaxed_topk takes an integer"),
        (["relaxed"], ["relaxed_delta=-0.5"], "relaxed_delta must be >= 0"),
        (["sd", "relaxed"], ["posterior_alpha=0.3"], "no selected method takes it"),
        (["relaxed"], ["relaxed_topk"], "name=value"),
    ],
)
def test_bad_parameter_values_are_one_clear_line(methods, params, needle):
    with pytest.raises(BenchError) as err:
        expand_methods(methods, params=parse_params(params))
    assert needle in str(err.value) and "\n" not in str(err.value)


# --- Greedy drafts: the law of the emitted token given the drafted one -------------------------


def greedy_round(p, q, draft):
    r = round_with(p, q, draft)
    return Round(r.draft, r.q, r.p, r.q_logits, r.p_logits, r.sampling, greedy_draft=True)


@pytest.mark.parametrize("single,acc", [(1.0, 1.0), (0.3, 0.5), (0.2, 0.05)])
def test_threshold_on_a_greedy_draft_is_sglangs_per_token_rule(single, acc):
    """With the drafted x fixed (EAGLE's argmax), the template gives exactly SGLang's procedure:
    keep x with probability a(x), else sample norm(p with x set to 0)."""
    verifier = make_verifier(
        "threshold", speculative_accept_threshold_single=single, speculative_accept_threshold_acc=acc
    )
    for x in range(len(P)):
        r = greedy_round(P, Q, x)
        a = verifier.accept_prob(one(P))[0, 0, x]
        without = P.clone()
        without[x] = 0
        expected = (
            a * torch.nn.functional.one_hot(torch.tensor(x), len(P)) + (1 - a) * without / without.sum()
        )
        verdict = verify(verifier, r, BONUS.view(1, -1), torch.Generator().manual_seed(0))
        mass, residual = verifier.rule(r)
        emitted = mass + (1 - mass.sum(-1, keepdim=True)) * residual / residual.sum(
            -1, keepdim=True
        ).clamp_min(1e-30)
        assert torch.allclose(emitted[0, 0], expected, atol=1e-6)
        assert verdict.expected_acceptance.item() == pytest.approx(float(a))


@pytest.mark.parametrize("method", ["sd", "lossy", "typical", "relaxed"])
def test_a_greedy_draft_is_accepted_by_its_target_law_alone(method):
    """Against the one-hot proposal, sd keeps x with probability p(x) and emits p exactly (bias 0),
    and the engines' deterministic rules keep x iff it is in their accepted set."""
    verifier = make_verifier(method)
    for x in range(len(P)):
        verdict = verify(verifier, greedy_round(P, Q, x), BONUS.view(1, -1), torch.Generator().manual_seed(0))
        if method == "sd":
            assert verdict.expected_acceptance.item() == pytest.approx(float(P[x]))
            assert verdict.bias.item() == pytest.approx(0.0, abs=1e-6)
        elif method == "lossy":
            assert verdict.expected_acceptance.item() == pytest.approx(min(1.0, float(P[x]) / 0.5))
        else:
            kept = (verifier.accept_set(one(P)) if method == "typical" else verifier.candidates(one(P)))[
                0, 0, x
            ]
            assert verdict.accepted.item() == int(kept)
