#!/usr/bin/env bash
# Session 27, call 5: the rest of the zoo under kiln:cudagraphs (#18), on ecf4c55. (Its
# probe of the host time before a replay patched Conv2d before compiling and measured a
# different graph: discarded, re-run in call 6.)
set -u
PY=python3
FINAL=$OUT
export OUT=/tmp/w; mkdir -p $OUT
. tools/gpu_setup.sh
export PYTHONPATH=.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/kiln-pycache
BENCH_MODELS=nanogpt,hf_gpt2,hf_bert,hf_llama,timm_vit BENCH_BACKENDS=eager,kiln:cudagraphs BENCH_CASES=inference,training \
    BENCH_ARGS="--no-warm --reps 20" BENCH_BUDGET=$((500 - SECONDS)) BENCH_ROW_BUDGET=40 \
    OUT=/tmp/w/cg bash benchmarks/gpu.sh 2>&1 | grep -E "^\| [a-z_0-9]+ +\| (inference|training) +\| [0-9.]+ +\|"
cp /tmp/w/cg/bench-cuda.md /tmp/w/cg/bench-cuda.json "$FINAL/"
