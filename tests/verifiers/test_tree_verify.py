"""Verification rules on token trees (bench/verifiers/tree.py), without a model.

A small "language model" is a table of next-token laws over V = 5 tokens for every prefix up to
three tokens. Each law is checked statistically over 10^5 batched rows: the emitted path and token
against an exact law enumerated here (written from the rules' descriptions, not from the code),
the lossless rules' emitted sequence against the table's autoregressive law, a one-wide tree
against today's chain ``verify``.
"""

import itertools
import math
from collections import Counter

import pytest
import torch
from scipy import stats

from bench.distributions import Sampling, normalise
from bench.errors import BenchError
from bench.verifiers import (
    Round,
    TreeRound,
    make_verifier,
    tree_methods,
    verify,
    verify_tree,
    without_earlier_siblings,
)

V = 5
DEPTH = 3  # laws for every prefix of up to DEPTH tokens
DRAWS = 100_000
PREFIXES = [pre for k in range(DEPTH + 1) for pre in itertools.product(range(V), repeat=k)]
CONTEXT = {pre: i for i, pre in enumerate(PREFIXES)}
# CHILD[c, t]: the context of prefix c followed by t (the last level points at itself: unused)
CHILD = torch.tensor([[CONTEXT.get(pre + (t,), i) for t in range(V)] for i, pre in enumerate(PREFIXES)])


def law_table(seed: int, zeros: bool) -> torch.Tensor:
    """[contexts, V]: peaked random laws; ``zeros`` gives some contexts a token of probability 0."""
    g = torch.Generator().manual_seed(seed)
    laws = torch.rand(len(PREFIXES), V, generator=g) ** 3 + 0.01
    if zeros:
        laws[::3, 4] = 0.0
    return laws / laws.sum(-1, keepdim=True)


P_LAWS = law_table(0, zeros=True)
Q_LAWS = law_table(1, zeros=False)


def contexts(tokens: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
    """[B, n]: each node's context (the prefix from the root to it)."""
    ctx = torch.zeros_like(tokens)
    for j in range(tokens.shape[1]):
        parent = parents[:, j]
        above = torch.where(parent < 0, 0, ctx.gather(1, parent.clamp(min=0).unsqueeze(1)).squeeze(1))
        ctx[:, j] = CHILD[above, tokens[:, j]]
    return ctx


def tree_round(tokens, parents, *, q=None, temperature=1.0, greedy_draft=False, counts=None):
    """A TreeRound whose target laws come from the table at each node's prefix."""
    tokens, parents = torch.as_tensor(tokens), torch.as_tensor(parents)
    if tokens.dim() == 1:
        tokens = tokens.expand(DRAWS, -1)
    if parents.dim() == 1:
        parents = parents.expand(tokens.shape[0], -1)
    ctx = torch.cat([torch.zeros(tokens.shape[0], 1, dtype=torch.long), contexts(tokens, parents)], 1)
    p = P_LAWS[ctx]
    counts = [tokens.shape[1]] * tokens.shape[0] if counts is None else counts
    return TreeRound(tokens, parents, counts, p, p.log(), q, Sampling(temperature), greedy_draft)


def outcomes(verdict, parents) -> Counter:
    """Counts of (path, next token) over rows sharing one tree (a path is named by its end node)."""
    nodes = torch.cat([torch.full_like(verdict.accepted, -1).unsqueeze(1), verdict.nodes], 1)
    end = nodes.gather(1, verdict.accepted.unsqueeze(1)).squeeze(1)
    counts = torch.bincount((end + 1) * V + verdict.next_token, minlength=(len(parents) + 1) * V)
    found = Counter()
    for code in counts.nonzero().flatten().tolist():
        node, path = code // V - 1, []
        while node >= 0:
            path.insert(0, node)
            node = parents[node]
        found[(tuple(path), code % V)] = int(counts[code])
    return found


def chi2_pvalue(observed: Counter, law: dict) -> float:
    """Chi-square of observed outcome counts against an exact law (cells under 5 expected pooled)."""
    total = sum(observed.values())
    assert not set(observed) - {k for k, v in law.items() if v > 0}, "an outcome of probability 0 occurred"
    cells = sorted(law, key=lambda k: law[k])
    big = [k for k in cells if law[k] * total >= 5]
    small = [k for k in cells if 0 < law[k] * total < 5]
    obs = [observed.get(k, 0) for k in big] + ([sum(observed.get(k, 0) for k in small)] if small else [])
    exp = [law[k] * total for k in big] + ([sum(law[k] for k in small) * total] if small else [])
    if len(obs) < 2:
        return 1.0
    scale = sum(obs) / sum(exp)
    return stats.chisquare(obs, [e * scale for e in exp]).pvalue


# --- Exact laws, enumerated -------------------------------------------------------------------


def children_of(parents, node):
    return [j for j, par in enumerate(parents) if par == node]


def p_at(tokens, parents, node):
    """The target law at node (-1: the root): the table at its prefix."""
    prefix = []
    while node >= 0:
        prefix.append(tokens[node])
        node = parents[node]
    return P_LAWS[CONTEXT[tuple(reversed(prefix))]].double()


def lossless_law(tokens, parents, q=None, node=-1, path=(), weight=1.0, law=None):
    """Per node: try children in order; keep x with probability min(1, r(x) / q_x(x)), else
    r <- norm(max(0, r - q_x)); q_x the point mass when q is None. All rejected: norm(r)."""
    law = {} if law is None else law
    r = p_at(tokens, parents, node)
    for j in children_of(parents, node):
        qx = torch.zeros(V, dtype=torch.float64)
        qx[tokens[j]] = 1.0
        if q is not None:
            qx = q[j].double()
        a = min(1.0, (r[tokens[j]] / qx[tokens[j]]).item()) if qx[tokens[j]] > 0 else 0.0
        if a > 0:
            lossless_law(tokens, parents, q, j, path + (j,), weight * a, law)
        weight *= 1 - a
        rest = (r - qx).clamp_min(0)
        r = rest / rest.sum() if rest.sum() > 0 else r
    for v in range(V):
        law[(path, v)] = law.get((path, v), 0.0) + weight * (r[v] / r.sum()).item()
    return law


def sglang_law(tokens, parents, single, acc, node=-1, path=(), weight=1.0, law=None):
    """The kernel's law, by the coin's intervals: child k (the first with p >= single, or the first
    whose running sum S_k of p over the tried children reaches coin * acc) is kept; no child kept:
    p with every child's token zeroed."""
    law = {} if law is None else law
    p = p_at(tokens, parents, node)
    covered, leftover, settled = 0.0, p.clone(), False
    for j in children_of(parents, node):
        reach = min(1.0, covered + p[tokens[j]].item() / acc) if acc > 0 else 1.0
        kept = 1 - min(1.0, covered) if p[tokens[j]] >= single else reach - min(1.0, covered)
        covered = math.inf if p[tokens[j]] >= single else covered + p[tokens[j]].item() / acc
        if kept > 0:
            sglang_law(tokens, parents, single, acc, j, path + (j,), weight * kept, law)
        leftover[tokens[j]] = 0.0
        if covered >= 1:
            settled = True
            break
    if not settled:
        rest = weight * (1 - min(1.0, covered))
        leftover = leftover / leftover.sum() if leftover.sum() > 0 else p
        for v in range(V):
            law[(path, v)] = law.get((path, v), 0.0) + rest * leftover[v].item()
    return law


def typical_keeps(p, x, eps=0.09, alpha=0.3):
    entropy = -(p * (p + 1e-5).log()).sum().item()
    return p[x].item() > min(eps, alpha * math.exp(-entropy))


def relaxed_keeps(p, x, topk, delta):
    top = p.argsort(descending=True)[:topk].tolist()
    return x == int(p.argmax()) or (x in top and p[x].item() >= p.max().item() - delta)


def target_only_law(tokens, parents, keeps, replacement):
    """Longest path of kept nodes (ties: lowest index); then replacement(p) after it, or the bonus
    from p at a leaf."""
    ok, depth = {}, {}
    for j, par in enumerate(parents):
        ok[j] = keeps(p_at(tokens, parents, par), tokens[j]) and (par < 0 or ok[par])
        depth[j] = 1 if par < 0 else depth[par] + 1
    kept = [j for j in ok if ok[j]]
    end = min(kept, key=lambda j: (-depth[j], j)) if kept else -1
    path, node = [], end
    while node >= 0:
        path.insert(0, node)
        node = parents[node]
    p = p_at(tokens, parents, end)
    after = replacement(p) if children_of(parents, end) else p
    return {(tuple(path), v): after[v].item() for v in range(V)}


def one_hot(v):
    return torch.nn.functional.one_hot(torch.tensor(v), V).double()


# --- Exact laws of path and next token ---------------------------------------------------------

# (tokens, parents): a root with three children, one repeated, grandchildren under two of them
TREES = [
    ([1, 0, 1, 3, 4, 2, 0], [-1, -1, -1, 0, 0, 1, 3]),
    ([0, 1, 2, 3, 4, 0, 1], [-1, -1, -1, -1, -1, 4, 4]),  # the whole vocabulary under the root
    ([2, 2, 1], [-1, 0, 1]),  # a chain
]


@pytest.mark.parametrize("tokens,parents", TREES)
def test_lossless_on_a_deterministic_tree_follows_its_exact_law(tokens, parents):
    verdict = verify_tree(make_verifier("sd"), tree_round(tokens, parents), torch.Generator().manual_seed(0))
    law = lossless_law(tokens, parents)
    assert sum(law.values()) == pytest.approx(1.0)
    assert chi2_pvalue(outcomes(verdict, parents), law) > 1e-3
    assert torch.equal((verdict.nodes >= 0).sum(1), verdict.accepted)


@pytest.mark.parametrize("tokens,parents", TREES[:2])
def test_specinfer_rule_given_sampled_children_follows_its_exact_law(tokens, parents):
    q = Q_LAWS[torch.arange(len(tokens)) * 7 % len(PREFIXES)]  # any stated laws, one per node
    q[torch.arange(len(tokens)), torch.tensor(tokens)] += 0.05  # a drawn token has q > 0
    q = q / q.sum(-1, keepdim=True)
    r = tree_round(tokens, parents, q=q.expand(DRAWS, -1, -1))
    verdict = verify_tree(make_verifier("sd"), r, torch.Generator().manual_seed(1))
    assert chi2_pvalue(outcomes(verdict, parents), lossless_law(tokens, parents, q)) > 1e-3


SGLANG_CASES = [(1.0, 1.0), (0.3, 0.5), (1.0, 0.2), (0.0, 1.0)]


def grid(cases, trees=TREES):
    """Every case on the first tree in the fast run, on the others in the slow one."""
    return [
        pytest.param(*case, *tree, marks=[pytest.mark.slow] if i else [])
        for i, tree in enumerate(trees)
        for case in cases
    ]


@pytest.mark.parametrize("single,acc,tokens,parents", grid(SGLANG_CASES))
def test_sglang_kernel_follows_its_exact_law(tokens, parents, single, acc):
    verifier = make_verifier(
        "threshold", speculative_accept_threshold_single=single, speculative_accept_threshold_acc=acc
    )
    verdict = verify_tree(verifier, tree_round(tokens, parents), torch.Generator().manual_seed(2))
    law = sglang_law(tokens, parents, single, acc)
    assert sum(law.values()) == pytest.approx(1.0)
    assert chi2_pvalue(outcomes(verdict, parents), law) > 1e-3


TARGET_ONLY = [
    ("typical", {}, lambda p, x: typical_keeps(p, x)),
    (
        "typical",
        {"posterior_threshold": 0.3, "posterior_alpha": 0.9},
        lambda p, x: typical_keeps(p, x, 0.3, 0.9),
    ),
    ("relaxed", {"relaxed_topk": 3, "relaxed_delta": 0.3}, lambda p, x: relaxed_keeps(p, x, 3, 0.3)),
    ("relaxed", {"relaxed_topk": 5, "relaxed_delta": 1.0}, lambda p, x: relaxed_keeps(p, x, 5, 1.0)),
]


@pytest.mark.parametrize("method,params,keeps,tokens,parents", grid(TARGET_ONLY))
def test_target_only_rules_keep_the_longest_kept_path(tokens, parents, method, params, keeps):
    verifier = make_verifier(method, **params)
    verdict = verify_tree(verifier, tree_round(tokens, parents), torch.Generator().manual_seed(3))
    law = target_only_law(tokens, parents, keeps, lambda p: one_hot(int(p.argmax())))
    assert bool((verdict.nodes == verdict.nodes[0]).all()), "the path of a target-only rule is deterministic"
    assert chi2_pvalue(outcomes(verdict, parents), law) > 1e-3


# --- Lossless: the emitted sequence follows the target's autoregressive law ---------------------


def emitted(r, verdict) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, D + 1] the tokens a round emits (the path's, then the next token; -1 after), and [B] how many."""
    tokens = torch.where(verdict.nodes >= 0, r.tokens.gather(1, verdict.nodes.clamp(min=0)), -1)
    seq = torch.cat([tokens, torch.full_like(tokens[:, :1], -1)], 1)
    seq.scatter_(1, verdict.accepted.unsqueeze(1), verdict.next_token.unsqueeze(1))
    return seq, verdict.accepted + 1


def emitted_law_test(r, verdict, length=DEPTH, seed=9):
    """p-value of the first ``length`` emitted tokens (completed by the table's own autoregressive
    draws where a round emitted fewer) against the table's autoregressive law."""
    g = torch.Generator().manual_seed(seed)
    seq, _ = emitted(r, verdict)
    seq = torch.cat([seq, torch.full((seq.shape[0], length), -1)], 1)[:, :length]
    ctx = torch.zeros(seq.shape[0], dtype=torch.long)
    code = torch.zeros_like(ctx)
    for k in range(length):
        drawn = torch.multinomial(P_LAWS[ctx], 1, generator=g).squeeze(1)
        seq[:, k] = torch.where(seq[:, k] < 0, drawn, seq[:, k])
        ctx, code = CHILD[ctx, seq[:, k]], code * V + seq[:, k]
    counts = torch.bincount(code, minlength=V**length).tolist()
    observed = Counter({seq: c for seq, c in zip(itertools.product(range(V), repeat=length), counts) if c})
    law = {}
    for seq in itertools.product(range(V), repeat=length):
        prob = 1.0
        for k in range(length):
            prob *= P_LAWS[CONTEXT[seq[:k]], seq[k]].item()
        law[seq] = prob
    return chi2_pvalue(observed, law)


def sampled_tree(parents, *, replacement, seed):
    """DRAWS rows whose nodes are drawn from the draft table given their parent's prefix:
    siblings i.i.d. (``replacement``) or without replacement."""
    g = torch.Generator().manual_seed(seed)
    n = len(parents)
    par = torch.tensor(parents).expand(DRAWS, -1)
    tokens = torch.zeros(DRAWS, n, dtype=torch.long)
    q = torch.zeros(DRAWS, n, V)
    for j in range(n):
        ctx = contexts(tokens[:, :j], par[:, :j]) if j else torch.zeros(DRAWS, 0, dtype=torch.long)
        above = 0 if parents[j] < 0 else ctx[:, parents[j]]
        q[:, j] = Q_LAWS[above] if parents[j] >= 0 else Q_LAWS[0].expand(DRAWS, -1)
        law = q[:, j].clone()
        if not replacement:
            for k in range(j):
                if parents[k] == parents[j]:
                    law[torch.arange(DRAWS), tokens[:, k]] = 0.0
        tokens[:, j] = torch.multinomial(law, 1, generator=g).squeeze(1)
    return tokens, par, q


SHAPES = [[-1, -1, -1, 0, 0, 1], [-1, 0, 0, 0, 1, 1], [-1, 0, 1]]


@pytest.mark.parametrize("parents", SHAPES)
def test_lossless_on_deterministic_trees_reproduces_the_target(parents):
    g = torch.Generator().manual_seed(4)
    tokens = torch.randint(0, V, (DRAWS, len(parents)), generator=g)  # any drafts, repeats included
    r = tree_round(tokens, parents)
    assert emitted_law_test(r, verify_tree(make_verifier("sd"), r, g)) > 1e-3
    # SGLang at thresholds 1: lossless where a parent's children are distinct
    distinct = torch.tensor([len(set(zip(t.tolist(), parents))) == len(parents) for t in tokens])
    sub = TreeRound(r.tokens[distinct], r.parents[distinct], [len(parents)] * int(distinct.sum()),
                    r.p[distinct], r.p_logits[distinct], None, r.sampling)
    assert emitted_law_test(sub, verify_tree(make_verifier("threshold"), sub, g)) > 1e-3


@pytest.mark.parametrize("parents", SHAPES)
def test_specinfer_with_iid_children_reproduces_the_target(parents):
    tokens, par, q = sampled_tree(parents, replacement=True, seed=5)
    r = tree_round(tokens, par, q=q)
    assert emitted_law_test(r, verify_tree(make_verifier("sd"), r, torch.Generator().manual_seed(6))) > 1e-3


def test_children_drawn_without_replacement_need_their_own_law():
    parents = SHAPES[0]
    tokens, par, q = sampled_tree(parents, replacement=False, seed=7)
    right = tree_round(tokens, par, q=without_earlier_siblings(q, tokens, par))
    g = torch.Generator().manual_seed(8)
    assert emitted_law_test(right, verify_tree(make_verifier("sd"), right, g)) > 1e-3
    wrong = tree_round(tokens, par, q=q)  # the i.i.d. law for children drawn without replacement
    assert emitted_law_test(wrong, verify_tree(make_verifier("sd"), wrong, g)) < 1e-6


def test_sglang_kernel_is_lossy_on_a_repeated_child():
    """prob_acc counts a repeated token twice: the kernel keeps it with probability 2 p(x), not p(x)."""
    r = tree_round([0, 0], [-1, -1])
    verdict = verify_tree(make_verifier("threshold"), r, torch.Generator().manual_seed(19))
    kept, expected = verdict.accepted.double().mean().item(), 2 * P_LAWS[0, 0].item()
    assert expected < 1 and abs(kept - expected) < 5 * math.sqrt(expected * (1 - expected) / DRAWS)
    law = sglang_law([0, 0], [-1, -1], 1.0, 1.0)
    assert sum(w for (path, v), w in law.items() if path or v == 0) == pytest.approx(expected)


# --- A one-wide tree is today's chain ------------------------------------------------------------


# Every registered rule defined on trees, at its defaults (a newly registered one is tested on
# arrival), and settings that move its rule away from them.
CHAIN_METHODS = [(name, {}) for name in tree_methods()] + [
    ("threshold", {"speculative_accept_threshold_single": 0.3, "speculative_accept_threshold_acc": 0.5}),
    ("typical", {"posterior_threshold": 0.3, "posterior_alpha": 0.9}),
    ("relaxed", {"relaxed_topk": 3, "relaxed_delta": 0.3}),
]


def chain_pair(deterministic, temperature=1.0, seed=10):
    """The same chains as a TreeRound and as a Round with its bonus row."""
    parents = [-1, 0, 1]
    if deterministic:
        tokens = torch.randint(0, V, (DRAWS, 3), generator=torch.Generator().manual_seed(seed))
        par, q = torch.tensor(parents).expand(DRAWS, -1), None
    else:
        tokens, par, q = sampled_tree(parents, replacement=True, seed=seed)
    tree = tree_round(tokens, par, q=q, temperature=temperature)
    proposal = tree.node_round().proposal if q is None else q
    chain = Round(tokens, proposal, tree.p[:, :3], None, tree.p_logits[:, :3], tree.sampling)
    return tree, chain


def same_law(a: torch.Tensor, b: torch.Tensor) -> float:
    """Two-sample chi-square: do two count vectors come from one law?"""
    seen = (a + b) > 0
    table = torch.stack([a[seen], b[seen]]).numpy()
    return stats.chi2_contingency(table).pvalue if seen.sum() > 1 else 1.0


@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("method,params", CHAIN_METHODS)
def test_a_chain_tree_gives_the_chain_rules_law(method, params, deterministic):
    tree, chain = chain_pair(deterministic)
    verifier = make_verifier(method, **params)
    ours = verify_tree(verifier, tree, torch.Generator().manual_seed(11))
    theirs = verify(verifier, chain, tree.p[:, 3], torch.Generator().manual_seed(12))
    assert same_law(sequence_counts(tree.tokens, ours), sequence_counts(tree.tokens, theirs)) > 1e-3
    on_chain = torch.arange(ours.nodes.shape[1]) < ours.accepted.unsqueeze(1)
    assert torch.equal(ours.nodes, torch.where(on_chain, torch.arange(ours.nodes.shape[1]), -1))


def sequence_counts(tokens, verdict) -> torch.Tensor:
    """Counts of the emitted sequence (kept draft tokens, then the next token), coded as integers."""
    n = tokens.shape[1]
    kept = torch.arange(n) < verdict.accepted.unsqueeze(1)
    seq = torch.cat([torch.where(kept, tokens, 0), torch.zeros_like(tokens[:, :1])], 1)
    seq.scatter_(1, verdict.accepted.unsqueeze(1), verdict.next_token.unsqueeze(1))
    code = verdict.accepted
    for k in range(n + 1):
        code = code * V + seq[:, k]
    return torch.bincount(code, minlength=(n + 1) * V ** (n + 1))


@pytest.mark.parametrize("method,params", CHAIN_METHODS)
def test_a_greedy_chain_tree_is_the_greedy_chain_token_for_token(method, params):
    tree, chain = chain_pair(True, temperature=0.0)
    verifier = make_verifier(method, **params)
    ours, theirs = verify_tree(verifier, tree), verify(verifier, chain, tree.p[:, 3])
    assert torch.equal(ours.accepted, theirs.accepted) and torch.equal(ours.next_token, theirs.next_token)


# --- Greedy trees ------------------------------------------------------------------------------


def random_trees(rows, n, seed):
    """Random trees of n nodes per row, no deeper than DEPTH (the table's prefixes)."""
    g = torch.Generator().manual_seed(seed)
    parents = torch.full((rows, n), -1)
    depth = torch.ones(rows, n, dtype=torch.long)
    for j in range(1, n):
        parent = torch.randint(-1, j, (rows,), generator=g)
        above = depth.gather(1, parent.clamp(min=0).unsqueeze(1)).squeeze(1)
        parents[:, j] = torch.where((parent >= 0) & (above >= DEPTH), -1, parent)
        depth[:, j] = torch.where(parents[:, j] < 0, 1, above + 1)
    return torch.randint(0, V, (rows, n), generator=g), parents


@pytest.mark.parametrize("method", ["sd", "threshold", "typical"])
def test_greedy_tree_follows_the_argmax_path(method):
    tokens, parents = random_trees(3000, 8, seed=13)
    counts = torch.randint(0, 9, (3000,), generator=torch.Generator().manual_seed(14)).tolist()
    r = tree_round(tokens, parents, temperature=0.0, counts=counts)
    verdict = verify_tree(make_verifier(method), r)
    for b in range(3000):
        t, par = tokens[b, : counts[b]].tolist(), parents[b, : counts[b]].tolist()
        node, path = -1, []
        while True:
            best = int(p_at(t, par, node).argmax())
            follow = [j for j in children_of(par, node) if t[j] == best]
            if not follow:
                break
            node = follow[0] if len(follow) == 1 else max(follow, key=lambda j: depth_below(par, t, j))
            path.append(node)
        if verdict.path[b] != path:  # a repeated argmax child: the deeper subtree wins
            assert [t[j] for j in verdict.path[b]] == [t[j] for j in path]
        assert verdict.next_token[b].item() == best


def depth_below(parents, tokens, node):
    """How deep the argmax path below ``node`` goes."""
    best = int(p_at(tokens, parents, node).argmax())
    below = [1 + depth_below(parents, tokens, j) for j in children_of(parents, node) if tokens[j] == best]
    return max(below, default=0)


def test_greedy_relaxed_keeps_the_longest_path_of_candidates():
    tokens, parents = random_trees(2000, 7, seed=15)
    r = tree_round(tokens, parents, temperature=0.0)
    verdict = verify_tree(make_verifier("relaxed", relaxed_topk=3, relaxed_delta=0.3), r)
    for b in range(2000):
        t, par = tokens[b].tolist(), parents[b].tolist()
        keeps = lambda p, x: relaxed_keeps(p, x, 3, 0.3)  # noqa: E731
        law = target_only_law(t, par, keeps, lambda p: one_hot(int(p.argmax())))
        (path, _), = [k for k in law if law[k] > 0][:1]
        assert verdict.path[b] == list(path)
        assert verdict.next_token[b].item() == int(p_at(t, par, path[-1] if path else -1).argmax())


# --- Batching, padding, refusals -----------------------------------------------------------------


def test_padded_nodes_are_never_verified():
    tokens, parents = random_trees(500, 6, seed=16)
    counts = [3] * 500
    padded = tokens.clone()
    padded[:, 3:] = -7  # garbage beyond each row's count
    bad_parents = parents.clone()
    bad_parents[:, 3:] = 99
    for method in ("sd", "typical"):
        full = verify_tree(make_verifier(method), tree_round(tokens[:, :3], parents[:, :3], temperature=0.0))
        raw = tree_round_raw(padded, bad_parents, counts, tokens[:, :3], parents[:, :3])
        ours = verify_tree(make_verifier(method), raw)
        assert ours.path == full.path and torch.equal(ours.next_token, full.next_token)


def tree_round_raw(tokens, parents, counts, real_tokens, real_parents):
    """A greedy TreeRound padded beyond ``counts`` with garbage tokens and parents."""
    base = tree_round(real_tokens, real_parents, temperature=0.0)
    extra = tokens.shape[1] - real_tokens.shape[1]
    p = torch.cat([base.p, base.p[:, -1:].expand(-1, extra, -1)], 1)
    return TreeRound(tokens, parents, counts, p, p.log(), None, Sampling(0.0))


@pytest.mark.parametrize("method", ["sd", "threshold", "typical"])
def test_a_row_draws_what_it_draws_alone(method):
    tokens, parents = random_trees(4, 6, seed=17)
    r = tree_round(tokens, parents)
    together = verify_tree(make_verifier(method), r, [torch.Generator().manual_seed(b) for b in range(4)])
    for b in range(4):
        alone = tree_round(tokens[b : b + 1], parents[b : b + 1])
        verdict = verify_tree(make_verifier(method), alone, [torch.Generator().manual_seed(b)])
        assert verdict.path[0] == together.path[b] and verdict.next_token[0] == together.next_token[b]


def test_an_empty_tree_is_one_target_step():
    r = tree_round(torch.zeros(DRAWS, 0, dtype=torch.long), torch.zeros(DRAWS, 0, dtype=torch.long))
    for method in ("sd", "threshold", "typical"):
        verdict = verify_tree(make_verifier(method), r, torch.Generator().manual_seed(18))
        assert verdict.accepted.sum() == 0 and verdict.nodes.shape == (DRAWS, 0)
        law = {((), v): P_LAWS[0, v].item() for v in range(V)}
        assert chi2_pvalue(outcomes(verdict, []), law) > 1e-3


@pytest.mark.parametrize(
    "method", ["ar", "lossy", "cascade", "ensemble", "diversed", "example_verifier:ConfidenceEnsemble"]
)
def test_rules_not_defined_on_trees_are_refused_in_one_line(method):
    r = tree_round([1, 2], [-1, 0])
    with pytest.raises(BenchError) as err:
        verify_tree(make_verifier(method), r)
    message = str(err.value)
    assert "\n" not in message and "is not defined on token trees" in message
    assert "sd, typical, threshold, relaxed" in message and "--tree-width 1" in message


def test_tree_methods_are_the_rules_with_a_tree_rule():
    assert tree_methods()[:4] == ["sd", "typical", "threshold", "relaxed"]


@pytest.mark.parametrize(
    "tokens,parents,counts,needle",
    [
        ([[1, 2]], [[-1, 1]], [2], "must be an earlier node"),
        ([[1, 2]], [[-1, -2]], [2], "must be an earlier node"),
        ([[1, 9]], [[-1, 0]], [2], "outside the vocabulary"),
        ([[1, 2]], [[-1, 0]], [3], "counts must lie in"),
    ],
)
def test_malformed_trees_are_refused_in_one_line(tokens, parents, counts, needle):
    p = P_LAWS[:3].unsqueeze(0)
    with pytest.raises(BenchError, match=needle):
        TreeRound(torch.tensor(tokens), torch.tensor(parents), counts, p, p.log(), None, Sampling(1.0))


def test_without_earlier_siblings_removes_only_siblings():
    q = normalise(torch.ones(1, 4, V), torch.ones(1, 4, V))
    tokens, parents = torch.tensor([[2, 3, 2, 2]]), torch.tensor([[-1, -1, 0, -1]])
    out = without_earlier_siblings(q, tokens, parents)
    torch.testing.assert_close(out[0, 0], q[0, 0])
    assert out[0, 1, 2] == 0 and out[0, 1].sum().item() == pytest.approx(1.0)
    torch.testing.assert_close(out[0, 2], q[0, 2])  # node 2 has no earlier sibling
    assert out[0, 3, 2] == 0 and out[0, 3, 3] == 0 and out[0, 3, 0].item() == pytest.approx(1 / 3)
