#!/usr/bin/env bash
# Session 24, call 1: identical kernels of a model's layers share one function (params named
# by position): GPU tests, cold compiles against torch.compile's, warm starts (with and
# without an eager step first, whether Triton is imported), steady speed unchanged.
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/kiln-pycache
timeout 120 $PY .device_scripts/pyc_warm.py 2>&1 | tail -1
echo "elapsed $SECONDS"
timeout 150 $PY -m pytest -q -p no:cacheprovider tests/plugins/inductor/test_triton_binaries_gpu.py \
    tests/plugins/inductor/test_cuda_launch_gpu.py tests/plugins/inductor/test_cuda_launch_abi.py \
    tests/plugins/inductor/test_triton_launch.py tests/plugins/inductor/test_autotune.py \
    tests/plugins/inductor/test_compile_cache.py tests/plugins/cudagraphs/test_runner_cuda.py \
    tests/plugins/cudagraphs/test_reduce_overhead_cuda.py 2>&1 | tail -n 8 | tee "$OUT/gpu-tests.txt"
echo "elapsed $SECONDS"
timeout 120 $PY -m benchmarks.compile_phases --device cuda --case training \
    --models mlp,nanogpt,hf_gpt2 >"$OUT/phases-training.txt" 2>&1
grep -E "^== |first step|compile / |waiting|triton_workers" "$OUT/phases-training.txt"
echo "elapsed $SECONDS"
timeout 100 $PY -m benchmarks.compile_phases --device cuda --case inference \
    --models mlp,nanogpt,hf_gpt2 >"$OUT/phases-inference.txt" 2>&1
grep -E "^== |first step|compile / |waiting|triton_workers" "$OUT/phases-inference.txt"
echo "elapsed $SECONDS"
timeout 60 $PY benchmarks/results/h200-2026-12-01e-shared-kernels/call1/triton_probe.py 2>&1 | tail -n 4 | tee "$OUT/triton-probe.txt"
echo "elapsed $SECONDS"
{
    echo "--eager-first, training"
    timeout 90 $PY -m benchmarks.warm_start --device cuda --size large --case training \
        --models mlp,nanogpt,hf_bert --eager-first 2>&1 | tail -n 3
    echo "without an eager step first, training"
    timeout $((560 - SECONDS)) $PY -m benchmarks.warm_start --device cuda --size large \
        --case training --models mlp,nanogpt,hf_bert 2>&1 | tail -n 3
} | tee "$OUT/warm.txt"
echo "elapsed $SECONDS"
