#!/usr/bin/env bash
# DIVERSED's head on smollm2's EAGLE drafts (issue 52): trained on XSum rows 0-99 of
# $data/xsum_test.jsonl (train.jsonl), then run on rows 100-199 (test.jsonl) with the same drafter.
#   PROMPTS=4 BATCH=2 TOKENS=16 LIMIT=2 NEW_TOKENS=16 scripts/smollm2_diversed_eagle.sh OUT    (a smoke run; the
#   documented head: PROMPTS=32 BATCH=8 TOKENS=48)
set -euo pipefail
out=${1:-/tmp/smollm2-diversed-eagle}; data=${DATA:-../shared/data}
prompts=${PROMPTS:-32}; batch=${BATCH:-8}; tokens=${TOKENS:-48}; limit=${LIMIT:-10}; new=${NEW_TOKENS:-64}
mkdir -p "$out/data"
python - "$out/data" "$data/xsum_test.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[2])]
for name, part in (("train", rows[:100]), ("test", rows[100:200])):
    with open(f"{sys.argv[1]}/{name}.jsonl", "w") as f:
        f.writelines(json.dumps({k: r[k] for k in ("document", "summary", "id")}) + "\n" for r in part)
PY
[ -f "$out/head/card.json" ] || diversed-bench train --method diversed --drafter eagle --pair smollm2 --task xsum \
    --data "$out/data" --chat-template --num-prompts "$prompts" --batch-size "$batch" --epochs 1 --rollout-tokens "$tokens" \
    --dtype bfloat16 --output-dir "$out/head"
diversed-bench run --pair smollm2 --drafter eagle --method diversed --head "$out/head" --task xsum --num-fewshot 0 \
    --chat-template --data "$out/data" --limit "$limit" --max-new-tokens "$new" --temperature 1 --output-dir "$out/results"
