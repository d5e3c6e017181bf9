"""Per-kernel GPU time of GPT-2 large inference under dynamic shapes, kiln vs torch.compile."""

import copy
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.dynamic import build_model, make_step
from benchmarks.models import Built, random_tokens
from benchmarks.models.hf import SHAPES
from benchmarks.profile_steps import _kernel_times
from benchmarks.rows import on_device
from benchmarks.variants import discover_kiln_backends, select_variants

torch.set_float32_matmul_precision("high")
dev = torch.device("cuda")
model = on_device(Built(build_model("large", 512), ()), dev, torch.bfloat16).module
batch, vocab = SHAPES["large"].batch, model.model.config.vocab_size
warm = [64, 143, 300]
probe = [int(a) for a in sys.argv[1].split(",")] if len(sys.argv) > 1 else [98, 311, 445]
toks = {n: random_tokens(vocab, (batch, n), seed=n).to(dev) for n in warm + probe}
variants = select_variants("torch.compile,kiln:inductor", "cuda", discover_kiln_backends("cuda"))
for v in variants:
    step = make_step(copy.deepcopy(model), v.compile(copy.deepcopy(model)), "inference")
    for n in warm + probe:
        step(toks[n])
        step(toks[n])
    torch.cuda.synchronize()
    for n in probe:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                step(toks[n])
            torch.cuda.synchronize()
        kt = _kernel_times(prof)
        total = sum(us for us, _ in kt.values()) / 3
        launches = sum(c for _, c in kt.values()) / 3
        print(f"== {v.label} len {n}: GPU {total:.0f} us/step, {launches:.0f} launches")
        for name, (us, c) in sorted(kt.items(), key=lambda kv: -kv[1][0])[:14]:
            print(f"   {us / 3:9.1f} us {c // 3:4d}x  {name[:110]}")
