#!/usr/bin/env bash
# Session 26, call 5 (#24): fused-epilogue GEMMs against cuBLAS plus the activation's kernel,
# for three activations (exact GELU, tanh GELU, ReLU).
set -u
PY=python3
FINAL=$OUT
export OUT=/tmp/w; mkdir -p $OUT
. tools/gpu_setup.sh
export PYTHONPATH=.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/kiln-pycache
TORCHKILN_LOGS=autotune,quiet timeout 500 $PY -m benchmarks.gemm \
    --shapes 4096x4096x4096,8192x3072x768,8192x768x3072,8192x2304x768 \
    --epilogues gelu,gelu_tanh,relu >"$FINAL/gemm-epilogues.txt" 2>"$FINAL/autotune.log"
cat "$FINAL/gemm-epilogues.txt"
echo "elapsed $SECONDS"
