"""SuffixDecoding (bench/drafters/suffix.py) without a model: the port answers as the authors' C++
(tests/data/suffix_reference.json, recorded by scripts/suffix_reference.py: drafts, parents,
probabilities, scores, match lengths, tie orders and removals included); node counts are window
counts; a repeated phrase is drafted, ``min_token_prob`` cuts a branch, the budget caps the nodes,
chain mode is the tree's most probable path; the global tree drafts an earlier example's response
and evicts the oldest; drafts are valid token trees; bad parameters are refused in one line; in
the loop, greedy ``sd`` on suffix drafts equals ``ar``."""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.config import RunConfig
from bench.decoding import SpeculativeDecoder
from bench.distributions import Sampling
from bench.drafters import canonical_drafter, drafter_label, parse_drafter
from bench.drafters.suffix import SuffixCache, SuffixDecoding, SuffixTree
from bench.errors import BenchError
from bench.verifiers import make_verifier

REFERENCE = Path(__file__).parents[1] / "data" / "suffix_reference.json"


@dataclass
class Row:
    """What a drafter reads of a row in flight."""

    index: int
    seq: list[int]
    out: list[int] = field(default_factory=list)
    generator: torch.Generator | None = None

    def emit(self, tokens: list[int]) -> None:
        self.seq += tokens
        self.out += tokens


def test_the_port_answers_as_the_authors_cpp():
    """Every recorded speculation, replayed on the same operations: the same tokens, parents,
    float32 probabilities and score, and the same match length."""
    reference = json.loads(REFERENCE.read_text())
    checked = branched = 0
    for case in reference["cases"]:
        tree = SuffixTree(case["depth"])
        for op in case["ops"]:
            if op[0] == "extend":
                tree.extend(op[1], op[2])
            elif op[0] == "remove":
                tree.remove(op[1])
            else:
                context, most, factor, offset, floor, use_tree, want = op[1:]
                got = tree.speculate(context, most, factor, offset, floor, use_tree)
                assert (got.tokens, got.parents, got.match_len) == (want["tokens"], want["parents"], want["match_len"])
                assert np.array_equal(np.float32(got.probs), np.float32(want["probs"]))
                assert np.float32(got.score) == np.float32(want["score"])
                checked += 1
                branched += len(set(want["parents"])) < len(want["parents"])
    assert checked > 300 and branched > 20  # token trees with branches were compared


def window_count(seqs: list[list[int]], path: tuple[int, ...]) -> int:
    return sum(tuple(s[i : i + len(path)]) == path for s in seqs for i in range(len(s) - len(path) + 1))


def test_node_counts_are_the_windows_that_start_with_their_path():
    """A node's count is how many windows of its sequences (at most max_depth long) start with
    its path; removing a sequence leaves the other's counts, and drops nodes only it had."""
    rng = random.Random(3)
    for depth in (1, 3, 6):
        tree = SuffixTree(depth)
        seqs = {sid: [rng.randrange(4) for _ in range(rng.randrange(5, 40))] for sid in range(3)}
        for sid, seq in seqs.items():
            tree.extend(sid, seq[:7])
            tree.extend(sid, seq[7:])  # in two pieces: appending is incremental
        for gone in (1, 0, None):
            stack = [(tree.root, ())]
            while stack:
                node, path = stack.pop()
                if path:
                    assert node.count == window_count(list(seqs.values()), path) > 0, path
                    assert len(path) <= depth
                counts = [c.count for c in node.order]
                assert set(node.order) == set(node.children.values())
                assert not path or counts == sorted(counts, reverse=True)  # the root's order is never read
                stack += [(c, (*path, c.token)) for c in node.order]
            assert tree.root.count == sum(map(len, seqs.values()))
            if gone is not None:
                tree.remove(gone)
                del seqs[gone]


def test_a_repeated_phrase_is_drafted():
    """``the cat sat on the mat . the cat``: the last two tokens occurred once before, followed by
    ``sat on``: a match of 2 drafts 2 tokens (max_spec_factor 1), each with probability 1/2
    (the context's own occurrence ends there)."""
    the, cat, sat, on, mat, dot = range(6)
    text = [the, cat, sat, on, the, mat, dot, the, cat]
    tree = SuffixTree(24)
    tree.extend(0, text)
    draft = tree.speculate(text, 10, 1.0, 0.0, 0.1, False)
    assert (draft.tokens, draft.parents, draft.match_len) == ([sat, on], [-1, 0], 2)
    assert draft.probs == pytest.approx([0.5, 0.5]) and draft.score == pytest.approx(1.0)
    assert tree.speculate(text, 10, 2.0, 0.0, 0.1, False).tokens == [sat, on, the, mat]  # factor 2: 4
    assert tree.speculate(text, 10, 1.0, 1.0, 0.1, False).tokens == [sat, on, the]  # offset 1: 3
    assert tree.speculate([mat, dot, the, 7], 10, 1.0, 0.0, 0.1, False).tokens == []  # no match


def test_min_token_prob_cuts_a_branch_and_the_budget_caps_the_nodes():
    """After ``a b`` came ``c`` 8 times and ``d`` once: ``d``'s probability, about 1/10 (the
    context's own ``a b`` counts too), keeps it at a floor of 0.1 and cuts it at 0.15; every node
    kept is at least the floor; the node budget caps the tree."""
    a, b, c, d, x = range(5)
    tree = SuffixTree(24)
    tree.extend(0, [a, b, c, x] * 8 + [a, b, d, x, a, b])
    context = [c, x, a, b]
    full = tree.speculate(context, 60, 20.0, 0.0, 0.1, True)
    cut = tree.speculate(context, 60, 20.0, 0.0, 0.15, True)
    at_root = [prob for t, p, prob in zip(full.tokens, full.parents, full.probs) if (t, p) == (d, -1)]
    assert len(at_root) == 1 and 0.1 <= at_root[0] < 0.15
    assert d not in cut.tokens and min(cut.probs) >= 0.15 and min(full.probs) >= 0.1
    for most in (1, 2, 3):
        assert len(tree.speculate(context, most, 8.0, 0.0, 0.0, True).tokens) == most


def test_chain_mode_is_the_trees_most_probable_path():
    """With the same match and budget, chain mode follows the most frequent child at each step:
    the path the tree reaches by its first child at each node."""
    tree = SuffixTree(24)
    tree.extend(0, [1, 2, 3, 4, 5] * 3 + [1, 2, 6, 7] * 2 + [1, 2, 3, 8] + [1, 2])
    chain = tree.speculate([9, 1, 2], 6, 3.0, 0.0, 0.0, False)
    full = tree.speculate([9, 1, 2], 6, 3.0, 0.0, 0.0, True)
    assert chain.tokens == [3, 4, 5, 1, 2, 3] and len(set(full.parents)) < len(full.parents)
    path, parent = [], -1
    while parent in full.parents:
        parent = full.parents.index(parent)
        path.append(full.tokens[parent])
    assert path == chain.tokens[: len(path)] and len(path) >= 3


def prompt_then_answer(drafter: SuffixDecoding, index: int, prompt: list[int], answer: list[int], caps: int = 8):
    """Decode ``answer`` after ``prompt`` with perfect verification (every drafted token that
    matches the answer kept, then the next answer token): the drafts of every round."""
    row, drafts = Row(index, list(prompt)), []
    while len(row.out) < len(answer):
        draft = drafter.draft([row], [caps])
        tokens = draft.tokens[0, : draft.counts[0]].tolist()
        drafts.append(tokens)
        want = answer[len(row.out) :]
        keep = 0
        while keep < len(tokens) and keep < len(want) - 1 and tokens[keep] == want[keep] and draft.parents is None:
            keep += 1
        row.emit(want[: keep + 1])
    drafter.finish(row)
    return drafts


def test_the_global_tree_drafts_an_earlier_examples_response():
    """Example 2's prompt does not contain example 1's answer, so only the global tree can draft
    it: once example 2 starts answering alike, the rest of example 1's answer is drafted; without
    a global tree (max_cached_requests=0) nothing is."""
    answer = [50, 51, 52, 53, 54, 55, 56, 57, 58, 59]
    for cached, drafts_more in ((10000, True), (0, False)):
        drafter = SuffixDecoding(max_cached_requests=cached)
        drafter.start(1, 64)
        prompt_then_answer(drafter, 0, [1, 2, 3, 4], answer)
        drafter.start(1, 64)
        drafts = prompt_then_answer(drafter, 0, [7, 8, 9, 10], answer)
        assert (max(map(len, drafts)) > 0) is drafts_more
        if drafts_more:
            assert [53, 54, 55] in [d[:3] for d in drafts]  # after 50 51 52: example 1's sequel


def test_the_global_tree_evicts_the_oldest_response_and_a_prompt_seen_again():
    """max_cached_requests=2 (the active request holds a place, as in the source): a third
    example evicts the first's answer and drafts the second's; a prompt decoded again replaces
    its own earlier response (the timing pass's warm-up)."""
    first, second = [60, 61, 62, 63, 64, 65], [70, 71, 72, 73, 74, 75]
    drafter = SuffixDecoding(max_cached_requests=2)
    for prompt, answer in (([1], first), ([2], second)):
        drafter.start(1, 64)
        prompt_then_answer(drafter, 0, prompt, answer)
    assert list(drafter.cache.seq_ids) == [(1,), (2,)]
    drafter.start(1, 64)
    row = Row(0, [3])
    row.emit([70, 71, 72])
    got = drafter.draft([row], [8])
    assert got.tokens[0, : got.counts[0]].tolist() == [73, 74, 75] and list(drafter.cache.seq_ids) == [(2,), (3,)]
    row.emit([60, 61, 62])
    assert drafter.draft([row], [8]).counts == [0]  # the first answer is gone
    cache = SuffixCache(24, -1)
    for _ in range(2):
        cache.start_request((5,), [5])
        cache.add_active_response((5,), first)
        cache.stop_request((5,))
    assert len(cache.seq_ids) == 1 and cache.global_tree.root.count == len(first)


def valid_tree(tokens: torch.Tensor, parents: torch.Tensor | None, counts: list[int]) -> None:
    assert tokens.dtype == torch.long and tokens.shape[0] == len(counts) and tokens.shape[1] == max(counts)
    if parents is None:
        return
    assert parents.shape == tokens.shape and parents.dtype == torch.long
    for row, n in zip(parents.tolist(), counts):
        assert all(-1 <= p < j for j, p in enumerate(row[:n])), row  # topological, -1: the root
        assert all(p == -1 for p in row[n:])  # padding


def test_drafts_of_a_batch_are_valid_token_trees():
    """Rows with a branching tree, a chain and nothing share a round: tokens padded, parents
    topological with -1 for the root's children and for padding; a chain-only round has none."""
    branchy = [1, 2, 3, 4] * 4 + [1, 2, 5, 6] * 3 + [1, 2, 7] + [1, 2]
    rows = [Row(0, branchy), Row(1, [9, 8, 7, 6, 9, 8]), Row(2, [1, 2, 3])]
    tree = SuffixDecoding(mode="tree", max_spec_factor=4.0)
    tree.start(3, 64)
    draft = tree.draft(rows, [8, 8, 8])
    assert draft.counts[0] == 8 and draft.counts[2] == 0 and draft.parents is not None
    assert draft.q is None  # deterministic: the loop takes each node's law as the point mass
    valid_tree(draft.tokens, draft.parents, draft.counts)
    assert draft.parents[0].tolist().count(-1) >= 2  # branches at the root
    chain = SuffixDecoding(max_spec_factor=4.0)
    chain.start(3, 64)
    drafted = chain.draft(rows, [8, 8, 8])
    assert drafted.parents is None and drafted.counts[0] > 0
    valid_tree(drafted.tokens, drafted.parents, drafted.counts)


def test_suffix_specs_are_canonical_and_bad_ones_are_one_line():
    assert canonical_drafter("suffix") == (
        "suffix:max_cached_requests=10000,max_spec_factor=1.0,max_spec_offset=0.0,max_tree_depth=24,"
        "min_token_prob=0.1,mode=chain"
    )
    assert drafter_label("suffix:mode=tree,max_spec_factor=2") == "suffix max_spec_factor=2.0 mode=tree"
    assert parse_drafter("suffix:max_tree_depth=32")[1]["max_tree_depth"] == 32
    for bad, needle in [
        ("suffix:depth=3", "unknown or malformed parameter"),
        ("suffix:max_tree_depth=1.5", "takes an integer"),
        ("suffix:min_token_prob=x", "takes a number"),
        ("suffix:min_token_prob=1.5", "min_token_prob must be in [0, 1]"),
        ("suffix:max_spec_factor=-1", "max_spec_factor must be >= 0"),
        ("suffix:max_spec_offset=nan", "max_spec_offset must be a number"),
        ("suffix:max_tree_depth=1", "max_tree_depth must be an integer >= 2"),
        ("suffix:max_cached_requests=-2", "max_cached_requests must be an integer >= 0"),
        ("suffix:mode=beam", "mode must be one of chain, tree"),
    ]:
        with pytest.raises(BenchError, match=re.escape(needle)) as err:
            parse_drafter(bad)
        assert "\n" not in str(err.value)
    with pytest.raises(BenchError, match="reads the draft model's logits") as err:
        RunConfig(task="arith", pair="ref", method="ensemble", params={"mix": "logit"}, drafter="suffix").resolve()
    assert "\n" not in str(err.value)
    cfg = RunConfig(task="arith", pair="ref", method="sd", drafter="suffix:mode=tree").resolve()
    assert cfg.label == "sd (suffix mode=tree)" and cfg.draft_policy is None


BRANCHING = [
    "the cat sat on the mat. the cat ran to the door. the cat sat on the mat. the cat",
    "one two three four. one two five six. one two three four. one two",
]


@pytest.mark.parametrize("spec", ["suffix", "suffix:mode=tree,max_spec_factor=4", "lookup_tree:matches=4"])
def test_greedy_sd_on_suffix_and_lookup_trees_equals_ar(tiny_pair, spec):
    """In the loop: greedy ``sd`` on these drafts gives ``ar``'s tokens, alone and in a batch, the
    tree drafters' rounds verifying token trees (some with branches); the finished rows'
    responses are in the suffix drafter's global tree afterwards."""
    from bench.drafters import DRAFTERS, DraftContext
    from tests.drafters.test_lookup import repetitive_prompts

    prompts = repetitive_prompts(tiny_pair.tokenizer) + [tiny_pair.tokenizer(t).input_ids for t in BRANCHING]
    kw = dict(draft_len=6, sampling=Sampling(temperature=0.0), eos_token_ids=tiny_pair.eos_token_ids)
    name, params = parse_drafter(spec)
    drafter = DRAFTERS[name](**params).bind(DraftContext(eos=frozenset(tiny_pair.eos_token_ids), draft_len=6))
    trees: list[bool] = []
    draft = drafter.draft
    drafter.draft = lambda rows, caps: trees.append((d := draft(rows, caps)).parents is not None) or d
    ar = SpeculativeDecoder(tiny_pair.target, None, make_verifier("ar"), **kw)
    sd = SpeculativeDecoder(tiny_pair.target, None, make_verifier("sd"), drafter=drafter, **kw)
    want = [ar.generate(p, 24).token_ids for p in prompts]
    assert [sd.generate(p, 24).token_ids for p in prompts] == want
    batch = sd.generate_batch(prompts, 24, [0] * len(prompts))
    assert [g.token_ids for g in batch] == want
    assert sum(g.stats.drafted_tokens for g in batch) > 0
    assert any(trees) is (spec != "suffix")
    if name == "suffix":
        cache = drafter.cache
        assert len(cache.seq_ids) == len(prompts) and not cache.local  # one response per prompt, none active
        assert cache.global_tree.root.count == sum(len(w) for w in want)
