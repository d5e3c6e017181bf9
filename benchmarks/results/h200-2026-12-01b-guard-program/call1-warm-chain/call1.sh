#!/usr/bin/env bash
# Session 19, call 1: #16 warm start after da0aaad, the chain row after 33f3695, and whether
# torch.compile's environment changes (TRITON_PTXAS_PATH) slow kiln's compile in one process.
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
timeout 220 $PY -m benchmarks.warm_start --device cuda --size large --case training \
    --models mlp,nanogpt,hf_bert 2>&1 | tee "$OUT/warm-training.txt"
BENCH_MODELS=chain BENCH_BACKENDS=torch.compile,kiln:inductor BENCH_CASES=inference,training \
    BENCH_BUDGET=100 BENCH_ROW_BUDGET=45 BENCH_ARGS="--no-warm --reps 20" \
    timeout 130 bash benchmarks/gpu.sh > "$OUT/chain.txt" 2>&1
tail -n 40 "$OUT/chain.txt"
timeout 60 $PY - > "$OUT/env-diff.txt" 2>&1 <<'PYEOF'
import os, torch
before = dict(os.environ)
f = torch.compile(lambda x: (x + 1).relu())
f(torch.ones(64, device="cuda"))
after = dict(os.environ)
for k in sorted(set(before) | set(after)):
    if before.get(k) != after.get(k):
        print(k, repr(before.get(k)), "->", repr(after.get(k)))
import triton
print("triton", triton.__version__)
try:
    from triton import knobs
    print("knobs.nvidia.ptxas", knobs.nvidia.ptxas.path if hasattr(knobs.nvidia.ptxas, "path") else knobs.nvidia.ptxas)
except Exception as e:
    print("knobs", type(e).__name__, e)
PYEOF
cat "$OUT/env-diff.txt"
BENCH_MODELS=mlp BENCH_BACKENDS=torch.compile,kiln:inductor BENCH_CASES=training \
    BENCH_BUDGET=120 BENCH_ROW_BUDGET=60 BENCH_ARGS="--no-warm --no-paired --reps 5" \
    timeout 150 bash benchmarks/gpu.sh 2>&1 | grep -A8 "Compile time" | tee "$OUT/harness-mlp-both.txt"
