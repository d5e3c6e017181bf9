#!/usr/bin/env bash
# Session 26, call 6 (#18): recordings without torch.cuda.graph's empty_cache (the warm-ups
# empty it): the cudagraphs tests, where the loss's gradient lands, the zoo under kiln:cudagraphs.
set -u
PY=python3
FINAL=$OUT
export OUT=/tmp/w; mkdir -p $OUT
. tools/gpu_setup.sh
export PYTHONPATH=.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/kiln-pycache
timeout 120 $PY -m pytest -p no:cacheprovider -q tests/plugins/cudagraphs >"$FINAL/gpu-tests.txt" 2>&1
grep -E "^(FAILED|E  )" "$FINAL/gpu-tests.txt" | cut -c1-200 | head; tail -n 1 "$FINAL/gpu-tests.txt"
echo "elapsed $SECONDS"
for m in chain mlp nanogpt; do
  timeout 60 $PY .device_scripts/cg_probe.py $m 2>&1 | grep -E "recorded|Error|moved|without|per call" | cut -c1-700
done > "$FINAL/cg-probe.txt"
grep -E "recorded|moved" "$FINAL/cg-probe.txt"
echo "elapsed $SECONDS"
BENCH_MODELS=all BENCH_BACKENDS=eager,kiln:cudagraphs BENCH_CASES=training,inference \
    BENCH_ARGS="--no-warm --reps 20" BENCH_BUDGET=$((280 - SECONDS)) BENCH_ROW_BUDGET=40 \
    OUT=/tmp/w/cg bash benchmarks/gpu.sh 2>&1 | grep -E "^\| [a-z_0-9]+ +\| (training|inference) +\| [0-9]" | head -24
cp /tmp/w/cg/bench-cuda.md "$FINAL/zoo-cudagraphs.md"
echo "elapsed $SECONDS"
