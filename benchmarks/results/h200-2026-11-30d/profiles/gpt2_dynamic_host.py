"""Ad-hoc probe (twelfth session): GPT-2 (zoo, large, bf16) inference at 300 tokens after
lengths 15, 42, 64 (automatic dynamic shapes), kiln:inductor against torch.compile: step
time, GPU kernels, host time by function and by op. Run from the repository root on the
GPU machine with PYTHONPATH=.; output: gpt2-dynamic-host.txt."""

import cProfile
import pstats
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

import torchkiln
from benchmarks.dynamic import build_model


def compiled(label: str, module: torch.nn.Module):
    if label == "torch.compile":
        return torch.compile(module)
    return torchkiln.compile(module, backend="inductor")


def probe(label: str) -> None:
    module = build_model("large", 512).cuda().to(torch.bfloat16).eval()
    forward = compiled(label, module)
    with torch.no_grad():
        for length in (15, 42, 64):
            forward(torch.randint(0, 1000, (16, length), device="cuda"))
        tokens = torch.randint(0, 1000, (16, 300), device="cuda")
        for _ in range(3):
            forward(tokens)
        torch.cuda.synchronize()
        steps = []
        for _ in range(10):
            start = time.perf_counter()
            forward(tokens)
            torch.cuda.synchronize()
            steps.append(time.perf_counter() - start)
        with profile(activities=[ProfilerActivity.CUDA]) as gpu:
            forward(tokens)
            torch.cuda.synchronize()
        host = cProfile.Profile()
        host.enable()
        for _ in range(10):
            forward(tokens)
        torch.cuda.synchronize()
        host.disable()
        pstats.Stats(host).sort_stats("tottime").print_stats(8)
        with profile(activities=[ProfilerActivity.CPU]) as ops:
            for _ in range(10):
                forward(tokens)
            torch.cuda.synchronize()
        print(ops.key_averages().table(sort_by="self_cpu_time_total", row_limit=22))
    kernels: dict[str, list] = {}
    for event in gpu.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            total = kernels.setdefault(event.name, [0.0, 0])
            total[0] += event.device_time
            total[1] += 1
    gpu_ms = sum(us for us, _ in kernels.values()) / 1e3
    launches = sum(n for _, n in kernels.values())
    print(
        f"== {label}: step {statistics.median(steps) * 1e3:.3f} ms, kernels {gpu_ms:.3f} ms, "
        f"{launches} launches"
    )
    for name, (us, n) in sorted(kernels.items(), key=lambda kv: -kv[1][0])[:14]:
        print(f"  {us:9.1f} us x{n:3d} {name[:150]}")


if __name__ == "__main__":
    torch.manual_seed(0)
    for label in ("kiln:inductor", "torch.compile"):
        probe(label)
