#!/usr/bin/env bash
# Session 26, call 4: the cudagraphs GPU tests on 5dd52d4; chain/mlp/nanogpt training, eager
# vs kiln:cudagraphs (#18); hf_gpt2 max-autotune training, kiln vs torch.compile (#24).
set -u
PY=python3
FINAL=$OUT
export OUT=/tmp/w; mkdir -p $OUT
. tools/gpu_setup.sh
export PYTHONPATH=.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/kiln-pycache
timeout 120 $PY -m pytest -p no:cacheprovider -q tests/plugins/cudagraphs >"$FINAL/gpu-tests.txt" 2>&1
tail -n 1 "$FINAL/gpu-tests.txt"
echo "elapsed $SECONDS"
mkdir -p "$FINAL/cg" "$FINAL/ma"
BENCH_MODELS=chain,mlp,nanogpt BENCH_BACKENDS=eager,kiln:cudagraphs BENCH_CASES=training \
    BENCH_ARGS="--no-warm --reps 20" BENCH_BUDGET=60 BENCH_ROW_BUDGET=30 \
    OUT=/tmp/w/cg bash benchmarks/gpu.sh 2>&1 | grep -E "^\| (chain|mlp|nanogpt) .*training .*kiln"
cp /tmp/w/cg/bench-cuda.md "$FINAL/cg/"
echo "elapsed $SECONDS"
BENCH_MODELS=hf_gpt2 BENCH_BACKENDS=eager,kiln:inductor:max-autotune,torch.compile:max-autotune \
    BENCH_CASES=training BENCH_ARGS=--no-warm BENCH_ROW_BUDGET=440 \
    BENCH_BUDGET=$((575 - SECONDS)) OUT=/tmp/w/ma bash benchmarks/gpu.sh 2>&1 | head -n 30
cp /tmp/w/ma/bench-cuda.json /tmp/w/ma/bench-cuda.md /tmp/w/ma/bench-cuda.log "$FINAL/ma/"
echo "elapsed $SECONDS"
