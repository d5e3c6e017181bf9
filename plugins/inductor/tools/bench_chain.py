"""One-off measurement: softmax(layer_norm(gelu(x * w + b))) at 512x1024 float32, eager vs inductor.

    python plugins/inductor/tools/bench_chain.py [--rows 512 --cols 1024 --iters 200 --threads N]

Both run side by side in one process, on the same inputs, calls alternating
(so background load affects both alike); prints median and minimum time per
call and the speedups. (The benchmark suite lives in benchmarks/.)
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
        torch.testing.assert_close(compiled(*args), chain(*args))
        (eager, eager_min), (kiln, kiln_min) = interleaved_us([chain, compiled], args, a.iters)
    print(f"threads={torch.get_num_threads()} kernels={compiled.num_kernels}")
    print(f"median: eager {eager:9.1f} us   inductor {kiln:9.1f} us   speedup {eager / kiln:.2f}x")
    print(
        f"min:    eager {eager_min:9.1f} us   inductor {kiln_min:9.1f} us   speedup {eager_min / kiln_min:.2f}x"
    )


if __name__ == "__main__":
    main()
