#!/usr/bin/env bash
# Session 22, call 2: what a warm first step spends (profile), warm starts with an eager step
# first, how many compile workers pay, and the cold-compile rows call 1 left out.
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/kiln-pycache
timeout 120 $PY .device_scripts/pyc_warm.py 2>&1 | tail -1
echo "elapsed $SECONDS"
timeout 60 $PY -m benchmarks.warm_start --device cuda --size large --case inference \
    --models mlp --profile >"$OUT/warm-profile-mlp-inference.txt" 2>&1
tail -n 1 "$OUT/warm-profile-mlp-inference.txt"
echo "elapsed $SECONDS"
{
    echo "--eager-first, training"
    timeout 90 $PY -m benchmarks.warm_start --device cuda --size large --case training \
        --models mlp,nanogpt,hf_bert --eager-first 2>&1 | tail -n 3
    echo "--eager-first, inference"
    timeout 60 $PY -m benchmarks.warm_start --device cuda --size large --case inference \
        --models mlp,hf_gpt2,nanogpt --eager-first 2>&1 | tail -n 3
} | tee "$OUT/warm-eager-first.txt"
echo "elapsed $SECONDS"
for workers in 8 4 16; do
    echo "TORCHKILN_COMPILE_WORKERS=$workers"
    TORCHKILN_COMPILE_WORKERS=$workers timeout 60 $PY -m benchmarks.compile_phases --device cuda \
        --case training --models nanogpt,mlp --backends kiln:inductor 2>&1 |
        grep -E "^== |first step|waiting for compile|triton_workers"
done | tee "$OUT/workers.txt"
echo "elapsed $SECONDS"
timeout 100 $PY -m benchmarks.compile_phases --device cuda --case inference \
    --models hf_bert,hf_llama,tv_resnet18 >"$OUT/phases-inference2.txt" 2>&1
grep -E "^== |first step|compile / " "$OUT/phases-inference2.txt"
echo "elapsed $SECONDS"
timeout $((575 - SECONDS)) $PY -m benchmarks.compile_phases --device cuda --case training \
    --models chain,tv_resnet18,hf_bert,hf_llama >"$OUT/phases-training2.txt" 2>&1
grep -E "^== |first step|compile / " "$OUT/phases-training2.txt"
echo "elapsed $SECONDS"
