#!/usr/bin/env bash
# Session 18, call 4: cold compile, training rows, after the backward compiled with the forward:
# compile_phases with the backend's imports in the first step (as torch.compile's are), its main
# thread sampled; then the harness's cold column for the same rows (its overhead item pays each
# compiler's one-time start-up first).
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
timeout 260 $PY -m benchmarks.compile_phases --device cuda --models mlp,nanogpt,hf_bert \
    --case training --backends kiln:inductor,torch.compile --sample 30 2>&1 | tee "$OUT/phases-fair-training.txt"
BENCH_MODELS=mlp,nanogpt,hf_bert BENCH_BACKENDS=torch.compile,kiln:inductor BENCH_CASES=training \
    BENCH_BUDGET=200 BENCH_ROW_BUDGET=60 BENCH_ARGS="--no-warm --no-paired --reps 5" \
    timeout 280 bash benchmarks/gpu.sh 2>&1 | tail -n 40 | tee "$OUT/harness-training.txt"
