#!/usr/bin/env bash
# Session 20, call 1: cold first-step timelines (mlp, nanogpt training), the warm hf_bert
# training profile, and every zoo row's cold compile against torch.compile's.
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
for m in mlp nanogpt; do
    d=$(mktemp -d)
    TORCHINDUCTOR_CACHE_DIR=$d/inductor TRITON_CACHE_DIR=$d/inductor/triton TORCHKILN_CACHE_DIR=$d/torchkiln \
        timeout 60 $PY .device_scripts/timeline.py $m training >"$OUT/timeline-$m.txt" 2>&1
    head -4 "$OUT/timeline-$m.txt"; tail -1 "$OUT/timeline-$m.txt"
done
echo "elapsed $SECONDS"
timeout 90 $PY -m benchmarks.warm_start --device cuda --size large --case training --models hf_bert \
    --profile >"$OUT/warm-profile-bert.txt" 2>&1
grep "first step" "$OUT/warm-profile-bert.txt"
echo "elapsed $SECONDS"
timeout 220 $PY -m benchmarks.compile_phases --device cuda --case inference \
    --models mlp,nanogpt,hf_gpt2,hf_bert,hf_llama,tv_resnet18,chain >"$OUT/phases-inference.txt" 2>&1
grep -E "^== |first step|compile / " "$OUT/phases-inference.txt"
echo "elapsed $SECONDS"
timeout $((560 - SECONDS)) $PY -m benchmarks.compile_phases --device cuda --case training \
    --models hf_gpt2,hf_llama,tv_resnet18,chain >"$OUT/phases-training.txt" 2>&1
grep -E "^== |first step|compile / " "$OUT/phases-training.txt"
echo "elapsed $SECONDS"
