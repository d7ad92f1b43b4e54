"""Quality metrics, named from task files (``metric: gsm8k``). Each maps a cut completion and its
dataset row to a dict of scores; the task file names the primary one (``quality:``)."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from bench.errors import BenchError
from bench.sandbox import run_tests

# Scores by name (read-only: a Mapping, so a metric of floats only is one too).
Metric = Callable[[str, dict[str, Any], str | None], Mapping[str, float | str]]
METRICS: dict[str, Metric] = {}


def metric(name: str) -> Callable[[Metric], Metric]:
    def register(fn: Metric) -> Metric:
        METRICS[name] = fn
        return fn

    return register


def get_metric(name: str) -> Metric:
    if name not in METRICS:
        raise BenchError(f"unknown metric {name!r}; choose one of {', '.join(METRICS)}")
    return METRICS[name]


# --- GSM8K -----------------------------------------------------------------------------------

_NUMBER = r"-?[\d,]*\.?\d+"
_STRICT = re.compile(r"####\s*\$?\s*(" + _NUMBER + ")")


def _normalise_number(text: str) -> str:
    text = text.replace(",", "").rstrip(".")
    try:
        value = float(text)
    except ValueError:
        return text
    return str(int(value)) if value.is_integer() else repr(value)


def extract_strict(text: str) -> str | None:
    """The number after the first ``####``."""
    match = _STRICT.search(text)
    return _normalise_number(match.group(1)) if match else None


def extract_flexible(text: str) -> str | None:
    """The authors' rule: the number after ``####``, else the last number in the text."""
    strict = extract_strict(text)
    if strict is not None:
        return strict
    numbers = re.findall(_NUMBER, text)
    return _normalise_number(numbers[-1]) if numbers else None


@metric("gsm8k")
def gsm8k(completion: str, doc: dict[str, Any], reference_field: str | None) -> dict[str, float]:
    gold = extract_strict(doc[reference_field or "answer"])
    return {
        "exact_strict": float(extract_strict(completion) == gold),
        "exact_flexible": float(extract_flexible(completion) == gold),
    }


# --- ROUGE -----------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _rouge_scorer() -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)


@metric("rouge")
def rouge(completion: str, doc: dict[str, Any], reference_field: str | None) -> dict[str, float]:
    """ROUGE-1/2/L F1 x 100 with rouge_score (``evaluate.load("rouge")`` would need the hub)."""
    scores = _rouge_scorer().score(doc[reference_field or "reference"], completion.strip())
    return {name: 100 * s.fmeasure for name, s in scores.items()}


# --- Code ------------------------------------------------------------------------------------

FENCE = re.compile(r"```(?:python|py)?\n(.*?)(?:```|$)", re.DOTALL)


def extract_code(completion: str, prefix: str = "") -> str:
    """The first fenced code block if the model wrote one, else the completion itself; but code
    before the first fence is the answer (code, then a fence it closes or a usage example): text
    before it that is Python after ``prefix`` (HumanEval's prompt) is taken, prose is not."""
    match = FENCE.search(completion)
    if match is None:
        return completion
    before = completion[: match.start()]
    return before if _is_code(prefix + before, prefix.count("\n")) else match.group(1)


def _is_code(text: str, after_line: int) -> bool:
    """Whether ``text`` parses as Python with a statement past line ``after_line`` that is more than
    a bare word (a line of prose such as ``Sure`` parses too)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):  # ValueError: a null byte
        return False
    return any(
        isinstance(n, ast.stmt)
        and n.lineno > after_line
        and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Name))
        for n in ast.walk(tree)
    )


def defined_names(code: str) -> set[str]:
    """The functions, classes and variables ``code`` defines at top level: what tests may use."""
    names = set()
    for node in ast.parse(code).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def mbpp_tests(doc: dict[str, Any]) -> str:
    return f"{doc.get('test_setup_code') or ''}\n" + "\n".join(doc["test_list"]) + "\n"


def humaneval_tests(doc: dict[str, Any]) -> str:
    return f"{doc['test']}\n\ncheck({doc['entry_point']})\n"


@metric("mbpp")
def mbpp(completion: str, doc: dict[str, Any], reference_field: str | None) -> dict[str, float | str]:
    """pass@1, the ``sandbox`` that ran the code and what its judge discarded on the way (output past
    its cap: ``sandbox_note``; text columns, left out of means)."""
    outcome = run_tests(extract_code(completion), mbpp_tests(doc), defined_names(doc["code"]))
    return {"pass@1": float(outcome.passed), "sandbox": outcome.sandbox, "sandbox_note": outcome.note}


@metric("humaneval")
def humaneval(completion: str, doc: dict[str, Any], reference_field: str | None) -> dict[str, float | str]:
    # The prompt's helpers (``poly``, ``encode_cyclic``) run on the trusted side, as the prompt wrote
    # them: the completion can neither redefine them nor rebind what they use.
    # A chat model's fenced answer restates the signature: its code follows the prompt and redefines it.
    code = extract_code(completion, prefix=doc["prompt"])
    outcome = run_tests(
        doc["prompt"] + code, humaneval_tests(doc), {doc["entry_point"]}, trusted=doc["prompt"]
    )
    return {"pass@1": float(outcome.passed), "sandbox": outcome.sandbox, "sandbox_note": outcome.note}


# --- Spec-Bench --------------------------------------------------------------------------------

# The categories whose ``reference`` an automatic score can read (the MT-bench ones hold hints for
# an LLM judge, qa has none): the score's name, and how it reads the first reference.
SPEC_BENCH_SCORES = {"translation": "rougeL", "summarization": "rouge2", "math_reasoning": "exact", "rag": "hit"}


def _normalise_text(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


@metric("spec_bench")
def spec_bench(completion: str, doc: dict[str, Any], reference_field: str | None) -> dict[str, float | str]:
    """The category's reference score, NaN where it has none (``reference_metric`` names it, a
    text column): ROUGE-L F1 x 100 for translation, ROUGE-2 for summarization, the GSM8K answer
    (``#### n``, else the last number) for math_reasoning, and for rag whether any reference answer
    appears in the completion as whole words (lowercased, punctuation dropped): open-domain QA's hit."""
    name = SPEC_BENCH_SCORES.get(str(doc.get("category")), "")
    references = doc.get(reference_field or "reference")
    if not name or references is None or not len(references):
        return {"reference_metric": "", "reference_score": float("nan")}
    first = references[0]
    if name == "exact":
        score = float(extract_flexible(completion) == extract_strict(str(first)))
    elif name == "hit":
        answers = [_normalise_text(str(a)) for a in ([first] if isinstance(first, str) else first)]
        text = f" {_normalise_text(completion)} "
        score = float(any(a and f" {a} " in text for a in answers))
    else:
        score = float(rouge(completion, {"reference": str(first)}, None)[name])
    return {"reference_metric": name, "reference_score": score}
