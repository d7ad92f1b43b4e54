"""Write the prompts the shipped `smollm2` EAGLE-3 head was trained and held out on.

Why a script: the head's card must say exactly which prompts it saw, and the prompts must be
disjoint from everything the harness evaluates (Spec-Bench's 480 questions, the shared CNN/DM,
GSM8K, XSum and MBPP slices, tasks/fixtures; tests/eagle/test_eagle_corpus.py checks it). So every
prompt comes from a train-side source read from a public repository at a fixed commit:

| source | repository @ commit, path | licence |
|---|---|---|
| gsm8k_train | openai/grade-school-math @ 3101c7d, grade_school_math/data/train.jsonl | MIT |
| self_instruct_seed | yizhongw/self-instruct @ 0b26cca, data/seed_tasks.jsonl | Apache-2.0 |
| mbpp_train | google-research/google-research @ 2251e8c, mbpp/mbpp.jsonl (task ids 1-10, 601-974) | CC BY 4.0 |
| t0:TEMPLATE | yizhongw/self-instruct @ 0b26cca, data/finetuning/t0_train_50k/data_per_template/TEMPLATE.jsonl | repo Apache-2.0; per dataset below |

The T0 files are the P3 prompts of each dataset's *train* split (T0 never trains on test rows).
Licences of the datasets behind them: adversarial_qa CC BY-SA 4.0, quoref CC BY 4.0, ropes CC BY
4.0, cosmos_qa CC BY 4.0, duorc MIT; CNN/DailyMail and XSum state none (the articles are the
publishers'), so for those two the shipped prompts file keeps only where each prompt comes from,
its sha256 and hashes of its word windows (``shingles``, enough to prove it shares no passage with
an evaluated row), never the text: the head ships, the text does not (``--redact``).

Task-shaped prompts: GSM8K, MBPP, and the CNN/DM and XSum articles of one template each are put in
the harness's own 0-shot query of the task (tasks/*.yaml), so the head learns the text it drafts in
evaluation; the other T0 templates are kept verbatim (open instructions, reading comprehension).

Usage: python scripts/eagle_prompts.py --grade-school-math DIR --self-instruct DIR --mbpp FILE
    [--redact] --out OUT.jsonl --evaluated ../shared/data/*.jsonl tasks/fixtures/*/*.jsonl
(DIR: a checkout of the repository at the commit above; FILE: task ids 1-10 and 601-974 of
mbpp.jsonl, one JSON object a line). ``--redact`` writes the shippable file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from pathlib import Path

T0 = "data/finetuning/t0_train_50k/data_per_template"
# (source, per-row maker key, train rows, held-out rows); held-out rows follow the train rows.
QA_TEMPLATES = (
    "adversarial_qa_dbert_answer_the_following_q",
    "adversarial_qa_dbidaf_question_context_answer",
    "quoref_Answer_Question_Given_Context",
    "ropes_prompt_beginning",
    "cosmos_qa_context_question_description_answer_text",
    "duorc_SelfRC_answer_question",
)
NEWS = {"cnn_dailymail_3_0_0_news_summary": "cnndm", "xsum_summarize_DOC": "xsum"}
GSM8K_ROWS = 1025  # of the 7,473: 1,000 train and 25 held out
UNLICENSED = ("t0:cnn_dailymail", "t0:xsum")
QUERIES = {
    "gsm8k": "Question: {question}\nAnswer: Let's think step by step.\n",
    "mbpp": "{text}\nYour code should pass these tests:\n{test_list}\n",
    "cnndm": "Article: {article}\n\nHighlights:",
    "xsum": "Summarize each document in one sentence of under 20 words.\n\nDocument: {document}\n\nSummary:",
}
HELDOUT = 25  # held-out rows per source: the learning curve's per-domain points
VALID = 15  # the rows before them: the held-out loss that tells training to stop (never judged)
DOMAINS = {"gsm8k": "math", "mbpp": "code", "self_instruct": "instructions", "t0:cnn": "cnndm", "t0:xsum": "xsum"}


def domain(source: str) -> str:
    """What kind of text a source's prompts ask for (the card's per-domain acceptance)."""
    return next((d for prefix, d in DOMAINS.items() if source.startswith(prefix)), "qa")


SHINGLE, STRIDE = 12, 24


def words(text: str) -> list[str]:
    """A text's lower-cased words and numbers: what the overlap checks compare."""
    return re.findall(r"[a-z0-9]+", text.lower())


def shingle(ws: list[str]) -> str:
    return hashlib.sha256(" ".join(ws).encode()).hexdigest()[:10]


def shingles(text: str, stride: int = STRIDE) -> list[str]:
    """Hashes of the text's SHINGLE-word windows starting every ``stride`` words. Stored every
    STRIDE words for a redacted prompt; an evaluated text hashed at every word (stride 1) shares
    one of them whenever the two share a run of SHINGLE + STRIDE - 1 words (35)."""
    ws = words(text)
    return [shingle(ws[i : i + SHINGLE]) for i in range(0, max(len(ws) - SHINGLE + 1, 1), stride)]


def jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


EVALUATED_FIELDS = ("article", "document", "question", "text", "turns", "prompt")


def evaluated_texts(files: list[Path]) -> list[str]:
    """Every text a command can put before the model from these files (the shared slices, the
    task fixtures): the fields that become prompts, Spec-Bench's turns one by one."""
    out: list[str] = []
    for row in (r for f in files for r in jsonl(f)):
        for k in EVALUATED_FIELDS:
            value = row.get(k)
            out += value if isinstance(value, list) else [value] if isinstance(value, str) else []
    return [t for t in out if t.strip()]


def overlaps(lines: list[dict], texts: list[str]) -> list[tuple[str, int]]:
    """The (source, row) of every prompt line holding an evaluated text: its first 40 words
    inside a prompt's words (texts of 6 words or more), or a word window shared with a redacted
    line's ``shingles`` (texts of SHINGLE words or more)."""
    joined = {(x["source"], x["row"]): " " + " ".join(words(x["prompt"])) + " " for x in lines if "prompt" in x}
    everything = "\n".join(joined.values())
    stored = {h: (x["source"], x["row"]) for x in lines for h in x.get("shingles", [])}
    hits = []
    for text in texts:
        ws = words(text)
        probe = " " + " ".join(ws[:40]) + " "
        if len(ws) >= 6 and probe in everything:
            hits += [k for k, v in joined.items() if probe in v]
        hits += [stored[h] for h in shingles(text, stride=1) if h in stored and len(ws) >= SHINGLE]
    return hits


def seed_prompt(row: dict) -> str:
    """A seed task as one user turn: the instruction, then its first input when it has one."""
    text = row["instruction"].strip()
    first = (row.get("instances") or [{}])[0].get("input", "").strip()
    return f"{text}\n\n{first}" if first else text


def news_document(template: str, prompt: str) -> str:
    """The article inside a T0 news prompt of the two templates read ('Summarise the article:' /
    'Summarize:' then the text)."""
    head = "Summarise the article:" if template.startswith("cnn") else "Summarize:"
    if not prompt.startswith(head):
        raise SystemExit(f"{template}: a prompt does not start with {head!r}; the template changed")
    return prompt[len(head) :].strip()


def sources(gsm: Path, si: Path, mbpp: Path) -> dict[str, list[tuple[str, str]]]:
    """Each source's rows as (prompt, the text whose start no train prompt may hold when it is held out), in file order."""
    out: dict[str, list[tuple[str, str]]] = {}
    out["gsm8k_train"] = [
        (QUERIES["gsm8k"].format(question=r["question"].strip()), r["question"])
        for r in jsonl(gsm / "grade_school_math/data/train.jsonl")[:GSM8K_ROWS]
    ]
    out["self_instruct_seed"] = [(seed_prompt(r), seed_prompt(r)) for r in jsonl(si / "data/seed_tasks.jsonl")]
    out["mbpp_train"] = [
        (QUERIES["mbpp"].format(text=r["text"], test_list="\n".join(r["test_list"])), r["text"])
        for r in jsonl(mbpp)
    ]
    for template, task in NEWS.items():
        docs = [news_document(template, r["prompt"]) for r in jsonl(si / T0 / f"{template}.jsonl")]
        field = "article" if task == "cnndm" else "document"
        out[f"t0:{template}"] = [(QUERIES[task].format(**{field: d}), d) for d in docs]
    others = sorted(p.stem for p in (si / T0).glob("*.jsonl") if p.stem.startswith(("cnn_", "xsum_")))
    for template in QA_TEMPLATES + tuple(t for t in others if t not in NEWS):
        out[f"t0:{template}"] = [(r["prompt"].strip(), r["prompt"]) for r in jsonl(si / T0 / f"{template}.jsonl")]
    return out


def lines(rows: dict[str, list[tuple[str, str]]], redact: bool, banned: list[str]) -> list[dict]:
    """{source, domain, row, split, prompt | sha256 + shingles}: the last HELDOUT rows of each source are
    held out, the VALID before them validate, the rest train (of the verbatim news templates, all: their articles
    recur across templates). Duplicate prompts are dropped, and so is a train prompt holding the
    start of a held-out row's text (the same article under another template), and so is any prompt
    holding a text that a command here evaluates (``banned``: MBPP repeats some problem texts across
    its splits, and XSum some boilerplate across weeks)."""
    held = {s: items[-HELDOUT - VALID :] for s, items in rows.items() if _holds_out(s)}
    starts = [re.sub(r"\s+", " ", text).strip()[:200] for items in held.values() for _, text in items]
    seen: set[str] = set()
    out = []
    for source, items in rows.items():
        for i, (prompt, text) in enumerate(items):
            split = _split(i, len(items)) if source in held else "train"
            flat = re.sub(r"\s+", " ", prompt)
            if prompt in seen or (split == "train" and any(s in flat for s in starts)):
                continue
            seen.add(prompt)
            line = {"source": source, "domain": domain(source), "row": i, "split": split}
            if redact and source.startswith(UNLICENSED):
                line["sha256"] = hashlib.sha256(prompt.encode()).hexdigest()
                line["shingles"] = shingles(prompt)
            else:
                line["prompt"] = prompt
            out.append(line)
    full = [{**x, "prompt": (p := rows[x["source"]][x["row"]][0]), "shingles": shingles(p)} for x in out]
    clash = set(overlaps(full, banned))
    return [x for x in out if (x["source"], x["row"]) not in clash]


def _split(i: int, n: int) -> str:
    return "heldout" if i >= n - HELDOUT else "valid" if i >= n - HELDOUT - VALID else "train"


def _holds_out(source: str) -> bool:
    """Sources with held-out rows: all but the verbatim CNN/DM and XSum templates."""
    return not source.startswith(UNLICENSED) or source.removeprefix("t0:") in NEWS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grade-school-math", type=Path, required=True)
    ap.add_argument("--self-instruct", type=Path, required=True)
    ap.add_argument("--mbpp", type=Path, required=True)
    ap.add_argument("--redact", action="store_true", help="CNN/DM and XSum rows without their text")
    ap.add_argument("--evaluated", type=Path, nargs="+", required=True,
                    help="every evaluated file (../shared/data/*.jsonl tasks/fixtures/*/*.jsonl): prompts holding their texts are dropped")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    out = lines(sources(a.grade_school_math, a.self_instruct, a.mbpp), a.redact, evaluated_texts(a.evaluated))
    a.out.write_text("".join(json.dumps(x) + "\n" for x in out))
    print(f"{a.out}: {len(out)} prompts from {len({x['source'] for x in out})} sources")


if __name__ == "__main__":
    main()
