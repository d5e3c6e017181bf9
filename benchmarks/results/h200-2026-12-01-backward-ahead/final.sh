#!/usr/bin/env bash
# Session 18, call 6: #19's large dynamic inference after this session's changes; a cProfile of
# mlp training's warm start (#16's warm <= 10% of cold).
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
timeout 150 $PY -m benchmarks.dynamic --device cuda --size large --cases inference \
    --backends eager,torch.compile,kiln:inductor --json "$OUT/dynamic-large.json" \
    --markdown "$OUT/dynamic-large.md" > /dev/null 2>&1
tail -n 12 "$OUT/dynamic-large.md"
timeout 120 $PY -m benchmarks.warm_start --device cuda --size large --case training \
    --models mlp --profile > "$OUT/warm-profile-mlp.txt" 2>&1
tail -n 2 "$OUT/warm-profile-mlp.txt"
