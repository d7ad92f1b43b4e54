"""How ``lookup_tree`` breaks ties between equally shared nodes (bench/drafters/lookup.py), decided
without a model: each reference summary is drafted from its article by prompt lookup, a round
keeping the longest tree path that the summary continues (greedy verification against the
reference), and tokens per round are compared for the shallower node first (what ``lookup_tree``
does) against the earlier match's branch first, beside the chain.

    python scripts/lookup_tree_ties.py ../shared/data/xsum_test.jsonl --limit 100   # chosen on
    python scripts/lookup_tree_ties.py ../shared/data/cnndm_test.jsonl              # confirmed on

Needs the smollm2 pair fetched (its tokenizer). Prints tokens per round per N and matches.
"""

from __future__ import annotations

import argparse
import json

from bench.drafters.lookup import continuation, merge_trie, occurrences
from bench.pairs import load_pair


def tree(ids: list[int], tokens: int, matches: int, shallow_first: bool) -> tuple[list[int], list[int]]:
    """``lookup_tree`` (ngram 2, match=first) with either tie order."""
    _, starts = occurrences(ids, 2)
    conts = [continuation(ids, s, tokens, frozenset()) for s in starts[:matches]]
    return merge_trie(conts, tokens, shallow_first)


def tokens_per_round(docs: list[tuple[list[int], list[int]]], n: int, matches: int, shallow_first: bool) -> float:
    rounds = emitted = 0
    for prompt, answer in docs:
        seq, done = list(prompt), 0
        while done < len(answer):
            nodes, parents = tree(seq, n, matches, shallow_first)
            node, kept = -1, 0
            for want in answer[done:]:
                nxt = [j for j, p in enumerate(parents) if p == node and nodes[j] == want]
                if not nxt:
                    break
                node, kept = nxt[0], kept + 1
            new = answer[done : done + kept + 1]
            seq, done, rounds, emitted = seq + new, done + len(new), rounds + 1, emitted + len(new)
    return emitted / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help="a jsonl of article/highlights (CNN/DM) or document/summary (XSum)")
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    tokenizer = load_pair("smollm2", device="cpu").tokenizer
    docs = []
    for line in open(args.data).readlines()[: args.limit]:
        row = json.loads(line)
        source, target = (row["article"], row["highlights"]) if "highlights" in row else (row["document"], row["summary"])
        docs.append((tokenizer(source).input_ids[:1500], tokenizer(" " + target).input_ids))
    for n in (5, 10):
        found = {"chain": tokens_per_round(docs, n, 1, True)}
        for m in (2, 4, 8):
            found[f"M={m} shallow first"] = tokens_per_round(docs, n, m, True)
            found[f"M={m} earlier match first"] = tokens_per_round(docs, n, m, False)
        print(f"N={n}: " + ", ".join(f"{k} {v:.3f}" for k, v in found.items()))


if __name__ == "__main__":
    main()
