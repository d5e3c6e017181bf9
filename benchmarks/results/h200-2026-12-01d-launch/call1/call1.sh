#!/usr/bin/env bash
# Session 22, call 1: session 21's GPU-path changes (direct cuLaunchKernel, the driver set up
# off the main thread) run on the GPU: tests, cold compiles against torch.compile's, warm
# starts, and the host cost of a launch.
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/kiln-pycache
timeout 120 $PY .device_scripts/pyc_warm.py 2>&1 | tail -2
echo "elapsed $SECONDS"
timeout 150 $PY -m pytest -q -p no:cacheprovider tests/plugins/inductor/test_cuda_launch_gpu.py \
    tests/plugins/inductor/test_cuda_launch_abi.py tests/plugins/inductor/test_triton_binaries_gpu.py \
    tests/plugins/inductor/test_compile_cache.py tests/plugins/inductor/test_triton_launch.py \
    tests/plugins/inductor/test_autotune.py 2>&1 | tail -n 25 | tee "$OUT/gpu-tests.txt"
echo "elapsed $SECONDS"
timeout 110 $PY -m benchmarks.compile_phases --device cuda --case inference \
    --models mlp,nanogpt,chain,hf_gpt2 >"$OUT/phases-inference.txt" 2>&1
grep -E "^== |first step|compile / |triton_launch" "$OUT/phases-inference.txt"
echo "elapsed $SECONDS"
timeout 120 $PY -m benchmarks.compile_phases --device cuda --case training \
    --models mlp,nanogpt,hf_gpt2 >"$OUT/phases-training.txt" 2>&1
grep -E "^== |first step|compile / |triton_launch" "$OUT/phases-training.txt"
echo "elapsed $SECONDS"
{
    timeout 75 $PY -m benchmarks.warm_start --device cuda --size large --case training \
        --models mlp,nanogpt,hf_bert 2>&1 | tail -n 3
    timeout 45 $PY -m benchmarks.warm_start --device cuda --size large --case inference \
        --models mlp,hf_gpt2 2>&1 | tail -n 2
} | tee "$OUT/warm.txt"
echo "elapsed $SECONDS"
for mode in direct triton direct triton; do
    [ $SECONDS -lt 540 ] || break
    timeout $((570 - SECONDS)) $PY .device_scripts/gpu_launch_cost.py $mode 2>&1 | tail -n 4
done | tee "$OUT/launch-cost.txt"
echo "elapsed $SECONDS"
