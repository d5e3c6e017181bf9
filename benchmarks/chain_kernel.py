"""The fused chain softmax(layer_norm(gelu(x * w + b))) at 512x1024 float32: eager, torch.compile
and torchkiln's inductor kernel.

    python -m benchmarks.chain_kernel [--rows 512 --cols 1024 --iters 200 --threads N]

The inductor row is the compiled aten graph alone (``compile_fx``, no capture
or guards), the number the inductor issue's "2x eager" target is about. All
run in one process on the same inputs, calls alternating (so background load
hits all alike); prints median and minimum time per call and the speedups.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from torchkiln_inductor.backend import decompositions
from torchkiln_inductor.compile_fx import compile_fx
from torchkiln_inductor.options import InductorOptions


def chain(x, w, b, lw, lb):
    return torch.softmax(F.layer_norm(F.gelu(x * w + b), (x.shape[-1],), lw, lb), -1)


def interleaved_us(fns, args, iters: int) -> list[tuple[float, float]]:
    """(median, min) microseconds per call of each fn, calls alternating so load hits all alike."""
    for fn in fns:
        for _ in range(10):
            fn(*args)
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(iters):
        for fn, out in zip(fns, samples):
            start = time.perf_counter()
            fn(*args)
            out.append(time.perf_counter() - start)
    return [(statistics.median(s) * 1e6, min(s) * 1e6) for s in samples]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--cols", type=int, default=1024)
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--threads", type=int, default=None, help="torch and OpenMP threads")
    a = parser.parse_args()
    options = InductorOptions()
    if a.threads:
        torch.set_num_threads(a.threads)
        options = InductorOptions(threads=a.threads)
    args = [torch.randn(a.rows, a.cols), *(torch.randn(a.cols) for _ in range(4))]
    with torch.no_grad():
        gm = make_fx(chain, decomposition_table=decompositions())(*args)
        compiled = compile_fx(gm, args, options)
        reference = torch.compile(chain)
        for fn in (compiled, reference):
            torch.testing.assert_close(fn(*args), chain(*args))
        times = interleaved_us([chain, reference, compiled], args, a.iters)
    print(f"threads={torch.get_num_threads()} inductor kernels={compiled.num_kernels}")
    (eager, eager_min) = times[0]
    for name, (med, low) in zip(("eager", "torch.compile", "kiln:inductor"), times):
        print(
            f"{name:14s} median {med:8.1f} us ({eager / med:.2f}x)   "
            f"min {low:8.1f} us ({eager_min / low:.2f}x)"
        )


if __name__ == "__main__":
    main()
