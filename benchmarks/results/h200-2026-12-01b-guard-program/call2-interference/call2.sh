#!/usr/bin/env bash
# Session 19, call 2: kiln's cold training compile alone, after torch.compile in one process,
# and with torch's ptxas; phases and sampled stacks.
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
timeout 300 $PY .device_scripts/interference.py 2>&1 | tee "$OUT/interference-mlp.txt"
PROBE_MODEL=nanogpt timeout 200 $PY .device_scripts/interference.py 2>&1 | tee "$OUT/interference-nanogpt.txt"
