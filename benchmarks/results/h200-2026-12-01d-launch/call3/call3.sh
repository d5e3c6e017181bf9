#!/usr/bin/env bash
# Session 22, call 3: warm starts that never import Triton (StoredKernel), the cudagraphs
# backend reading a settled backward input in place, their GPU tests and measurements.
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/kiln-pycache
timeout 120 $PY .device_scripts/pyc_warm.py 2>&1 | tail -1
echo "elapsed $SECONDS"
timeout 170 $PY -m pytest -q -p no:cacheprovider tests/plugins/inductor/test_triton_binaries_gpu.py \
    tests/plugins/inductor/test_cuda_launch_gpu.py tests/plugins/inductor/test_cuda_launch_abi.py \
    tests/plugins/inductor/test_triton_launch.py tests/plugins/cudagraphs/test_runner_cuda.py \
    tests/plugins/cudagraphs/test_reduce_overhead_cuda.py 2>&1 | tail -n 15 | tee "$OUT/gpu-tests.txt"
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
timeout 60 $PY benchmarks/results/h200-2026-12-01d-launch/call3/cg_probe.py 2>&1 | grep -E "recorded|probe|Error" | tee "$OUT/cudagraphs.txt"
timeout 120 $PY -m benchmarks.run --device cuda --models chain,mlp,nanogpt --backends kiln:cudagraphs \
    --cases training --no-warm 2>&1 | tail -n 30 | tee -a "$OUT/cudagraphs.txt"
echo "elapsed $SECONDS"
timeout $((560 - SECONDS)) $PY -m benchmarks.warm_start --device cuda --size large --case inference \
    --models mlp --eager-first --profile >"$OUT/warm-profile-mlp-inference.txt" 2>&1
tail -n 1 "$OUT/warm-profile-mlp-inference.txt"
echo "elapsed $SECONDS"
