"""Token trees (issue 46, item 1): an engine verifies a tree per row in one forward, and the loop
runs tree rounds. On the tiny pair, in fp32:

- every tree token's logits equal transformers' forward of its row's sequence and the token's path,
  in ragged batches, across steps after a committed path (whose K/V the engine moved into place);
- greedy tree ``sd`` (a test drafter hiding the greedy continuation among distractors) equals
  ``ar`` and transformers' ``generate`` token for token, alone and in a ragged batch, and counts
  its verified nodes; the real architectures' checkpoints are checked in tests/engines/test_fidelity.py.
"""

from __future__ import annotations

import pytest
import torch

from bench.decoding import SpeculativeDecoder
from bench.distributions import Sampling
from bench.engines import EagerEngine, make_engine
from bench.errors import BenchError
from bench.verifiers import make_verifier
from tree_checks import OracleTree, check_tree_steps, path_to

GREEDY = Sampling(temperature=0.0)
BUDGET = 24
TEXTS = ["The quick brown fox", "Question: what is 12 + 7? Answer:", "Once upon a time, in a land far away, there"]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def prompts(tiny_pair):
    return [tiny_pair.tokenizer(t).input_ids for t in TEXTS]


@pytest.fixture(scope="module")
def references(tiny_pair, prompts):
    out = []
    for p in prompts:
        ids = torch.tensor([p])
        gen = tiny_pair.target.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=BUDGET,
            eos_token_id=tiny_pair.eos_token_ids or None, pad_token_id=tiny_pair.tokenizer.pad_token_id,
        )  # fmt: skip
        out.append(gen[0, len(p) :].tolist())
    return out


def tree_decoder(pair, prompts, references, nodes: int, seed: int = 0, engine=EagerEngine) -> SpeculativeDecoder:
    drafter = OracleTree([len(p) for p in prompts], references, pair.target.config.vocab_size, seed)
    return SpeculativeDecoder(
        pair.target, None, make_verifier("sd"), draft_len=nodes, sampling=GREEDY,
        eos_token_ids=pair.eos_token_ids, drafter=drafter, engine=engine,
    )  # fmt: skip


def test_tree_step_logits_equal_a_full_forward_of_each_path(tiny_pair):
    model = tiny_pair.target
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(3, vocab, (length,), generator=g).tolist() for length in (7, 12, 9)]
    engine = EagerEngine(model)
    with torch.inference_mode():
        engine.start(3, 64)
        width = max(map(len, seqs)) - 1
        feed = torch.tensor([s[:-1] + [0] * (width - len(s) + 1) for s in seqs])
        engine.step(feed, [len(s) - 1 for s in seqs], keep=1, hidden=False)
        check_tree_steps(model, engine, seqs, [(5, 0, 3), (6, 6, 6), (1, 4, 2), (8, 3, 0)], vocab, g, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("nodes", [1, 4, 9])
def test_greedy_tree_sd_equals_ar_and_transformers_generate(tiny_pair, prompts, references, nodes):
    ar = SpeculativeDecoder(tiny_pair.target, None, make_verifier("ar"), sampling=GREEDY, eos_token_ids=tiny_pair.eos_token_ids)
    moved = 0
    for i, (prompt, want) in enumerate(zip(prompts, references)):
        got = tree_decoder(tiny_pair, [prompt], [want], nodes, seed=i).generate(prompt, BUDGET)
        assert got.token_ids == want == ar.generate(prompt, BUDGET).token_ids
        s = got.stats
        assert s.verified_nodes == s.drafted_tokens <= nodes * s.rounds
        assert s.accepted_tokens == s.new_tokens - s.rounds  # greedy: one target token per round
        moved += s.accepted_tokens
    assert moved > 0, "the trees must hide accepted paths"
    batch = tree_decoder(tiny_pair, prompts, references, nodes).generate_batch(prompts, BUDGET, [0, 1, 2])
    assert [g.token_ids for g in batch] == references


def test_a_chain_draft_never_runs_a_tree_round(tiny_pair, prompts, monkeypatch):
    """parents None keeps today's loop: the engine is never asked for a tree."""
    called = []
    monkeypatch.setattr(EagerEngine, "tree_step", lambda *a: called.append(a))
    dec = SpeculativeDecoder(tiny_pair.target, tiny_pair.draft, make_verifier("sd"), draft_len=3, sampling=GREEDY)
    s = dec.generate(prompts[0], 12).stats
    assert not called and s.verified_nodes == s.drafted_tokens > 0


@pytest.mark.slow
def test_the_compiled_engine_runs_trees_in_declared_graphs(tiny_pair, prompts, references):
    """One graph per declared tree width: smaller trees and batches pad into it, tree logits equal
    transformers' per path, greedy tree sd equals generate; a wider tree is refused in one line."""
    factory = make_engine("compiled")
    model = tiny_pair.target
    # The draft model's tree, its draft engine a tree graph per level but the last. Made first, as a
    # run makes every engine of a pair before any compiles: the draft's first forward installs
    # transformers' hooks on the layers it shares with the target, which the graphs guard on.
    model_tree = SpeculativeDecoder(
        model, tiny_pair.draft, make_verifier("sd"), draft_len=6, sampling=GREEDY,
        eos_token_ids=tiny_pair.eos_token_ids, drafter="model_tree:depth=3,topk=2", engine=factory,
    )  # fmt: skip
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(3, vocab, (length,), generator=g).tolist() for length in (7, 12, 9)]
    engine = factory(model, (1,), (7,))
    with torch.inference_mode():
        engine.start(3, 64)
        width = max(map(len, seqs)) - 1
        feed = torch.tensor([s[:-1] + [0] * (width - len(s) + 1) for s in seqs])
        engine.step(feed, [len(s) - 1 for s in seqs], keep=1, hidden=False)
        check_tree_steps(model, engine, seqs, [(6, 0, 3), (2, 6, 6)], vocab, g, rtol=1e-4, atol=1e-4)
        with pytest.raises(BenchError, match="wider than the tree widths compiled"):
            engine.tree_step(torch.zeros(3, 9, dtype=torch.long), torch.full((3, 8), -1), [1, 1, 1])
    dec = tree_decoder(tiny_pair, prompts, references, 6, engine=factory)
    assert [x.token_ids for x in dec.generate_batch(prompts, BUDGET, [0, 1, 2])] == references
    assert dec.generate(prompts[1], BUDGET).token_ids == references[1]  # 1 row in the 3-row graphs
    assert [x.token_ids for x in model_tree.generate_batch(prompts, BUDGET, [0, 1, 2])] == references


@pytest.mark.parametrize(
    "method,params", [("sd", {}), ("threshold", {"speculative_accept_threshold_acc": 0.1})], ids=["sd", "threshold"]
)
def test_sampled_tree_rows_in_a_batch_decode_as_they_do_alone(tiny_pair, prompts, references, method, params):
    """Temperature 1: each row draws from its own generator, so a ragged batch of tree rounds gives
    every row what it gives alone; the fidelity column is the target's log p of the emitted tokens."""
    vocab = tiny_pair.target.config.vocab_size

    def decoder(rows: list[int]) -> SpeculativeDecoder:
        drafter = OracleTree([len(prompts[i]) for i in rows], [references[i] for i in rows], vocab)
        return SpeculativeDecoder(
            tiny_pair.target, None, make_verifier(method, **params), draft_len=5, sampling=Sampling(1.0),
            eos_token_ids=tiny_pair.eos_token_ids, drafter=drafter,
        )  # fmt: skip

    batch = decoder([0, 1, 2]).generate_batch(prompts, BUDGET, [0, 1, 2])
    for i, gen in enumerate(batch):
        alone = decoder([i]).generate(prompts[i], BUDGET, seed=i)
        assert alone.token_ids == gen.token_ids and alone.stats.verified_nodes == gen.stats.verified_nodes
        with torch.inference_mode():
            logits = tiny_pair.target(torch.tensor([prompts[i] + gen.token_ids])).logits[0].float()
        logp = logits[len(prompts[i]) - 1 : -1].log_softmax(-1)
        want = logp.gather(-1, torch.tensor(gen.token_ids).unsqueeze(-1)).mean().item()
        assert gen.stats.target_loglik == pytest.approx(want, abs=1e-4)
        # the tree path's divergence too (temperature 1: log p + H(p) of each emitted token)
        excess = logp.gather(-1, torch.tensor(gen.token_ids).unsqueeze(-1)).squeeze(-1) + torch.special.entr(logp.exp()).sum(-1)
        assert gen.stats.target_divergence == pytest.approx(excess.mean().item(), abs=1e-4)
    assert sum(g.stats.accepted_tokens for g in batch) > 0


@pytest.mark.parametrize("spec", ["model_tree", "model_tree:depth=3,topk=2,branch=2", "model_tree:depth=2,topk=4"])
def test_greedy_model_tree_sd_equals_ar_and_transformers_generate(tiny_pair, prompts, references, spec):
    dec = SpeculativeDecoder(
        tiny_pair.target, tiny_pair.draft, make_verifier("sd"), draft_len=8, sampling=GREEDY,
        eos_token_ids=tiny_pair.eos_token_ids, drafter=spec,
    )  # fmt: skip
    assert [g.token_ids for g in dec.generate_batch(prompts, BUDGET, [0, 1, 2])] == references
    for prompt, want in zip(prompts, references):
        got = dec.generate(prompt, BUDGET)
        assert got.token_ids == want
        assert got.stats.verified_nodes > got.stats.accepted_tokens > 0


@pytest.mark.parametrize("greedy", [True, False], ids=["top-k", "sampled"])
def test_model_tree_nodes_are_the_drafts_top_k_or_draws_from_its_law(tiny_pair, prompts, greedy):
    """Every node's law is the draft model's full forward at its parent's path (earlier siblings
    removed when sampled without replacement); greedy children are its top-k in order, sampled
    ones distinct."""
    from bench.drafters import DraftContext, ModelTree
    from bench.distributions import process

    sampling = GREEDY if greedy else Sampling(1.0)
    tree = ModelTree(depth=3, topk=3, branch=2).bind(DraftContext(draft=tiny_pair.draft, sampling=sampling, greedy=greedy))
    rows = [type("Row", (), {"index": i, "seq": list(p), "generator": torch.Generator().manual_seed(i)}) for i, p in enumerate(prompts)]
    with torch.inference_mode():
        tree.engine.start(len(rows), 128)
        draft = tree.draft(rows, [tree.nodes, 5, tree.nodes])
        assert draft.counts == [tree.nodes, 5, tree.nodes] and draft.parents[1, 5:].eq(-1).all()
        for b, row in enumerate(rows):
            parents = draft.parents[b].tolist()
            for j in range(draft.counts[b]):
                path = path_to(parents, parents[j])
                seq = row.seq + draft.tokens[b, path].tolist()
                logits = tiny_pair.draft(input_ids=torch.tensor([seq])).logits[0, -1]
                siblings = [i for i in range(j) if parents[i] == parents[j]]
                law = process(logits, sampling)
                if greedy:
                    assert draft.tokens[b, j] == logits.topk(len(siblings) + 1).indices[-1]
                else:
                    law[draft.tokens[b, siblings]] = 0
                    law = law / law.sum()
                    assert draft.tokens[b, j] not in draft.tokens[b, siblings]
                torch.testing.assert_close(draft.q[b, j], law, rtol=1e-4, atol=1e-5)


def test_sampled_model_tree_rows_in_a_batch_decode_as_they_do_alone(tiny_pair, prompts):
    """Draws without replacement per row from the row's generator (rows that may not draft draw
    nothing), so a row's completion does not depend on its batch."""
    dec = SpeculativeDecoder(
        tiny_pair.target, tiny_pair.draft, make_verifier("sd"), draft_len=6, sampling=Sampling(1.0),
        eos_token_ids=tiny_pair.eos_token_ids, drafter="model_tree:depth=3,topk=2",
    )  # fmt: skip
    batch = dec.generate_batch(prompts, BUDGET, [0, 1, 2])
    assert [g.token_ids for g in batch] == [dec.generate(p, BUDGET, seed=i).token_ids for i, p in enumerate(prompts)]
    assert sum(g.stats.accepted_tokens for g in batch) > 0


def test_a_method_not_defined_on_trees_is_refused_before_decoding(tiny_pair):
    with pytest.raises(BenchError, match="not defined on token trees"):
        SpeculativeDecoder(tiny_pair.target, tiny_pair.draft, make_verifier("lossy"), draft_len=4, drafter="model_tree")
