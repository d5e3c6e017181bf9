#!/usr/bin/env bash
# Run the test suites that need the GPU machine (CUDA, Python 3.12) in one call.
#
#   bash tools/gpu_tests.sh [pytest paths...]     # from the repository root
#
# Default paths: the capture suite (the Python 3.12 bytecode run) and the
# CUDA-only plugin tests. Writes $OUT/gpu-tests.log and $OUT/junit.xml.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/tools/out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
. tools/gpu_setup.sh
"$PY" -c 'import sys, torch; print(sys.version); print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
paths=("$@")
[ ${#paths[@]} -gt 0 ] || paths=(tests/core tests/plugins/cudagraphs tests/plugins/onnxrt/test_onnxrt_backend.py)
workers=()
"$PY" -c 'import xdist' 2>/dev/null && workers=(-n 8)
set -o pipefail
"$PY" -m pytest -q -p no:cacheprovider "${workers[@]}" --junitxml "$OUT/junit.xml" "${paths[@]}" 2>&1 \
    | tee "$OUT/gpu-tests.log" | tail -n 60
