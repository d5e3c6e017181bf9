#!/usr/bin/env bash
# Session 18, call 1: #16's headline table with the halved-warps heuristic.
set -u
export PYTHON=python3
BENCH_MODELS=mlp,nanogpt,hf_gpt2,hf_bert,hf_llama,tv_resnet18,chain \
BENCH_BACKENDS=torch.compile,kiln:inductor BENCH_CASES=training,inference \
BENCH_BUDGET=470 BENCH_ROW_BUDGET=70 BENCH_ARGS="--no-warm --reps 20" bash benchmarks/gpu.sh 2>&1 | tee "$OUT/headline.txt"
