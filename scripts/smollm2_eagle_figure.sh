#!/usr/bin/env bash
# The paper's figure on a real LLM (docs/real-pair.md "The paper's figure with EAGLE drafts"): smollm2 with
# its EAGLE head at temperature 1 on XSum, quality (ROUGE-2, log p per token) against normalised time for
# ar, lossless sd, lossy SD, SpecCascade, the static ensemble swept, DIVERSED trained here on EAGLE drafts
# and AutoJudge mined here on EAGLE drafts; then `compare --candidate diversed` on the run.
#   scripts/smollm2_eagle_figure.sh OUT     (EXAMPLES, TIMING, QUESTIONS set the sizes)
# Heads train on XSum rows 0-99 of the shared slice (DATA/xsum_test.jsonl), the run judges rows 100-199: disjoint.
# The task is XSum 0-shot in the chat template. Needs `diversed-bench fetch smollm2`; run it on quiet cores.
set -euo pipefail
out=${1:-results/eagle-xsum}; data=${DATA:-../shared/data}
examples=${EXAMPLES:-40}; timing=${TIMING:-10}; questions=${QUESTIONS:-12}
mkdir -p "$out/data"
python - "$data/xsum_test.jsonl" "$out/data" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
for split, part in (("train", rows[:100]), ("test", rows[100:200])):
    with open(f"{sys.argv[2]}/{split}.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in part)
PY
task=$(python -c "from bench.registry import find; print(find('tasks', 'xsum'))")
sed -e "s/^num_fewshot: 2/num_fewshot: 0/" -e "s/^max_new_tokens: 128/max_new_tokens: 64/" "$task" > "$out/data/xsum.yaml"
common=(--pair smollm2 --drafter eagle --task "$out/data/xsum.yaml" --data "$out/data" --chat-template --dtype bfloat16)
# DIVERSED's head by REINFORCE on rollouts from pi = w p + (1 - w) q, q the EAGLE head's law read in the
# run's rounds (--draft-len 5), as long as the run decodes, on the authors' schedule (comeusr/diversed
# train_config/config.yaml: 400 prompts an epoch, batch 8, 2 epochs, AdamW lr 5e-4; the train part's 100
# rows cap an epoch at 100 prompts: 26 steps). AutoJudge's by mining the EAGLE head's proposals.
# Re-running resumes or skips what is trained.
diversed-bench train --method diversed "${common[@]}" --num-prompts 400 --batch-size 8 --epochs 2 --lr 5e-4 \
    --rollout-tokens 64 --draft-len 5 --output-dir "$out/heads/diversed"
diversed-bench train --method autojudge "${common[@]}" --num-prompts "$questions" --output-dir "$out/heads/autojudge"
diversed-bench run "${common[@]}" --method ar,sd,lossy,cascade,ensemble,diversed,autojudge \
    --param lenience=0.5 --param cascade_alpha=0.5 --param target_weight=0.02,0.05,0.1,0.3,0.6 \
    --head "diversed=$out/heads/diversed,autojudge=$out/heads/autojudge" --temperature 1 --draft-len 5 \
    --max-new-tokens 64 --limit "$examples" --timing-examples "$timing" --timing-repeats 2 --batch-size 1 \
    --output-dir "$out/results"
diversed-bench compare "$out/results" --candidate diversed
diversed-bench report "$out/results" --candidate diversed --output "$out/report.html"
