"""``speed --drafter eagle``: the steps it times are the drafter's own, the report's rows and the
bound's arithmetic, end to end at tiny size (timings are reported, never asserted)."""

import json

import pytest
import torch

from bench.build import build_decoder
from bench.distributions import Sampling
from bench.errors import BenchError
from bench.engines import EagerEngine
from bench.speed.eagle import chain_steps, timing_target
from tests.conftest import bench_cli
from tests.eagle_checkpoints import write_eagle_head

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny_head(tiny_pair, tmp_path_factory):
    return write_eagle_head(
        tmp_path_factory.mktemp("head") / "h", tiny_pair.target.config, "eagle3", draft_vocab=64
    )


def test_each_timed_step_is_one_head_forward_of_its_width_over_the_prompts_cache(tiny_pair, tiny_head):
    """A head step feeds one token, a catch-up of M states M, each over the head's cache of the
    prompt (P - 1 positions) however often it runs; the target steps keep no token."""
    decoder = build_decoder(
        tiny_pair, "sd", draft_len=3, sampling=Sampling(0.0), drafter=f"eagle:path={tiny_head}"
    )
    prompt = list(range(5, 25))
    target = timing_target(decoder, EagerEngine, [2, 3])
    assert target.states_at == decoder.engines[0].states_at != ()
    steps = chain_steps(decoder, target, prompt, [2, 3])
    assert list(steps) == [
        "target_1",
        "verify_3",
        "verify_4",
        "head_step",
        *(f"catch_up_{m}" for m in range(1, 5)),
    ]
    head, seen = decoder.drafter.head, []
    forward = head.forward

    def recorded(hidden, tokens, positions=None, cache=None, mask=None):
        seen.append((tokens.shape[1], cache[0][0].shape[2] if cache else 0))
        return forward(hidden, tokens, positions, cache, mask)

    head.forward = recorded
    with torch.inference_mode():  # as round_robin runs them (and chain_steps built them)
        for name in ("head_step", "catch_up_3", "head_step", "catch_up_1", "target_1", "verify_4"):
            steps[name]()
    assert seen == [(1, 19), (3, 19), (1, 19), (1, 19)]
    assert target.lengths == [19]


def test_speed_eagle_writes_its_rows_end_to_end(tiny_pair, tiny_head, tmp_path):
    """The command on the tiny pair with a tiny head: the page and JSON, a row per step and per
    N, the bound from the costs and the counted tokens and forwards per round."""
    done = bench_cli("speed", "--pair", "tiny", "--drafter", f"eagle:path={tiny_head}", "--method", "sd",
                     "--draft-len", "2,3", "--prompts", "1", "--max-new-tokens", "6", "--repeats", "1",
                     "--device", "cpu", "--threads", "1", "--output-dir", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "speed_eagle_tiny.json").read_text())
    page = (tmp_path / "speed_eagle_tiny.md").read_text()
    assert [(s["step"], s["tokens"]) for s in result["steps"]] == [
        ("target", 1), ("verify", 3), ("verify", 4), ("head_step", 1), *(("catch_up", m) for m in range(1, 5))
    ]  # fmt: skip
    assert result["steps"][0]["per_target"] == 1.0 and result["steps"][1]["per_verify"]["2"] == 1.0
    for row in result["rows"]:
        assert row["draft_forwards_per_round"] > 0 and row["equals_ar"] is True
        assert row["bound"] == pytest.approx(
            row["tokens_per_forward"] / (row["verify_cost"] + row["draft_cost"])
        )
        assert row["efficiency"] == pytest.approx(row["decode_speedup"] / row["bound"])
    assert (
        "| head step (law + one head forward) | 1 |" in page
        and "| N | tokens/fwd | draft fwd/round |" in page
    )
    assert f"| 3 | {result['rows'][1]['tokens_per_forward']:.2f} |" in page


@pytest.mark.parametrize(
    ("drafter", "method", "needle"),
    [("eagle:tree=1", "sd", "tree=1 is not timed here"), ("eagle", "sd,ensemble", "give --method sd")],
)
def test_what_speed_eagle_does_not_time_is_one_line_before_any_model_loads(drafter, method, needle, tmp_path):
    from bench import api

    with pytest.raises(BenchError) as err:
        api.speed(pair="tiny", drafter=drafter, methods=method.split(","), output_dir=tmp_path)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_speed_eagle_on_smollm2_with_its_shipped_head(smollm2, tmp_path):
    """The pair's own head (no path), a CNN/DM article in the chat template, as the measurement
    runs it (fp32 here, a few tokens)."""
    from bench import api

    _, paths = api.speed(pair="smollm2", drafter="eagle", methods=["sd"], draft_lens=[3], prompts=1, max_new_tokens=4,
                         repeats=1, device="cpu", dtype="float32", chat_template=True, output_dir=tmp_path,
                         log=lambda m: None)  # fmt: skip
    result = json.loads(paths[1].read_text())
    assert result["head"] == "reference/smollm2-eagle" and result["rows"][0]["equals_ar"] is True
