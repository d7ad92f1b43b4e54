"""Prompt + budget against the models' context: one-line refusals before any decode, the opt-in
left truncation (decoded and recorded), and the settings in the configuration's id."""

import json
from types import SimpleNamespace

import pytest
from conftest import cli_error

from bench.context import Context, context_length, fit_prompt
from bench.errors import BenchError
from bench.runner import RunConfig, Runner
from bench.store import load_results

# The shipped ref pair: target and draft both know 256 positions; a 4-shot GSM8K prompt is ~1000.
REF_CONTEXT = 256


def test_fit_prompt_keeps_a_fitting_prompt_and_cuts_from_the_left_after_the_bos():
    ctx = Context(10, "target model")
    assert fit_prompt([1, 5, 6], 7, ctx, "none", example="e") == ([1, 5, 6], 0)
    ids = [1] + list(range(100, 120))
    kept, dropped = fit_prompt(ids, 4, ctx, "left", example="e", bos_token_id=1)
    assert kept == [1, 115, 116, 117, 118, 119] and dropped == 15 and len(kept) + 4 == 10
    kept, dropped = fit_prompt(ids, 4, ctx, "left", example="e", bos_token_id=None)
    assert kept == ids[-6:] and dropped == 15


def test_fit_prompt_refuses_with_the_example_the_lengths_the_limit_and_the_fix():
    ctx = Context(10, "draft model x")
    with pytest.raises(BenchError) as err:
        fit_prompt(list(range(8)), 4, ctx, "none", example="gsm8k example 7")
    message = str(err.value)
    for needle in ("gsm8k example 7", "prompt 8 tokens", "4 new tokens", "= 12 > 10", "draft model x"):
        assert needle in message, message
    assert "--truncate-prompt left" in message and "--max-new-tokens" in message
    with pytest.raises(BenchError, match="no room for the prompt"):  # truncation cannot help
        fit_prompt(list(range(8)), 10, ctx, "left", example="e")


def test_the_context_is_read_from_the_text_config_of_a_multimodal_wrapper():
    from transformers import Gemma3Config

    config = Gemma3Config(text_config={"max_position_embeddings": 77}, vision_config={"hidden_size": 16})
    assert getattr(config, "max_position_embeddings", None) != 77  # the wrapper's own field is not it
    assert context_length(SimpleNamespace(config=config), "target") == 77


def _run_args(tmp_path, *extra, pair="ref"):
    return ["run", "--pair", pair, "--no-report", "--no-progress", "--device", "cpu", "--limit", "2"] + [
        "--output-dir",
        str(tmp_path),
        *extra,
    ]


def test_run_refuses_a_prompt_past_the_context_before_decoding_anything(tmp_path):
    # The tiny pair (8192 positions) comes first and fits, the ref pair does not: nothing is decoded.
    args = _run_args(tmp_path, "--task", "gsm8k", "--data", "fixture", "--method", "ar", pair="tiny,ref")
    message = cli_error(*args)
    assert message.startswith("gsm8k example ") and f"> {REF_CONTEXT}" in message, message
    assert "--truncate-prompt left" in message
    assert not list(tmp_path.rglob("*.parquet"))


def test_run_refuses_a_budget_that_runs_past_the_context(tmp_path):
    message = cli_error(*_run_args(tmp_path, "--task", "arith", "--method", "sd", "--max-new-tokens", "250"))
    assert "arith example" in message and "250 new tokens" in message and f"> {REF_CONTEXT}" in message


def test_generate_and_train_refuse_in_one_line(tmp_path):
    long = "1 + 2 = 3. " * 200
    message = cli_error("generate", long, "--pair", "ref", "--device", "cpu", "--max-new-tokens", "8")
    assert message.startswith("generate: prompt ") and f"> {REF_CONTEXT}" in message
    message = cli_error(
        "train", "--task", "gsm8k", "--pair", "ref", "--data", "fixture", "--device", "cpu",
        "--num-prompts", "2", "--output-dir", str(tmp_path / "head"),
    )  # fmt: skip
    assert "train example" in message and "--rollout-tokens" in message
    assert not (tmp_path / "head").exists()


def test_truncate_left_decodes_the_last_tokens_and_records_the_cut(tmp_path):
    cfg = RunConfig(
        task="gsm8k", pair="ref", method="ar", data="fixture", max_new_tokens=8, device="cpu",
        truncate_prompt="left",
    )  # fmt: skip
    Runner(tmp_path, limit=2, progress=False, log=lambda m: None).run([cfg])
    rows = load_results(tmp_path)
    assert (rows["prompt_tokens"] == REF_CONTEXT - 8).all()
    assert (rows["prompt_tokens_dropped"] > 500).all() and (rows["new_tokens"] == 8).all()
    assert set(rows["truncate_prompt"]) == {"left"}
    manifest = json.loads(next((tmp_path / "manifests").glob("*.json")).read_text())
    assert manifest["settings"]["truncate_prompt"] == "left"


def test_truncation_and_draft_policy_are_part_of_the_configuration_id():
    base = dict(task="arith", pair="ref", method="threshold", device="cpu")
    ids = {
        RunConfig(**base).resolve().config_id,
        RunConfig(**base, truncate_prompt="left").resolve().config_id,
        RunConfig(**base, draft_policy="sample").resolve().config_id,
    }
    assert len(ids) == 3
    # the default is the engine's own policy, so naming it changes nothing
    assert (
        RunConfig(**base, draft_policy="greedy").resolve().config_id == RunConfig(**base).resolve().config_id
    )
    with pytest.raises(BenchError, match="--truncate-prompt takes none or left"):
        RunConfig(**base, truncate_prompt="right").resolve()
    with pytest.raises(BenchError, match="--draft-policy takes sample or greedy"):
        RunConfig(**base, draft_policy="topk").resolve()


def test_train_truncates_left_when_asked_and_logs_the_cut(tmp_path):
    from bench.pairs import load_pair
    from bench.tasks import Task, resolve_task
    from bench.learned.reinforce import TrainConfig, Trainer

    pair = load_pair("ref", device="cpu")
    task = Task(resolve_task("gsm8k"), "fixture", split="train")  # the task's 4 shots: ~1000 tokens
    cfg = TrainConfig(batch_size=2, epochs=1, num_prompts=2, rollout_tokens=4, truncate_prompt="left", allow_flat_reward=True)
    trainer = Trainer(pair, task, cfg, tmp_path, reward=lambda example, rollout, text: 0.0)
    trainer.train()
    lengths = [len(pair.tokenizer(e.prompt).input_ids) for e in task.examples(2, 0)]
    assert trainer.history[-1]["prompt_tokens_dropped"] == sum(n - (REF_CONTEXT - 4) for n in lengths)


DRAFT_CONTEXT = 16  # the ref draft's context cut to this: an arith prompt (16 tokens) + 4 new tokens exceed it


@pytest.fixture
def short_draft(monkeypatch):
    """The ref pair, its draft model's context cut to DRAFT_CONTEXT, wherever a pair is loaded."""
    from bench import pairs

    load = pairs.load_pair

    def cut(*args, **kwargs):
        pair = load(*args, **kwargs)
        monkeypatch.setattr(pair.draft.config, "max_position_embeddings", DRAFT_CONTEXT)
        return pair

    for module in ("bench.pairs", "bench.runner", "bench.lm_eval_model"):
        monkeypatch.setattr(f"{module}.load_pair", cut)
    return cut


@pytest.mark.parametrize(
    "method, drafter, feeds_draft",
    [("sd", "model", True), ("sd", "model_tree", True), ("sd", "lookup", False), ("sd", "suffix", False), ("ar", "model", False)],
)  # fmt: skip
def test_the_decoder_says_which_models_context_applies(short_draft, method, drafter, feeds_draft):
    from bench.build import build_decoder

    context = build_decoder(short_draft("ref", device="cpu"), method, drafter=drafter).context
    assert (context.tokens, context.model.startswith("draft model")) == (
        (DRAFT_CONTEXT, True) if feeds_draft else (REF_CONTEXT, False)
    )


@pytest.mark.parametrize("drafter, feeds_draft", [("model_tree", True), ("lookup", False)])
def test_run_checks_the_draft_context_exactly_when_the_drafter_runs_the_draft(
    tmp_path, short_draft, drafter, feeds_draft
):
    cfg = RunConfig(task="arith", pair="ref", method="sd", drafter=drafter, max_new_tokens=4, device="cpu")
    runner = Runner(tmp_path, limit=1, timing_examples=0, progress=False, log=lambda m: None)
    if feeds_draft:  # model_tree steps the draft model: before, only --drafter model was checked
        with pytest.raises(BenchError, match=f"= 20 > {DRAFT_CONTEXT}, the context .* of the draft model"):
            runner.run([cfg])
        assert not list(tmp_path.rglob("*.parquet"))
    else:  # lookup runs no draft model: only the target's context applies
        runner.run([cfg])
        assert len(load_results(tmp_path)) == 1


@pytest.mark.parametrize("drafter, feeds_draft", [("model", True), ("model_tree", True), ("lookup", False)])
def test_lm_eval_checks_the_draft_context_exactly_when_the_drafter_runs_the_draft(
    tmp_path, short_draft, drafter, feeds_draft
):
    from lm_eval.api.instance import Instance

    from bench.lm_eval_model import DiversedLM

    lm = DiversedLM(pair="ref", method="sd", drafter=drafter, device="cpu", output_dir=str(tmp_path))
    gen = {"until": [], "do_sample": False, "temperature": 0.0, "max_gen_toks": 4}
    request = Instance("generate_until", {}, ("347 + 285 = 632. 12 + 7 =", gen), 0, metadata=("unit", 0, 1))
    if feeds_draft:
        with pytest.raises(BenchError, match=f"> {DRAFT_CONTEXT}, the context .* of the draft model"):
            lm.generate_until([request])
    else:  # before, the backend took no drafter and checked every drafting method against the draft
        lm.generate_until([request])
        rows = load_results(tmp_path)
        assert len(rows) == 1 and rows["drafter"].iloc[0].startswith("lookup:")
