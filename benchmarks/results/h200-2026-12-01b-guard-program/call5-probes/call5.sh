#!/usr/bin/env bash
# Session 19, call 5: (a) does torch.compile change Triton's cache key in this process?
# (b) how many C launchers a cold mlp training compile builds, and what one costs.
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
TRITON_CACHE_DIR=$(mktemp -d) timeout 90 $PY .device_scripts/keyprobe.py 2>&1 | tee "$OUT/keyprobe.txt"
timeout 120 $PY .device_scripts/launchers.py 2>&1 | tail -5 | tee "$OUT/launchers.txt"
