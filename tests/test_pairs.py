"""Pair registry: the shipped files, a user's own file, tokenizer checks, fast hub failures."""

import subprocess
import sys
import time

import pytest

from bench.errors import BenchError
from bench.pairs import check_same_tokenizer, load_pair, pair_names, resolve_pair
from bench.tiny import build_tokenizer

HUB_IDS = {
    "llama3": ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"),
    "qwen3": ("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B"),
    "gemma3": ("google/gemma-3-12b-it", "google/gemma-3-4b-it"),
}


def test_registry_holds_the_paper_pairs_and_tiny():
    assert pair_names() == ["gemma3", "llama3", "qwen3", "tiny"]
    for name, (target, draft) in HUB_IDS.items():
        spec = resolve_pair(name)
        assert (spec.target, spec.draft) == (target, draft)
        assert spec.dtype == {"cuda": "bfloat16", "cpu": "float32"} and spec.attn_implementation == "sdpa"


def test_a_users_own_pair_file(tmp_path):
    own = tmp_path / "my_pair.yaml"
    own.write_text("name: mine\nkind: tiny\ntiny: {seed: 7, damping: 0.05, hidden_size: 32, num_heads: 2, num_kv_heads: 1}\n")
    pair = load_pair(str(own), device="cpu")
    assert pair.spec.name == "mine" and pair.hidden_sizes == (32, 32)


def test_unknown_pair_names_the_choices():
    with pytest.raises(BenchError, match="gemma3, llama3, qwen3, tiny"):
        resolve_pair("mistral")


def test_tokenizers_must_match():
    a, b = build_tokenizer(512), build_tokenizer(400)
    check_same_tokenizer(a, build_tokenizer(512), "same")
    with pytest.raises(BenchError, match="different vocabularies"):
        check_same_tokenizer(a, b, "odd")


def test_unreachable_hub_pair_fails_fast_with_one_line():
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "bench", "generate", "hello", "--pair", "qwen3", "--device", "cpu"],
        capture_output=True, text=True, timeout=120,
    )
    assert time.monotonic() - start < 60
    assert out.returncode == 2 and "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: cannot load Qwen/Qwen3-8B") and "--pair tiny" in last
