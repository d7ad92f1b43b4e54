"""``speed --drafter lookup``: the rows, what they measure beside speed, the plot and the category
selection (timings are reported, never asserted)."""

import os
import statistics

import pytest

from bench.engines import EagerEngine
from bench.errors import BenchError
from bench.speed.runs import run_harness
from bench.speed.fidelity import Fidelity
from bench.speed.lookup import AR, HF, measure_lookup, run_transformers_lookup
from bench.speed.report import lookup_markdown, lookup_plot, plot_points
from bench.tasks import Task, resolve_task

RELAXED = {
    f"relaxed (topk=10, delta={d})": ("relaxed", {"relaxed_topk": 10, "relaxed_delta": d}) for d in (0.3, 0.5)
}


def _fidelity(pair, n=2):
    task = Task(resolve_task("cnndm"), "fixture", num_fewshot=0)
    examples = task.examples(n)
    return Fidelity(pair, task, examples, [list(pair.tokenizer(e.prompt).input_ids) for e in examples])


def _rouge2(reference: str, text: str) -> float:
    """ROUGE-2 F1 x 100, straight from rouge_score (the task file's quality for CNN/DM)."""
    from rouge_score import rouge_scorer

    return 100 * rouge_scorer.RougeScorer(["rouge2"], use_stemmer=True).score(reference, text.strip())["rouge2"].fmeasure


def test_lookup_speed_rows_measure_every_method_against_ar(tiny_pair, tmp_path):
    """A row per baseline and per method setting; lossless lookup equals ar and transformers; ar's
    own judgement is the reference (agreement 1, deltas 0); its ROUGE is the task's, its log p the
    decoder's; every eager width 1 .. N + 1 is timed; the plot has a point per setting."""
    fidelity = _fidelity(tiny_pair)
    methods = {"sd": ("sd", {}), **RELAXED}
    result = measure_lookup(tiny_pair, fidelity, [4], 16, 1, "lookup", methods, EagerEngine, log=lambda m: None)
    result.update(task="cnndm", data="fixture")
    assert list(result["width_ms"]) == [1, 2, 3, 4, 5]
    rows = {r["method"]: r for r in result["rows"]}
    assert list(rows) == [AR, HF, "sd", *RELAXED]
    ar, hf, sd = rows[AR], rows[HF], rows["sd"]
    assert ar["same_as_ar"] == ar["prefix_agreement"] == 1.0 and ar["loglik_vs_ar"] == ar["quality_vs_ar"] == 0
    assert ar["tokens_per_forward"] == 1.0 and ar["acceptance_rate"] is None and hf["tokens_per_forward"] is None
    assert sd["same_as_ar"] == 1.0 and sd["equals_hf"] and hf["equals_hf"] and 0 < sd["drafting_share"] <= 1
    assert sd["loglik_vs_ar"] == pytest.approx(0, abs=1e-6)
    for label in RELAXED:
        assert rows[label]["tokens_per_forward"] >= sd["tokens_per_forward"] >= 1
    timed = run_harness(tiny_pair, "ar", fidelity.prompts, 1, 16)
    texts = fidelity.texts(timed.outputs)
    assert ar["quality"] == pytest.approx(
        statistics.mean(_rouge2(e.doc["highlights"], t) for e, t in zip(fidelity.examples, texts))
    )
    logp = sum(s.target_logprob_sum for s in timed.stats) / sum(s.new_tokens for s in timed.stats)
    assert ar["target_loglik"] == pytest.approx(logp, abs=1e-4)
    text = lookup_markdown(result, "diversed-bench speed")
    assert "| Δ log p/token vs ar | rouge2 | Δ rouge2 vs ar | prefix agreement with ar | same as ar |" in text
    assert "| relaxed (topk=10, delta=0.5) | 4 |" in text and "| ar | 4 | 1.00 [1.00, 1.00] |" in text
    points = plot_points(result)
    assert [p["label"] for p in points] == [HF, "sd", *RELAXED]
    assert [p["transformers"] for p in points] == [True, False, False, False]
    lookup_plot(result, tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 10_000


def test_fidelity_scores_with_the_task_and_agreement_as_the_category_report(tiny_pair):
    """Outputs that are the reference score its ROUGE-2 (100 up to the scorer's tokenising); the
    prefix agreement is the share of ar's text before the first difference, mean over prompts."""
    fidelity = _fidelity(tiny_pair)
    refs = [" " + e.doc["highlights"] for e in fidelity.examples]
    outputs = [list(tiny_pair.tokenizer(r).input_ids) for r in refs]
    other = " " + refs[1].split()[0] + " something else entirely"
    ar = [outputs[0], list(tiny_pair.tokenizer(other).input_ids)]
    got = fidelity(outputs, ar, greedy=True)
    assert got["quality"] == pytest.approx(statistics.mean(_rouge2(r, r) for r in refs)) and got["quality"] > 90
    assert got["quality_metric"] == "rouge2"
    share = len(os.path.commonprefix([refs[1], other])) / len(other)
    assert 0 < share < 1 and got["prefix_agreement"] == pytest.approx((1 + share) / 2)
    assert got["same_as_ar"] == 0.5
    sampled = fidelity(outputs, ar, greedy=False)
    assert sampled["prefix_agreement"] is None and sampled["same_as_ar"] is None


def test_sampled_lookup_speed_says_n_a_and_transformers_samples_the_plain_softmax(tiny_pair, monkeypatch):
    """At temperature 1 agreement and equality are n/a; transformers' prompt lookup samples as the
    harness does: temperature 1, top-k and top-p off."""
    calls = []
    generate = tiny_pair.target.generate

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return generate(*args, **kwargs)

    monkeypatch.setattr(tiny_pair.target, "generate", spy)
    fidelity = _fidelity(tiny_pair, 1)
    result = measure_lookup(tiny_pair, fidelity, [3], 8, 1, "lookup", dict(list(RELAXED.items())[:1]), EagerEngine,
                            log=lambda m: None, temperature=1.0)  # fmt: skip
    assert calls and all(
        (c["do_sample"], c["temperature"], c["top_k"], c["top_p"], c["prompt_lookup_num_tokens"]) == (True, 1.0, 0, 1.0, 3)
        for c in calls
    )
    for row in result["rows"]:
        assert row["prefix_agreement"] is None and row["same_as_ar"] is None and row["equals_hf"] is None
        assert row["quality"] is not None
    result.update(task="cnndm", data="fixture")
    assert "temperature 1" in lookup_markdown(result, "speed") and "| n/a | n/a | n/a |" in lookup_markdown(result, "speed")
    run_transformers_lookup(tiny_pair, fidelity.prompts, 3, 2, 4)
    assert calls[-1]["do_sample"] is False and "top_k" not in calls[-1]


def test_category_selects_only_that_groups_examples():
    task = Task(resolve_task("spec_bench"), "fixture")
    members = task.category_members("summarization")
    examples = task.examples(categories=members)
    assert members == ["summarization"] and examples
    assert all(e.doc["category"] == "summarization" for e in examples)
    assert len(examples) == sum(r["category"] == "summarization" for r in task.rows())
    mt = task.examples(2, categories=task.category_members("mt_bench"))
    assert len(mt) == 2 and {e.doc["category"] for e in mt} <= set(task.category_members("mt_bench"))


@pytest.mark.parametrize(
    ("task", "category", "drafter", "needle"),
    [
        ("spec_bench", "summarisation", "lookup", "choose one of mt_bench, translation, summarization, qa"),
        ("cnndm", "summarization", "lookup", "task cnndm has no category groups"),
        ("spec_bench", "summarization", "model", "--category only with --drafter lookup"),
    ],
)
def test_a_bad_category_is_one_line_before_any_model_loads(task, category, drafter, needle, tmp_path):
    from bench import api

    with pytest.raises(BenchError) as err:
        api.speed(pair="tiny", drafter=drafter, task=task, data="fixture", category=category,
                  methods=["sd"], output_dir=tmp_path)  # fmt: skip
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_speed_times_a_spec_bench_category_end_to_end(tmp_path):
    """``speed --category summarization`` on Spec-Bench: the table, JSON and plot are written, the
    prompts are the group's, the quality is the category's reference score."""
    import json

    from bench import api

    text, paths = api.speed(pair="tiny", drafter="lookup", task="spec_bench", data="fixture", category="summarization",
                            methods=["sd"], draft_lens=[3], prompts=1, max_new_tokens=4, repeats=1,
                            output_dir=tmp_path, log=lambda m: None)  # fmt: skip
    assert [p.suffix for p in paths] == [".md", ".json", ".png"] and all(p.is_file() for p in paths)
    result = json.loads(paths[1].read_text())
    assert result["category"] == "summarization" and result["prompts"] == 1
    assert {r["quality_metric"] for r in result["rows"]} == {"rouge2"}
    assert "spec_bench, category group summarization" in text
