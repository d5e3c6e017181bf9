"""The chain's kernel: each max-autotune candidate's time (TORCHKILN_LOGS=autotune), and the
heuristic's, on the zoo's large size in bf16."""

import sys

import torch

sys.path.insert(0, ".")
import torchkiln
from benchmarks.models import MODELS

built = MODELS["chain"].build("large")
m = built.module.to(device="cuda", dtype=torch.bfloat16)
x = built.inputs[0].to(device="cuda", dtype=torch.bfloat16)


def bench(fn, n=200):
    for _ in range(10):
        fn(x)
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn(x)
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    ts.sort()
    return ts[len(ts) // 2]


with torch.no_grad():
    copy = bench(lambda t: t.clone())
    for mode in ("default", "max-autotune-no-cudagraphs"):
        c = torchkiln.compile(m, backend="inductor", mode=mode)
        t = bench(c)
        print(f"{mode}: {t:.1f} us (copy {copy:.1f} us, {copy / t * 100:.0f}% of copy)", flush=True)
