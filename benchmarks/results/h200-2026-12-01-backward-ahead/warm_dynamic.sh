#!/usr/bin/env bash
# Session 18, call 3: #16's warm start (second process) against cold, and #19's dynamic GPT-2
# (small) after the halved-warps heuristic and the backward compiled with the forward.
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
timeout 200 $PY -m benchmarks.warm_start --device cuda --size large --case training \
    --models mlp,nanogpt,hf_bert 2>&1 | tee "$OUT/warm-training.txt"
timeout 100 $PY -m benchmarks.warm_start --device cuda --size large --case inference \
    --models hf_gpt2,nanogpt 2>&1 | tee "$OUT/warm-inference.txt"
timeout 270 $PY -m benchmarks.dynamic --device cuda --size small \
    --backends eager,torch.compile,kiln:inductor --json "$OUT/dynamic-small.json" \
    --markdown "$OUT/dynamic-small.md" 2>&1 | tail -n 60 | tee "$OUT/dynamic-small.txt"
