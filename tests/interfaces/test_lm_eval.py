"""The lm-eval backend: lm-eval runs local tasks end to end through ``--model diversed``.

The tasks in ``tests/lm_eval_tasks`` read local JSONL files, so nothing here touches the hub.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import lm_eval
import pytest
import torch
import yaml
from lm_eval.api.instance import Instance
from lm_eval.tasks import TaskManager

from bench.decoding import SpeculativeDecoder
from bench.distributions import Sampling
from bench.errors import BenchError
from bench.lm_eval_model import DiversedLM
from bench.reports.summary import summarise
from bench.pairs import encode_prompt
from bench.config import example_seed
from bench.store import load_results
from bench.verifiers import make_verifier

TASKS = Path(__file__).parents[1] / "lm_eval_tasks"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def task_manager() -> TaskManager:
    return TaskManager(include_path=str(TASKS), include_defaults=False)


def evaluate(task_manager, output_dir: Path, tasks=("arith_local",), **model_args):
    """lm-eval's own entry point with the backend named by its registry string."""
    return lm_eval.simple_evaluate(
        model="diversed",
        model_args={"pair": "tiny", "device": "cpu", "output_dir": str(output_dir), **model_args},
        tasks=list(tasks),
        task_manager=task_manager,
        log_samples=True,
    )


def responses(results, task="arith_local") -> dict[int, str]:
    return {s["doc_id"]: s["resps"][0][0] for s in results["samples"][task]}


@pytest.mark.slow
def test_ar_sd_ensemble_end_to_end_and_greedy_sd_equals_ar(task_manager, tmp_path):
    runs = {
        "ar": evaluate(task_manager, tmp_path / "ar", method="ar"),
        "sd": evaluate(task_manager, tmp_path / "sd", ("arith_local", "choice_local"), method="sd"),
        "ensemble": evaluate(task_manager, tmp_path / "ens", method="ensemble", target_weight=0.7),
    }
    assert responses(runs["sd"]) == responses(runs["ar"])  # greedy sd is ar, token for token
    assert len(responses(runs["ar"])) == 4 and any(responses(runs["ar"]).values())
    for method, results in runs.items():
        assert {"exact_match,strict-match", "exact_match,flexible-extract"} <= set(
            results["results"]["arith_local"]
        )
        info = results["config"]["diversed"]
        assert info["method"] == method
        tally = info["acceptance"]["arith_local"]
        rows = load_results(tmp_path / {"ar": "ar", "sd": "sd", "ensemble": "ens"}[method])
        assert len(rows) == 4 and set(rows["method"]) == {method}
        # the parquet rows are what lm-eval scored, and the results' counters are their sums
        assert dict(zip(rows["doc_id"], rows["completion_cut"])) == responses(results)
        assert tally["new_tokens"] == rows["new_tokens"].sum() and tally["rounds"] == rows["rounds"].sum()
        assert tally["accepted_tokens"] == rows["accepted_tokens"].sum()
        assert (rows["temperature"] == 0).all() and (rows["max_new_tokens"] == 32).all()
        if method == "ar":
            assert tally["drafted_tokens"] == 0 and tally["rounds"] == tally["new_tokens"]
        else:
            assert 0 < tally["acceptance_rate"] <= 1 and tally["acceptance_length"] > 1
            assert len(tally["acceptance_rate_per_position"]) == 5
    assert {json.loads(p)["target_weight"] for p in rows["params"]} == {0.7}
    with pytest.raises(BenchError, match="scored by lm-eval"):  # our tables need our quality scores
        summarise(rows)
    assert "acc,none" in runs["sd"]["results"]["choice_local"]  # multiple choice ran (loglikelihood)
    assert "choice_local" not in runs["sd"]["config"]["diversed"]["acceptance"]  # no decoding, no counters


def request(context: str, idx: int = 0, doc_id: int = 0, **gen_kwargs) -> Instance:
    kwargs = {"until": [], "do_sample": False, "temperature": 0.0, "max_gen_toks": 16, **gen_kwargs}
    return Instance("generate_until", {}, (context, kwargs), idx, metadata=("unit", doc_id, 1))


PROMPTS = ["Question: A farmer has 12 cows.", "Article: The city council voted", "def add_numbers(a, b):"]


@pytest.fixture(scope="module")
def sd_lm(tmp_path_factory) -> DiversedLM:
    return DiversedLM(
        pair="tiny", method="sd", seed=7, device="cpu", output_dir=str(tmp_path_factory.mktemp("u"))
    )


def test_sampling_follows_temperature_budget_and_per_request_seeds(sd_lm, tmp_path):
    reqs = [
        request(p, doc_id=i, do_sample=True, temperature=1.0, max_gen_toks=12) for i, p in enumerate(PROMPTS)
    ]
    first = sd_lm.generate_until(reqs)
    assert sd_lm.generate_until(list(reversed(reqs))) == list(reversed(first))  # order does not matter
    other = DiversedLM(pair="tiny", method="sd", seed=8, device="cpu", output_dir=str(tmp_path))
    assert other.generate_until(reqs) != first
    rows = load_results(sd_lm.output_dir)
    rows = rows[rows["temperature"] == 1.0].set_index("doc_id")
    assert (rows["max_new_tokens"] == 12).all()
    # each completion is the decoder at T = 1 with the runner's per-example seed
    pair = sd_lm.pair
    decoder = SpeculativeDecoder(
        pair.target, pair.draft, make_verifier("sd"), sampling=Sampling(1.0), eos_token_ids=pair.eos_token_ids
    )
    for i, prompt in enumerate(PROMPTS):
        gen = decoder.generate(
            encode_prompt(pair, prompt, False), 12, seed=example_seed(7, rows.loc[i, "example_id"])
        )
        assert pair.tokenizer.decode(gen.token_ids, skip_special_tokens=True) == rows.loc[i, "completion"]
        assert first[i] == rows.loc[i, "completion"]


def test_do_sample_false_is_greedy_whatever_the_temperature(sd_lm):
    greedy = sd_lm.generate_until([request(PROMPTS[0], idx=1)])
    assert sd_lm.generate_until([request(PROMPTS[0], idx=2, do_sample=False, temperature=0.9)]) == greedy


def test_until_cuts_after_decoding_the_whole_budget(sd_lm):
    full = sd_lm.generate_until([request(PROMPTS[1], idx=3, max_gen_toks=24)])[0]
    stop = full[6:9]
    assert stop and stop in full
    cut = sd_lm.generate_until([request(PROMPTS[1], idx=4, max_gen_toks=24, until=[stop])])[0]
    assert cut == full.split(stop)[0]
    rows = load_results(sd_lm.output_dir).set_index("example_id")
    uncut = rows[rows.index.str.startswith("unit/0/3/")].iloc[0]
    stopped = rows[rows.index.str.startswith("unit/0/4/")].iloc[0]
    assert stopped["completion"] == uncut["completion"] and stopped["completion_cut"] == cut
    assert stopped["new_tokens"] == uncut["new_tokens"]  # counters describe every decoded token


def test_loglikelihood_is_the_target_alone(sd_lm):
    context, continuation = "Question: A farmer has 12 cows and buys 7 more.\nAnswer:", " 19"
    [(score, greedy)] = sd_lm.loglikelihood([Instance("loglikelihood", {}, (context, continuation), 0)])
    tok, target = sd_lm.pair.tokenizer, sd_lm.pair.target
    ctx, whole = tok(context).input_ids, tok(context + continuation).input_ids
    with torch.no_grad():
        logprobs = target(input_ids=torch.tensor([whole])).logits[0].float().log_softmax(-1)
    cont = whole[len(ctx) :]
    expected = sum(float(logprobs[len(ctx) - 1 + i, t]) for i, t in enumerate(cont))
    assert score == pytest.approx(expected, abs=1e-4)
    assert greedy == all(int(logprobs[len(ctx) - 1 + i].argmax()) == t for i, t in enumerate(cont))
    with pytest.raises(BenchError, match="loglikelihood_rolling"):
        sd_lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, ("text",), 0)])


def test_batched_loglikelihood_equals_one_request_at_a_time(sd_lm, tmp_path):
    """Requests of different lengths (an empty context among them) share right-padded forwards;
    each score and greedy flag is the one its own forward gives, in the requests' order."""
    texts = [(p, c) for p in ["", *PROMPTS] for c in (" 19", " the new bridge", "\n    return")]
    reqs = [Instance("loglikelihood", {}, text, i) for i, text in enumerate(texts)]
    alone = sd_lm.loglikelihood(reqs)  # batch size 1
    batched = DiversedLM(pair="tiny", method="sd", device="cpu", batch_size=5, output_dir=str(tmp_path))
    together = batched.loglikelihood(reqs)
    assert [g for _, g in together] == [g for _, g in alone]
    assert [s for s, _ in together] == pytest.approx([s for s, _ in alone], abs=1e-4)
    assert len({round(s, 3) for s, _ in alone}) > len(texts) // 2  # the scores tell requests apart


def test_custom_verifier_and_diversed_head_through_model_args(tmp_path):
    custom = DiversedLM(
        method="example_verifier:ConfidenceEnsemble", floor=0.5, device="cpu", output_dir=str(tmp_path)
    )
    diversed = DiversedLM(method="diversed", head="init", draft_len=3, device="cpu", output_dir=str(tmp_path))
    for lm in (custom, diversed):
        assert lm.generate_until([request(PROMPTS[2])])[0] is not None
    rows = load_results(tmp_path).set_index("method")
    assert rows.loc["diversed", "head"] == "init" and rows.loc["diversed", "weight_mean"] == pytest.approx(
        0.5
    )
    assert rows.loc["diversed", "draft_len"] == 3 and rows.loc["confidence", "draft_len"] == 5
    assert custom.verifier.floor == 0.5


@pytest.mark.parametrize(
    "args, message",
    [
        ({"method": "nope"}, "unknown method 'nope'"),
        ({"method": "ensemble", "target_weight": 1.5}, r"target_weight must be in \(0, 1\]"),
        ({"method": "ensemble", "target_weight": "high"}, "target_weight takes a number"),
        (
            {"method": "lossy", "draft_length": 3},
            r"unknown parameter\(s\) \['draft_length'\].*model_args also take",
        ),
        ({"method": "sd", "draft_len": 0}, "draft_len must be >= 1"),
        ({"method": "diversed"}, "head=PATH in lm-eval's model_args"),
        ({"method": "sd", "head": "init"}, "sd: reads no head"),
        ({"method": "sd", "temperature": 1.0}, "--gen_kwargs"),
        ({"method": "sd", "batch_size": "auto"}, "fixed batch size"),
        ({"pair": "nope"}, "unknown pair 'nope'"),
        ({"method": "sd", "engine": "turbo"}, "engine='turbo'; use engine=eager or engine=compiled"),
    ],
)
def test_bad_model_args_are_one_clear_error(args, message, tmp_path):
    with pytest.raises(BenchError, match=message):
        DiversedLM(**{"device": "cpu", "output_dir": str(tmp_path), **args})


def test_the_backend_decodes_on_the_engine_it_is_given_and_its_rows_say_so(tmp_path):
    """sd's target and draft steps both run on the engine given (built, not compiled: an engine
    compiles at its first decode); rows decoded through the backend say which engine ran. The rows
    come from ar, which compiles one graph where sd compiles three (the engine, not the method, is
    what is checked; tests/engines/test_compiled.py checks each method's compiled decode against eager)."""
    from bench.engines import CompiledEngine, EagerEngine
    from bench.store import load_results

    for name, kind in (("eager", EagerEngine), ("compiled", CompiledEngine)):
        sd = DiversedLM(pair="tiny", method="sd", engine=name, device="cpu", output_dir=str(tmp_path / "sd"))
        engines = sd.decoder(Sampling(0.0)).engines
        assert len(engines) == 2 and all(isinstance(e, kind) for e in engines)
        lm = DiversedLM(pair="tiny", method="ar", engine=name, device="cpu", output_dir=str(tmp_path / name))
        lm.generate_until([request("Hi", max_gen_toks=3)])
        assert set(load_results(tmp_path / name)["engine"]) == {name}


def test_unsupported_requests_are_refused(sd_lm):
    with pytest.raises(BenchError, match=r"\['top_p'\] not supported"):
        sd_lm.generate_until([request(PROMPTS[0], top_p=0.9)])
    with pytest.raises(BenchError, match="no chat template; drop --apply_chat_template"):
        sd_lm.apply_chat_template([{"role": "user", "content": "hi"}])


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench.lm_eval_cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
    )


@pytest.mark.slow
def test_command_registers_the_backend_and_refuses_bad_args_in_one_line():
    """The command reaches our constructor (so `--model diversed` resolved) and prints its error alone."""
    bad = cli(
        "--model", "diversed",
        "--model_args", "pair=tiny,method=ensemble,target_weight=2",
        "--device", "cpu", "--tasks", "arith_local", "--include_path", str(TASKS),
    )  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1] == (
        "error: ensemble: target_weight must be in (0, 1], got 2.0 "
        "(model_args also take pair, method, draft_len, drafter, head, seed, dtype, engine, output_dir)"
    )
    assert "Traceback" not in bad.stderr


HUB_TASK = """task: hub_only
dataset_path: openai/gsm8k
dataset_name: main
output_type: generate_until
test_split: test
doc_to_text: "{{question}}"
doc_to_target: "{{answer}}"
"""


@pytest.mark.parametrize(
    "tasks, message",
    [
        (
            ["--tasks", "no_such_task"],
            "error: Tasks not found: no_such_task; `diversed-lm-eval ls tasks` lists them "
            "(add --include_path DIR for your own task files)",
        ),
        (
            [],
            "error: No tasks specified, or no tasks found. Please verify the task names; `diversed-lm-eval ls",
        ),
        (
            ["--tasks", "hub_only"],
            "error: Couldn't reach 'openai/gsm8k' on the Hub (OfflineModeIsEnabled); lm-eval's task",
        ),
    ],
    ids=["unknown-task", "no-task", "hub-dataset"],
)
def test_no_task_an_unknown_task_and_a_dataset_off_the_hub_are_one_line_each(
    tasks, message, tmp_path, monkeypatch, capsys
):
    """lm-eval's own refusals, raised by lm-eval itself, come out of the command as one line naming
    the way round: no task, a task it does not know, and a task whose dataset is on the hub
    (unreachable in the tests). In-process, with lm-eval's task index cut to the given folder (its ~7 s scan of its
    own task files is not what is tested), and without lm-eval's logging set-up, which would leave
    a handler on this test's captured stderr."""
    from functools import partial

    import lm_eval.__main__
    import lm_eval.tasks

    from bench import lm_eval_cli

    (tmp_path / "hub_only.yaml").write_text(HUB_TASK)
    monkeypatch.setattr(lm_eval.__main__, "setup_logging", lambda *a, **k: None)  # no handler left behind
    monkeypatch.setattr(lm_eval.tasks, "TaskManager", partial(TaskManager, include_defaults=False))
    monkeypatch.setattr(sys, "argv", ["diversed-lm-eval", "--model", "diversed", "--model_args", "pair=tiny"])
    sys.argv += ["--device", "cpu", *tasks, "--include_path", str(tmp_path), "--limit", "1"]
    with pytest.raises(SystemExit) as exit_:
        lm_eval_cli.main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(message), err[-2000:]


@pytest.mark.slow
def test_core_cli_does_not_import_lm_eval():
    code = "import sys, bench.cli, bench.runner; print(sorted(m for m in sys.modules if m.startswith('lm_eval')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


# --- GSM8K: our scoring vs lm-eval's gsm8k task on the same completions ------------------------


def lm_eval_gsm8k_scores(completions: list[str], docs: list[dict]) -> dict[str, list[float]]:
    """lm-eval's gsm8k task filters and exact_match settings, read from its own task file, offline."""
    from lm_eval.api.metrics import exact_match_hf_evaluate
    from lm_eval.filters import build_filter_ensemble

    cfg = yaml.safe_load((Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml").read_text())
    [metric] = cfg["metric_list"]
    kwargs = {k: v for k, v in metric.items() if k not in ("metric", "aggregation", "higher_is_better")}
    instances = [Instance("generate_until", d, ("", {}), 0, resps=[c]) for c, d in zip(completions, docs)]
    scores = {}
    for spec in cfg["filter_list"]:
        steps = [(s["function"], {k: v for k, v in s.items() if k != "function"}) for s in spec["filter"]]
        build_filter_ensemble(spec["name"], steps).apply(instances)
        scores[spec["name"]] = [
            float(
                exact_match_hf_evaluate([i.filtered_resps[spec["name"]]], [d["answer"]], **kwargs)[
                    "exact_match"
                ]
            )
            for i, d in zip(instances, docs)
        ]
    return scores


def _final(answer: str) -> str:
    return answer.rsplit("#### ", 1)[1].strip().replace(",", "")


def _body(answer: str) -> str:
    return answer.rsplit("#### ", 1)[0]


# completion from a gold answer -> which side alone credits it, for (strict, flexible); None: both
# agree on every example. docs/lm-eval.md lists each difference with its example.
OURS, THEIRS = "ours", "lm-eval"
CORRUPTIONS = {
    "gold": (lambda a: a, None, None),
    "wrong final number": (lambda a: _body(a) + f"#### {int(_final(a)) + 1}", None, None),
    "no ####, sentence": (lambda a: _body(a) + f"The answer is {_final(a)}.", None, None),
    "thousands commas": (lambda a: _body(a) + f"#### {int(_final(a)):,}", None, None),
    "trailing period": (lambda a: a + ".", None, None),
    "negative of gold": (lambda a: _body(a) + f"#### -{_final(a)}", None, None),
    "no ####, $ and commas": (lambda a: _body(a) + f"The answer is ${int(_final(a)):,}.", None, None),
    "no number": (lambda a: "I do not know.", None, None),
    "#### $N": (lambda a: _body(a) + f"#### ${_final(a)}", OURS, None),
    "####N (no space)": (lambda a: _body(a) + f"####{_final(a)}", OURS, None),
    "#### N.00": (lambda a: _body(a) + f"#### {_final(a)}.00", OURS, OURS),
    "#### 0N (leading zero)": (lambda a: _body(a) + f"#### 0{_final(a)}", OURS, OURS),
    "no ####, N.00": (lambda a: _body(a) + f"The answer is {_final(a)}.00.", None, OURS),
    "text after #### N": (lambda a: a + "\nCheck: 2 + 2 = 4", None, OURS),
    "wrong #### then right ####": (
        lambda a: _body(a) + f"#### {int(_final(a)) + 1}\n#### {_final(a)}",
        None,
        THEIRS,
    ),
}


def test_gsm8k_scoring_matches_lm_eval_except_the_listed_cases(shared_data):
    from bench.metrics import gsm8k

    docs = [json.loads(line) for line in (shared_data / "gsm8k_test.jsonl").read_text().splitlines()]
    negative = [{**d, "answer": _body(d["answer"]) + f"#### -{_final(d['answer'])}"} for d in docs]
    cases = {
        **{k: (docs, *v) for k, v in CORRUPTIONS.items()},
        "negative gold": (negative, lambda a: a, None, None),
    }
    for name, (rows, corrupt, strict_side, flexible_side) in cases.items():
        completions = [corrupt(d["answer"]) for d in rows]
        ours = [gsm8k(c, d, "answer") for c, d in zip(completions, rows)]
        theirs = lm_eval_gsm8k_scores(completions, rows)
        for ours_key, their_key, side in (
            ("exact_strict", "strict-match", strict_side),
            ("exact_flexible", "flexible-extract", flexible_side),
        ):
            pairs = [(o[ours_key], t) for o, t in zip(ours, theirs[their_key])]
            differ = [(o, t) for o, t in pairs if o != t]
            if side is None:
                assert not differ, (name, ours_key, len(differ))
            else:  # every example but a few coincidences (the last number equals the gold one)
                assert len(differ) >= 0.95 * len(rows), (name, ours_key, len(differ))
                assert all((o > t) == (side == OURS) for o, t in differ), (name, ours_key)
        if name in ("gold", "negative gold"):
            assert all(o["exact_strict"] == 1 for o in ours)
