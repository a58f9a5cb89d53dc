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
set -u
OFFICIAL=${1:-}
OUT=${2:-bench/results}
PY=${PYTHON:-python}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
status=0
run() {
  echo "== $*"
  "$@" || { echo "FAILED: $*"; status=1; }
}
if [[ -n "$OFFICIAL" && -d "$OFFICIAL" ]]; then
  run timeout 240 "$PY" bench/official_steps.py --device cuda --official "$OFFICIAL" --methods frozen,mmt \
    --paper-size --optimiser both --repeats 7 --json "$OUT/official_steps_cuda.json"
  run timeout 180 "$PY" bench/official_steps.py --device cuda --official "$OFFICIAL" --methods frozen,mmt \
    --paper-size --optimiser official --compile --precisions bf16 --repeats 7 \
    --json "$OUT/official_steps_cuda_compile.json"
else
  echo "== official_steps skipped: no OFFICIAL_DIR"
fi
run timeout 240 "$PY" bench/gpu.py --videos 256 --steps 10 --queries 100 --methods dual,frozen,mmt,clip4clip \
  --json "$OUT/gpu.json"
run timeout 120 "$PY" bench/grad_cache.py --device cuda --methods frozen --preset base --chunk 32 \
  --out "$OUT/grad_cache_cuda.json"
exit $status
