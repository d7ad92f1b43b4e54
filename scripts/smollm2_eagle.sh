#!/usr/bin/env bash
# Lossless greedy speed of EAGLE drafts on the real pair smollm2, beside prompt lookup, on CNN/DM articles
# (docs/real-pair.md "EAGLE drafts"). Needs `diversed-bench fetch smollm2`; DATA: the CNN/DM test slice.
# Each run times ar and every drafter's sd interleaved in one process (--timing-repeats), so the ratios hold
# on a noisy machine; run it with nothing else on the cores. dtype: bf16 where `torch` serves it (docs/real-pair.md).
set -euo pipefail
data="${DATA:-../shared/data/cnndm_test.jsonl}"
dtype="${DTYPE:-bfloat16}"
common=(--pair smollm2 --task cnndm --data "$data" --num-fewshot 0 --chat-template --dtype "$dtype" --method ar,sd
        --temperature 0 --max-new-tokens 96 --limit 10 --timing-examples 10 --timing-repeats 2)
# Chains of 5: the EAGLE head's chain and prompt lookup's.
diversed-bench run "${common[@]}" --draft-len 5 --drafter eagle --drafter lookup --output-dir eagle_chain
# Trees of up to 16 nodes: EAGLE-2's dynamic tree from the head (its CPU defaults) and a lookup tree.
diversed-bench run "${common[@]}" --draft-len 16 --drafter eagle:tree=1 --drafter lookup_tree:matches=8 --output-dir eagle_tree
