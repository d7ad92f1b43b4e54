"""The decoding loop on the tiny pair: token-for-token equivalences and counters."""

import pytest
import torch

from bench.decoding import SpeculativeDecoder
from bench.distributions import Sampling
from bench.errors import BenchError
from bench.verifier_heads import WeightHead
from bench.pairs import load_pair, resolve_pair
from bench.verifiers import make_verifier

GREEDY = Sampling(temperature=0.0)


def prompts(tokenizer, count=20):
    g = torch.Generator().manual_seed(123)
    low = len(tokenizer.all_special_ids)
    out = []
    for _ in range(count):
        length = int(torch.randint(3, 40, (1,), generator=g))
        out.append(
            [tokenizer.bos_token_id] + torch.randint(low, len(tokenizer), (length,), generator=g).tolist()
        )
    return out


def decoder(pair, method, draft_len=5, sampling=GREEDY, eos=True, **params):
    return SpeculativeDecoder(
        pair.target,
        pair.draft,
        make_verifier(method, **params),
        draft_len=draft_len,
        sampling=sampling,
        eos_token_ids=pair.eos_token_ids if eos else (),
        head=WeightHead(*pair.hidden_sizes) if method == "diversed" else None,
    )


@pytest.mark.slow
def test_greedy_sd_equals_ar_token_for_token(tiny_pair):
    ar = decoder(tiny_pair, "ar", eos=False)
    refs = [ar.generate(p, 64).token_ids for p in prompts(tiny_pair.tokenizer)]
    assert all(len(r) == 64 for r in refs)
    for n in (1, 3, 5, 8):
        sd = decoder(tiny_pair, "sd", draft_len=n, eos=False)
        rates = []
        for prompt, ref in zip(prompts(tiny_pair.tokenizer), refs):
            gen = sd.generate(prompt, 64)
            assert gen.token_ids == ref, f"draft length {n} diverged from ar"
            rates.append(gen.stats.acceptance_rate)
        assert 0 < sum(rates) / len(rates) < 1  # the draft is neither perfect nor useless


def test_lossy_is_sd_under_greedy(tiny_pair):
    for prompt in prompts(tiny_pair.tokenizer, 5):
        a = decoder(tiny_pair, "sd").generate(prompt, 48)
        b = decoder(tiny_pair, "lossy", lenience=0.3).generate(prompt, 48)
        assert a.token_ids == b.token_ids


def test_ensemble_weight_one_reproduces_sd_under_sampling(tiny_pair):
    hot = Sampling(temperature=1.0)
    for seed, prompt in enumerate(prompts(tiny_pair.tokenizer, 6)):
        sd = decoder(tiny_pair, "sd", sampling=hot).generate(prompt, 64, seed=seed)
        ens = decoder(tiny_pair, "ensemble", sampling=hot, target_weight=1.0).generate(prompt, 64, seed=seed)
        assert ens.token_ids == sd.token_ids
        for name in (
            "rounds",
            "drafted_tokens",
            "accepted_tokens",
            "new_tokens",
            "accepted_per_position",
            "reached_per_position",
            "expected_acceptance_sum",
            "bias_sum",
        ):
            assert getattr(ens.stats, name) == getattr(sd.stats, name), name


@pytest.fixture
def assistant_settings(tiny_pair):
    """transformers reads the draft length and schedule from the ASSISTANT's generation config."""
    config = tiny_pair.draft.generation_config
    saved = config.to_dict()
    yield config
    for key in ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold"):
        setattr(config, key, saved.get(key))


@pytest.mark.slow
def test_greedy_ensemble_matches_transformers_assisted_generation(tiny_pair, assistant_settings):
    n = 4
    assistant_settings.num_assistant_tokens = n
    assistant_settings.num_assistant_tokens_schedule = "constant"
    assistant_settings.assistant_confidence_threshold = 0.0
    ours = decoder(tiny_pair, "ensemble", draft_len=n, target_weight=0.7)
    lower = decoder(tiny_pair, "sd", draft_len=n)
    differs = 0
    for prompt in prompts(tiny_pair.tokenizer, 12):
        ids = torch.tensor([prompt])
        theirs = tiny_pair.target.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            assistant_model=tiny_pair.draft,
            do_sample=False,
            max_new_tokens=48,
            assistant_ensemble_weight=0.7,
            eos_token_id=tiny_pair.eos_token_ids,
            pad_token_id=tiny_pair.tokenizer.pad_token_id,
        )[0, len(prompt) :].tolist()
        got = ours.generate(prompt, 48).token_ids
        assert got == theirs
        differs += got != lower.generate(prompt, 48).token_ids
    assert differs > 0, "w = 0.7 never changed the output: the comparison shows nothing"


def test_budget_is_never_overshot_and_counters_add_up(tiny_pair):
    hot = Sampling(temperature=1.0)
    for budget in (1, 2, 7, 33):
        gen = decoder(tiny_pair, "ensemble", draft_len=5, sampling=hot, eos=False).generate(
            prompts(tiny_pair.tokenizer, 1)[0], budget, seed=budget
        )
        s = gen.stats
        assert len(gen.token_ids) == s.new_tokens == budget
        assert s.new_tokens == s.accepted_tokens + s.rounds  # each round: accepted + one more
        assert s.drafted_tokens == sum(s.drafted_per_position)
        assert s.accepted_tokens == sum(s.accepted_per_position)
        assert s.target_forwards == s.rounds + 1  # + prefill
        assert s.draft_forwards == s.drafted_tokens + 1



# Each row's draft_forwards (a prompt with nothing to prefill last), recorded before drafters
# reported their own forwards (Draft.forwards): moving the count into the drafters changed none.
FORWARDS_BEFORE_DRAFTERS_REPORTED = {
    ("model", 4, 0.0): [18, 27, 41, 40],
    ("model", 4, 1.0): [19, 26, 24, 17],
    ("model_tree:depth=3,topk=2,branch=2", 6, 0.0): [14, 16, 15, 17],
    ("model_tree:depth=3,topk=2,branch=2", 6, 1.0): [14, 14, 13, 12],
    ("lookup", 4, 0.0): [0, 0, 0, 0],
    ("lookup_tree", 6, 0.0): [0, 0, 0, 0],
    ("suffix", 4, 1.0): [0, 0, 0, 0],
}


@pytest.mark.parametrize("spec,n,temperature", list(FORWARDS_BEFORE_DRAFTERS_REPORTED))
def test_draft_model_and_deterministic_forward_counts_are_unchanged(tiny_pair, spec, n, temperature):
    """A draft model's chain counts a forward per drafted token (a tree: per level) plus its
    prefill; a deterministic drafter none."""
    sd = SpeculativeDecoder(tiny_pair.target, tiny_pair.draft, make_verifier("sd"), draft_len=n,
                            sampling=Sampling(temperature), drafter=spec)  # fmt: skip
    batch = prompts(tiny_pair.tokenizer, 3) + [[tiny_pair.tokenizer.bos_token_id]]
    out = sd.generate_batch(batch, 19, [0, 1, 2, 3])
    assert [g.stats.draft_forwards for g in out] == FORWARDS_BEFORE_DRAFTERS_REPORTED[(spec, n, temperature)]


@pytest.mark.parametrize("spec", ["model", "model_tree", "lookup", "lookup_tree"])
def test_a_drafter_that_reads_no_target_states_pays_nothing_for_them(tiny_pair, monkeypatch, spec):
    """Only a drafter that reads the target's layer states (EAGLE's) is handed them: for any other,
    neither the prefill nor a round builds their index lists or reads the engine's states."""

    def refuse(*args):
        raise AssertionError("the loop handed states to a drafter that reads none")

    monkeypatch.setattr(SpeculativeDecoder, "_hand_states", refuse)
    sd = SpeculativeDecoder(tiny_pair.target, tiny_pair.draft, make_verifier("sd"), draft_len=4, drafter=spec)
    out = sd.generate_batch(prompts(tiny_pair.tokenizer, 2), 8, [0, 1])
    assert [len(g.token_ids) for g in out] == [8, 8]

def test_eos_ends_generation(tiny_pair):
    eos = tiny_pair.tokenizer.eos_token_id
    ar = decoder(tiny_pair, "ar", sampling=Sampling(1.0))
    for seed in range(60):
        gen = ar.generate([tiny_pair.tokenizer.bos_token_id], 128, seed=seed)
        if eos in gen.token_ids:
            assert gen.token_ids[-1] == eos and gen.token_ids.count(eos) == 1
            assert gen.stats.new_tokens < 128
            return
    pytest.fail("no sample ended with EOS in 60 tries; the test shows nothing")


def test_diversed_runs_with_a_fresh_head_as_the_half_ensemble(tiny_pair):
    hot = Sampling(temperature=1.0)
    prompt = prompts(tiny_pair.tokenizer, 1)[0]
    div = decoder(tiny_pair, "diversed", sampling=hot).generate(prompt, 64, seed=3)
    ens = decoder(tiny_pair, "ensemble", sampling=hot, target_weight=0.5).generate(prompt, 64, seed=3)
    assert div.token_ids == ens.token_ids
    assert div.stats.weights and set(div.stats.weights) == {0.5}


def test_diversed_without_a_head_is_refused(tiny_pair):
    with pytest.raises(BenchError, match="--head"):
        SpeculativeDecoder(tiny_pair.target, tiny_pair.draft, make_verifier("diversed"))


def test_a_head_that_is_not_one_of_ours_is_refused_in_one_line(tiny_pair):
    """The chain round reads a head's ``at_token`` (which target states it reads): a module without
    it is refused when the decoder is built, not met as an AttributeError mid-round."""
    with pytest.raises(BenchError, match="WeightHead or JudgeHead, got Linear"):
        SpeculativeDecoder(tiny_pair.target, tiny_pair.draft, make_verifier("diversed"), head=torch.nn.Linear(2, 1))


@pytest.mark.parametrize("damping,low,high", [(0.05, 0.85, 1.0), (0.2, 0.4, 0.7), (0.4, 0.2, 0.4)])
def test_tiny_pair_acceptance_is_tunable(damping, low, high):
    spec = resolve_pair("tiny")
    pair = load_pair(type(spec)(**{**spec.__dict__, "tiny": {**spec.tiny, "damping": damping}}), device="cpu")
    sd = decoder(pair, "sd", sampling=Sampling(1.0), eos=False)
    stats = [sd.generate(p, 48, seed=i).stats for i, p in enumerate(prompts(pair.tokenizer, 6))]
    rate = sum(s.accepted_tokens for s in stats) / sum(s.drafted_tokens for s in stats)
    assert low <= rate <= high, rate


def test_drafts_accepted_after_an_eos_are_not_counted(tiny_pair):
    """Issue 13: an example that emitted 6 tokens must not log 11 accepted. The round that ends on a
    drafted EOS counts drafted and accepted tokens up to the EOS only."""
    sd = decoder(tiny_pair, "sd", eos=False)
    found = 0
    for prompt in prompts(tiny_pair.tokenizer, 4):
        out = sd.generate(prompt, 48).token_ids
        for i, token in enumerate(out[:16]):
            if token in out[:i]:
                continue
            sd.eos = frozenset([token])
            s = sd.generate(prompt, 48).stats
            sd.eos = frozenset()
            assert s.new_tokens == i + 1
            assert s.accepted_tokens == sum(s.accepted_per_position) <= s.drafted_tokens
            assert s.new_tokens in (s.accepted_tokens + s.rounds, s.accepted_tokens + s.rounds - 1)
            found += s.new_tokens == s.accepted_tokens + s.rounds - 1  # ended on an accepted draft
    assert found, "no example ended on an accepted drafted EOS: the test shows nothing"


def test_diversed_weights_cover_reached_positions_only(tiny_pair):
    """Issue 13: weights are logged where the verifier looked (up to the first rejection), like
    expected acceptance and bias, not at every drafted position."""
    hot = Sampling(temperature=1.0)
    head = WeightHead(*tiny_pair.hidden_sizes)
    with torch.no_grad():
        head.linear.weight.normal_(0, 0.3, generator=torch.Generator().manual_seed(5))
    div = SpeculativeDecoder(
        tiny_pair.target,
        tiny_pair.draft,
        make_verifier("diversed"),
        draft_len=5,
        sampling=hot,
        head=head,
    )
    rejected = 0
    for seed, prompt in enumerate(prompts(tiny_pair.tokenizer, 4)):
        s = div.generate(prompt, 48, seed=seed).stats
        assert len(s.weights) == sum(s.reached_per_position)
        rejected += s.drafted_tokens - s.accepted_tokens
    assert rejected and len(set(div.generate(prompts(tiny_pair.tokenizer, 1)[0], 48).stats.weights)) > 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="host syncs exist only on a CUDA device")
@pytest.mark.parametrize("engine", ["eager", "compiled"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_round_syncs_the_host_once_on_cuda(engine, temperature):
    """The loop's contract: the verdicts are a round's one wait for the device. A blocking copy or
    a host read in a step would add a sync per draft step (three per round here)."""
    import warnings

    from bench.engines import make_engine

    pair = load_pair("tiny", device="cuda")
    sd = SpeculativeDecoder(
        pair.target,
        pair.draft,
        make_verifier("sd"),
        draft_len=3,
        sampling=Sampling(temperature=temperature),
        engine=make_engine(engine),
    )
    prompt = prompts(pair.tokenizer, 1)[0]
    sd.generate(prompt, 32)  # compiles and warms up
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gen = sd.generate(prompt, 32)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    syncs = sum("synchroniz" in str(w.message) for w in caught)
    # Per round: the verdicts, then the per-position sums read after them (nothing left to wait
    # for). Around the loop: the clock's syncs before and after the prefill and at the end.
    assert syncs <= 2 * gen.stats.rounds + 3, f"{syncs} syncs in {gen.stats.rounds} rounds"


class _Recording:
    """Keeps the rounds a verifier was shown (the verifiers are frozen dataclasses)."""

    rounds: list = []


def _recording(method):
    from dataclasses import dataclass

    from bench.verifiers import verifier_class

    @dataclass(frozen=True)
    class Recording(verifier_class(method)):
        def rule(self, r):
            _Recording.rounds.append(r)
            return super().rule(r)

    return Recording()


@pytest.mark.parametrize("policy", ["greedy", "sample"])
def test_greedy_drafts_are_the_draft_argmax_and_the_verifier_sees_both_laws(tiny_pair, policy):
    """Under the greedy policy every drafted token is argmax q (at temperature 1); the verifier still
    gets the draft's processed q (the ensemble's component) and takes acceptance against the
    one-hot law the drafts came from. Sampled drafts are not all the argmax."""
    from bench.distributions import process

    sampling = Sampling(temperature=1.0)
    _Recording.rounds = []
    dec = SpeculativeDecoder(
        tiny_pair.target, tiny_pair.draft, _recording("ensemble"), draft_len=4, sampling=sampling,
        draft_policy=policy,
    )  # fmt: skip
    for i, prompt in enumerate(prompts(tiny_pair.tokenizer, 2)):
        dec.generate(prompt, 12, seed=i)
    rounds = _Recording.rounds
    assert rounds
    argmax = [bool((r.draft == r.q_logits.argmax(-1)).all()) for r in rounds]
    for r in rounds:
        assert torch.allclose(r.q, process(r.q_logits, sampling))
        assert r.greedy_draft == (policy == "greedy")
    if policy == "greedy":
        assert all(argmax)
        for r in rounds:
            assert torch.equal(r.proposal, torch.nn.functional.one_hot(r.draft, r.q.shape[-1]).float())
    else:
        assert not all(argmax)
        assert all(r.proposal is r.q for r in rounds)
