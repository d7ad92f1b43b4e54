"""The compiled engine decodes exactly what the eager reference decodes, and refuses loudly.

Compiling costs seconds per graph on a CPU, so one factory serves the whole module: each model
compiles its few step widths once (target N + 1 and 1, draft 1 and 2) and every test reuses them;
the Qwen3 and Gemma 3 targets have two layers (one for the draft) to keep tracing short.
"""

import math
from dataclasses import asdict

import pytest
import torch
from scipy.stats import chisquare
from transformers import LlamaConfig, LlamaForCausalLM

from bench.decoding import SpeculativeDecoder
from bench.distributions import Sampling, process
from bench.engines import make_engine
from bench.errors import BenchError
from bench.head import WeightHead
from bench.verifiers import make_verifier
from test_architectures import ARCHITECTURES

GREEDY = Sampling(temperature=0.0)
N = 3
METHODS = {
    "ar": {},
    "sd": {},
    "lossy": {"lenience": 0.3},
    "cascade": {"cascade_rule": "opt", "cascade_alpha": 0.5},
    "ensemble": {"target_weight": 0.7},
    "diversed": {},
}
TIMINGS = ("wall_time_s", "prefill_time_s", "kv_cache_bytes")
FLOATS = ("expected_acceptance_sum", "bias_sum", "weights")


@pytest.fixture(scope="module")
def compiled():
    return make_engine("compiled")


@pytest.fixture(scope="module")
def pairs(tiny_pair):
    built = {"tiny": (tiny_pair.target, tiny_pair.draft, tiny_pair.eos_token_ids)}
    for name, build in ARCHITECTURES.items():
        built[name] = (*build(layers=2), ())
    return built


def decoder(pair, method, engine, sampling=GREEDY):
    target, draft, eos = pair
    head = None
    if method == "diversed":
        torch.manual_seed(0)
        head = WeightHead(draft.config.hidden_size, target.config.hidden_size)
    return SpeculativeDecoder(
        target,
        draft if method != "ar" else None,
        make_verifier(method, **METHODS[method]),
        draft_len=N,
        sampling=sampling,
        eos_token_ids=eos,
        head=head,
        engine=engine,
    )


def prompts(vocab: int, count: int = 3) -> list[list[int]]:
    g = torch.Generator().manual_seed(7)
    return [
        torch.randint(3, vocab, (int(torch.randint(5, 20, (1,), generator=g)),), generator=g).tolist()
        for _ in range(count)
    ]


def same_stats(a, b) -> None:
    da, db = asdict(a), asdict(b)
    for key in da:
        if key in TIMINGS:
            continue
        if key in FLOATS:
            assert da[key] == pytest.approx(db[key], rel=1e-4, abs=1e-5), key
        else:
            assert da[key] == db[key], key


def test_batched_rows_equal_eager(pairs, compiled):
    """Rows finish at different rounds: the static cache compacts them in place. Runs first: the
    batch-1 decodes below reuse its three-row graphs (two rows idle), so they compile nothing."""
    pair = pairs["tiny"]
    batch = prompts(pair[0].config.vocab_size, 3)
    want = decoder(pair, "sd", make_engine("eager")).generate_batch(batch, 20, [0, 1, 2])
    got = decoder(pair, "sd", compiled).generate_batch(batch, 20, [0, 1, 2])
    assert [g.token_ids for g in got] == [w.token_ids for w in want]
    assert len({g.stats.rounds for g in got}) > 1, "rows should finish at different rounds"
    for g, w in zip(got, want):
        same_stats(g.stats, w.stats)


@pytest.mark.parametrize("name", ["tiny", "qwen3", "gemma3"])
def test_greedy_outputs_and_counters_equal_eager(name, pairs, compiled):
    pair = pairs[name]
    for method in METHODS:
        eager, fast = decoder(pair, method, make_engine("eager")), decoder(pair, method, compiled)
        for prompt in prompts(pair[0].config.vocab_size):
            want, got = eager.generate(prompt, 24), fast.generate(prompt, 24)
            assert got.token_ids == want.token_ids, (name, method)
            same_stats(got.stats, want.stats)
            assert got.stats.wall_time_s > 0 and not math.isnan(got.stats.wall_time_s)


def test_sampled_sd_first_token_follows_the_target(pairs, compiled):
    """Lossless under sampling: sd's first emitted token is distributed as p(. | prompt)."""
    target, _, _ = pair = pairs["tiny"]
    prompt = prompts(target.config.vocab_size, 1)[0]
    hot = Sampling(temperature=1.0)
    sd = decoder(pair, "sd", compiled, sampling=hot)
    draws = torch.tensor([sd.generate(prompt, 2, seed=s).token_ids[0] for s in range(600)])
    with torch.inference_mode():
        p = process(target(torch.tensor([prompt])).logits[0, -1], hot).double()
    likely = p > 0.01  # pool the tail so every expected count is large enough
    observed = torch.cat(
        [
            torch.bincount(draws, minlength=len(p))[likely],
            torch.bincount(draws, minlength=len(p))[~likely].sum(0, keepdim=True),
        ]
    )
    expected = torch.cat([p[likely], p[~likely].sum(0, keepdim=True)]) * len(draws)
    assert chisquare(observed.numpy(), expected.numpy()).pvalue > 1e-3


def test_ensemble_weight_one_reproduces_sd_under_sampling(pairs, compiled):
    pair, hot = pairs["tiny"], Sampling(temperature=1.0)
    sd = decoder(pair, "sd", compiled, sampling=hot)
    ens = SpeculativeDecoder(
        pair[0],
        pair[1],
        make_verifier("ensemble", target_weight=1.0),
        draft_len=N,
        sampling=hot,
        engine=compiled,
    )
    for seed, prompt in enumerate(prompts(pair[0].config.vocab_size)):
        assert ens.generate(prompt, 24, seed=seed).token_ids == sd.generate(prompt, 24, seed=seed).token_ids


def test_compile_time_is_reported_outside_the_example_time(pairs, compiled):
    assert compiled.compile_s > 0 and compiled.warmup_s > 0


def test_unknown_engine_is_one_clear_error():
    with pytest.raises(BenchError, match="unknown engine 'nosuch': use --engine eager or compiled"):
        make_engine("nosuch")


def test_no_cpp_compiler_is_refused(pairs, monkeypatch):
    from torch._inductor import config

    monkeypatch.setattr(config.cpp, "cxx", (None, "no-such-g++"))
    with pytest.raises(BenchError, match="needs a C\\+\\+ compiler .* or use --engine eager"):
        decoder(pairs["tiny"], "sd", make_engine("compiled"))


def test_a_model_that_does_not_trace_is_refused():
    """A forward that reads a tensor on the host cannot be one graph: an error, not eager."""
    config = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
    )
    model = LlamaForCausalLM(config).eval()
    model.model.register_forward_hook(lambda module, args, out: out.last_hidden_state.sum().item())
    fast = SpeculativeDecoder(
        model, None, make_verifier("ar"), sampling=GREEDY, engine=make_engine("compiled")
    )
    with pytest.raises(BenchError, match="torch.compile cannot compile llama .*; use --engine eager"):
        fast.generate([1, 2, 3], 4)
