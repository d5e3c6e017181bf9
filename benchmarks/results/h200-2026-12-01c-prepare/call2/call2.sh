#!/usr/bin/env bash
# Session 20, call 2: after Backend.prepare (workers started as the capture begins) and the
# binary load reading no IR texts: cold compiles against torch.compile's, warm starts, #19's
# dynamic training; the cost of importing torch._dynamo in a fresh process.
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
{
    echo "PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-unset}"
    $PY -c 'import sys, os, torch; print("dont_write_bytecode", sys.flags.dont_write_bytecode); d = os.path.dirname(torch.__file__); print("torch dir writable", os.access(d, os.W_OK)); print("torch pyc", os.path.isdir(os.path.join(d, "__pycache__")))'
    for i in 1 2; do
        $PY -c 'import time, torch; t = time.perf_counter(); import torch._dynamo; print("import torch._dynamo after torch: %.2f s" % (time.perf_counter() - t))'
    done
} 2>&1 | tee "$OUT/env-probe.txt"
d=$(mktemp -d)
TORCHINDUCTOR_CACHE_DIR=$d/inductor TRITON_CACHE_DIR=$d/inductor/triton TORCHKILN_CACHE_DIR=$d/torchkiln \
    timeout 60 $PY .device_scripts/timeline.py mlp training >"$OUT/timeline-mlp.txt" 2>&1
head -1 "$OUT/timeline-mlp.txt"; grep -E "warm_pool|translate|worker connected pid|precompile|first step done" "$OUT/timeline-mlp.txt" | head -12
echo "elapsed $SECONDS"
timeout 150 $PY -m benchmarks.compile_phases --device cuda --case inference \
    --models mlp,nanogpt,tv_resnet18,chain >"$OUT/phases-inference.txt" 2>&1
grep -E "^== |first step|compile / |capture|waiting for compile" "$OUT/phases-inference.txt"
echo "elapsed $SECONDS"
timeout 110 $PY -m benchmarks.compile_phases --device cuda --case training \
    --models mlp,nanogpt >"$OUT/phases-training.txt" 2>&1
grep -E "^== |first step|compile / |capture|waiting for compile" "$OUT/phases-training.txt"
echo "elapsed $SECONDS"
timeout 100 $PY -m benchmarks.warm_start --device cuda --size large --case training \
    --models mlp,nanogpt,hf_bert 2>&1 | tail -n 3 | tee "$OUT/warm-training.txt"
echo "elapsed $SECONDS"
timeout $((575 - SECONDS)) $PY -m benchmarks.dynamic --device cuda --size small --cases training \
    --backends eager,torch.compile,kiln:inductor --json "$OUT/dynamic-small-training.json" \
    --markdown "$OUT/dynamic-small-training.md" >"$OUT/dynamic.log" 2>&1
cat "$OUT/dynamic-small-training.md" 2>/dev/null || tail -5 "$OUT/dynamic.log"
echo "elapsed $SECONDS"
