import copy
import statistics
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.dynamic import build_model, make_step
from benchmarks.models import Built, random_tokens
from benchmarks.models.hf import SHAPES
from benchmarks.profile_steps import _kernel_times
from benchmarks.rows import on_device
from benchmarks.variants import discover_kiln_backends, select_variants

size = sys.argv[1]
torch.set_float32_matmul_precision("high")
dev = torch.device("cuda")
model = on_device(Built(build_model(size, 512), ()), dev, torch.bfloat16).module
batch, vocab = SHAPES[size].batch, model.model.config.vocab_size
sweep = [395, 431, 42, 266]
probe = [431, 415, 445, 395, 64, 42]
toks = {n: random_tokens(vocab, (batch, n), seed=n).to(dev) for n in set(sweep + probe)}
variants = select_variants("torch.compile,kiln:inductor", "cuda", discover_kiln_backends("cuda"))[
    1:
]
for v in variants:
    step = make_step(copy.deepcopy(model), v.compile(copy.deepcopy(model)), "inference")
    for n in sweep + probe:
        step(toks[n])
    torch.cuda.synchronize()
    for n in probe:
        ts = []
        for _ in range(9):
            t = time.perf_counter()
            step(toks[n])
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t)
        print(f"{v.label} {n}: {statistics.median(ts) * 1e3:.3f} ms", flush=True)
    if v.label.startswith("kiln"):
        for n in (431, 415):
            with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
                for _ in range(3):
                    step(toks[n])
                torch.cuda.synchronize()
            kt = _kernel_times(prof)
            print(
                f"== {n}: GPU {sum(u for u, _ in kt.values()) / 3:.0f} us, {sum(c for _, c in kt.values()) / 3:.0f} launches"
            )
            for name, (us, c) in sorted(kt.items(), key=lambda kv: -kv[1][0])[:8]:
                print(f"   {us / 3:9.1f} us {c // 3:4d}x  {name[:100]}")
            print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=12))
