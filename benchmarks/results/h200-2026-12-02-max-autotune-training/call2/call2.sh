#!/usr/bin/env bash
# Session 25, call 2: max-autotune training against torch.compile's (#24), nanoGPT and hf_bert.
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/kiln-pycache
timeout 120 $PY .device_scripts/pyc_warm.py 2>&1 | tail -1
echo "elapsed $SECONDS"
BENCH_MODELS=${MODELS:-nanogpt,hf_bert} BENCH_BACKENDS=eager,kiln:inductor:max-autotune,torch.compile:max-autotune \
    BENCH_CASES=training BENCH_ARGS=--no-warm BENCH_ROW_BUDGET=${ROW:-280} \
    BENCH_BUDGET=$((560 - SECONDS)) OUT="$OUT" bash benchmarks/gpu.sh 2>&1 | head -n 40
echo "elapsed $SECONDS"
