#!/usr/bin/env bash
# Session 27, call 3: host time before a kiln:cudagraphs replay, layer by layer, with the
# C++ address check (#18); timm_vit and tv_resnet50 inference rows.
set -u
PY=python3
FINAL=$OUT
export OUT=/tmp/w; mkdir -p $OUT
. tools/gpu_setup.sh
export PYTHONPATH=.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/kiln-pycache
timeout 200 $PY benchmarks/results/h200-2026-12-02c-epilogue-replay/call3/prelaunch2.py timm_vit,tv_resnet50 >"$FINAL/prelaunch2.txt" 2>&1
tail -n 5 "$FINAL/prelaunch2.txt"
echo "elapsed $SECONDS"
BENCH_MODELS=timm_vit,tv_resnet50 BENCH_BACKENDS=eager,kiln:cudagraphs BENCH_CASES=inference \
    BENCH_ARGS="--no-warm --reps 30" BENCH_BUDGET=200 BENCH_ROW_BUDGET=60 \
    OUT=/tmp/w/cg bash benchmarks/gpu.sh 2>&1 | grep -E "^\| (timm_vit|tv_resnet50) "
cp /tmp/w/cg/bench-cuda.md "$FINAL/"
echo "elapsed $SECONDS"
