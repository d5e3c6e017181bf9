"""Host cost per call of dynamic GPT-2 inference at a short length: kiln vs torch.compile."""

import copy
import cProfile
import pstats
import statistics
import sys
import time

import torch

from benchmarks.dynamic import build_model, make_step
from benchmarks.models import Built, random_tokens
from benchmarks.models.hf import SHAPES
from benchmarks.rows import on_device
from benchmarks.variants import discover_kiln_backends, select_variants

size = sys.argv[1]
cuda = torch.cuda.is_available()
dev = torch.device("cuda" if cuda else "cpu")
if cuda:
    torch.set_float32_matmul_precision("high")
model = on_device(
    Built(build_model(size, 512), ()), dev, torch.bfloat16 if cuda else torch.float32
).module
batch, vocab = SHAPES[size].batch, model.model.config.vocab_size
warm, probe = [64, 143, 300], 15
toks = {n: random_tokens(vocab, (batch, n), seed=n).to(dev) for n in [*warm, probe]}
variants = select_variants(
    "torch.compile,kiln:inductor", dev.type, discover_kiln_backends(dev.type)
)
steps = {}
for v in variants:
    steps[v.label] = make_step(copy.deepcopy(model), v.compile(copy.deepcopy(model)), "inference")
    for n in [*warm, probe]:
        steps[v.label](toks[n])
        steps[v.label](toks[n])


def sync():
    if cuda:
        torch.cuda.synchronize()


times = {k: [] for k in steps}
host = {k: [] for k in steps}
for _ in range(200):
    for k, s in steps.items():
        sync()
        t = time.perf_counter()
        s(toks[probe])
        h = time.perf_counter()
        sync()
        e = time.perf_counter()
        times[k].append(e - t)
        host[k].append(h - t)
for k in steps:
    print(
        f"{k}: wall {statistics.median(times[k]) * 1e6:.0f} us, host (to return) {statistics.median(host[k]) * 1e6:.0f} us"
    )
prof = cProfile.Profile()
s = steps["kiln:inductor"]
prof.enable()
for _ in range(100):
    s(toks[probe])
prof.disable()
sync()
pstats.Stats(prof).sort_stats("tottime").print_stats(30)
