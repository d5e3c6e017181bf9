#!/usr/bin/env bash
# Run the benchmark harness on the GPU machine in ONE call, within 9 minutes.
#
#   bash benchmarks/gpu.sh        # from the repository root (the device tool's cwd)
#
# Writes under $OUT (default benchmarks/out): bench-cuda.json (every row),
# bench-cuda.md (the tables, also printed at the end), bench-cuda.log
# (progress, one line per row), env.txt (GPU, versions) and pip.log.
# Overrides: BENCH_MODELS, BENCH_BACKENDS, BENCH_CASES (comma lists, default
# all), BENCH_BUDGET (seconds for the harness; default what is left of 480 s
# after setup), BENCH_ROW_BUDGET (default 90 s), BENCH_ARGS (more harness flags,
# e.g. --no-warm), PYTHON (default python3).
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/benchmarks/out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"

. tools/gpu_setup.sh

{
    nvidia-smi
    "$PY" -c 'import sys, torch; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda)'
    "$PY" -m pip list 2>/dev/null | grep -iE '^(torch|transformers|torchvision|timm|triton|onnx|onnxruntime|openvino|apache-tvm|torchkiln) '
} >"$OUT/env.txt" 2>&1

budget="${BENCH_BUDGET:-$((480 - SECONDS))}"
timeout --kill-after=10 "$((budget + 40))" "$PY" -m benchmarks.run --device cuda \
    --models "${BENCH_MODELS:-all}" --backends "${BENCH_BACKENDS:-all}" \
    --cases "${BENCH_CASES:-inference,training}" \
    --time-budget "$budget" --row-budget "${BENCH_ROW_BUDGET:-90}" \
    --json "$OUT/bench-cuda.json" --markdown "$OUT/bench-cuda.md" ${BENCH_ARGS:-} \
    >"$OUT/bench-cuda.out" 2>"$OUT/bench-cuda.log"
rc=$?

if [ ! -s "$OUT/bench-cuda.md" ] && [ -s "$OUT/bench-cuda.json" ]; then
    echo "(harness did not finish; tables rebuilt from the rows it wrote)"
    "$PY" -m benchmarks.show "$OUT/bench-cuda.json" >"$OUT/bench-cuda.md"
fi
cat "$OUT/bench-cuda.md" 2>/dev/null
if [ "$rc" -ne 0 ]; then
    echo "harness exited with $rc; last lines of bench-cuda.log:"
    tail -n 30 "$OUT/bench-cuda.log"
fi
echo "gpu.sh: ${SECONDS} s"
exit "$rc"
