import copy
import cProfile
import pstats
import statistics
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.dynamic import build_model, make_step
from benchmarks.models import Built, random_tokens
from benchmarks.models.hf import SHAPES
from benchmarks.rows import on_device
from benchmarks.variants import discover_kiln_backends, select_variants

size = sys.argv[1]
torch.set_float32_matmul_precision("high")
dev = torch.device("cuda")
model = on_device(Built(build_model(size, 512), ()), dev, torch.bfloat16).module
batch, vocab = SHAPES[size].batch, model.model.config.vocab_size
sweep = [395, 431, 42, 266]
toks = {n: random_tokens(vocab, (batch, n), seed=n).to(dev) for n in sweep}
variants = select_variants("torch.compile,kiln:inductor", "cuda", discover_kiln_backends("cuda"))[
    1:
]
steps = {}
for v in variants:
    steps[v.label] = step = make_step(
        copy.deepcopy(model), v.compile(copy.deepcopy(model)), "inference"
    )
    for n in sweep + sweep:
        step(toks[n])
torch.cuda.synchronize()
for k, step in steps.items():
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(5):
            step(toks[42])
        torch.cuda.synchronize()
    print("=====", k)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
for k, step in steps.items():
    ts = []
    for _ in range(15):
        t = time.perf_counter()
        step(toks[42])
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t)
    print(f"{k} 42: {statistics.median(ts) * 1e3:.3f} ms", flush=True)
p = cProfile.Profile()
s = steps["kiln:inductor"]
p.enable()
for _ in range(50):
    s(toks[42])
torch.cuda.synchronize()
p.disable()
pstats.Stats(p).sort_stats("tottime").print_stats(25)
