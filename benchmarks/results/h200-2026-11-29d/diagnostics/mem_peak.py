"""Live CUDA blocks at the allocated-memory peak of one step, by allocating frame."""

import collections
import sys

import torch

sys.path.insert(0, ".")
import torchkiln
from benchmarks.cases import make_workload
from benchmarks.models import MODELS


def frames_key(frames, depth=3):
    keep = [
        f
        for f in frames
        if f["filename"].endswith(".py")
        and "/torch/" not in f["filename"]
        and "mem_peak" not in f["filename"]
    ]
    fs = keep[:depth] or frames[:depth]
    return " < ".join(f"{f['filename'].split('/')[-1]}:{f['line']}:{f['name']}" for f in fs)


def peak_report(step, title):
    step()
    step()
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=500000, stacks="python")
    base = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    live, cur, peak, at_peak = {}, 0, 0, {}
    for ev in snap["device_traces"][0]:
        if ev["action"] == "alloc":
            live[ev["addr"]] = ev
            cur += ev["size"]
            if cur > peak:
                peak, at_peak = cur, dict(live)
        elif ev["action"] in ("free_requested",) and ev["addr"] in live:
            cur -= live.pop(ev["addr"])["size"]
    print(f"== {title}: base {base / 2**20:.0f} MiB, step adds at peak {peak / 2**20:.0f} MiB")
    agg = collections.defaultdict(lambda: [0, 0])
    for ev in at_peak.values():
        k = frames_key(ev.get("frames", []))
        agg[k][0] += ev["size"]
        agg[k][1] += 1
    for k, (size, n) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:20]:
        print(f"  {size / 2**20:8.1f} MiB x{n:3d}: {k}")
    print(
        "  sizes at peak (MiB):",
        sorted((round(ev["size"] / 2**20, 1) for ev in at_peak.values()), reverse=True),
    )


def main(model, case, backend):
    built = MODELS[model].build("large")
    module = built.module.to(device="cuda", dtype=torch.bfloat16)
    inputs = tuple(
        t.to(device="cuda", dtype=torch.bfloat16) if t.is_floating_point() else t.cuda()
        for t in built.inputs
    )
    fwd = (
        module
        if backend == "eager"
        else (
            torch.compile(module)
            if backend == "torch.compile"
            else torchkiln.compile(module, backend=backend)
        )
    )
    wl = make_workload(module, fwd, inputs, case)
    peak_report(wl.step if hasattr(wl, "step") else wl[0], f"{model} {case} {backend}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
