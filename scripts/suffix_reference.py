"""Record the authors' suffix tree on random cases, for tests/drafters/test_suffix.py to replay on the port
(bench/drafters/suffix.py): tests/data/suffix_reference.json.

    git clone https://github.com/snowflakedb/ArcticInference
    python scripts/suffix_reference.py ArcticInference/csrc/suffix_decoding [--commit SHA]

Compiles ``suffix_tree.cc`` with a small driver (g++, C++20), plays random operations on it
(sequences extended, some removed, speculations in chain and tree mode under random budgets,
factors, offsets and probability floors, over small vocabularies so that counts tie) and stores
each case's operations with the C++ answers. Recorded from commit 9d46438 (November 2026).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import tempfile
from pathlib import Path

DRIVER = r"""
#include <cstdio>
#include <iostream>
#include <vector>
#include "suffix_tree.h"
int main() {
    int depth; std::cin >> depth;
    SuffixTree t(depth);
    char op;
    while (std::cin >> op) {
        if (op == 'E') { int id, n; std::cin >> id >> n; std::vector<int32_t> v(n); for (auto& x : v) std::cin >> x; t.extend(id, v); }
        else if (op == 'R') { int id; std::cin >> id; t.remove(id); }
        else {
            int n; std::cin >> n; std::vector<int32_t> c(n); for (auto& x : c) std::cin >> x;
            int most, tree; double f, o, p; std::cin >> most >> f >> o >> p >> tree;
            Draft d = t.speculate(c, most, (float)f, (float)o, (float)p, tree);
            std::printf("%d %zu", d.match_len, d.token_ids.size());
            for (auto x : d.token_ids) std::printf(" %d", x);
            for (auto x : d.parents) std::printf(" %d", x);
            for (auto x : d.probs) std::printf(" %.9g", x);
            std::printf(" %.9g\n", d.score);
        }
    }
}
"""


def case(rng: random.Random) -> dict:
    """Random operations: extend a sequence (sometimes with a piece of another), remove one,
    speculate on a context cut from a sequence or made up."""
    depth, vocab = rng.choice([2, 3, 5, 8, 24]), rng.choice([2, 3, 5, 12])
    ops: list[list] = []
    seqs: dict[int, list[int]] = {}
    for _ in range(rng.randrange(5, 40)):
        r = rng.random()
        if r < 0.5 or not seqs:
            sid = rng.randrange(6)
            tokens = [rng.randrange(vocab) for _ in range(rng.randrange(1, 40))]
            if seqs and rng.random() < 0.3:
                other = seqs[rng.choice(list(seqs))]
                at = rng.randrange(len(other))
                tokens = other[at : at + rng.randrange(1, 12)]
            seqs.setdefault(sid, []).extend(tokens)
            ops.append(["extend", sid, tokens])
        elif r < 0.6:
            sid = rng.choice(list(seqs))
            del seqs[sid]
            ops.append(["remove", sid])
        else:
            src = seqs[rng.choice(list(seqs))]
            end = rng.randrange(len(src) + 1)
            context = src[max(0, end - rng.randrange(1, 30)) : end] if rng.random() < 0.7 else [
                rng.randrange(vocab) for _ in range(rng.randrange(10))
            ]
            args = [rng.randrange(30), rng.choice([0.3, 0.5, 1.0, 1.5, 2.0]), rng.choice([0.0, 0.0, 1.0, -1.0, 2.5])]
            args += [rng.choice([0.0, 0.05, 0.1, 0.1, 0.2, 0.3, 0.5]), rng.random() < 0.5]
            ops.append(["speculate", context, *args])
    return {"depth": depth, "ops": ops}


def play(driver: Path, c: dict) -> None:
    """Run a case's operations on the C++ tree; each speculation gets its answer appended."""
    lines = [str(c["depth"])]
    for op in c["ops"]:
        if op[0] == "extend":
            lines.append(f"E {op[1]} {len(op[2])} " + " ".join(map(str, op[2])))
        elif op[0] == "remove":
            lines.append(f"R {op[1]}")
        else:
            context, most, f, o, p, tree = op[1:]
            lines.append(f"S {len(context)} {' '.join(map(str, context))} {most} {f} {o} {p} {int(tree)}")
    out = subprocess.run([str(driver)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
    answers = iter(out.stdout.splitlines())
    for op in c["ops"]:
        if op[0] == "speculate":
            fields = next(answers).split()
            match_len, n = int(fields[0]), int(fields[1])
            op.append({
                "match_len": match_len,
                "tokens": [int(x) for x in fields[2 : 2 + n]],
                "parents": [int(x) for x in fields[2 + n : 2 + 2 * n]],
                "probs": [float(x) for x in fields[2 + 2 * n : 2 + 3 * n]],
                "score": float(fields[-1]),
            })  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csrc", type=Path, help="ArcticInference's csrc/suffix_decoding")
    parser.add_argument("--commit", default="9d46438", help="the ArcticInference commit it holds")
    parser.add_argument("--cases", type=int, default=60)
    parser.add_argument("--out", type=Path, default=Path(__file__).parents[1] / "tests/data/suffix_reference.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        driver = Path(tmp) / "driver"
        (Path(tmp) / "driver.cc").write_text(DRIVER)
        subprocess.run(
            ["g++", "-std=c++20", "-O1", f"-I{args.csrc}", "-o", str(driver), str(Path(tmp) / "driver.cc"),
             str(args.csrc / "suffix_tree.cc")],
            check=True,
        )  # fmt: skip
        rng = random.Random(0)
        cases = [case(rng) for _ in range(args.cases)]
        for c in cases:
            play(driver, c)
    source = f"snowflakedb/ArcticInference@{args.commit} csrc/suffix_decoding/suffix_tree.cc"
    args.out.write_text(json.dumps({"source": source, "cases": cases}, separators=(",", ":")) + "\n")
    print(f"{args.out}: {len(cases)} cases, {sum(op[0] == 'speculate' for c in cases for op in c['ops'])} speculations")


if __name__ == "__main__":
    main()
