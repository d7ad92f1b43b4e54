"""Hub pair files load offline through the real loading code, from tiny random checkpoints saved
in a hub cache layout (tests/hub_checkpoints.py): a padded target vocabulary, a spread target, hub
data. What the three real pairs decode is checked against transformers in tests/engines/test_fidelity.py."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
from hub_checkpoints import build_family

PROBE = textwrap.dedent(
    """
    import json, sys
    from bench.decoding import SpeculativeDecoder
    from bench.distributions import Sampling
    from bench.pairs import load_pair
    from bench.pairs import encode_prompt
    from bench.verifiers import make_verifier

    out = {}
    for name in sys.argv[1:]:
        pair = load_pair(name, device="cpu")
        prompt = encode_prompt(pair, "Question: what is 12 + 7?", chat_template=True)
        greedy = Sampling(0.0)
        ar = SpeculativeDecoder(pair.target, None, make_verifier("ar"), sampling=greedy)
        sd = SpeculativeDecoder(pair.target, pair.draft, make_verifier("sd"), draft_len=3, sampling=greedy)
        a, s = ar.generate(prompt, 24).token_ids, sd.generate(prompt, 24)
        out[name] = {
            "classes": [type(pair.target).__name__, type(pair.draft).__name__],
            "tied": [pair.target.config.get_text_config().tie_word_embeddings,
                     pair.draft.config.get_text_config().tie_word_embeddings],
            "eos": pair.eos_token_ids,
            "eos_tokens": pair.tokenizer.convert_ids_to_tokens(pair.eos_token_ids),
            "prompt": pair.tokenizer.decode(prompt),
            "equal": a == s.token_ids,
            "acceptance": s.stats.acceptance_rate,
            "logits": int(pair.target(input_ids=__import__("torch").tensor([prompt])).logits.shape[-1]),
            "vocab": len(pair.tokenizer),
            "device": str(pair.device),
        }
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    cache = tmp_path_factory.mktemp("hub")
    build_family(cache, "qwen3")
    return cache


def probe(cache, *pairs):
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *pairs], capture_output=True, text=True, env=env, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_padded_target_vocabulary_is_compared_on_the_shared_rows(tmp_path):
    build_family(tmp_path, "qwen3", target_vocab_padding=24)  # like Qwen2.5-7B's 152064 vs 151936 rows
    got = probe(tmp_path, "qwen3")["qwen3"]
    assert got["logits"] == got["vocab"] and got["equal"]


@pytest.mark.slow
def test_a_pair_file_can_spread_the_target_with_device_map_auto(hub_cache, tmp_path):
    from bench.pairs import resolve_pair

    spec = resolve_pair("qwen3")
    path = tmp_path / "qwen3-spread.yaml"
    path.write_text(
        f"name: qwen3-spread\nkind: hub\ntarget: {spec.target}\ndraft: {spec.draft}\ndevice_map: auto\n"
    )
    got = probe(hub_cache, str(path))[str(path)]
    assert got["device"] == "cpu"  # all that a machine without GPUs has to spread over
    assert got["equal"]


def test_hub_data_loads_from_a_downloaded_dataset_snapshot(tmp_path):
    """What `hf download openai/gsm8k --repo-type dataset` leaves: parquet files and the card's configs."""
    import pandas as pd

    from bench.data import fixture_dir, read_table

    snapshot = tmp_path / "hub" / "datasets--openai--gsm8k" / "snapshots" / ("0" * 40)
    (snapshot / "main").mkdir(parents=True)
    for split in ("train", "test"):
        rows = read_table(fixture_dir("gsm8k") / f"{split}.jsonl")
        pd.DataFrame(rows).to_parquet(snapshot / "main" / f"{split}-00000-of-00001.parquet")
    (snapshot / "README.md").write_text(
        "---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    path: main/train-*\n"
        "  - split: test\n    path: main/test-*\n---\n"
    )
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    env = {
        **os.environ,
        "HF_HUB_CACHE": str(tmp_path / "hub"),
        "HF_DATASETS_CACHE": str(tmp_path / "datasets"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    code = (
        "from bench.tasks import Task, resolve_task\n"
        "e = Task(resolve_task('gsm8k'), 'hub').examples()\n"
        "print(len(e), e[0].prompt.count('Question:'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["8", "5"]  # 8 test rows; 4 exemplars from train + the question


def test_the_hub_is_probed_once_per_process(monkeypatch):
    import urllib.request

    import huggingface_hub.constants as hub_constants

    from bench import hub

    calls = []

    def refuse(*args, **kwargs):
        calls.append(args)
        raise OSError("connection refused")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    hub.reachable.cache_clear()
    try:
        for _ in range(3):
            with hub.hub_access() as online:
                assert not online
    finally:
        hub.reachable.cache_clear()
    assert len(calls) == 1
