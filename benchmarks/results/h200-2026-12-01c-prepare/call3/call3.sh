#!/usr/bin/env bash
# Session 20, call 3: with bytecode caches (as an installation has them), after
# Backend.prepare, the lazy kernel modules and the benchmarks' fairness fixes: GPU tests of
# the binary index, cold compiles against torch.compile's, warm starts, a warm profile.
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/kiln-pycache
{
    echo "bytecode caches under $PYTHONPYCACHEPREFIX"
    timeout 120 $PY .device_scripts/pyc_warm.py 2>&1 | tail -2
    for i in 1 2; do
        $PY -c 'import time, torch; t = time.perf_counter(); import torch._dynamo; print("import torch._dynamo after torch: %.2f s" % (time.perf_counter() - t))'
    done
} 2>&1 | tee "$OUT/env-probe.txt"
echo "elapsed $SECONDS"
timeout 120 $PY -m pytest -q -p no:cacheprovider tests/plugins/inductor/test_triton_binaries_gpu.py \
    tests/plugins/inductor/test_compile_cache.py tests/plugins/inductor/test_triton_launch.py \
    2>&1 | tail -n 6 | tee "$OUT/gpu-tests.txt"
echo "elapsed $SECONDS"
timeout 110 $PY -m benchmarks.compile_phases --device cuda --case inference \
    --models mlp,nanogpt,chain,hf_gpt2 >"$OUT/phases-inference.txt" 2>&1
grep -E "^== |first step|compile / " "$OUT/phases-inference.txt"
echo "elapsed $SECONDS"
timeout 130 $PY -m benchmarks.compile_phases --device cuda --case training \
    --models mlp,nanogpt,hf_gpt2,hf_bert >"$OUT/phases-training.txt" 2>&1
grep -E "^== |first step|compile / " "$OUT/phases-training.txt"
echo "elapsed $SECONDS"
{
    timeout 75 $PY -m benchmarks.warm_start --device cuda --size large --case training \
        --models mlp,nanogpt,hf_bert 2>&1 | tail -n 3
    timeout 45 $PY -m benchmarks.warm_start --device cuda --size large --case inference \
        --models mlp,hf_gpt2 2>&1 | tail -n 2
} | tee "$OUT/warm.txt"
echo "elapsed $SECONDS"
timeout $((560 - SECONDS)) $PY -m benchmarks.warm_start --device cuda --size large --case training \
    --models mlp --profile >"$OUT/warm-profile-mlp.txt" 2>&1
tail -n 1 "$OUT/warm-profile-mlp.txt"
echo "elapsed $SECONDS"
