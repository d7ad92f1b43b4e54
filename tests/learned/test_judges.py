"""The judge family: its law (always-reject is SD, always-accept keeps every draft), mining on a
fake target whose greedy continuation is known, the classifier against scikit-learn's, and the
judge head read off the verify forward."""

import pytest
import torch

from bench.distributions import Sampling, process
from bench.verifier_heads import JudgeHead
from bench.learned.logistic import fit_judge, logistic_fit, roc_auc
from bench.learned.miners import autojudge, mismatches, run, run_many, selfjudge
from bench.verifiers import Round, make_verifier, verify


def random_round(b=4000, n=3, v=6, seed=0, scores=None, temperature=1.0):
    g = torch.Generator().manual_seed(seed)
    pl, ql = torch.randn(b, n, v, generator=g) * 2, torch.randn(b, n, v, generator=g) * 2
    s = Sampling(temperature)
    p, q = process(pl, s), process(ql, s)
    draft = q.reshape(-1, v).multinomial(1, generator=g).reshape(b, n) if temperature else ql.argmax(-1)
    w = scores if scores is not None else torch.zeros(b, n)
    return Round(draft, q, p, ql, pl, s, weights=w.expand(b, n) if w.dim() == 0 else w)


@pytest.mark.parametrize("method", ["judge", "autojudge", "selfjudge"])
def test_always_reject_is_exactly_sd(method):
    """p(important) = 1 > tau everywhere: the same mass and residual as SD, so the same draws."""
    r = random_round(scores=torch.tensor(1.0))
    judge, sd = make_verifier(method, tau=0.9), make_verifier("sd")
    for a, b in zip(judge.rule(r), sd.rule(r)):
        assert torch.equal(a, b)
    bonus = r.p[:, -1]
    vj = verify(judge, r, bonus, torch.Generator().manual_seed(1))
    vs = verify(sd, r, bonus, torch.Generator().manual_seed(1))
    assert torch.equal(vj.accepted, vs.accepted) and torch.equal(vj.next_token, vs.next_token)


def test_tau_zero_is_sd_whatever_the_head_says():
    r = random_round(scores=torch.rand(4000, 3, generator=torch.Generator().manual_seed(3)))
    for a, b in zip(make_verifier("autojudge", tau=0.0).rule(r), make_verifier("sd").rule(r)):
        assert torch.equal(a, b)


def test_always_accept_keeps_every_draft():
    r = random_round(scores=torch.tensor(0.0))
    v = verify(make_verifier("autojudge", tau=0.5), r, r.p[:, -1], torch.Generator().manual_seed(1))
    assert bool((v.accepted == 3).all())
    g = random_round(scores=torch.tensor(0.0), temperature=0)
    assert bool((verify(make_verifier("selfjudge", tau=0.5), g, g.p[:, -1]).accepted == 3).all())


def test_judge_acceptance_follows_the_law():
    """Statistically: drafted x kept w.p. min(1, p/q) + (1 - min(1, p/q)) [s < tau], per position."""
    b, v = 200_000, 5
    g = torch.Generator().manual_seed(7)
    p = torch.softmax(torch.randn(v, generator=g), -1).expand(b, 1, v)
    q = torch.softmax(torch.randn(v, generator=g), -1).expand(b, 1, v)
    draft = q[:, 0].multinomial(1, generator=g)
    fine_tokens = torch.tensor([0, 2])
    scores = torch.where(torch.isin(draft, fine_tokens), 0.1, 0.9).float()
    r = Round(draft, q, p, q.log(), p.log(), Sampling(1.0), weights=scores)
    got = verify(make_verifier("judge", tau=0.5), r, p[:, 0], torch.Generator().manual_seed(2)).accepted.float()
    ratio = (p[0, 0] / q[0, 0]).clamp(max=1)
    law = torch.where(torch.isin(torch.arange(v), fine_tokens), torch.ones(v), ratio)
    expected = (q[0, 0] * law).sum()
    assert abs(got.mean() - expected) < 4 * (expected * (1 - expected) / b) ** 0.5


def test_greedy_keeps_exact_matches_and_what_the_judge_calls_fine():
    r = random_round(b=500, temperature=0, scores=torch.full((500, 3), 0.9))
    sd = verify(make_verifier("sd"), r, r.p[:, -1])
    judged = verify(make_verifier("judge", tau=0.5), r, r.p[:, -1])
    assert torch.equal(sd.accepted, judged.accepted) and torch.equal(sd.next_token, judged.next_token)


class FakeOracle:
    """A target whose greedy continuation is a table lookup on the last token; a draft that
    proposes fixed tokens at fixed positions."""

    eos = frozenset({0})

    def __init__(self, nexts, draft_swaps, v=10):
        self.nexts, self.swaps, self.v = nexts, draft_swaps, v

    def greedy(self, calls):
        return [self._greedy(c.ids, c.max_new) for c in calls]

    def _greedy(self, ids, max_new):
        out = []
        while len(out) < max_new:
            out.append(self.nexts[(ids + out)[-1]])
            if out[-1] in self.eos:
                break
        return out

    def drafted(self, calls):
        return [[self.swaps.get(i + 1, c.ids[i + 1] if i + 1 < len(c.ids) else 0) for i in range(len(c.ids))] for c in calls]

    def likelihood(self, calls):
        # after token 9 the target finds any next token unlikely (log p -5), else sure (0)
        return [torch.tensor([-5.0 if t == 9 else 0.0 for t in c.ids[:-1]]) for c in calls]

    @staticmethod
    def top(token):
        """The target's max log p after ``token``: unsure (-5) after 9, else sure (0)."""
        return -5.0 if token == 9 else 0.0

    def logp(self, before, token):
        """log p(token | ... before): 0 for its greedy next token, -3 for any other."""
        return 0.0 if self.nexts.get(before) == token else -3.0

    def swapped(self, calls):
        """By its definition: top log p from the position before the swap to the window's end, the
        copy's first entry the swapped-in token's own log p."""
        out = []
        for c in calls:
            scores = []
            for pos, token in c.sites:
                copy, end = c.ids[:pos] + [token] + c.ids[pos + 1 :], min(pos + c.window, len(c.ids) - 1)
                original = [self.top(c.ids[k]) for k in range(pos - 1, end)]
                swapped = [self.logp(c.ids[pos - 1], token)] + [self.top(copy[k]) for k in range(pos, end)]
                scores.append((torch.tensor(original), torch.tensor(swapped)))
            out.append(scores)
        return out


def test_autojudge_mining_on_a_known_case():
    """Target: 1 -> 2 -> 3 -> 4 -> 0 (EOS); 5 -> 3 (rejoins); 7 -> 8 -> 0 (another answer).
    The draft writes 5 at completion position 0 (answer kept: unimportant, swapped text kept) and 7
    at position 2 (answer changes: important)."""
    nexts = {1: 2, 2: 3, 3: 4, 4: 0, 5: 3, 7: 8, 8: 0}
    prompt = [1]
    oracle = FakeOracle(nexts, {1: 5, 3: 7})  # absolute positions in prompt + completion
    agree = lambda a, b: a[-2:] == b[-2:]  # the "answer": the last token before EOS
    expected = [
        ([1], 5, False),  # 1 5 3 4 0: ends "4 0" as the target's 1 2 3 4 0 does
        ([1, 5, 3], 7, True),  # on the kept text: 1 5 3 7 8 0 ends "8 0"
    ]
    labels = run(oracle, autojudge.mine(prompt, 10, agree, oracle.eos))
    assert [(m.context, m.token, m.important) for m in labels] == expected
    other = run(oracle, autojudge.mine([4], 10, agree, oracle.eos))
    seen: list[tuple[int, int]] = []
    miners = [autojudge.mine(prompt, 10, agree, oracle.eos), autojudge.mine([4], 10, agree, oracle.eos)]
    batched = run_many(oracle, miners, lambda rounds, mining: seen.append((rounds, mining)))
    assert batched == [labels, other]  # in lockstep, each miner as alone
    # progress after every round but the last: rounds count up, the miners still mining count down to 1
    assert [r for r, _ in seen] == list(range(1, len(seen) + 1)) and seen[0][1] == 2 and seen[-1][1] == 1


def test_selfjudge_mining_on_a_known_case():
    """The authors' statistic by hand (naver-aics/SelfJudge@c97c8e83 compare_important_tokens_gsm8k.py):
    mean(top log p, original, positions m-1 .. m+N-1) - mean([log p of the swapped token at m-1]
    + top log p of the copy at m .. m+N-1); each swap also yields the original token as a negative."""
    nexts = {1: 2, 2: 3, 3: 4, 4: 0, 9: 4}
    # The target writes 1 2 3 4 0 (sure of every token: top log p 0). At position 2 the draft writes
    # 9 (log p -3), after which the target is unsure (top -5): original [0, 0, 0], copy [-3, -5, 0],
    # score 8/3. At 3 it writes 3 (log p -3), after which it is as sure; the window stops at the
    # sequence's end: original [0, 0], copy [-3, 0], score 1.5.
    oracle = FakeOracle(nexts, {2: 9, 3: 3})
    labels = run(oracle, selfjudge.mine([1], 10, window=2))
    assert [(m.context, m.token, m.important) for m in labels] == [
        ([1, 2], 9, None), ([1, 2], 3, False), ([1, 2, 3], 3, None), ([1, 2, 3], 4, False)
    ]
    assert [m.score for m in labels[::2]] == pytest.approx([8 / 3, 1.5])
    assert labels[1].score is None and selfjudge.WINDOW == 20


def test_selfjudge_tau_is_the_authors_where_published_else_the_quantile_rule():
    assert selfjudge.published_tau("gsm8k", "meta-llama/Llama-3.1-8B-Instruct") == 0.066157
    assert selfjudge.published_tau("gsm8k", "Qwen/Qwen2.5-7B-Instruct") == 0.0563
    assert selfjudge.published_tau("arith", "reference/target") is None
    scores = torch.arange(1000, dtype=torch.float64)
    share = float((scores > selfjudge.quantile_tau(scores)).double().mean())
    assert share == pytest.approx(37646 / 47564, abs=2e-3)  # the authors' share of important swaps


def test_lookup_drafts_are_mined_where_lookup_proposes_a_token():
    """Lookup's first proposal after every prefix; where it finds no match it proposes nothing (-1),
    which is no mismatch."""
    from bench.drafters.lookup import first_proposals

    ids = [5, 6, 7, 5, 8, 9, 5]
    # after the second 5: its first occurrence was followed by 6; after the third, the most recent by 8
    assert first_proposals(ids, ngram=1) == [-1, -1, -1, 6, -1, -1, 6]
    assert first_proposals(ids, ngram=2, match="recent") == [-1, -1, -1, 6, -1, -1, 8]
    assert mismatches([-1, -1, 4, 9], [1, 2], [3, 4, 5], 0) == [(2, 9)]  # -1: nothing proposed; 4 agrees


def fixture(n=120, f=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, f, generator=g) * torch.tensor([1.0, 3.0, 0.5, 10.0]) + 2
    y = ((x[:, 0] - 2 + 0.3 * torch.randn(n, generator=g)) > 0).long()
    return x, y


def test_logistic_fit_equals_scikit_learn():
    sklearn = pytest.importorskip("sklearn.linear_model")
    from sklearn.metrics import roc_auc_score

    x, y = fixture()
    x = (x - x.mean(0)) / x.std(0, unbiased=False)
    for C in (0.01, 1.0, 100.0):
        w, b = logistic_fit(x, y, C)
        ref = sklearn.LogisticRegression(C=C, tol=1e-10, max_iter=10_000).fit(x.double().numpy(), y.numpy())
        assert torch.allclose(w.double(), torch.tensor(ref.coef_[0]), atol=1e-4, rtol=1e-4)
        assert b == pytest.approx(float(ref.intercept_[0]), abs=1e-4)
    s = torch.randn(len(y), generator=torch.Generator().manual_seed(1)).round()
    assert roc_auc(y, s) == pytest.approx(roc_auc_score(y.numpy(), s.numpy()))


def test_fit_splits_by_question_and_the_head_applies_it():
    x, y = fixture(200)
    groups = torch.arange(200) // 5
    fit = fit_judge(x, y, groups, seed=0)
    assert fit.val_auc >= 0.85 and int(fit.weight.abs().argmax()) == 0  # the one informative feature
    head = JudgeHead("target", 3, 4)
    head.mean.copy_(fit.mean), head.scale.copy_(fit.scale), head.weight.copy_(fit.weight)
    head.bias.fill_(fit.bias)
    expected = torch.sigmoid(((x - fit.mean) / fit.scale) @ fit.weight + fit.bias)
    assert torch.allclose(head(None, x), expected)


def test_rare_important_labels_still_split_both_ways():
    """Two questions of fifty hold the only important tokens: each side of the split gets one."""
    from bench.learned.logistic import validation_questions

    groups = torch.arange(150) // 3
    y = torch.isin(groups, torch.tensor([7, 31])) & (torch.arange(150) % 3 == 0)
    val = torch.isin(groups, validation_questions(y, groups, seed=0, share=0.1))
    assert y[val].any() and y[~val].any() and (~y[val]).any()
    assert len(validation_questions(y, groups, seed=0, share=0.1)) == 1 + round(48 * 0.1)


def test_one_class_of_labels_is_refused_not_a_constant_judge():
    """No finite logistic optimum: a judge that says the same of every token would be SD or
    accept-all under another name, so the fit refuses in one line."""
    from bench.errors import BenchError

    x, _ = fixture(40)
    for label, kind in ((0, "unimportant"), (1, "important")):
        with pytest.raises(BenchError, match=f"every one of the 40 mined labels says {kind}:"):
            fit_judge(x, torch.full((40,), label, dtype=torch.long), torch.arange(40) // 4)


def test_the_bare_judge_rule_needs_a_head_it_cannot_train():
    from bench.config import expand_methods
    from bench.errors import BenchError

    with pytest.raises(BenchError, match="judge: reads a head and trains none"):
        expand_methods(["judge"])
    assert expand_methods(["judge"], heads=["h"]) == [("judge", {}, "h")]
    assert expand_methods(["autojudge"]) == [("autojudge", {}, None)]  # its cached head


def test_a_head_reads_p_on_the_quantile_scale_of_its_validation_scores():
    from bench.verifier_heads import JudgeHead

    head = JudgeHead("target", 2, 2)
    head.weight.copy_(torch.tensor([1.0, 0.0]))
    head.ranks = torch.sigmoid(torch.tensor([-1.0, 0.0, 1.0, 2.0]))  # four validation scores
    h = torch.tensor([[-5.0, 0.0], [-0.5, 0.0], [0.5, 0.0], [1.5, 0.0], [9.0, 0.0]])
    assert head(None, h).tolist() == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8])  # the share of scores below p, / (n + 1)
    assert not (head(None, h) < 0.0).any() and (head(None, h) < 1.0).all()  # tau 0 keeps none, 1 all


def test_selfjudge_fit_picks_c_by_validation_auc_on_the_authors_grid():
    """notebooks/train_selfjudge-fulldata.ipynb: C_grid = (10 ** 0.5) ** -np.arange(10)[::-1], the
    best validation ROC-AUC wins (the first on a tie), the training split's model is kept, and the
    thresholds are np.quantile(val_probs, np.linspace(0, 1, 20))."""
    import numpy as np

    from bench.learned.logistic import SELFJUDGE, SELFJUDGE_C_GRID, standardiser, validation_questions

    assert np.allclose(SELFJUDGE_C_GRID, (10**0.5) ** -np.arange(10)[::-1])
    g = torch.Generator().manual_seed(5)
    x = torch.cat([fixture(300)[0], torch.randn(300, 40, generator=g)], dim=1)  # 40 noise features
    y = ((x[:, 0] - 2 + 1.5 * torch.randn(300, generator=g)) > 0).long()
    groups = torch.arange(300) // 3
    fit = fit_judge(x, y, groups, seed=0, val_share=0.3, style=SELFJUDGE)
    val = torch.isin(groups, validation_questions(y, groups, 0, 0.3))
    mean, scale = standardiser(x[~val])
    aucs = []
    for C in SELFJUDGE_C_GRID:
        w, b = logistic_fit((x[~val] - mean) / scale, y[~val], C)
        aucs.append(roc_auc(y[val], ((x[val] - mean) / scale) @ w + b))
    assert len(set(aucs)) > 1  # the grid matters on this fixture
    assert fit.C == SELFJUDGE_C_GRID[aucs.index(max(aucs))] and fit.val_auc == max(aucs)
    w, b = logistic_fit((x[~val] - mean) / scale, y[~val], fit.C)
    assert torch.allclose(fit.mean, mean.float()) and torch.allclose(fit.weight, w)  # no refit
    probs = torch.sigmoid(((x[val] - mean) / scale).float() @ w + b).double().numpy()
    assert fit.val_scores.tolist() == pytest.approx(np.quantile(probs, np.linspace(0, 1, 20)).tolist(), abs=1e-6)


def test_a_selfjudge_head_on_its_20_thresholds_keeps_what_the_authors_threshold_keeps():
    """ranks = the 20 quantile thresholds Q_0 .. Q_19: the head outputs (number of Q_i below p) / 21,
    so tau in (i / 21, (i + 1) / 21] keeps a token iff p <= Q_i (the authors predict important iff
    p > thr); tau = 0 keeps none."""
    head = JudgeHead("target", 2, 2)
    head.weight.copy_(torch.tensor([1.0, 0.0]))
    head.ranks = torch.linspace(0.2, 0.8, 20)
    p = torch.rand(500, generator=torch.Generator().manual_seed(0))
    out = head(None, torch.stack([torch.logit(p), torch.zeros(500)], dim=1))
    for i in range(20):
        for tau in ((i + 0.01) / 21, (i + 1) / 21):
            assert torch.equal(out < tau, p <= head.ranks[i])
    assert not (out < 0).any()
