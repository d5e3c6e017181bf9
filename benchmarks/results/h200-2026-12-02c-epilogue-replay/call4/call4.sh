#!/usr/bin/env bash
# Session 27, call 4: cudagraphs replay checks its inputs in one C++ call (tensors_check):
# GPU tests, host time before the replay, and the zoo rows under 1.0x (#18).
set -u
PY=python3
FINAL=$OUT
export OUT=/tmp/w; mkdir -p $OUT
. tools/gpu_setup.sh
cp $OUT/native.log $FINAL/
export PYTHONPATH=.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/kiln-pycache
echo "setup $SECONDS"
timeout 150 $PY -m pytest -p no:cacheprovider -q tests/plugins/cudagraphs tests/core/capture/test_native_guards.py >"$FINAL/gpu-tests.txt" 2>&1
tail -n 2 "$FINAL/gpu-tests.txt"
echo "elapsed $SECONDS"
timeout 120 $PY benchmarks/results/h200-2026-12-02c-epilogue-replay/call3/prelaunch2.py timm_vit,tv_resnet50 >"$FINAL/prelaunch2.txt" 2>&1
tail -n 3 "$FINAL/prelaunch2.txt"
echo "elapsed $SECONDS"
BENCH_MODELS=timm_vit,tv_resnet50,tv_resnet18,convnet,mlp,chain BENCH_BACKENDS=eager,kiln:cudagraphs BENCH_CASES=inference,training \
    BENCH_ARGS="--no-warm --reps 20" BENCH_BUDGET=$((540 - SECONDS)) BENCH_ROW_BUDGET=40 \
    OUT=/tmp/w/cg bash benchmarks/gpu.sh 2>&1 | grep -E "^\| [a-z_0-9]+ +\| (inference|training) +\| [0-9.]+ +\|"
cp /tmp/w/cg/bench-cuda.md /tmp/w/cg/bench-cuda.json "$FINAL/"
echo "elapsed $SECONDS"
