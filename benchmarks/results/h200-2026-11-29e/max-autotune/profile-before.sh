#!/usr/bin/env bash
# #24: where max-autotune's first call goes (mlp inference, then training), no CUDA graphs.
set -u
export PYTHONUNBUFFERED=1
PY=python3
. tools/gpu_setup.sh
for case in inference training; do
  TORCHKILN_LOGS=autotune timeout 170 $PY -m benchmarks.compile_profile --model mlp --case $case \
    --backend kiln:inductor:max-autotune-no-cudagraphs --top 45 > $OUT/prof-mlp-$case-ma.txt 2> $OUT/log-mlp-$case-ma.txt
  echo "rc $?"; head -1 $OUT/prof-mlp-$case-ma.txt; grep -A9 "torchkiln counters" $OUT/prof-mlp-$case-ma.txt
  [ $SECONDS -gt 200 ] && break
done
echo "total ${SECONDS}s"
