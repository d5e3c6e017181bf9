#!/usr/bin/env bash
# Session 19, call 3: (a) Triton compiles kiln makes in-process during its first step, alone and
# after torch.compile; (b) #19's dynamic GPT-2 (small) with the C++ guard program; (c) guard cost.
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
timeout 170 $PY .device_scripts/interference2.py 2>&1 | tee "$OUT/interference2.txt"
timeout 60 $PY -m benchmarks.guard_cost --device cuda --size large --models hf_gpt2,hf_bert,timm_vit,tv_resnet18 2>&1 | tee "$OUT/guard-cost.txt"
timeout 290 $PY -m benchmarks.dynamic --device cuda --size small \
    --backends eager,torch.compile,kiln:inductor --json "$OUT/dynamic-small.json" \
    --markdown "$OUT/dynamic-small.md" 2>&1 | tail -n 60 | tee "$OUT/dynamic-small.txt"
