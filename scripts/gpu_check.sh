#!/usr/bin/env bash
# One-shot GPU check of the harness (device tool: `bash scripts/gpu_check.sh`, carry [".whl"]).
# Stages, cheapest and most valuable first, each under `timeout` and a total budget (GPU_BUDGET_S):
#   setup  carried wheels -> /tmp/site (transformers 5.24, regex), versions, nvidia-smi
#   a1     the tests that use CUDA (test_decoding's host-sync count), eager engine
#   b1     greedy sd == ar (N = 3), bf16 and fp32, eager; a row alone vs in a batch of 8 (gpu_equivalence.py)
#   c1/c2  speed, eager (N = 3, 5); throughput at batch 1, 16, 64 (T = 1, N = 3)
#   c3     speed, eager vs compiled at the grid's N = 5 (torch.compile + CUDA graphs on 8B: slow, so late)
#   a2     the CUDA tests on the compiled engine (tiny pair)
#   b2     greedy sd == ar (N = 5) on the compiled engine, bf16 (graphs cached by c3) then fp32
#   p      GPU-hours projection of the paper grid (gpu_projection.py)
# Everything lands in $OUT as it goes (8 files at most). CPU dry run (about 5 min on 2 busy cores):
#   GPU_PAIR=tiny GPU_DEVICE=cpu GPU_DTYPE=float32 GPU_SMALL=1 GPU_SKIP_WHEELS=1 GPU_BUDGET_S=1800 \
#     OUT=/tmp/gpuout bash scripts/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/gpuout}; mkdir -p "$OUT"; LOG=$OUT/log.txt; rm -f "$LOG" "$OUT/speed.md"
PAIR=${GPU_PAIR:-llama3-shapes}; DEV=${GPU_DEVICE:-cuda}; DTYPE=${GPU_DTYPE:-bfloat16}
BUDGET=$((${GPU_BUDGET_S:-480} - 30)); PY=${PYTHON:-python3}; RES=/tmp/gpu_results; rm -rf "$RES"
if [ "${GPU_SMALL:-0}" = 1 ]; then   # shrunk sizes for a dry run on a CPU
  EQ=(--prompts 2 --max-new 12); SP=(--prompts 2 --max-new-tokens 12 --repeats 1)
  TP=(--batch-sizes 1,4,8 --examples 8 --max-new-tokens 8 --repeats 1); SPC=(--prompts 1 --max-new-tokens 12 --repeats 1)
else
  EQ=(--prompts 2 --max-new 32); SP=(--prompts 2 --max-new-tokens 48 --repeats 3)
  TP=(--batch-sizes 1,16,64 --examples 64 --max-new-tokens 16 --repeats 1); SPC=(--prompts 2 --max-new-tokens 48 --repeats 2)
fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 MPLBACKEND=Agg PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
T0=$SECONDS; SUMMARY=""
log() { echo "[$(date +%T) +$((SECONDS - T0))s] $*" | tee -a "$LOG"; }
stage() {  # stage NAME LIMIT_S COMMAND...: run under timeout, the budget's remainder at most
  local name=$1 cap=$2 left=$((BUDGET - (SECONDS - T0))) t=$SECONDS rc; shift 2
  if [ "$left" -lt 25 ]; then log "SKIP $name: ${left}s of ${BUDGET}s left"; SUMMARY+="$name skipped; "; return 1; fi
  [ "$cap" -gt "$left" ] && cap=$left
  log "START $name (limit ${cap}s): $*"
  timeout -k 10 "$cap" "$@" 2>&1 | tee -a "$LOG"; rc=${PIPESTATUS[0]}
  log "END $name: rc $rc in $((SECONDS - t))s$([ "$rc" = 124 ] && echo ' TIMED OUT')"
  SUMMARY+="$name rc=$rc $((SECONDS - t))s; "; return "$rc"
}
keep() {  # keep SRC DEST: copy a result into $OUT, its markdown appended to speed.md
  [ -f "$1.json" ] && cp "$1.json" "$OUT/$2.json" && log "kept $OUT/$2.json"
  [ -f "$1.md" ] && { echo -e "\n<!-- $2 -->"; cat "$1.md"; } >> "$OUT/speed.md"
}
PYTEST=("$PY" -m pytest -q -p no:cacheprovider -rA tests/decoding/test_decoding.py -k)  # its CUDA tests: -k cuda
ENVPY='import sys, torch, transformers, huggingface_hub, tokenizers, bench
print(sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__, transformers.__file__)
print("hub", huggingface_hub.__version__, "tokenizers", tokenizers.__version__, "bench", bench.__file__)
print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else "-")'

log "gpu_check: pair $PAIR, device $DEV, dtype $DTYPE, budget ${BUDGET}s + 30s, OUT $OUT, small ${GPU_SMALL:-0}"
if [ "${GPU_SKIP_WHEELS:-0}" = 1 ]; then log "wheels not installed (GPU_SKIP_WHEELS=1)"
else stage wheels 90 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}; fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD   # `python3 -m bench` from the checkout, no pip install
stage machine 30 bash -c 'nvidia-smi || echo "no nvidia-smi"; echo "cores $(nproc)"; free -g | head -2'
stage versions 60 "$PY" -c "$ENVPY"
log "SKIP smollm2 (real pair): its 517 MB model lives in ~/.cache/diversed-bench, which does not travel" \
    "(64 MiB tree limit) and the device reaches no package index to fetch it"

log "tests: test_decoding.py's host-sync test is the suite's one CUDA-specific test (the full suite is not run here)"
stage a1-tests-cuda-eager 90 "${PYTEST[@]}" "cuda and eager"
stage b1-equivalence-eager 150 "$PY" scripts/gpu_equivalence.py --pair "$PAIR" --device "$DEV" \
    --dtypes bfloat16,float32 --engines eager "${EQ[@]}" --batch 8 --out "$OUT/equivalence_eager.json"
SPEED=("$PY" -m bench speed --pair "$PAIR" --dtype "$DTYPE" --device "$DEV" --method sd)
stage c1-speed-eager 150 "${SPEED[@]}" --engine eager --draft-len 3,5 "${SP[@]}" --output-dir "$RES/eager"
keep "$RES/eager/speed_$PAIR" speed_eager
stage c2-throughput-eager 120 "${SPEED[@]}" --throughput --engine eager --draft-len 3 "${TP[@]}" --output-dir "$RES/tp"
keep "$RES/tp/speed_throughput_$PAIR" throughput
stage c3-speed-compiled 240 "${SPEED[@]}" --engine eager,compiled --draft-len 5 "${SPC[@]}" --output-dir "$RES/compiled"
keep "$RES/compiled/speed_$PAIR" speed_compiled
stage a2-tests-cuda-compiled 120 "${PYTEST[@]}" "cuda and compiled"
stage b2-equivalence-compiled 240 "$PY" scripts/gpu_equivalence.py --pair "$PAIR" --device "$DEV" \
    --dtypes bfloat16,float32 --engines compiled --draft-len 5 "${EQ[@]}" --batch 0 --out "$OUT/equivalence_compiled.json"
BUDGET=$((BUDGET + 30))  # the last 30 s were kept for the projection (CPU arithmetic, seconds)
stage p-projection 30 bash -c 'set -o pipefail; "$0" scripts/gpu_projection.py "$1" | tee "$1/projection.txt"' "$PY" "$OUT"
log "SUMMARY: $SUMMARY"
log "files: $(cd "$OUT" && ls | tr '\n' ' ')"
