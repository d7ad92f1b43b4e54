"""Multi-turn examples: each later user turn is decoded with the method's OWN earlier answers in
the conversation, as Spec-Bench's evaluation/eval.py does (its answer to turn 1 goes into the chat
history, turn 2's prompt is the whole conversation in the chat template, prefilled afresh).

A turn is one ordinary decode of that prompt, timed like any other (prefill included); an
example's row sums its turns' counters and times, which is what Spec-Bench times and counts too
(it sums ``new_tokens`` and ``wall_time`` over turns). The text put in the history is the answer
decoded without special tokens, cut at the task's stop strings and stripped, as Spec-Bench strips
its output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields

from bench.decode_stats import DecodeStats, Generation
from bench.errors import BenchError
from bench.tasks import Example

# How a counter of two turns combines: every field not named here is a count (numbers add, and
# per-draft-position lists add position by position).
_SAME = {"draft_len", "batch_size"}
_LARGEST = {"kv_cache_bytes"}
_JOINED = {"weights"}  # one entry per verified position, in order

Messages = list[dict[str, str]]


def check_chat(task: str, examples: Sequence[Example], chat_template: bool) -> None:
    """Later turns need a conversation format: the tokenizer's chat template, never an invented one."""
    multi = [e.example_id for e in examples if e.follow_ups]
    if multi and not chat_template:
        raise BenchError(
            f"task {task}: example {multi[0]} (and {len(multi) - 1} more) has several turns, asked with the "
            "earlier answers as chat history: add --chat-template (a pair whose tokenizer has one, e.g. smollm2)"
        )


def merge_stats(first: DecodeStats, later: DecodeStats) -> DecodeStats:
    """Two turns' counters as one example's: counts and times add (NaN times stay NaN)."""
    out = {}
    for f in fields(DecodeStats):
        a, b = getattr(first, f.name), getattr(later, f.name)
        if f.name in _SAME:
            out[f.name] = a
        elif f.name in _LARGEST:
            out[f.name] = max(a, b)
        elif f.name in _JOINED:
            out[f.name] = a + b
        elif isinstance(a, list):
            if not len(a) == len(b) == first.draft_len:
                raise BenchError(f"DecodeStats.{f.name}: not one entry per draft position; say how turns combine it")
            out[f.name] = [x + y for x, y in zip(a, b)]
        elif isinstance(a, (int, float)):
            out[f.name] = a + b
        else:
            raise BenchError(f"DecodeStats.{f.name}: cannot tell how two turns combine it")
    return DecodeStats(**out)


def merge(first: Generation, later: Generation) -> Generation:
    """One example's generation from two turns: the later turn's tokens, both turns' counters, and
    the traces one after the other (positions and rounds counted on from the first turn's)."""
    trace = None
    if first.trace is not None and later.trace is not None:
        shift = first.stats.new_tokens, first.stats.rounds
        trace = first.trace + [(t[0] + shift[0], t[1] + shift[1], *t[2:]) for t in later.trace]
    return Generation(later.token_ids, merge_stats(first.stats, later.stats), trace)


def decode_turns(
    examples: Sequence[Example],
    firsts: Sequence[Generation],
    decode: Callable[[list[list[int]], list[int]], list[Generation]],
    prompt: Callable[[Example, Messages], list[int]],
    answer: Callable[[list[int]], str],
    seed: Callable[[Example, int], int],
) -> list[tuple[Generation, list[str]]]:
    """Every example's later turns, decoded together turn by turn (``decode(prompts, seeds)``)
    after ``firsts``, its first turns' generations. ``prompt`` encodes a conversation ending in a
    user turn, ``answer`` turns a completion's tokens into the text the history keeps. Returns per
    example its merged generation and every turn's answer as the history kept it."""
    history: list[Messages] = [[{"role": "user", "content": e.prompt}] for e in examples]
    answers = [[answer(g.token_ids)] for g in firsts]
    merged = list(firsts)
    for turn in range(1, 1 + max((len(e.follow_ups) for e in examples), default=0)):
        ask = [i for i, e in enumerate(examples) if turn <= len(e.follow_ups)]
        for i in ask:
            history[i] = [
                *history[i],
                {"role": "assistant", "content": answers[i][-1]},
                {"role": "user", "content": examples[i].follow_ups[turn - 1]},
            ]
        gens = decode([prompt(examples[i], history[i]) for i in ask], [seed(examples[i], turn) for i in ask])
        for i, gen in zip(ask, gens):
            merged[i] = merge(merged[i], gen)
            answers[i].append(answer(gen.token_ids))
    return list(zip(merged, answers))
