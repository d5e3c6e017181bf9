"""Light tuning on and off, paired steady steps (bf16, size large), and per tuned kernel its
iteration space, bytes and every light candidate's time.

    PYTHONPATH=. python tune_log.py mlp:training,hf_gpt2:inference,... OUT.json
"""

import copy
import json
import math
import sys
import time

import torch

import torchkiln
from benchmarks.cases import make_workload
from benchmarks.measure import median, paired_step_times_ms
from benchmarks.models import MODELS
from benchmarks.rows import on_device
from torchkiln_inductor.autotune import triton_kernels, tuner

log = []
current = {}
orig_store = tuner.store_winner


def store(key, winner, timings):
    log.append({**current, "winner": winner, "timings": timings})
    return orig_store(key, winner, timings)


tuner.store_winner = store
orig_call = triton_kernels.TunedKernel.__call__


def call(self, *tensors):
    k = self._launch
    current.clear()
    current.update(
        model=MODEL,
        name=k.name,
        xnumel=int(k.xnumel),
        rnumels=[int(n) for _, n in k.rnumels],
        meta=dict(k.meta),
        warps=k.num_warps,
        bytes=sum(t.numel() * t.element_size() for t in tensors),
        elements=int(k.xnumel) * math.prod(int(n) for _, n in k.rnumels),
    )
    return orig_call(self, *tensors)


triton_kernels.TunedKernel.__call__ = call
dev = torch.device("cuda")
torch.set_float32_matmul_precision("high")
for spec in sys.argv[1].split(","):
    name, case = spec.split(":")
    MODEL = spec
    built = on_device(MODELS[name].build("large"), dev, torch.bfloat16)
    loads = {}
    for label, options in (("on", None), ("off", {"autotune.light": False})):
        module = copy.deepcopy(built.module)
        compiled = torchkiln.compile(module, options=options)
        wl = make_workload(module, compiled, built.inputs, case)
        t0 = time.perf_counter()
        wl.step()
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        for _ in range(3):
            wl.step()
        loads[label] = wl
        print(f"{name} {case} light {label}: first step {first:.2f} s", flush=True)
    on, off = paired_step_times_ms(loads["on"].step, loads["off"].step, dev, reps=60, budget_s=8)
    ratios = sorted(b / a for a, b in zip(on, off))
    print(
        f"{name} {case}: light on {median(on):.3f} ms, off {median(off):.3f} ms, "
        f"off/on paired median {ratios[len(ratios) // 2]:.3f}",
        flush=True,
    )
    del loads, built
    torch.cuda.empty_cache()
with open(sys.argv[2], "w") as f:
    json.dump(log, f, indent=0)
