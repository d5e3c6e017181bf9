"""For the GPU machine (not run yet: no device time this session): host time per call of
compiled functions whose kernels launch through ``cuda_launch.DirectLaunch`` (argument
``direct``) or through Triton 3.6's C launcher (``triton``), against eager in the same
process (interleaved rounds, medians). Run each mode in its own process, alternating:

    for mode in direct triton direct triton; do python gpu_launch_cost.py $mode; done
"""

import statistics
import sys
import time

import torch

import torchkiln
from torchkiln import counters
from torchkiln_inductor.codegen import triton_compile_worker

ROUNDS = 21
CALLS = 300


def add_one(x):
    return x + 1


def norm_and_reductions(x, w):
    y = torch.nn.functional.layer_norm(x * w + 1, x.shape[-1:])
    return y.relu().sum(-1), y.softmax(-1)


def mlp():
    torch.manual_seed(0)
    return (
        torch.nn.Sequential(
            torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.LayerNorm(1024),
            torch.nn.Linear(1024, 1024), torch.nn.GELU(), torch.nn.LayerNorm(1024),
            torch.nn.Linear(1024, 256),
        )
        .cuda()
        .to(torch.bfloat16)
    )  # fmt: skip


def per_call_us(fn, args) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        fn(*args)
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    return host / CALLS * 1e6


def main() -> None:
    mode = sys.argv[1]
    if mode == "triton":  # every kernel through Triton's launcher
        triton_compile_worker._triton_builds_launchers = lambda: False
    x = torch.randn(8, 256, device="cuda")
    cases = {
        "x + 1": (add_one, (torch.zeros(1, device="cuda"),)),
        "layer norm, 2 reductions": (norm_and_reductions, (x, torch.randn(256, device="cuda"))),
        "mlp bf16 batch 8": (mlp(), (x.to(torch.bfloat16),)),
    }
    with torch.no_grad():
        for name, (fn, args) in cases.items():
            counters.clear()
            compiled = torchkiln.compile(fn)
            for _ in range(20):
                compiled(*args)
            torch.testing.assert_close(compiled(*args), fn(*args), atol=2e-2, rtol=2e-2)
            eager, kiln = [], []
            for _ in range(ROUNDS):
                eager.append(per_call_us(fn, args))
                kiln.append(per_call_us(compiled, args))
            e, k = statistics.median(eager), statistics.median(kiln)
            print(
                f"{mode:7s} {name:26s} eager {e:6.1f} us  kiln {k:6.1f} us  kiln/eager "
                f"{k / e:.3f}  {dict(counters['triton_launch'])}"
            )


if __name__ == "__main__":
    main()
