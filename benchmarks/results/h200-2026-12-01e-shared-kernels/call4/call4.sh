#!/usr/bin/env bash
# Session 24, call 4: max-autotune's first call (tuning included) with shared kernel
# functions, inference: each tuned kernel and template is one function across layers.
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/kiln-pycache
timeout 120 $PY .device_scripts/pyc_warm.py 2>&1 | tail -1
echo "elapsed $SECONDS"
BENCH_MODELS=mlp,nanogpt,hf_bert,hf_gpt2 BENCH_BACKENDS=eager,kiln:inductor:max-autotune \
    BENCH_CASES=inference BENCH_ARGS=--no-warm BENCH_ROW_BUDGET=150 \
    BENCH_BUDGET=$((420 - SECONDS)) OUT="$OUT" bash benchmarks/gpu.sh 2>&1 | head -n 40
echo "elapsed $SECONDS"
