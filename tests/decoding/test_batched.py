"""Batched decoding gives every row exactly what decoding it alone gives: tokens and counters.

Rows of mixed prompt lengths share a batch, accept different counts, stop on EOS or on the budget
at different rounds, and (near the budget) draft fewer tokens than the others. Each row draws from
its own generator, so even sampled completions match batch 1 token for token in float32.

Float sums (expected acceptance, bias, DIVERSED weights) are compared to 1e-5: a batched matmul
may round differently from a batch of one (logits differ by ~1e-6 here), which moves those sums in
their last bits. The same rounding could in principle flip a sampled token whose uniform draw falls
within ~1e-6 of a boundary (probability ~1e-6 per draw); none does in these tests.
"""

import math
from collections import Counter
from dataclasses import fields

import pytest
import torch

from bench.decode_stats import DecodeStats
from bench.decoding import SpeculativeDecoder
from bench.distributions import Sampling
from bench.verifier_heads import WeightHead
from bench.verifiers import make_verifier

GREEDY, HOT = Sampling(temperature=0.0), Sampling(temperature=1.0)
TIMING = {"wall_time_s", "prefill_time_s", "batch_size", "kv_cache_bytes"}
FLOATS = {"expected_acceptance_sum", "bias_sum", "weights", "target_logprob_sum", "target_divergence_sum"}
METHODS = {
    "ar": {},
    "sd": {},
    "lossy": {"lenience": 0.4},
    "cascade": {"cascade_rule": "opt", "cascade_alpha": 0.3},
    "ensemble": {"target_weight": 0.6},
    "diversed": {},
}


def random_head(target, draft) -> WeightHead:
    """A head whose weights vary from token to token, so DIVERSED's per-token path is exercised."""
    head = WeightHead(draft.config.hidden_size, target.config.hidden_size)
    with torch.no_grad():
        head.linear.weight.normal_(0, 0.3, generator=torch.Generator().manual_seed(5))
    return head


def make(target, draft, method, sampling, eos=(), draft_len=4):
    return SpeculativeDecoder(
        target,
        draft,
        make_verifier(method, **METHODS[method]),
        draft_len=draft_len,
        sampling=sampling,
        eos_token_ids=eos,
        head=random_head(target, draft) if method == "diversed" else None,
    )


def mixed_prompts(vocab: int, count: int, low: int = 3) -> list[list[int]]:
    """Prompts of very different lengths (1 to 60 tokens)."""
    g = torch.Generator().manual_seed(7)
    lengths = [1, 60, 2, 33] + torch.randint(1, 45, (count,), generator=g).tolist()
    return [torch.randint(low, vocab, (n,), generator=g).tolist() for n in lengths[:count]]


def frequent_token(target, prompts, budget) -> int:
    """A token greedy decoding emits mid-way in several rows: used as EOS, rows stop early."""
    ar = make(target, None, "ar", GREEDY)
    outs = ar.generate_batch(prompts, budget, [0] * len(prompts))
    seen = Counter(t for g in outs for t in set(g.token_ids[3:-3]))
    return seen.most_common(1)[0][0]


def assert_same_counters(a: DecodeStats, b: DecodeStats, row: int) -> None:
    for f in fields(a):
        if f.name in FLOATS:
            # sums over ~30 tokens of fp32 reductions over the vocabulary (the entropy in
            # target_divergence_sum): a batch's shapes reorder them by about 1e-6 a token
            assert getattr(b, f.name) == pytest.approx(getattr(a, f.name), rel=1e-5, abs=1e-4), (row, f.name)
        elif f.name not in TIMING:
            assert getattr(b, f.name) == getattr(a, f.name), (row, f.name)


def assert_batch_equals_alone(decoder, prompts, budget, seeds, batch):
    alone = [decoder.generate(p, budget, seed=s) for p, s in zip(prompts, seeds)]
    for start in range(0, len(prompts), batch):
        chunk = slice(start, start + batch)
        together = decoder.generate_batch(prompts[chunk], budget, seeds[chunk])
        for k, (a, b) in enumerate(zip(alone[chunk], together)):
            assert b.token_ids == a.token_ids, f"row {start + k}: tokens differ from batch 1"
            assert_same_counters(a.stats, b.stats, start + k)
            assert b.stats.batch_size == len(together) and math.isnan(b.stats.wall_time_s)
    return alone


def architectures():
    from tests.prefix_pairs import ARCHITECTURES

    return ARCHITECTURES


@pytest.fixture(scope="module")
def models(tiny_pair):
    return {"tiny": (tiny_pair.target, tiny_pair.draft), **{k: f() for k, f in architectures().items()}}


@pytest.mark.parametrize(
    "arch",
    ["tiny", pytest.param("qwen3", marks=pytest.mark.slow), pytest.param("gemma3", marks=pytest.mark.slow)],
)
@pytest.mark.parametrize("method", sorted(METHODS))
def test_greedy_batches_equal_batch_one(models, arch, method):
    target, draft = models[arch]
    vocab = target.config.vocab_size
    prompts = mixed_prompts(vocab, 16)
    budget = 24
    eos = (frequent_token(target, prompts, budget),)
    decoder = make(target, draft, method, GREEDY, eos=eos)
    seeds = list(range(16))
    alone = assert_batch_equals_alone(decoder, prompts, budget, seeds, batch=16)
    assert_batch_equals_alone(decoder, prompts, budget, seeds, batch=4)
    lengths = [len(g.token_ids) for g in alone]
    assert min(lengths) < budget and max(lengths) == budget, "some rows must stop on EOS, some not"
    if method != "ar":
        rates = [g.stats.acceptance_rate for g in alone if g.stats.drafted_tokens]
        assert 0 < sum(rates) / len(rates) < 1, "both accept and reject paths must run"


@pytest.mark.parametrize("method", sorted(METHODS))
def test_sampled_batch_of_16_equals_batch_one(tiny_pair, method):
    prompts = mixed_prompts(tiny_pair.target.config.vocab_size, 16)
    decoder = make(tiny_pair.target, tiny_pair.draft, method, HOT, eos=tiny_pair.eos_token_ids)
    seeds = [1000 + i for i in range(16)]
    alone = assert_batch_equals_alone(decoder, prompts, 29, seeds, batch=16)
    assert len({tuple(g.token_ids) for g in alone}) == 16


def test_a_row_does_not_depend_on_its_neighbours(tiny_pair):
    """The same example in two different batches: the same completion."""
    prompts = mixed_prompts(tiny_pair.target.config.vocab_size, 8)
    decoder = make(tiny_pair.target, tiny_pair.draft, "sd", HOT)
    a = decoder.generate_batch(prompts[:4], 30, [1, 2, 3, 4])[2]
    b = decoder.generate_batch([prompts[5], prompts[2], prompts[7]], 30, [9, 3, 8])[1]
    assert a.token_ids == b.token_ids


def test_kv_cache_bytes_are_bounded_by_the_batch(tiny_pair):
    """Both caches hold at most the batch's own positions: longest prompt + budget + N + 1."""
    prompts = mixed_prompts(tiny_pair.target.config.vocab_size, 4)
    gens = make(tiny_pair.target, tiny_pair.draft, "sd", GREEDY).generate_batch(prompts, 20, [0] * 4)
    per_slot = sum(
        2 * m.config.num_hidden_layers * m.config.num_key_value_heads * m.config.head_dim * 4
        for m in (tiny_pair.target, tiny_pair.draft)
    )
    bound = len(prompts) * (max(map(len, prompts)) + 20 + 4 + 1) * per_slot
    assert {g.stats.kv_cache_bytes for g in gens} == {bound}


def test_training_rollouts_in_a_batch_equal_rollouts_alone(tiny_pair):
    """DIVERSED rollouts are batched the same way: each row samples from its own generator."""
    from bench.learned.reinforce import rollouts

    head = random_head(tiny_pair.target, tiny_pair.draft)
    prompts = mixed_prompts(tiny_pair.target.config.vocab_size, 4)

    def gens(seeds):
        return [torch.Generator().manual_seed(s) for s in seeds]

    together = rollouts(tiny_pair, head, prompts, 20, 1.0, gens(range(4)))
    for k, prompt in enumerate(prompts):
        alone = rollouts(tiny_pair, head, [prompt], 20, 1.0, gens([k]))[0]
        assert together[k].tokens == alone.tokens
        assert torch.allclose(together[k].pi_y_old, alone.pi_y_old, atol=1e-5)
        assert torch.allclose(together[k].h_target, alone.h_target, atol=1e-4)
    assert len({tuple(r.tokens) for r in together}) == 4


def test_batched_run_gives_batch_one_rows_and_times_only_the_timing_pass(tmp_path):
    import pandas as pd

    from bench.config import RunSettings
    from bench.grid import configs_from_flags
    from bench.reports.summary import summarise
    from bench.runner import Runner
    from bench.store import load_results

    grid = configs_from_flags(
        tasks=["gsm8k"], methods=["ar", "sd"], pairs=["tiny"], settings=RunSettings(draft_len=4, max_new_tokens=24),
        device="cpu",
    )
    frames = {}
    for name, batch in (("alone", 1), ("batched", 4)):
        Runner(tmp_path / name, limit=6, batch_size=batch, timing_examples=2, progress=False, log=print).run(
            grid
        )
        rows = load_results(tmp_path / name).sort_values(["config_id", "example_id"]).reset_index(drop=True)
        frames[name] = rows
    alone, batched = frames["alone"], frames["batched"]
    timing = ["wall_time_s", "wall_times_s", "prefill_time_s", "batch_size", "kv_cache_bytes"]
    pd.testing.assert_frame_equal(
        alone.drop(
            columns=timing
            + ["expected_acceptance", "bias", "expected_acceptance_per_position", "bias_per_position"]
        ),
        batched.drop(
            columns=timing
            + ["expected_acceptance", "bias", "expected_acceptance_per_position", "bias_per_position"]
        ),
    )
    assert alone["wall_time_s"].notna().all() and (alone["batch_size"] == 1).all()
    timed = batched[batched["wall_time_s"].notna()]
    assert len(timed) == 4 and (timed["batch_size"] == 1).all()  # 2 examples x 2 configurations
    assert (batched.loc[batched["wall_time_s"].isna(), "batch_size"] == 4).all()
    summary = summarise(batched).set_index("method")
    assert (summary["timed_examples"] == 2).all()
    assert summary.loc["sd", "normalised_time"] > 0 and summary.loc["sd", "time_per_token_s"] > 0


@pytest.mark.parametrize("value", ["0", "-3"])
def test_bad_batch_size_is_one_line(tmp_path, value):
    from conftest import cli_error

    error = cli_error(
        "run", "--batch-size", value, "--no-report", "--no-progress", "--output-dir", str(tmp_path)
    )
    assert "--batch-size" in error


def test_throughput_mode_checks_outputs_against_batch_one(tiny_pair):
    from bench.speed.report import throughput_markdown
    from bench.speed.throughput import measure_throughput

    prompts = mixed_prompts(tiny_pair.target.config.vocab_size, 5)
    result = measure_throughput(tiny_pair, prompts, [1, 2, 4], draft_len=3, max_new=10, repeats=1, log=lambda m: None)
    assert result["outputs_equal"]
    assert [(r["method"], r["batch_size"]) for r in result["rows"]] == [
        (m, b) for m in ("ar", "sd") for b in (1, 2, 4)
    ]
    assert all(r["examples_per_s"] > 0 and r["kv_cache_mib"] > 0 for r in result["rows"])
    assert "| sd | 4 |" in throughput_markdown(result, "diversed-bench speed --throughput")


def test_bad_throughput_batch_size_is_one_line(tmp_path):
    from conftest import cli_error

    assert "--batch-sizes" in cli_error(
        "speed", "--throughput", "--batch-sizes", "4,0", "--output-dir", str(tmp_path)
    )
