#!/usr/bin/env bash
# A target-only judge (SelfJudge) on smollm2 with prompt-lookup drafts on CNN/DM (issue 45):
# trained on XSum articles put in CNN/DM's 0-shot prompt (train split: $data/xsum_test.jsonl,
# disjoint from the 10 judged CNN/DM examples), then run beside ar, lookup sd and relaxed (TensorRT-LLM's target-only rule).
#   QUESTIONS=24 TIMING=0 scripts/smollm2_lookup_judge.sh OUT    (TIMING=3: the timed version)
set -euo pipefail
out=${1:-/tmp/smollm2-judge}; questions=${QUESTIONS:-24}; timing=${TIMING:-0}; data=${DATA:-../shared/data}
mkdir -p "$out/data"
python - "$out/data/train.jsonl" "$data/xsum_test.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for line in open(sys.argv[2]):
        r = json.loads(line)
        f.write(json.dumps({"article": r["document"], "highlights": r["summary"], "id": "xsum-" + r["id"]}) + "\n")
PY
task=$(python -c "from bench.registry import find; print(find('tasks', 'cnndm'))")
sed 's/^num_fewshot: 1/num_fewshot: 0/' "$task" > "$out/data/cnndm0.yaml"
[ -f "$out/head/card.json" ] || diversed-bench train --method selfjudge --drafter lookup --task "$out/data/cnndm0.yaml" --pair smollm2 --data "$out/data" \
    --chat-template --num-prompts "$questions" --dtype bfloat16 --output-dir "$out/head"
diversed-bench run --pair smollm2 --drafter lookup --task cnndm --data $data/cnndm_test.jsonl \
    --num-fewshot 0 --chat-template --dtype bfloat16 --method ar,sd,relaxed,selfjudge --head "$out/head" \
    --param relaxed_topk=10 --param relaxed_delta=0.3 --param tau=0.25,0.5,0.75 --temperature 0 --max-new-tokens 96 --limit 10 --timing-examples "$timing" \
    --output-dir "$out/results"
