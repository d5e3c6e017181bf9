#!/usr/bin/env bash
# Session 27, call 2: host time before a kiln:cudagraphs replay (#18).
set -u
PY=python3
FINAL=$OUT
export OUT=/tmp/w; mkdir -p $OUT
. tools/gpu_setup.sh
export PYTHONPATH=.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/kiln-pycache
timeout 400 $PY benchmarks/results/h200-2026-12-02c-epilogue-replay/call2/prelaunch.py timm_vit,tv_resnet50 >"$FINAL/prelaunch.txt" 2>&1
grep -E "^(timm|tv_)" "$FINAL/prelaunch.txt"
echo "elapsed $SECONDS"
