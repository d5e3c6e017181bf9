#!/usr/bin/env bash
# Session 19, call 4: (a) does torch.compile change Triton's cache key in-process? (b) #18's zoo
# (kiln:eager, kiln:cudagraphs against eager) with the C++ guard program; (c) a cProfile of mlp
# training's warm start (#16: warm <= 10% of cold).
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
TRITON_CACHE_DIR=$(mktemp -d) timeout 60 $PY .device_scripts/keyprobe.py 2>&1 | tee "$OUT/keyprobe.txt"
BENCH_MODELS=mlp,nanogpt,chain,convnet,hf_gpt2,hf_bert,hf_llama,tv_resnet18,timm_vit \
    BENCH_BACKENDS=eager,kiln:eager,kiln:cudagraphs BENCH_CASES=inference,training \
    BENCH_BUDGET=370 BENCH_ROW_BUDGET=40 BENCH_ARGS="--no-warm --reps 20" \
    timeout 400 bash benchmarks/gpu.sh > "$OUT/zoo.txt" 2>&1
tail -n 60 "$OUT/zoo.txt"
timeout 90 $PY -m benchmarks.warm_start --device cuda --size large --case training \
    --models mlp --profile > "$OUT/warm-profile-mlp.txt" 2>&1
grep -E "first step|cumtime|^ +[0-9]" "$OUT/warm-profile-mlp.txt" | head -45
