"""Pair registry: the shipped files, a user's own file, tokenizer checks, fast hub failures."""

import os
import time

import pytest
from conftest import bench_cli

from bench.errors import BenchError
from bench.pairs import check_same_tokenizer, load_pair, pair_names, resolve_pair
from bench.tiny import build_tokenizer

HUB_IDS = {
    "llama3": ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"),
    "qwen3": ("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B"),
    "gemma3": ("google/gemma-3-12b-it", "google/gemma-3-4b-it"),
}


def test_registry_holds_the_paper_pairs_and_tiny():
    assert pair_names() == ["gemma3", "llama3", "llama3-shapes", "qwen3", "ref", "ref-draft", "smollm2", "tiny"]
    for name, (target, draft) in HUB_IDS.items():
        spec = resolve_pair(name)
        assert (spec.target, spec.draft) == (target, draft)
        assert spec.dtype == {"cuda": "bfloat16", "cpu": "float32"} and spec.attn_implementation == "sdpa"


def test_a_users_own_pair_file(tmp_path):
    own = tmp_path / "my_pair.yaml"
    own.write_text(
        "name: mine\nkind: tiny\ntiny: {seed: 7, damping: 0.05, hidden_size: 32, num_heads: 2, num_kv_heads: 1}\n"
    )
    pair = load_pair(str(own), device="cpu")
    assert pair.spec.name == "mine" and pair.hidden_sizes == (32, 32)


def test_unknown_pair_names_the_choices():
    with pytest.raises(BenchError, match="gemma3, llama3, llama3-shapes, qwen3, ref, ref-draft, smollm2, tiny"):
        resolve_pair("mistral")


def test_tokenizers_must_match():
    a, b = build_tokenizer(512), build_tokenizer(400)
    check_same_tokenizer(a, build_tokenizer(512), "same")
    with pytest.raises(BenchError, match="different vocabularies"):
        check_same_tokenizer(a, b, "odd")


def test_unreachable_hub_pair_fails_fast_with_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf"))  # closed local port
    start = time.monotonic()
    out = bench_cli("generate", "hello", "--pair", "qwen3", "--device", "cpu", env=env, timeout=120)
    # Margin for a busy machine (25 s measured beside another job); the libraries' own retries took 53 s.
    assert time.monotonic() - start < 45
    assert out.returncode == 2 and "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: cannot load Qwen/Qwen3-8B") and "--pair tiny" in last


def test_synthetic_pair_keeps_real_shapes_and_tunable_acceptance(tmp_path):
    """llama3-shapes at reduced depth and width: same construction, CPU-sized."""
    import yaml

    from bench.decoding import SpeculativeDecoder
    from bench.distributions import Sampling
    from bench.pairs import PairSpec
    from bench.verifiers import make_verifier

    spec = yaml.safe_load(
        (__import__("pathlib").Path(__file__).parents[2] / "pairs" / "llama3-shapes.yaml").read_text()
    )
    real_t, real_d = spec["synthetic"]["target_config"], spec["synthetic"]["draft_config"]
    assert (
        real_t["hidden_size"],
        real_t["num_hidden_layers"],
        real_d["hidden_size"],
        real_d["num_hidden_layers"],
    ) == (4096, 32, 2048, 16)

    def shrink(cfg, width, layers):
        return {
            **cfg,
            "hidden_size": width,
            "intermediate_size": 2 * width,
            "num_hidden_layers": layers,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": width // 4,
            "vocab_size": 1000,
        }

    rates = []
    for damping in (0.05, 0.3):
        synthetic = {
            **spec["synthetic"],
            "damping": damping,
            "target_config": shrink(real_t, 128, 4),
            "draft_config": shrink(real_d, 64, 2),
        }
        pair = load_pair(PairSpec(**{**spec, "synthetic": synthetic}), device="cpu")
        assert pair.hidden_sizes == (64, 128)
        sd = SpeculativeDecoder(
            pair.target, pair.draft, make_verifier("sd"), draft_len=4, sampling=Sampling(1.0)
        )
        stats = [sd.generate(pair.tokenizer(f"prompt {i}").input_ids, 32, seed=i).stats for i in range(4)]
        assert all(s.new_tokens == 32 for s in stats)  # no EOS: fixed-length timing runs
        rates.append(sum(s.accepted_tokens for s in stats) / sum(s.drafted_tokens for s in stats))
    assert rates[0] > 0.6 and rates[1] < rates[0] - 0.2, rates
