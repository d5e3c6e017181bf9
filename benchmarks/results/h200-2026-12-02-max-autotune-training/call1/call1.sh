#!/usr/bin/env bash
# Session 25, call 1: nanoGPT training's warm step and steady speed with the fused attention
# on cuDNN (torch's default on the H200) against flash/efficient (cuDNN SDPA turned off);
# then max-autotune training on mlp against torch.compile's.
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/kiln-pycache
timeout 120 $PY .device_scripts/pyc_warm.py 2>&1 | tail -1
echo "elapsed $SECONDS"
for run in 1 2; do
  timeout 90 $PY -m benchmarks.warm_start --device cuda --size large --case training \
      --models nanogpt --eager-first >"$OUT/warm-cudnn-$run.txt" 2>&1
  tail -n 1 "$OUT/warm-cudnn-$run.txt"
  PYTHONPATH=.device_scripts/nocudnn:. timeout 90 $PY -m benchmarks.warm_start --device cuda --size large --case training \
      --models nanogpt --eager-first >"$OUT/warm-nocudnn-$run.txt" 2>&1
  tail -n 1 "$OUT/warm-nocudnn-$run.txt"
  echo "elapsed $SECONDS"
done
PYTHONPATH=.device_scripts/nocudnn:. $PY -c "import torch; print('cudnn sdp enabled:', torch.backends.cuda.cudnn_sdp_enabled())"
mkdir -p "$OUT/cudnn" "$OUT/nocudnn"
BENCH_MODELS=nanogpt BENCH_BACKENDS=eager,kiln:inductor BENCH_CASES=training \
    BENCH_ARGS=--no-warm BENCH_BUDGET=60 OUT="$OUT/cudnn" bash benchmarks/gpu.sh 2>&1 | grep -E "nanogpt|gpu.sh"
PYTHONPATH=.device_scripts/nocudnn:. BENCH_MODELS=nanogpt BENCH_BACKENDS=eager,kiln:inductor BENCH_CASES=training \
    BENCH_ARGS=--no-warm BENCH_BUDGET=60 OUT="$OUT/nocudnn" bash benchmarks/gpu.sh 2>&1 | grep -E "nanogpt|gpu.sh"
echo "elapsed $SECONDS"
mkdir -p "$OUT/ma"
BENCH_MODELS=mlp BENCH_BACKENDS=eager,kiln:inductor:max-autotune,torch.compile:max-autotune \
    BENCH_CASES=training BENCH_ARGS=--no-warm BENCH_ROW_BUDGET=200 \
    BENCH_BUDGET=$((540 - SECONDS)) OUT="$OUT/ma" bash benchmarks/gpu.sh 2>&1 | head -n 30
echo "elapsed $SECONDS"
