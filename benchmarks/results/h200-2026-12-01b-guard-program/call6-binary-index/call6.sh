#!/usr/bin/env bash
# Session 19, call 6: the binary index (triton_binaries) on the GPU: its GPU tests and the
# Triton launch tests; warm start against cold (mlp, nanogpt, hf_bert training); kiln's cold
# training compile alone and after torch.compile in one process (mlp).
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
timeout 150 $PY -m pytest -q -p no:cacheprovider tests/plugins/inductor/test_triton_binaries_gpu.py \
    tests/plugins/inductor/test_backward_ahead.py tests/plugins/inductor/test_triton_index_checks.py \
    2>&1 | tail -n 15 | tee "$OUT/gpu-tests.txt"
timeout 200 $PY -m benchmarks.warm_start --device cuda --size large --case training \
    --models mlp,nanogpt,hf_bert 2>&1 | tail -n 4 | tee "$OUT/warm-training.txt"
timeout 120 $PY .device_scripts/interference2.py 2>&1 | grep -v "^libdevice\|^threads" | tee "$OUT/interference.txt"
