"""Where a step's time goes, per variant: GPU kernels by total time, launches, host time.

    python -m benchmarks.profile_steps --models nanogpt,hf_bert --cases inference,training \\
        --backends eager,torch.compile,kiln:inductor [--size large --dtype bfloat16 --top 12]

For each model, case and variant: warm-up steps (compiling), then ``torch.profiler`` over a
few steps. Prints per step: host wall time, GPU kernel time, kernel launches, the peak GPU
memory of the timed steps, and the top kernels by GPU time. The speed tables (``benchmarks.run``) say *how much* slower a row is;
this says *where*: more kernels, slower kernels, or host time between them.
``--host-top N`` adds the N Python functions with the most host time over the timed steps
(cProfile, by own time); ``--trace DIR`` writes each row's profiler trace (Chrome format).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.cases import make_workload
from benchmarks.models import MODELS
from benchmarks.rows import on_device
from benchmarks.variants import parse_variant


def _kernel_times(prof) -> dict[str, tuple[float, int]]:
    """GPU kernel name -> (total µs, launches) over the profiled steps."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            entry = totals[event.name]
            entry[0] += event.device_time
            entry[1] += 1
    return {name: (us, int(n)) for name, (us, n) in totals.items()}


def profile_row(model: str, case: str, label: str, args) -> None:
    built = on_device(MODELS[model].build(args.size), torch.device("cuda"), args.dtype)
    variant = parse_variant(label)
    forward = variant.compile(built.module)
    work = make_workload(built.module, forward, built.inputs, case, variant.replays_cuda_graphs)
    for _ in range(args.warmup):
        work.step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    walls = []
    for _ in range(args.steps):
        start = time.perf_counter()
        work.step()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - start) * 1e3)
    peak_gb = torch.cuda.max_memory_allocated() / 1e9
    host = cProfile.Profile() if args.host_top else None
    if host is not None:
        host.enable()
        for _ in range(args.steps):
            work.step()
        torch.cuda.synchronize()
        host.disable()
    traced = bool(args.trace)  # with the arguments' shapes and strides, for the trace
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=traced
    ) as prof:
        for _ in range(args.steps):
            work.step()
        torch.cuda.synchronize()
    if args.trace:
        name = f"{model}-{case}-{label}".replace(":", "_").replace("/", "_")
        prof.export_chrome_trace(f"{args.trace}/{name}.json")
    kernels = _kernel_times(prof)
    gpu_ms = sum(us for us, _ in kernels.values()) / 1e3 / args.steps
    launches = sum(n for _, n in kernels.values()) / args.steps
    print(
        f"\n== {model} {case} {label}: step {statistics.median(walls):.3f} ms (median), "
        f"GPU kernels {gpu_ms:.3f} ms, {launches:.0f} launches per step, "
        f"peak memory {peak_gb:.2f} GB"
    )
    ranked = sorted(kernels.items(), key=lambda kv: -kv[1][0])[: args.top]
    for name, (us, n) in ranked:
        print(f"  {us / args.steps:9.1f} us  x{n / args.steps:5.1f}  {name[:110]}")
    if host is not None:
        print(f"  host time by function over {args.steps} steps (cProfile, own time):")
        pstats.Stats(host).sort_stats("tottime").print_stats(args.host_top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="nanogpt,hf_bert")
    parser.add_argument("--cases", default="inference,training")
    parser.add_argument("--backends", default="eager,torch.compile,kiln:inductor")
    parser.add_argument("--size", default="large")
    parser.add_argument("--dtype", default="bfloat16", type=lambda s: getattr(torch, s))
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--host-top", type=int, default=0, help="cProfile lines to print")
    parser.add_argument("--trace", default=None, help="folder for Chrome traces")
    args = parser.parse_args()
    for model in args.models.split(","):
        for case in args.cases.split(","):
            for label in args.backends.split(","):
                try:
                    profile_row(model, case, label, args)
                except Exception as e:  # one failing row must not hide the others
                    print(f"\n== {model} {case} {label}: FAILED {type(e).__name__}: {e}")
                torch._dynamo.reset()


if __name__ == "__main__":
    main()
