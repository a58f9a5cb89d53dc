#!/usr/bin/env bash
# The GPU figures of docs/performance.md in one short run (about 8 minutes on one H100), from the
# repository root on a machine with a CUDA device:
#
#   bash bench/gpu_check.sh [OFFICIAL_DIR] [OUT_DIR]
#
# OFFICIAL_DIR holds the official repositories as fetched (frozen-in-time/, mmt/; see
# bench/official_steps.py); without it the comparison with the official code is skipped.
# Each step writes its JSON under OUT_DIR (default bench/results) and prints its figures:
# 1. bench/official_steps.py at the paper's size (Frozen ViT-B/16 + DistilBERT-base, MMT), fp32 and
#    bf16: ours with the official optimiser on both sides (the model's own speed) and ours with our
#    fused optimiser, each against the official step;
# 2. the same with our loss through torch.compile (does it pay at this size?);
# 3. bench/gpu.py: extraction, every method's step at fp32 and bf16, the pixel pipeline's frames/s
#    against what Frozen's paper-size step consumes, index build and query latency;
# 4. bench/grad_cache.py on the device: Frozen's paper-size step (ViT-B/16, 224 px, 4 frames, bf16)
#    at batch 64 and 512 with train.chunk 32 (peak memory), and the plain step at 64.
# A step that fails is reported and the next one runs.
#
# Environment (defaults as above): PYTHON (python3), TEXT_MODEL (a MiniLM config + tokenizer folder whose
# random weights stand in for the packaged MiniLM, on a machine without it), REPEATS (7), VIDEOS (256),
# STEPS (10), QUERIES (100), WORKERS (8), and each step's time limit in seconds: T_OFFICIAL (240),
# T_COMPILE (180), T_GPU (240), T_GRAD (120).
set -u
OFFICIAL=${1:-}
OUT=${2:-bench/results}
PY=${PYTHON:-python3}
TEXT=(${TEXT_MODEL:+--text-model "$TEXT_MODEL"})
REPEATS=${REPEATS:-7}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
status=0
run() {
  echo "== $*"
  local started=$SECONDS
  "$@" || { echo "FAILED (exit $?): $*"; status=1; }
  echo "== $((SECONDS - started)) s"
}
if [[ -n "$OFFICIAL" && -d "$OFFICIAL" ]]; then
  run timeout "${T_OFFICIAL:-240}" "$PY" bench/official_steps.py --device cuda --official "$OFFICIAL" \
    --methods frozen,mmt --paper-size --optimiser both --repeats "$REPEATS" ${TEXT[@]+"${TEXT[@]}"} \
    --json "$OUT/official_steps_cuda.json"
  run timeout "${T_COMPILE:-180}" "$PY" bench/official_steps.py --device cuda --official "$OFFICIAL" \
    --methods frozen,mmt --paper-size --optimiser official --compile --precisions bf16 --repeats "$REPEATS" \
    ${TEXT[@]+"${TEXT[@]}"} --json "$OUT/official_steps_cuda_compile.json"
else
  echo "== official_steps skipped: no OFFICIAL_DIR"
fi
run timeout "${T_GPU:-240}" "$PY" bench/gpu.py --videos "${VIDEOS:-256}" --steps "${STEPS:-10}" \
  --queries "${QUERIES:-100}" --workers "${WORKERS:-8}" --methods dual,frozen,mmt,clip4clip \
  ${TEXT[@]+"${TEXT[@]}"} --json "$OUT/gpu.json"
run timeout "${T_GRAD:-120}" "$PY" bench/grad_cache.py --device cuda --methods frozen --preset base --chunk 32 \
  ${TEXT[@]+"${TEXT[@]}"} --out "$OUT/grad_cache_cuda.json"
exit $status
