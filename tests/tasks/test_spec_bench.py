"""The Spec-Bench task: prompts, categories, multi-turn conversations built from the method's own
answers, the per-category report, and the one-line refusals."""

import copy
import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from conftest import cli_error

from bench.conversation import decode_turns, merge_stats
from bench.decode_stats import DecodeStats, Generation
from bench.errors import BenchError
from bench.reports.categories import category_tables, prefix_share
from bench.reports.summary import summarise
from bench.tasks import Example, Task, resolve_task
from result_rows import result_rows

CATEGORIES = {
    "writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities",
    "translation", "summarization", "qa", "math_reasoning", "rag",
}  # fmt: skip
CHAT = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def fixture_task() -> Task:
    return Task(resolve_task("spec_bench"), "fixture")


def test_fixture_prompts_turns_and_categories():
    task = fixture_task()
    examples = task.examples()
    assert {task.columns(e.doc)["category"] for e in examples[:13]} == CATEGORIES  # one per category
    writing = task.example("1")
    assert writing.prompt == writing.doc["turns"][0]  # the query is the turn itself
    assert writing.follow_ups == (writing.doc["turns"][1],)
    assert task.example("9").follow_ups == ()
    assert task.render_text("Hello there") == "Hello there"


def test_the_real_questions_in_rounds_over_categories(shared_data):
    task = Task(resolve_task("spec_bench"), str(shared_data / "spec_bench_question.jsonl"))
    examples = task.examples()
    assert len(examples) == 480 and len({e.example_id for e in examples}) == 480
    firsts = [task.columns(e.doc)["category"] for e in examples[:13]]
    assert sorted(firsts) == sorted(CATEGORIES)
    assert [e.example_id for e in task.examples(13)] == [e.example_id for e in task.examples(30)[:13]]
    assert sum(bool(e.follow_ups) for e in examples) == 80  # MT-bench's questions have two turns
    assert [e.example_id for e in task.examples(20, seed=1)] != [e.example_id for e in task.examples(20)]


def test_missing_questions_say_where_to_put_them(tmp_path, monkeypatch):
    monkeypatch.setenv("DIVERSED_BENCH_CACHE", str(tmp_path))
    with pytest.raises(BenchError) as err:
        Task(resolve_task("spec_bench"), "hub").rows()
    message = str(err.value)
    assert "\n" not in message and str(tmp_path / "data" / "spec_bench_question.jsonl") in message
    assert "--data PATH" in message and "hemingkx/Spec-Bench" in message


def test_reference_scores_per_category():
    task = fixture_task()

    def score(example_id: str, text: str) -> dict:
        return task.score(task.example(example_id).doc, text)

    assert score("12", "12 - 2 = 10 apples. #### 10")["quality"] == 1.0
    assert score("12", "#### 12")["quality"] == 0.0
    assert score("13", "It reaches the sea at port lane.")["reference_metric"] == "hit"
    assert score("13", "It reaches the sea at port lane.")["quality"] == 1.0
    assert score("13", "It reaches the sea at Portlane harbour.")["quality"] == 0.0  # whole words only
    assert score("9", "The dog is sleeping in the garden.")["quality"] == pytest.approx(100.0)
    assert score("9", "The dog is sleeping in the garden.")["reference_metric"] == "rougeL"
    assert 0 < score("10", "The library reopened with a cafe.")["quality"] < 100
    assert math.isnan(score("11", "Shakespeare")["quality"])  # qa: no reference
    assert math.isnan(score("4", "84")["quality"])  # MT-bench: a judge's hint, not scored


def _stats(new: int, rounds: int, wall: float, per_position: list[int]) -> DecodeStats:
    n = len(per_position)
    return DecodeStats(
        prompt_tokens=5, draft_len=n, new_tokens=new, rounds=rounds, drafted_tokens=sum(per_position),
        accepted_tokens=1, target_forwards=rounds + 1, draft_forwards=3, wall_time_s=wall, prefill_time_s=0.1,
        kv_cache_bytes=100 * new, drafted_per_position=per_position, accepted_per_position=[1] + [0] * (n - 1),
        reached_per_position=list(per_position), expected_acceptance_sum=[0.5] * n, bias_sum=[0.25] * n,
        weights=[0.5] * rounds,
    )  # fmt: skip


def test_turns_add_up():
    both = merge_stats(_stats(4, 2, 1.0, [2, 1]), _stats(6, 3, 2.0, [3, 2]))
    assert (both.new_tokens, both.rounds, both.target_forwards, both.prompt_tokens) == (10, 5, 7, 10)
    assert both.wall_time_s == 3.0 and both.prefill_time_s == pytest.approx(0.2)
    assert both.drafted_per_position == [5, 3] and both.bias_sum == [0.5, 0.5]
    assert both.kv_cache_bytes == 600 and both.weights == [0.5] * 5 and both.draft_len == 2
    assert both.acceptance_length == 2.0
    batched = merge_stats(_stats(4, 2, math.nan, [2, 1]), _stats(6, 3, math.nan, [3, 2]))
    assert math.isnan(batched.wall_time_s)


def test_later_turns_carry_the_methods_own_answers():
    examples = [
        Example("a", {}, "first question", ("follow-up a1", "follow-up a2")),
        Example("b", {}, "single question"),
        Example("c", {}, "other question", ("follow-up c1",)),
    ]
    seen: list[list] = []

    def decode(prompts, seeds):
        seen.append((prompts, seeds))
        return [Generation([len(seen), 100 + len(seen)], _stats(2, 1, 1.0, [1])) for _ in prompts]

    def answer(ids):  # the method's answer: its own tokens, as text
        return f"answer{ids}"

    firsts = [Generation([0, i], _stats(2, 1, 1.0, [1])) for i in range(3)]
    out = decode_turns(examples, firsts, decode, lambda e, messages: messages, answer, lambda e, t: t)
    (turn2, seeds2), (turn3, seeds3) = seen
    assert turn2[0] == [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "answer[0, 0]"},
        {"role": "user", "content": "follow-up a1"},
    ]
    assert turn2[1][1]["content"] == "answer[0, 2]" and len(turn2) == 2  # b has no second turn
    assert turn3 == [turn2[0] + [{"role": "assistant", "content": "answer[1, 101]"},
                                 {"role": "user", "content": "follow-up a2"}]]  # fmt: skip
    assert seeds2 == [1, 1] and seeds3 == [2]
    gen_a, texts_a = out[0]
    assert texts_a == ["answer[0, 0]", "answer[1, 101]", "answer[2, 102]"] and gen_a.token_ids == [2, 102]
    assert gen_a.stats.new_tokens == 6 and gen_a.stats.wall_time_s == 3.0
    assert out[1] == (firsts[1], ["answer[0, 1]"])


@pytest.fixture
def chat_pair(tiny_pair, monkeypatch):
    """The tiny pair with a chat template of its own (its tokenizer has none)."""
    tokenizer = copy.deepcopy(tiny_pair.tokenizer)
    tokenizer.chat_template = CHAT
    pair = dataclasses.replace(tiny_pair, tokenizer=tokenizer)
    monkeypatch.setattr("bench.runner.load_pair", lambda *args, **kwargs: pair)
    return pair


@pytest.mark.slow
def test_a_run_decodes_turn_two_after_its_own_turn_one(tmp_path, chat_pair):
    from bench.pairs import encode_prompt
    from bench.config import RunConfig
    from bench.runner import Runner
    from bench.store import load_results

    configs = [
        RunConfig(task="spec_bench", pair="tiny", method=m, temperature=0.0, max_new_tokens=6,
                  chat_template=True, device="cpu", data="fixture")
        for m in ("ar", "sd")
    ]  # fmt: skip
    Runner(tmp_path, limit=13, batch_size=4, timing_examples=3, progress=False, log=lambda m: None).run(configs)
    rows = load_results(tmp_path)
    assert len(rows) == 26 and set(rows["category"]) == CATEGORIES
    task = fixture_task()
    for _, row in rows.iterrows():
        example = task.example(row["example_id"])
        turns = list(row["turn_completions"])
        assert row["turns"] == len(turns) == 1 + len(example.follow_ups)
        if example.follow_ups:  # turn 2 was asked after the row's own turn-1 answer
            conversation = [
                {"role": "user", "content": example.prompt},
                {"role": "assistant", "content": turns[0]},
                {"role": "user", "content": example.follow_ups[0]},
            ]
            both = len(encode_prompt(chat_pair, example.prompt, True)) + len(encode_prompt(chat_pair, conversation, True))
            assert row["prompt_tokens"] == both
            assert row["new_tokens"] <= 12 and row["target_forwards"] == row["rounds"] + 2  # two prefills
    timed = rows[rows["wall_time_s"].notna()]
    assert len(timed) == 6  # the first three examples of each configuration, both turns timed
    ar, sd = (rows[rows["method"] == m].set_index("example_id") for m in ("ar", "sd"))
    assert (ar["turn_completions"].map(list) == sd["turn_completions"].map(list)[ar.index]).all()  # greedy sd = ar


def test_multi_turn_without_a_chat_template_is_one_line(tmp_path):
    message = cli_error(
        "run", "--task", "spec_bench", "--pair", "tiny", "--method", "ar", "--limit", "13",
        "--output-dir", str(tmp_path), "--no-progress",
    )  # fmt: skip
    assert "has several turns" in message and "--chat-template" in message


def _category_rows(logprob: bool) -> pd.DataFrame:
    """ar and sd on four greedy examples in two categories; sd's example 3 differs from ar's."""
    rows = result_rows({"ar": [2.0, 2.0, 1.0, 1.0], "sd": [1.0, 1.0, 1.0, 0.5]})
    rows["task"], rows["temperature"] = "spec_bench", 0.0
    rows["category"] = ["writing", "roleplay", "qa", "qa"] * 2
    rows["completion"] = ["w", "r", "q1", "q2 answer"] + ["w", "r", "q1", "q2 other"]
    turns = [["w", "w2"], ["r", "r2"], None, ["q2 answer"]] * 2  # None: a row without turns (its completion)
    rows["turn_completions"] = turns[:7] + [["q2 other"]]
    rows["turn_completions"] = rows["turn_completions"].map(lambda t: np.nan if t is None else t)
    rows["reference_metric"] = ""
    rows["quality"] = np.nan
    if logprob:
        rows["target_loglik"] = [-1.0, -2.0, -1.0, -1.0, -1.0, -2.0, -1.0, -4.0]
    return rows


def _table(text: str, caption: str) -> dict[str, list[str]]:
    """A markdown table after ``caption``: {method: cells}, with the header under 'method'."""
    lines = text.split(caption, 1)[1].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = [line for line in lines[first:first + 4] if line.startswith("|")]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table]
    return {r[0]: r[1:] for r in rows if not r[0].startswith("---")}


def test_per_category_table_from_synthetic_rows():
    rows = _category_rows(logprob=True)
    text = category_tables(rows, summarise(rows))
    speed = _table(text, "Speedup over ar")
    assert speed["method"] == ["mt_bench", "qa", "overall"]
    # Time per emitted token, summed over examples (8 tokens each): mt_bench 4 s vs 2 s -> 2.00x; qa 2 s vs
    # 1.5 s -> 1.33x (Spec-Bench's mean of tokens/s would say (8 + 16) / 2 = 12 vs 8 -> 1.50x); overall 6 vs 3.5.
    assert [c.split()[0] for c in speed["sd"]] == ["2.00x", "1.33x", f"{6 / 3.5:.2f}x"]
    assert [c.rsplit(" ", 1)[1] for c in speed["sd"]] == ["(2)", "(2)", "(4)"]
    assert speed["ar"][0] == "1.00x [1.00, 1.00] (2)"
    assert _table(text, "Mean accepted tokens")["sd"] == ["4.00", "4.00", "4.00"]
    assert _table(text, "Same output as ar")["sd"] == ["100%", "50%", "75%"]
    share = prefix_share("q2 other", "q2 answer")
    assert share == pytest.approx(3 / 9)
    assert _table(text, "Prefix agreement")["sd"][1] == f"{(1 + share) / 2 * 100:.0f}%"
    assert _table(text, "mean log-likelihood")["sd"] == ["-1.500", "-2.500", "-2.000"]
    assert "Reference score" not in text  # no category here has one


def test_per_category_table_without_logprob_or_greedy():
    rows = _category_rows(logprob=False)
    rows["temperature"] = 1.0
    text = category_tables(rows, summarise(rows))
    assert "not recorded in these rows" in text
    assert "Same output as ar" not in text and "Speedup over ar" in text
    assert category_tables(result_rows({"ar": [1.0, 1.0]}), summarise(result_rows({"ar": [1.0, 1.0]}))) == ""


def test_no_empty_quality_figure_for_a_task_without_one(tmp_path):
    from bench.reports.plots import plot_pareto
    from bench.reports.summary import panels

    rows = _category_rows(logprob=False)
    [panel] = panels(summarise(rows))
    assert plot_pareto(panel, {"spec_bench": "reference_score"}, tmp_path) == []
    rows["quality"] = 1.0
    [panel] = panels(summarise(rows))
    assert plot_pareto(panel, {"spec_bench": "reference_score"}, tmp_path)
