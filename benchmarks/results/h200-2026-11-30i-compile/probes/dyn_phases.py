"""Phases of kiln's dynamic GPT-2 training compiles: lengths 2 (static), 65 (dynamic), 96."""

import importlib
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

import torchkiln
from benchmarks.caches import compiler_caches
from benchmarks.compile_phases import PhaseClock, StackSampler
from benchmarks.dynamic import build_model, make_step
from benchmarks.models import Built, random_tokens
from benchmarks.models.hf import SHAPES
from benchmarks.rows import on_device
from benchmarks.variants import discover_kiln_backends, select_variants

importlib.import_module("torchkiln_inductor.compile_fx")
size, case = sys.argv[1], sys.argv[2]
cuda = torch.cuda.is_available()
dev = torch.device("cuda" if cuda else "cpu")
if cuda:
    torch.set_float32_matmul_precision("high")
model = on_device(
    Built(build_model(size, 512), ()), dev, torch.bfloat16 if cuda else torch.float32
).module
batch, vocab = SHAPES[size].batch, model.model.config.vocab_size
lengths = [2, 65, 96, 228]
toks = {n: random_tokens(vocab, (batch, n), seed=n).to(dev) for n in lengths}
v = select_variants("kiln:inductor", dev.type, discover_kiln_backends(dev.type))[-1]
with compiler_caches(Path(tempfile.mkdtemp())):
    step = make_step(model, v.compile(model), case)
    for n in lengths:
        clock = PhaseClock()
        clock.install()
        sampler = StackSampler(threading.get_ident())
        sampler.start()
        t = time.perf_counter()
        step(toks[n])
        if cuda:
            torch.cuda.synchronize()
        first = time.perf_counter() - t
        sampler.stop()
        clock.uninstall()
        t = time.perf_counter()
        step(toks[n])
        if cuda:
            torch.cuda.synchronize()
        again = time.perf_counter() - t
        print(f"== len {n}: first {first:.2f} s, again {again * 1e3:.1f} ms")
        for p, s in clock.seconds().items():
            if s > 0.01:
                print(f"   {s:7.2f} s  {p}")
        if first > 1:
            for where, inc, own in sampler.top(45):
                print(f"   {inc * 100:5.1f}% {own * 100:5.1f}%  {where}")
print({g: dict(c) for g, c in torchkiln.counters.items()})
