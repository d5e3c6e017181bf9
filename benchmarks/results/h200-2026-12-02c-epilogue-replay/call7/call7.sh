#!/usr/bin/env bash
# Session 27, call 7: training graphs (forwards and backwards) warm up twice, recording in one
# step (peak memory from the first step, #18): the new test on the fix and on HEAD; training rows.
set -u
PY=python3
FINAL=$OUT
export OUT=/tmp/w; mkdir -p $OUT
. tools/gpu_setup.sh
export PYTHONPATH=.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/kiln-pycache
echo "setup $SECONDS"
timeout 150 $PY -m pytest -p no:cacheprovider -q tests/plugins/cudagraphs >"$FINAL/gpu-tests.txt" 2>&1
tail -n 2 "$FINAL/gpu-tests.txt"
cp plugins/cudagraphs/capture.py /tmp/fixed.py
git show HEAD:plugins/cudagraphs/capture.py > plugins/cudagraphs/capture.py
timeout 100 $PY -m pytest -p no:cacheprovider -q tests/plugins/cudagraphs -k peak_memory_from_the_first >"$FINAL/new-test-on-head.txt" 2>&1
grep -E "assert|passed|failed" "$FINAL/new-test-on-head.txt" | tail -n 3
cp /tmp/fixed.py plugins/cudagraphs/capture.py
echo "elapsed $SECONDS"
BENCH_MODELS=tv_resnet18,convnet,nanogpt,chain,mlp,tv_resnet50 BENCH_BACKENDS=eager,kiln:cudagraphs BENCH_CASES=training \
    BENCH_ARGS="--no-warm --reps 20" BENCH_BUDGET=$((540 - SECONDS)) BENCH_ROW_BUDGET=40 \
    OUT=/tmp/w/cg bash benchmarks/gpu.sh 2>&1 | grep -E "^\| [a-z_0-9]+ +\| (inference|training) +\| [0-9.]+ +\|"
cp /tmp/w/cg/bench-cuda.md /tmp/w/cg/bench-cuda.json "$FINAL/"
grep -E "kiln:cudagraphs|eager  " /tmp/w/cg/bench-cuda.md | grep training | awk -F'|' '{print $2,$4,$6,$10}'
echo "elapsed $SECONDS"
