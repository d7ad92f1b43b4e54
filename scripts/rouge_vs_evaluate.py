"""Our ROUGE (bench.metrics.rouge) against evaluate's rouge module on the real XSum and CNN/DM slices.

Usage: python scripts/rouge_vs_evaluate.py PATH_TO_EVALUATE_ROUGE [SHARED_DATA_DIR]
PATH is evaluate's ``metrics/rouge/rouge.py`` (or ``rouge`` where a warm hub cache has it). The
predictions are each document's first 30 words, so the scores are neither 0 nor 100.
"""

import json
import sys
from pathlib import Path

import evaluate

from bench.metrics import rouge


def main(module: str, data: Path) -> None:
    ev = evaluate.load(module)
    for name, field, ref in (("xsum", "document", "summary"), ("cnndm", "article", "highlights")):
        rows = [json.loads(line) for line in (data / f"{name}_test.jsonl").open()]
        preds = [" ".join(r[field].split()[:30]) for r in rows]
        refs = [r[ref] for r in rows]
        ours = [rouge(p, {"reference": t}, None) for p, t in zip(preds, refs)]
        stemmed = ev.compute(predictions=preds, references=refs, use_stemmer=True, use_aggregator=False)
        defaults = ev.compute(predictions=preds, references=refs)
        for key in ("rouge1", "rouge2", "rougeL"):
            diff = max(abs(o[key] - 100 * t) for o, t in zip(ours, stemmed[key]))
            mean = sum(o[key] for o in ours) / len(ours)
            print(
                f"{name} n={len(rows)} {key}: ours {mean:.3f}; max per-example |ours - evaluate(stemmer)| "
                f"{diff:.1e}; evaluate's defaults (no stemmer, bootstrap mid) {100 * defaults[key]:.3f}"
            )


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2] if len(sys.argv) > 2 else "../shared/data"))
