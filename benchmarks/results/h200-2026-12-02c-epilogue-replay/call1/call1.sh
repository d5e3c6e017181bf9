#!/usr/bin/env bash
# Session 27, call 1: the cudagraphs GPU tests (0858e3e's new one); GEMM epilogue probe (#24);
# timm_vit inference kernel by kernel, eager vs kiln:cudagraphs (#18).
set -u
PY=python3
FINAL=$OUT
export OUT=/tmp/w; mkdir -p $OUT
. tools/gpu_setup.sh
export PYTHONPATH=.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/kiln-pycache
echo "setup $SECONDS"
timeout 120 $PY -m pytest -p no:cacheprovider -q tests/plugins/cudagraphs >"$FINAL/gpu-tests.txt" 2>&1
tail -n 3 "$FINAL/gpu-tests.txt"
echo "elapsed $SECONDS"
timeout 240 $PY benchmarks/results/h200-2026-12-02c-epilogue-replay/call1/gemm_probe.py 4096x4096x4096,8192x3072x768 >"$FINAL/gemm-probe.txt" 2>&1
cat "$FINAL/gemm-probe.txt" | cut -c1-110
echo "elapsed $SECONDS"
timeout $((560 - SECONDS)) $PY -m benchmarks.profile_steps --models timm_vit --cases inference \
    --backends eager,kiln:cudagraphs --size large --dtype bfloat16 --top 25 >"$FINAL/profile-timm-vit.txt" 2>&1
tail -n 80 "$FINAL/profile-timm-vit.txt" | cut -c1-160
echo "elapsed $SECONDS"
