#!/usr/bin/env bash
# Session 24, call 3: cold compiles against torch.compile's on the rows calls 1 and 2 left
# out (chain, hf_bert, hf_llama, tv_resnet18), with shared kernel functions.
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/kiln-pycache
timeout 120 $PY .device_scripts/pyc_warm.py 2>&1 | tail -1
echo "elapsed $SECONDS"
timeout 200 $PY -m benchmarks.compile_phases --device cuda --case inference \
    --models chain,hf_bert,hf_llama,tv_resnet18 >"$OUT/phases-inference.txt" 2>&1
grep -E "^== |first step|compile / |waiting|triton_workers" "$OUT/phases-inference.txt"
echo "elapsed $SECONDS"
timeout $((560 - SECONDS)) $PY -m benchmarks.compile_phases --device cuda --case training \
    --models chain,hf_bert,hf_llama,tv_resnet18 >"$OUT/phases-training.txt" 2>&1
grep -E "^== |first step|compile / |waiting|triton_workers" "$OUT/phases-training.txt"
echo "elapsed $SECONDS"
