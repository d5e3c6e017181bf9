#!/usr/bin/env bash
# Cold-compile diagnosis on the GPU: A/B of the worker changes, profiles.
set -u
export PYTHONUNBUFFERED=1
PY=python3
. tools/gpu_setup.sh
nvidia-smi -L > $OUT/env.txt; nproc >> $OUT/env.txt
OLD=.device_scripts/old
ab() {  # model case
  for v in old new; do
    if [ $v = old ]; then pp="$OLD:${PYTHONPATH:-}"; else pp="${PYTHONPATH:-}"; fi
    echo "== $v $1 $2" ; PYTHONPATH=$pp timeout 240 $PY -m benchmarks.warm_start --device cuda --size large --case $2 --models $1 2>&1 | tail -2
  done
}
{
ab mlp training
ab nanogpt training
ab hf_bert training
ab nanogpt inference
} > $OUT/warm-ab.txt 2>&1
cat $OUT/warm-ab.txt
timeout 150 $PY -m benchmarks.compile_profile --model nanogpt --case training --top 60 \
  --callers "waitpid|builtins.compile|read' of|acquire" > $OUT/prof-nanogpt-training.txt 2>&1
head -1 $OUT/prof-nanogpt-training.txt; grep -A8 "torchkiln counters" $OUT/prof-nanogpt-training.txt
timeout 100 $PY -m benchmarks.compile_profile --model nanogpt --case training --backend torch.compile --top 60 > $OUT/prof-nanogpt-training-torch.txt 2>&1
head -1 $OUT/prof-nanogpt-training-torch.txt
echo "total ${SECONDS}s"
