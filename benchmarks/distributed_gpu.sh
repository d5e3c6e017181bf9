#!/usr/bin/env bash
# DDP and FSDP2 training (#25) on a multi-GPU machine, in ONE device call, within 9 minutes.
#
#   bash benchmarks/distributed_gpu.sh     # from the repository root, on nvidia-h200-x2 or larger
#
# Writes under $OUT (default benchmarks/out): distributed.json (every row), distributed.md
# (the tables, also printed), distributed.log (progress), traces.tar.gz (rank 0's profiled
# step per configuration, chrome traces) and env.txt. Overrides: DIST_MODELS, DIST_WRAPPERS,
# DIST_VARIANTS (comma lists), DIST_BUDGET (seconds for the run; default what is left of
# 500 s after setup), DIST_ARGS (more flags, e.g. --fsdp2-order shard-first), PYTHON.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/benchmarks/out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
# NVLink multicast (NVLS) off: the device README's advice for these machines.
export NCCL_NVLS_ENABLE=0

. tools/gpu_setup.sh

{
    nvidia-smi
    "$PY" -c 'import sys, torch; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
} >"$OUT/env.txt" 2>&1

budget="${DIST_BUDGET:-$((500 - SECONDS))}"
timeout --kill-after=10 "$((budget + 40))" "$PY" -m benchmarks.distributed --device cuda \
    --models "${DIST_MODELS:-nanogpt,hf_gpt2}" --wrappers "${DIST_WRAPPERS:-ddp,fsdp2}" \
    --variants "${DIST_VARIANTS:-eager,torch.compile,kiln:inductor}" --time-budget "$budget" \
    --json "$OUT/distributed.json" --markdown "$OUT/distributed.md" \
    --traces "$OUT/traces.tar.gz" ${DIST_ARGS:-} >"$OUT/distributed.out" 2>"$OUT/distributed.log"
rc=$?

if [ ! -s "$OUT/distributed.md" ] && [ -s "$OUT/distributed.json" ]; then
    echo "(the run did not finish; tables rebuilt from the rows it wrote)"
    "$PY" -m benchmarks.distributed --report "$OUT/distributed.json" >"$OUT/distributed.md"
fi
cat "$OUT/distributed.md" 2>/dev/null
if [ "$rc" -ne 0 ]; then
    echo "benchmarks.distributed exited with $rc; last lines of distributed.log:"
    tail -n 30 "$OUT/distributed.log"
fi
echo "distributed_gpu.sh: ${SECONDS} s"
exit "$rc"
