#!/usr/bin/env bash
# Lossless greedy speed of EAGLE drafts on the real pair smollm2, beside prompt lookup, lookup trees and
# SuffixDecoding (docs/real-pair.md "EAGLE drafts"). Needs `diversed-bench fetch smollm2`.
#   scripts/smollm2_eagle.sh                   10 CNN/DM articles (DATA: the CNN/DM test slice), 96 tokens
#   TASK=spec_bench scripts/smollm2_eagle.sh   Spec-Bench, 26 questions (2 per category), per-category tables
# Each run times ar and every drafter's sd interleaved in one process (--timing-repeats), so the ratios hold
# on a noisy machine; run it with nothing else on the cores. dtype: bf16 where `torch` serves it (docs/real-pair.md).
set -euo pipefail
task="${TASK:-cnndm}"
dtype="${DTYPE:-bfloat16}"
case "$task" in
  cnndm) data="${DATA:-../shared/data/cnndm_test.jsonl}"; n=10; extra=(--num-fewshot 0) ;;
  spec_bench) data="${DATA:-../shared/data/spec_bench_question.jsonl}"; n=26; extra=() ;;
  *) echo "TASK is cnndm or spec_bench, got $task" >&2; exit 2 ;;
esac
common=(--pair smollm2 --task "$task" --data "$data" "${extra[@]}" --chat-template --dtype "$dtype" --method ar,sd
        --temperature 0 --max-new-tokens 96 --limit "$n" --timing-examples "$n" --timing-repeats 2)
# Chains of 5: the EAGLE head's chain, prompt lookup's and SuffixDecoding's (N = 5 tokens a round).
diversed-bench run "${common[@]}" --draft-len 5 --drafter eagle --drafter lookup --drafter suffix --output-dir "eagle_chain_$task"
# Trees of up to 16 nodes: EAGLE-2's dynamic tree from the head (its CPU defaults), a lookup tree, SuffixDecoding's tree.
diversed-bench run "${common[@]}" --draft-len 16 --drafter eagle:tree=1 --drafter lookup_tree:matches=8 \
    --drafter suffix:mode=tree,max_spec_factor=4,min_token_prob=0.05 --output-dir "eagle_tree_$task"
