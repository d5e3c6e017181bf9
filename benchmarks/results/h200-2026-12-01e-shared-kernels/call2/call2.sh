#!/usr/bin/env bash
# Session 24, call 2: where a warm nanoGPT training step's 0.33 s goes (cProfile), and the
# steady speed of kiln:inductor against torch.compile with shared kernel functions.
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/kiln-pycache
timeout 120 $PY .device_scripts/pyc_warm.py 2>&1 | tail -1
echo "elapsed $SECONDS"
timeout 90 $PY -m benchmarks.warm_start --device cuda --size large --case training \
    --models nanogpt --eager-first --profile >"$OUT/warm-profile-nanogpt-training.txt" 2>&1
tail -n 1 "$OUT/warm-profile-nanogpt-training.txt"
echo "elapsed $SECONDS"
BENCH_MODELS=mlp,nanogpt,hf_gpt2,hf_bert BENCH_BACKENDS=eager,kiln:inductor,torch.compile \
    BENCH_ARGS=--no-warm BENCH_BUDGET=$((520 - SECONDS)) OUT="$OUT" bash benchmarks/gpu.sh 2>&1 | head -n 20
echo "elapsed $SECONDS"
