"""Prompt lookup (bench/drafters/lookup.py) against transformers, under every verifier defined on a
point mass, and the counters that compare drafters: drafts equal what transformers'
``PromptLookupCandidateGenerator`` proposes; greedy lookup ``sd`` equals ``ar`` and transformers'
``generate(prompt_lookup_num_tokens=N)`` token for token with as many target forwards (so every
round drafted what transformers drafted); each rule's emitted law on a lookup draft is its formula
on the point mass (lossless: exactly p); rules that read a draft model are refused in one line."""

from __future__ import annotations

import math
import random

import pytest
import torch
from scipy import stats
from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

from bench.config import RunConfig
from bench.decoding import SpeculativeDecoder
from bench.distributions import Sampling
from bench.drafters import DraftContext, PromptLookup, canonical_drafter, drafter_label, lookup, lookup_tree, parse_drafter
from bench.engines import make_engine
from bench.errors import BenchError
from bench.verifiers import Round, make_verifier, verify

GREEDY = Sampling(temperature=0.0)
DRAWS = 200_000
P = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])
BONUS = torch.full((6,), 1 / 6)

pytestmark = pytest.mark.usefixtures("one_thread")


def transformers_candidates(ids: list[int], ngram: int, tokens: int, eos: list[int]) -> list[int]:
    gen = PromptLookupCandidateGenerator(
        eos_token_id=torch.tensor(eos) if eos else None,
        num_output_tokens=tokens,
        max_matching_ngram_size=ngram,
        max_length=len(ids) + tokens + 5,
    )
    out, _ = gen.get_candidates(torch.tensor([ids]))
    return out[0, len(ids) :].tolist()


def test_drafts_equal_transformers_prompt_lookup_candidates():
    """Random short sequences over a small vocabulary (so n-grams recur, overlap and run into an
    EOS), every n-gram size and draft length: the same tokens as transformers' own class."""
    rng = random.Random(0)
    found = 0
    for case in range(600):
        ids = [rng.randrange(6) for _ in range(rng.randrange(2, 50))]
        ngram, tokens = rng.randrange(1, 5), rng.randrange(1, 12)
        eos = [5] if case % 2 else []
        want = transformers_candidates(ids, ngram, tokens, eos)
        assert lookup(ids, ngram, tokens, "first", frozenset(eos)) == want, (ids, ngram, tokens, eos)
        found += bool(want)
    assert 100 < found < 600  # both outcomes were exercised


def test_recent_match_takes_the_latest_occurrence():
    ids = [1, 2, 7, 8, 1, 2, 9, 4, 1, 2]
    assert lookup(ids, 2, 3, "first") == [7, 8, 1]
    assert lookup(ids, 2, 3, "recent") == [9, 4, 1]
    assert lookup([3, 4, 5], 2, 3) == []  # nothing recurs: no draft
    assert lookup(ids, 2, 3, "first", frozenset({7})) == []  # the continuation starts with an EOS
    assert lookup([5, 1, 6, 2, 1], 2, 2) == [6, 2]  # a 1-gram match...
    assert lookup([5, 1, 6, 2, 1], 2, 2, min_ngram=2) == []  # ...that min_ngram=2 ignores


def test_a_lookup_tree_of_one_match_is_the_chain():
    """``lookup_tree`` with matches=1 is ``lookup`` exactly (a chain: parents j - 1), on random
    sequences with EOS, every n-gram size, budget and match rule."""
    rng = random.Random(1)
    for case in range(400):
        ids = [rng.randrange(6) for _ in range(rng.randrange(2, 40))]
        args = (ids, rng.randrange(1, 4), rng.randrange(1, 10))
        kw = {"match": rng.choice(["first", "recent"]), "eos": frozenset({5} if case % 2 else ())}
        tokens, parents = lookup_tree(*args, 1, **kw)
        assert tokens == lookup(*args, **kw) and parents == list(range(-1, len(tokens) - 1))


def test_a_lookup_tree_merges_shared_prefixes():
    """Three earlier occurrences of ``1 2``, continued ``3 4 5 0 ..``, ``3 4 6 0 ..`` and
    ``7 8 0 ..``: one trie, ``3 4`` shared and kept first (two continuations pass there), then the
    shallower nodes, the earlier match first among equals (``recent``: the latest); a
    continuation that starts with an EOS adds nothing."""
    ids = [1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 6, 0, 1, 2, 7, 8, 0, 1, 2]
    assert lookup_tree(ids, 2, 2, 3) == ([3, 4], [-1, 0])
    assert lookup_tree(ids, 2, 4, 3) == ([3, 4, 7, 8], [-1, 0, -1, 2])
    assert lookup_tree(ids, 2, 6, 3) == ([3, 4, 7, 8, 5, 6], [-1, 0, -1, 2, 1, 1])
    assert lookup_tree(ids, 2, 6, 3, match="recent") == ([3, 4, 7, 8, 0, 6], [-1, 0, -1, 2, 3, 1])
    assert lookup_tree(ids, 2, 8, 3) == ([3, 4, 7, 8, 5, 6, 0, 0], [-1, 0, -1, 2, 1, 1, 3, 4])
    assert lookup_tree(ids, 2, 8, 3, eos=frozenset({7, 0})) == ([3, 4, 5, 6], [-1, 0, 1, 1])
    assert lookup_tree(ids, 2, 8, 2) == ([3, 4, 5, 6, 0, 0, 1, 1], [-1, 0, 1, 1, 2, 3, 4, 5])
    assert lookup_tree([3, 4, 5], 2, 8, 3) == ([], [])


def test_the_lookup_tree_drafter_packs_valid_trees():
    """Rows with a tree, a chain and nothing share a round: tokens padded, parents topological,
    -1 for the root's children and for padding; a round of chains carries no parents (the loop's
    chain path); heuristic schedules and bad matches are refused in one line."""
    from bench.drafters import LookupTree

    class Row:
        def __init__(self, index, seq):
            self.index, self.seq, self.out, self.generator = index, seq, [], None

    tree = LookupTree(matches=3).bind(DraftContext(draft_len=8))
    rows = [Row(0, [1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 6, 0, 1, 2, 7, 8, 0, 1, 2]), Row(1, [5, 6, 5]), Row(2, [9])]
    draft = tree.draft(rows, [8, 8, 8])
    assert draft.counts == [8, 2, 0] and draft.q is None
    assert draft.parents.tolist() == [[-1, 0, -1, 2, 1, 1, 3, 4], [-1, 0] + [-1] * 6, [-1] * 8]
    assert draft.tokens[:2].tolist() == [[3, 4, 7, 8, 5, 6, 0, 0], [6, 5, 0, 0, 0, 0, 0, 0]]
    assert tree.draft(rows[1:], [8, 8]).parents is None
    assert canonical_drafter("lookup_tree") == "lookup_tree:match=first,matches=4,min_ngram=1,ngram=2,schedule=constant"
    for bad, needle in [("lookup_tree:matches=0", "matches must be an integer >= 1"), ("lookup_tree:schedule=heuristic", "adapts a chain")]:
        with pytest.raises(BenchError, match=needle) as err:
            canonical_drafter(bad)
        assert "\n" not in str(err.value)


def test_drafter_specs_are_canonical_and_bad_ones_are_one_line():
    assert canonical_drafter("lookup") == "lookup:match=first,min_ngram=1,ngram=2,schedule=constant"
    assert canonical_drafter(" lookup:ngram=3 ") == "lookup:match=first,min_ngram=1,ngram=3,schedule=constant"
    assert drafter_label("lookup:match=first,min_ngram=1,ngram=3,schedule=constant") == "lookup ngram=3"
    assert drafter_label("model") == ""
    assert parse_drafter("lookup:match=recent")[1]["match"] == "recent"
    for bad, needle in [
        ("ngram", "unknown drafter"),
        ("lookup:n=3", "unknown or malformed parameter"),
        ("lookup:ngram=x", "takes an integer"),
        ("lookup:ngram=0", "ngram must be an integer >= 1"),
        ("lookup:match=last", "match must be one of first, recent"),
        ("lookup:min_ngram=3", r"min_ngram must be an integer in \[1, ngram=2\]"),
    ]:
        with pytest.raises(BenchError, match=needle):
            canonical_drafter(bad)


@pytest.mark.parametrize(
    "method,params,needle",
    [
        ("cascade", {}, "reads the draft model's logits"),
        ("ensemble", {"mix": "logit"}, "reads the draft model's logits"),
        ("diversed", {}, "hidden states"),
    ],
)
def test_rules_that_read_a_draft_model_are_refused_with_lookup(method, params, needle):
    cfg = RunConfig(task="arith", pair="ref", method=method, params=params, drafter="lookup")
    with pytest.raises(BenchError, match=needle) as err:
        cfg.resolve()
    assert "\n" not in str(err.value) and "--drafter model" in str(err.value)


def test_lookup_configurations_are_their_own_family_and_id():
    base = dict(task="arith", pair="ref", method="sd")
    model, lookup_ = RunConfig(**base).resolve(), RunConfig(**base, drafter="lookup").resolve()
    assert model.config_id != lookup_.config_id
    assert model.label == "sd" and lookup_.label == "sd (lookup)"
    assert lookup_.draft_policy is None  # a lookup draws nothing
    assert RunConfig(task="arith", pair="ref", method="ar", drafter="lookup").resolve().drafter is None
    token = RunConfig(**{**base, "method": "cascade"}, params={"cascade_rule": "token"}, drafter="lookup")
    assert token.resolve().label.startswith("cascade (token, lookup")


# --- The emitted law on a point mass -------------------------------------------------------------


def without(p: torch.Tensor, x: int) -> torch.Tensor:
    rest = p.clone()
    rest[x] = 0
    return rest / rest.sum()


def point_mass_law(method: str, params: dict, p: torch.Tensor, x: int) -> torch.Tensor:
    """Each rule's law when the draft is x with certainty, written from its formula: keep x with
    probability a, else the rule's replacement."""
    top = torch.zeros_like(p)
    top[p.argmax()] = 1
    one = torch.zeros_like(p)
    one[x] = 1
    if method == "sd":
        return p
    if method == "lossy":
        a = min(1.0, p[x].item() / params["lenience"])
        return a * one + (1 - a) * without(p, x)
    if method == "ensemble":  # pi = w p + (1 - w) delta_x
        return params["target_weight"] * p + (1 - params["target_weight"]) * one
    if method == "threshold":
        single, acc = params["speculative_accept_threshold_single"], params["speculative_accept_threshold_acc"]
        a = 1.0 if p[x] >= single else min(1.0, p[x].item() / acc)
        return a * one + (1 - a) * without(p, x)
    if method == "typical":
        entropy = -(p * (p + 1e-5).log()).sum()
        keep = p[x] > min(params["posterior_threshold"], params["posterior_alpha"] * math.exp(-entropy.item()))
        return one if keep else top
    if method == "relaxed":
        order = p.argsort(descending=True)[: params["relaxed_topk"]]
        keep = x == p.argmax().item() or (x in order.tolist() and p[x] >= p.max() - params["relaxed_delta"])
        return one if keep else top
    assert method == "cascade"  # token rule: x kept iff p(x) >= (1 - alpha) max p, else p
    return one if p[x] >= (1 - params["cascade_alpha"]) * p.max() else p


POINT_MASS_CASES = [
    ("sd", {}),
    ("lossy", {"lenience": 0.5}),
    ("ensemble", {"target_weight": 0.7}),
    ("ensemble", {"target_weight": 0.2}),
    ("threshold", {"speculative_accept_threshold_single": 0.2, "speculative_accept_threshold_acc": 0.5}),
    ("typical", {"posterior_threshold": 0.09, "posterior_alpha": 0.3}),
    ("relaxed", {"relaxed_topk": 3, "relaxed_delta": 0.2}),
    ("cascade", {"cascade_rule": "token", "cascade_alpha": 0.5}),
]


@pytest.mark.parametrize("x", [0, 1, 3, 5])
@pytest.mark.parametrize("method,params", POINT_MASS_CASES)
def test_emitted_token_on_a_lookup_draft_follows_the_rules_formula(method, params, x):
    """A lookup round as the loop builds it: q the point mass on the drafted token, no draft
    logits, no hidden states. The first emitted token's frequencies match the formula
    (chi-square), and the logged acceptance and bias are the formula's."""
    g = torch.Generator().manual_seed(11 + x)
    expand = lambda d: d.view(1, 1, -1).expand(DRAWS, 1, -1)  # noqa: E731
    draft = torch.full((DRAWS, 1), x)
    point = torch.nn.functional.one_hot(draft, len(P)).float()
    r = Round(draft, point, expand(P), None, expand(P.log()), Sampling(1.0))
    verdict = verify(make_verifier(method, **params), r, BONUS.expand(DRAWS, -1), g)
    emitted = torch.where(verdict.accepted >= 1, draft[:, 0], verdict.next_token)
    law = point_mass_law(method, params, P, x)
    counts = torch.bincount(emitted, minlength=len(P)).double()
    keep = law > 0
    assert counts[~keep].sum() == 0, "emitted a token the law gives probability 0"
    if keep.sum() > 1:
        expected = law[keep].double() / law[keep].double().sum() * counts.sum()
        assert stats.chisquare(counts[keep].numpy(), expected.numpy()).pvalue > 1e-3, (method, x)
    assert verdict.bias[0, 0].item() == pytest.approx((law - P).clamp_min(0).sum().item(), abs=1e-5)
    accepted = law[x].item()  # x is emitted only when kept: a rejection resamples without x
    assert verdict.expected_acceptance[0, 0].item() == pytest.approx(accepted, abs=1e-5)
    sigma = math.sqrt(max(accepted * (1 - accepted), 1e-12) / DRAWS)
    assert abs(verdict.accepted.double().mean().item() - accepted) < 5 * sigma + 1e-9


# --- In the loop ---------------------------------------------------------------------------------


def repetitive_prompts(tokenizer) -> list[list[int]]:
    """Prompts whose text recurs, so lookups find continuations (and sometimes none)."""
    texts = [
        "the cat sat on the mat. the cat sat on the mat. the cat",
        "one two three four one two three four one two",
        "Question: 12 + 7 = 19. Question: 12 + 7 =",
        "abc",
    ]
    return [list(tokenizer(t).input_ids) for t in texts]


class ForwardCount:
    """Counts a model's forward calls (transformers' prefill and one per round)."""

    def __init__(self, model):
        self.calls = 0
        self.handle = model.register_forward_hook(self.hook)

    def hook(self, *args):
        self.calls += 1


def transformers_lookup(pair, prompt: list[int], n: int, ngram: int, budget: int) -> tuple[list[int], int]:
    """transformers' greedy prompt-lookup generate(): tokens and target forwards (one per round, the
    first reading the prompt too)."""
    ids = torch.tensor([prompt])
    count = ForwardCount(pair.target)
    try:
        out = pair.target.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=budget,
            prompt_lookup_num_tokens=n, max_matching_ngram_size=ngram,
            eos_token_id=pair.eos_token_ids or None, pad_token_id=pair.tokenizer.pad_token_id,
        )  # fmt: skip
    finally:
        count.handle.remove()
    return out[0, len(prompt) :].tolist(), count.calls


def decoder(pair, method: str, n: int, drafter: str, engine=None, sampling=GREEDY, **params) -> SpeculativeDecoder:
    return SpeculativeDecoder(
        pair.target, pair.draft, make_verifier(method, **params), draft_len=n, sampling=sampling,
        eos_token_ids=pair.eos_token_ids, drafter=drafter, **({"engine": engine} if engine else {}),
    )  # fmt: skip


def check_against_transformers(pair, prompts, n: int, ngram: int, budget: int, engine=None) -> None:
    """Greedy lookup sd on ``engine`` (eager by default) equals transformers' prompt lookup and
    eager ar (the compiled engine's ar is checked against eager in tests/engines/test_compiled.py)."""
    sd = decoder(pair, "sd", n, f"lookup:ngram={ngram}", engine)
    ar = decoder(pair, "ar", n, "model")
    for prompt in prompts:
        want, forwards = transformers_lookup(pair, prompt, n, ngram, budget)
        got = sd.generate(prompt, budget)
        assert got.token_ids == want == ar.generate(prompt, budget).token_ids
        # As many rounds as transformers' forwards (its first also reads the prompt): every round
        # drafted what transformers drafted.
        assert got.stats.rounds == forwards
        s = got.stats
        assert s.draft_forwards == 0 and s.drafting_rounds <= s.rounds
        assert s.acceptance_length == pytest.approx(s.new_tokens / s.rounds)


@pytest.mark.slow
@pytest.mark.parametrize("n,ngram", [(10, 2), (3, 3), (1, 1)])
def test_greedy_lookup_sd_equals_ar_and_transformers_prompt_lookup(tiny_pair, n, ngram):
    check_against_transformers(tiny_pair, repetitive_prompts(tiny_pair.tokenizer), n, ngram, 30)


@pytest.mark.slow
def test_greedy_lookup_on_the_compiled_engine(tiny_pair):
    """The compiled engine declares widths 1 and N + 1: a round that found nothing runs at width 1,
    a shorter draft is padded to N + 1; the tokens and forwards stay transformers'. (ar runs eager:
    compiling its own width-1 engine too cost a third of this test.)"""
    check_against_transformers(tiny_pair, repetitive_prompts(tiny_pair.tokenizer)[:2], 4, 2, 24, make_engine("compiled"))


def test_lookup_rows_in_a_batch_decode_as_they_do_alone(tiny_pair):
    """Rows that find a continuation and rows that do not share one round, sampled at temperature 1."""
    prompts = repetitive_prompts(tiny_pair.tokenizer)
    dec = decoder(tiny_pair, "typical", 5, "lookup:schedule=heuristic", sampling=Sampling(1.0))
    batch = dec.generate_batch(prompts, 24, list(range(len(prompts))))
    alone = [dec.generate(p, 24, seed=i) for i, p in enumerate(prompts)]
    assert [g.token_ids for g in batch] == [g.token_ids for g in alone]
    assert [g.stats.drafting_rounds for g in batch] == [g.stats.drafting_rounds for g in alone]
    assert any(0 < g.stats.drafting_share < 1 for g in alone)  # lookups that found nothing


def test_target_loglik_is_the_targets_log_p_of_the_emitted_tokens(tiny_pair):
    """The fidelity columns read from the verify forwards equal a full forward over the text: the
    temperature-1 log p, and log p_T(y) + H(p_T) at the sampling temperature (1 under greedy)."""
    prompt = repetitive_prompts(tiny_pair.tokenizer)[0]
    for method, drafter, sampling in [("ar", "model", GREEDY), ("sd", "lookup", Sampling(1.0)), ("sd", "model", Sampling(1.0))]:
        gen = decoder(tiny_pair, method, 4, drafter, sampling=sampling).generate(prompt, 20, seed=3)
        with torch.inference_mode():
            logits = tiny_pair.target(torch.tensor([prompt + gen.token_ids])).logits[0].float()
        logp = logits[len(prompt) - 1 : -1].log_softmax(-1)
        want = logp.gather(-1, torch.tensor(gen.token_ids).unsqueeze(-1)).mean().item()
        assert gen.stats.target_loglik == pytest.approx(want, abs=1e-4), (method, drafter)
        law = (logits[len(prompt) - 1 : -1] / (sampling.temperature or 1.0)).log_softmax(-1)
        excess = law.gather(-1, torch.tensor(gen.token_ids).unsqueeze(-1)).squeeze(-1) + torch.special.entr(law.exp()).sum(-1)
        assert gen.stats.target_divergence == pytest.approx(excess.mean().item(), abs=1e-4), (method, drafter)


@pytest.mark.slow
def test_greedy_lookup_on_smollm2_equals_transformers_and_ar(smollm2):
    """The real weights: transformers' generate(prompt_lookup_num_tokens=10,
    max_matching_ngram_size=3) and ``ar``, token for token, as many target forwards, on a CNN/DM
    fixture article under the chat template (where the summary copies from the article)."""
    from bench.pairs import encode_prompt
    from bench.tasks import Task, resolve_task

    example = Task(resolve_task("cnndm"), "fixture").examples(1)[0]
    prompt = encode_prompt(smollm2, example.prompt, chat_template=True)
    check_against_transformers(smollm2, [prompt], 10, 3, 32)


def test_lookup_drafter_state_resets_per_batch():
    drafter = PromptLookup(schedule="heuristic").bind(DraftContext(draft_len=6))

    class Row:
        index, seq, generator = 0, [1, 2, 3, 1, 2, 3, 1, 2], None

    drafter.start(1, 64)
    assert drafter.draft([Row()], [6]).counts == [6]
    drafter.observe([Row()], [6], [2])
    assert drafter.draft([Row()], [6]).counts == [5]  # one fewer after a rejection
    drafter.observe([Row()], [5], [5])
    assert drafter.draft([Row()], [6]).counts == [6]  # +2 after a full acceptance, capped at N
    drafter.start(1, 64)
    assert drafter.lengths == {}


def test_a_grid_sweeps_drafters_and_runs_ar_once(tmp_path):
    """``drafter`` is a grid axis: every method once per drafter, ``ar`` (which drafts nothing) once."""
    from bench.grid import configs_from_grid

    grid = tmp_path / "g.yaml"
    grid.write_text("tasks: [arith]\npairs: [ref]\nmethods: [ar, sd, typical]\ndrafter: [model, 'lookup:ngram=3']\n")
    configs, _ = configs_from_grid(str(grid))
    resolved = {c.config_id: c for c in (c.resolve() for c in configs)}
    labels = sorted(c.label for c in resolved.values())
    assert labels == sorted(
        ["ar", "sd", "sd (lookup ngram=3)", "typical (alpha=0.3, eps=0.09)", "typical (alpha=0.3, eps=0.09, lookup ngram=3)"]
    )


@pytest.mark.slow
def test_drafters_sit_in_separate_panels_with_their_counters(tmp_path):
    """A run over both drafters: one panel each (ar joins both), rows record the drafter, tables
    show tokens per forward and the share of rounds that drafted."""
    from bench import api
    from bench.reports.summary import panels, summarise
    from bench.store import load_results

    out = tmp_path / "results"
    api.run(
        tasks=["arith"], pairs=["ref"], methods=["ar", "sd", "typical"],
        settings=api.RunSettings(drafter=["model", "lookup"]), limit=4, output_dir=out, batch_size=4, timing_examples=0, progress=False, device="cpu", log=lambda m: None,
        accept_all=False,
    )  # fmt: skip
    rows = load_results(out)
    assert set(rows["drafter"].dropna()) == {"model", "lookup:match=first,min_ngram=1,ngram=2,schedule=constant"}
    assert rows.loc[rows["method"] == "ar", "drafter"].isna().all()
    found = panels(summarise(rows))
    assert len(found) == 2 and all("ar" in set(p.part["method"]) for p in found)
    assert sorted(p.part["label"].tolist()[-1] for p in found) == ["typical (alpha=0.3, eps=0.09)", "typical (lookup, alpha=0.3, eps=0.09)"]
    lookup_panel = next(p for p in found if "drafter lookup" in p.title)
    share = lookup_panel.part.set_index("label").loc["sd (lookup)", "drafting_share"]
    assert 0 < share < 1  # arithmetic prompts rarely recur: many rounds found nothing
    text = (out / "table.md").read_text()
    assert "tokens/fwd" in text and "drafted" in text and "log p/token" in text
    assert text.count("### ") == 2 and text.count("drafter lookup") == 1


def test_a_lookup_round_shows_the_verifier_a_point_mass_and_no_draft_model(tiny_pair):
    """What the verifier reads of a lookup round: q is the point mass on each drafted token (the law
    the token came from, so the proposal is q itself), and there are no draft logits or weights."""
    from dataclasses import dataclass

    from bench.verifiers import SpeculativeDecoding

    seen = []

    @dataclass(frozen=True)
    class Recording(SpeculativeDecoding):
        def rule(self, r):
            seen.append(r)
            return super().rule(r)

    dec = SpeculativeDecoder(tiny_pair.target, None, Recording(), draft_len=4, sampling=Sampling(1.0), drafter="lookup")
    for i, prompt in enumerate(repetitive_prompts(tiny_pair.tokenizer)):
        dec.generate(prompt, 16, seed=i)
    assert seen
    for r in seen:
        assert r.q_logits is None and r.weights is None and not r.greedy_draft
        assert torch.equal(r.q, torch.nn.functional.one_hot(r.draft, r.p.shape[-1]).float())
        assert r.proposal is r.q


@pytest.mark.slow
def test_greedy_tree_and_suffix_drafters_on_smollm2_equal_ar(smollm2):
    """The real weights: greedy ``sd`` with each chain and tree drafter beside lookup (lookup_tree,
    suffix chain and tree, model_tree) gives eager ``ar``'s tokens on the CNN/DM fixture article,
    and each drafter had tokens accepted (its drafts were verified, not skipped)."""
    from bench.pairs import encode_prompt
    from bench.tasks import Task, resolve_task

    example = Task(resolve_task("cnndm"), "fixture").examples(1)[0]
    prompt = encode_prompt(smollm2, example.prompt, chat_template=True)
    want = decoder(smollm2, "ar", 6, "model").generate(prompt, 32).token_ids
    for spec in ("lookup_tree:matches=4", "suffix", "suffix:mode=tree,max_spec_factor=4", "model_tree"):
        got = decoder(smollm2, "sd", 6, spec).generate(prompt, 32)
        assert got.token_ids == want, spec
        assert got.stats.accepted_tokens > 0 and got.stats.verified_nodes >= got.stats.accepted_tokens, spec
