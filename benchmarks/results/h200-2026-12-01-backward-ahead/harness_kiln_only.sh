#!/usr/bin/env bash
# Session 18, call 5: is kiln's cold training compile slower in the harness because torch.compile
# ran in the same process first? The same rows with kiln alone; then cProfile of a warm start.
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
BENCH_MODELS=mlp,nanogpt BENCH_BACKENDS=kiln:inductor BENCH_CASES=training \
    BENCH_BUDGET=120 BENCH_ROW_BUDGET=60 BENCH_ARGS="--no-warm --no-paired --reps 5" \
    timeout 200 bash benchmarks/gpu.sh 2>&1 | grep -A8 "Compile time" | tee "$OUT/harness-kiln-only.txt"
timeout 150 $PY -m benchmarks.warm_start --device cuda --size large --case training \
    --models mlp --profile > "$OUT/warm-profile-mlp.txt" 2>&1
tail -n 3 "$OUT/warm-profile-mlp.txt"
