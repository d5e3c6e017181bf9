"""How long a kiln:cudagraphs inference step spends on the host before its graph launches."""

import cProfile
import pstats
import statistics
import sys
import time

import torch

import torchkiln
from benchmarks.cases import make_workload
from benchmarks.models import MODELS
from benchmarks.rows import on_device

marks = []
_replay = torch.cuda.CUDAGraph.replay


def replay(self):
    marks.append(time.perf_counter())
    return _replay(self)


torch.cuda.CUDAGraph.replay = replay

for model in sys.argv[1].split(","):
    built = on_device(MODELS[model].build("large"), torch.device("cuda"), torch.bfloat16)
    for label, fwd in (
        ("eager", built.module),
        ("kiln:cudagraphs", torchkiln.compile(built.module, backend="cudagraphs")),
    ):
        work = make_workload(built.module, fwd, built.inputs, "inference", label != "eager")
        for _ in range(5):
            work.step()
        torch.cuda.synchronize()
        pre, host, total = [], [], []
        for _ in range(50):
            marks.clear()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            work.step()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            if marks:
                pre.append((marks[0] - t0) * 1e6)
            host.append((t1 - t0) * 1e6)
            total.append((t2 - t0) * 1e6)
        med = statistics.median
        print(
            f"{model} {label}: step {med(total):.0f} us, host {med(host):.0f} us, "
            f"before the replay {med(pre) if pre else float('nan'):.0f} us (median of 50)"
        )
        if label != "eager":
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(50):
                work.step()
            prof.disable()
            torch.cuda.synchronize()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(35)
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        torch._dynamo.reset()
        torchkiln.reset()
