"""The compiled engine decodes exactly what the eager reference decodes, and refuses loudly.

Compiling costs seconds per graph on a CPU, so one factory serves the whole module: the tiny pair
compiles its few step widths once (target N + 1 and 1, draft 1 and 2) and every test reuses them.
Every method on the real pairs' architectures (Llama 3, Qwen3, Gemma 3), compiled against eager, is
checked in tests/engines/test_fidelity.py, on the graphs its checks against transformers compile anyway.
"""

import math
from dataclasses import asdict

import pytest
import torch
from scipy.stats import chisquare
from transformers import LlamaConfig, LlamaForCausalLM

from conftest import bench_cli

from bench.decoding import SpeculativeDecoder
from bench.distributions import Sampling, process
from bench.engines import make_engine
from bench.engines.eager import EagerEngine
from bench.errors import BenchError
from bench.verifier_heads import WeightHead
from bench.verifiers import make_verifier

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
FLOATS = ("expected_acceptance_sum", "bias_sum", "weights", "target_logprob_sum", "target_divergence_sum")


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def compiled():
    return make_engine("compiled")


@pytest.fixture(scope="module")
def pairs(tiny_pair):
    return {"tiny": (tiny_pair.target, tiny_pair.draft, tiny_pair.eos_token_ids)}


def decoder(pair, method, engine, sampling=GREEDY):
    """``method`` on ``pair`` (target, draft, EOS ids); DIVERSED with a seeded untrained head."""
    target, draft, eos = pair
    head = None
    if method == "diversed":
        torch.manual_seed(0)
        hidden = (m.config.get_text_config().hidden_size for m in (draft, target))
        head = WeightHead(*hidden)
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_greedy_outputs_and_counters_equal_eager(pairs, compiled):
    pair = pairs["tiny"]
    for method in METHODS:
        eager, fast = decoder(pair, method, make_engine("eager")), decoder(pair, method, compiled)
        for prompt in prompts(pair[0].config.vocab_size, 3):
            want, got = eager.generate(prompt, 24), fast.generate(prompt, 24)
            assert got.token_ids == want.token_ids, method
            same_stats(got.stats, want.stats)
            assert got.stats.wall_time_s > 0 and not math.isnan(got.stats.wall_time_s)


@pytest.mark.slow
def test_sampled_outputs_equal_eager(pairs, compiled):
    """Same seeds, same draws: each row's generator is consumed in the same order and shapes."""
    pair, hot = pairs["tiny"], Sampling(temperature=1.0)
    for method in METHODS:
        eager, fast = decoder(pair, method, make_engine("eager"), hot), decoder(pair, method, compiled, hot)
        for seed, prompt in enumerate(prompts(pair[0].config.vocab_size)):
            want, got = eager.generate(prompt, 24, seed=seed), fast.generate(prompt, 24, seed=seed)
            assert got.token_ids == want.token_ids, method
            same_stats(got.stats, want.stats)


def test_sampled_sd_first_token_follows_the_target(pairs, compiled):
    """Lossless under sampling: sd's first emitted token is distributed as p(. | prompt)."""
    target, _, _ = pair = pairs["tiny"]
    prompt = prompts(target.config.vocab_size, 1)[0]
    hot = Sampling(temperature=1.0)
    sd = decoder(pair, "sd", compiled, sampling=hot)
    draws = torch.tensor(
        [
            g.token_ids[0]
            for s in range(0, 600, 3)
            for g in sd.generate_batch([prompt] * 3, 2, [s, s + 1, s + 2])
        ]
    )
    with torch.inference_mode():
        p = process(target(torch.tensor([prompt])).logits[0, -1], hot).double()
    counts = torch.bincount(draws, minlength=len(p)).double()
    likely = p > 0.01  # pool the tail so every expected count is large enough
    observed = torch.cat([counts[likely], counts[~likely].sum(0, keepdim=True)])
    expected = torch.cat([p[likely], p[~likely].sum(0, keepdim=True)])
    assert chisquare(observed.numpy(), (expected / expected.sum() * len(draws)).numpy()).pvalue > 1e-3


@pytest.mark.slow
def test_training_rollouts_equal_eager(tiny_pair, compiled):
    """`train --engine compiled` samples its rollouts on the same engines: same seeds, same tokens
    and the same per-token quantities as the eager reference."""
    from bench.learned.reinforce import rollouts

    torch.manual_seed(0)
    head = WeightHead(tiny_pair.draft.config.hidden_size, tiny_pair.target.config.hidden_size)
    batch = prompts(tiny_pair.target.config.vocab_size, 3)

    def sample(factory):
        generators = [torch.Generator().manual_seed(s) for s in range(len(batch))]
        return rollouts(tiny_pair, head, batch, 12, 1.0, generators, factory)

    want, got = sample(make_engine("eager")), sample(compiled)
    for w, g in zip(want, got):
        assert g.tokens == w.tokens
        for key in ("p_y", "q_y", "tv", "pi_y_old"):
            assert torch.allclose(getattr(g, key), getattr(w, key), rtol=1e-4, atol=1e-6), key


def test_compilation_is_counted_once_and_reused(pairs, compiled):
    """Compile and warm-up time are measured (in ``start``, before the loop's clock), a new decoder
    on the same models reuses the graphs, and no step inside the loop compiles anything."""
    from torch._dynamo.utils import counters

    pair = pairs["tiny"]
    first, second = prompts(pair[0].config.vocab_size, 2)
    decoder(pair, "sd", compiled).generate(first, 8)
    spent, graphs = (compiled.compile_s, compiled.warmup_s), counters["stats"]["unique_graphs"]
    assert spent[0] > 0 and spent[1] > 0
    decoder(pair, "sd", compiled).generate(second, 16)
    assert (compiled.compile_s, compiled.warmup_s) == spent
    assert counters["stats"]["unique_graphs"] == graphs


def test_two_models_of_one_shape_each_decode_with_their_own_weights(compiled):
    """Graphs are kept per engine and guard only tensor shapes: two models of the same shape (a
    target and its draft can be) must never run each other's graphs or weights."""
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2
    )
    models = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        models.append(LlamaForCausalLM(config).eval())
    prompt = [3, 1, 4, 1, 5]
    outs = {}
    for engine in ("eager", compiled):
        factory = make_engine(engine) if engine == "eager" else engine
        for i, model in enumerate(models):
            ar = SpeculativeDecoder(model, None, make_verifier("ar"), sampling=GREEDY, engine=factory)
            outs[engine == "eager", i] = ar.generate(prompt, 12).token_ids
    assert outs[True, 0] != outs[True, 1]  # the two models disagree, so a mix-up shows
    assert outs[False, 0] == outs[True, 0] and outs[False, 1] == outs[True, 1]


def test_cpu_graphs_hold_frozen_weights():
    """On a CPU the engine's graphs take the weights as constants, packed at compile (what makes its
    step near the bandwidth floor). Passed as ``torch.compile`` options, ``freezing`` did nothing
    and the graphs read the live weights: then zeroing a weight after the compile changes them."""
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2
    )
    torch.manual_seed(3)
    model = LlamaForCausalLM(config).eval()
    engine = make_engine("compiled")(model, (1,))
    ids = torch.tensor([[3, 1, 4]])
    with torch.inference_mode():
        engine.start(1, 8)
        engine.step(ids, [3], 1, False)  # the prompt runs eagerly, on the live weights
        before, _ = engine.step(torch.tensor([[5]]), [1], 1, False)
        model.model.layers[0].mlp.down_proj.weight.zero_()
        engine.start(1, 8)
        engine.step(ids, [3], 1, False)
        after, _ = engine.step(torch.tensor([[5]]), [1], 1, False)
        eager = EagerEngine(model)
        eager.start(1, 8)
        eager.step(ids, [3], 1, False)
        live, _ = eager.step(torch.tensor([[5]]), [1], 1, False)
    assert not torch.allclose(live, before, atol=1e-3)  # the zeroed weight matters to this step
    # One layer: its MLP feeds no K/V, so the eager prompt's cache is the same as before.
    torch.testing.assert_close(after, before)


def test_unknown_engine_is_one_clear_error():
    with pytest.raises(BenchError, match="unknown engine 'nosuch': use --engine eager or compiled"):
        make_engine("nosuch")


def test_no_cpp_compiler_is_refused(pairs):
    from torch._inductor import config

    with config.patch({"cpp.cxx": (None, "no-such-g++")}):
        with pytest.raises(BenchError, match="needs a C\\+\\+ compiler .* or use --engine eager"):
            decoder(pairs["tiny"], "sd", make_engine("compiled"))


def test_a_model_that_does_not_trace_is_refused():
    """A forward that branches on a tensor's value cannot be one graph: an error, not eager."""
    config = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
    )
    model = LlamaForCausalLM(config).eval()

    def read_on_host(module, args, out) -> None:
        if out.last_hidden_state.sum() > 1e30:  # Python control flow on a tensor's value
            raise ValueError("diverged")

    model.model.register_forward_hook(read_on_host)
    fast = SpeculativeDecoder(
        model, None, make_verifier("ar"), sampling=GREEDY, engine=make_engine("compiled")
    )
    with pytest.raises(BenchError, match="torch.compile cannot compile llama .*; use --engine eager"):
        fast.generate([1, 2, 3], 4)


@pytest.mark.slow
def test_cli_refuses_an_unknown_engine_in_one_line():
    out = bench_cli("generate", "Question: 2 + 3?", "--engine", "nosuch", "--max-new-tokens", "2")
    assert out.returncode == 2
    assert out.stderr.strip() == "error: unknown engine 'nosuch': use --engine eager or compiled"


def test_a_step_that_would_compile_again_is_refused():
    """Graphs compiled in ``start`` outside inference mode fail their guards in a step inside it:
    the step would compile a graph without ``start``'s CPU options (slower, silently); refused."""
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2
    )
    model = LlamaForCausalLM(config).eval()
    engine = make_engine("compiled")(model, (1,))
    engine.start(1, 8)  # compiled with grad mode on
    with torch.inference_mode():
        engine.step(torch.tensor([[3, 1, 4]]), [3], 1, False)  # the prompt runs eagerly
        with pytest.raises(BenchError, match="would compile again.*same grad mode"):
            engine.step(torch.tensor([[5]]), [1], 1, False)


@pytest.mark.slow
@pytest.mark.parametrize("tree", [0, 1])
def test_greedy_sd_on_eagle_drafts_is_ar_and_drafts_as_eager(tiny_pair, compiled, tmp_path, tree):
    """EAGLE on the compiled engine (fp32): the target's graphs hand the head the layer states it
    reads, the head's steps run compiled over static slots, and greedy sd, chain or dynamic tree,
    emits ar's tokens with the eager engine's very drafts (every counter equal). The head's draft
    vocabulary is the tokens ar emits most, so rounds accept drafts and roll back the rest."""
    from tests.eagle_checkpoints import write_eagle_head

    target = tiny_pair.target
    batch = prompts(target.config.vocab_size, 2)
    ar = decoder((target, None, tiny_pair.eos_token_ids), "ar", make_engine("eager")).generate_batch(batch, 10, [0, 1])
    common = torch.bincount(torch.tensor([t for g in ar for t in g.token_ids])).topk(3).indices.tolist()
    folder = write_eagle_head(tmp_path / "h", target.config, "eagle3", kept=common, seed=2)
    spec = f"eagle:path={folder},tree={tree},topk=2,depth=3,total=4"

    def sd(engine):
        made = SpeculativeDecoder(target, None, make_verifier("sd"), draft_len=N, sampling=GREEDY,
                                  eos_token_ids=tiny_pair.eos_token_ids, engine=engine, drafter=spec)  # fmt: skip
        return made.generate_batch(batch, 10, [0, 1])

    want, got = sd(make_engine("eager")), sd(compiled)
    assert [g.token_ids for g in got] == [g.token_ids for g in ar]
    assert sum(g.stats.accepted_tokens for g in got) > 0
    for g, w in zip(got, want):
        same_stats(g.stats, w.stats)
