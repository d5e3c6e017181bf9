#!/usr/bin/env bash
# Session 24, call 5: max-autotune's first call against torch.compile's max-autotune, same
# run, inference, mlp and hf_bert.
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/kiln-pycache
timeout 100 $PY .device_scripts/pyc_warm.py 2>&1 | tail -1
echo "elapsed $SECONDS"
BENCH_MODELS=mlp,hf_bert BENCH_BACKENDS=eager,kiln:inductor:max-autotune,torch.compile:max-autotune \
    BENCH_CASES=inference BENCH_ARGS=--no-warm BENCH_ROW_BUDGET=130 \
    BENCH_BUDGET=$((300 - SECONDS)) OUT="$OUT" bash benchmarks/gpu.sh 2>&1 | head -n 30
echo "elapsed $SECONDS"
