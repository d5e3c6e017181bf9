"""Where a kiln:cudagraphs inference step's host time before its graph launch goes:
timestamps at each layer's entry (median of 100 synchronized steps)."""

import statistics
import sys
import time

import torch

import torchkiln
from benchmarks.cases import make_workload
from benchmarks.models import MODELS
from benchmarks.rows import on_device
from torchkiln.aot import api as aot_api
from torchkiln_cudagraphs import capture

stamps = {}


def stamp(name, fn):
    def wrapped(*a, **k):
        stamps.setdefault(name, time.perf_counter())
        return fn(*a, **k)

    return wrapped


aot_api._AOTCompiled.__call__ = stamp("aot", aot_api._AOTCompiled.__call__)
capture.CudaGraphRunner.call_boxed = stamp("runner", capture.CudaGraphRunner.call_boxed)
capture.Recording._replay = stamp("_replay", capture.Recording._replay)
torch.cuda.CUDAGraph.replay = stamp("graph.replay", torch.cuda.CUDAGraph.replay)
ORDER = ["aot", "runner", "_replay", "graph.replay"]

for model in sys.argv[1].split(","):
    built = on_device(MODELS[model].build("large"), torch.device("cuda"), torch.bfloat16)
    fwd = torchkiln.compile(built.module, backend="cudagraphs")
    work = make_workload(built.module, fwd, built.inputs, "inference", True)
    for _ in range(5):
        work.step()
    rows = {k: [] for k in ORDER}
    for _ in range(100):
        stamps.clear()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        work.step()
        for k in ORDER:
            rows[k].append((stamps[k] - t0) * 1e6)
    torch.cuda.synchronize()
    print(model, "  ".join(f"{k} at {statistics.median(v):.0f} us" for k, v in rows.items()))
    torchkiln.reset()
