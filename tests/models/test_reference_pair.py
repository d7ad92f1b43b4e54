"""The shipped reference pair and its ``arith`` task: data, weights, accuracy, the training script."""

import pytest

from bench.decoding import SpeculativeDecoder
from bench.distributions import Sampling
from bench.pairs import load_pair
from bench.reference import arith
from bench.tasks import Task, resolve_task
from bench.verifiers import make_verifier

SUBSET = 30  # test examples checked here; the README's numbers come from the demo grid


@pytest.fixture(scope="module")
def ref_pair():
    return load_pair("ref", device="cpu")


@pytest.fixture(scope="module")
def arith_task():
    return Task(resolve_task("arith"), "hub")


def decode(pair, method: str, examples, temperature: float, *, draft_as_target: bool = False):
    target, draft = (pair.draft, None) if draft_as_target else (pair.target, pair.draft)
    decoder = SpeculativeDecoder(
        target,
        draft if method != "ar" else None,
        make_verifier(method),
        sampling=Sampling(temperature),
        eos_token_ids=pair.eos_token_ids,
    )
    return [
        decoder.generate(pair.tokenizer(ex.prompt).input_ids, 64, seed=i).token_ids
        for i, ex in enumerate(examples)
    ]


def accuracy(pair, task, examples, outputs) -> float:
    return sum(
        task.score(ex.doc, pair.tokenizer.decode(ids, skip_special_tokens=True))["quality"]
        for ex, ids in zip(examples, outputs)
    ) / len(examples)


def test_arith_data_is_deterministic_disjoint_and_gradable():
    train, test = arith.rows("train"), arith.rows("test")
    assert len(train) == arith.SPLIT_SIZES["train"] and len(test) == arith.SPLIT_SIZES["test"]
    assert arith.rows("test") == test
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    for row in test[:50]:
        a, b = map(int, row["question"].split(" + "))
        assert row["answer"].endswith(f"#### {a + b}")
        assert resolve_task("arith").name == "arith"
    task = Task(resolve_task("arith"), "hub")
    doc = task.examples(1)[0].doc
    assert task.score(doc, doc["answer"])["quality"] == 1.0
    assert (
        task.score(doc, doc["answer"][:-1] + "0" if not doc["answer"].endswith("0") else "1")["quality"]
        == 0.0
    )


def test_packaged_pair_shares_one_tokenizer_and_the_draft_is_smaller(ref_pair):
    draft_hidden, target_hidden = ref_pair.hidden_sizes
    assert draft_hidden < target_hidden
    assert ref_pair.draft.num_parameters() < ref_pair.target.num_parameters() / 2
    assert ref_pair.target.config.vocab_size == ref_pair.draft.config.vocab_size == len(ref_pair.tokenizer)


@pytest.mark.slow
def test_shipped_target_is_accurate_and_the_draft_clearly_weaker(ref_pair, arith_task):
    examples = arith_task.examples(SUBSET, seed=0)
    target_greedy = accuracy(ref_pair, arith_task, examples, decode(ref_pair, "ar", examples, 0.0))
    target_sampled = accuracy(ref_pair, arith_task, examples, decode(ref_pair, "ar", examples, 1.0))
    draft_sampled = accuracy(
        ref_pair, arith_task, examples, decode(ref_pair, "ar", examples, 1.0, draft_as_target=True)
    )
    assert target_greedy >= 0.9 and target_sampled >= 0.9, (target_greedy, target_sampled)
    assert draft_sampled <= target_sampled - 0.2, (draft_sampled, target_sampled)


def test_greedy_sd_equals_ar_on_the_reference_pair(ref_pair, arith_task):
    examples = arith_task.examples(5, seed=1)
    assert decode(ref_pair, "sd", examples, 0.0) == decode(ref_pair, "ar", examples, 0.0)


@pytest.mark.slow
def test_training_script_runs_and_writes_a_loadable_pair(tmp_path):
    from bench.pairs import PairSpec
    from bench.reference.train import main

    main(["--output", str(tmp_path), "--steps-scale", "0.01", "--check", "1"])
    for folder in ("target", "draft"):
        assert (tmp_path / folder / "model.safetensors").is_file()
    spec = PairSpec(
        name="short",
        kind="packaged",
        target=str(tmp_path / "target"),
        draft=str(tmp_path / "draft"),
        tokenizer=str(tmp_path / "tokenizer"),
    )
    pair = load_pair(spec, device="cpu")
    assert pair.hidden_sizes == (64, 96)


def test_a_packaged_pair_with_missing_files_is_one_clear_error(tmp_path):
    from bench.errors import BenchError
    from bench.pairs import PairSpec

    spec = PairSpec(name="gone", kind="packaged", target=str(tmp_path / "t"), draft=str(tmp_path / "d"))
    with pytest.raises(BenchError, match="no model files at .*python -m bench.reference.train"):
        load_pair(spec, device="cpu")
