"""Matmul throughput on the GPU: cuBLAS, torchkiln's max-autotune, torch.compile's max-autotune.

    python -m benchmarks.gemm                       # 4096^3 and the zoo's matmul shapes, bf16
    python -m benchmarks.gemm --shapes 4096x4096x4096 --torch-all
    python -m benchmarks.gemm --epilogues gelu,gelu_tanh,relu

The max-autotune issue asks two things of large bf16 matmuls: a plain product at 95% of
cuBLAS's throughput or more, and a product with a fused epilogue (bias and an activation:
GELU unless ``--epilogues``) faster than cuBLAS plus a separate epilogue kernel, which is
what eager runs. For every shape
(``MxNxK``: an ``M x K`` input times a ``K x N`` weight), this times in one process, on the
same inputs, each call replayed from a CUDA graph (Triton's ``do_bench_cudagraph``, median):
the host's cost of a call (guards, a wrapper) is not a matmul's, and a small product's kernel
is shorter than it.

* ``cublas``: ``torch.mm``, the reference, and eager's ``addmm`` + ``gelu``;
* ``kiln``: ``torchkiln.compile(mode="max-autotune-no-cudagraphs")`` of the same functions,
  whose first call tunes (its time is reported);
* ``torch``: ``torch.compile(mode="max-autotune-no-cudagraphs")``, the reference to beat, for
  4096^3 only unless ``--torch-all`` (its tuning takes tens of seconds a shape).

The zoo's shapes are the distinct ``mm``/``addmm`` products of the benchmark models' large
inference forward, recorded with a dispatch mode.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.models import MODELS
from benchmarks.rows import on_device

ZOO = ("mlp", "nanogpt", "hf_gpt2", "hf_bert", "hf_llama")
SQUARE = (4096, 4096, 4096)


class _Products(TorchDispatchMode):
    """Records the ``(M, N, K)`` of every 2-D matmul that runs under it."""

    def __init__(self):
        super().__init__()
        self.shapes: set[tuple[int, int, int]] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.mm.default:
            (m, k), n = args[0].shape, args[1].shape[1]
            self.shapes.add((m, n, k))
        elif func is torch.ops.aten.addmm.default:
            (m, k), n = args[1].shape, args[2].shape[1]
            self.shapes.add((m, n, k))
        return func(*args, **(kwargs or {}))


def zoo_shapes(device: torch.device, dtype: torch.dtype) -> set[tuple[int, int, int]]:
    """The distinct matmul shapes of the zoo models' large inference forward."""
    found = set()
    for name in ZOO:
        built = on_device(MODELS[name].build("large"), device, dtype)
        built.module.eval()
        with torch.no_grad(), _Products() as products:
            built.module(*built.inputs)
        found |= products.shapes
        del built
    return found


def plain(a, w):
    return torch.mm(a, w)


#: the pointwise functions applied to ``addmm``'s product (``--epilogues``)
EPILOGUES = {
    "gelu": F.gelu,
    "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"),
    "relu": F.relu,
}


def with_epilogue(activation: str) -> Callable:
    """``activation(a @ w + bias)``, eager's ``addmm`` then the activation's kernel."""
    act = EPILOGUES[activation]

    def mm_bias_activation(a, w, bias):
        return act(torch.addmm(bias, a, w))

    return mm_bias_activation


def bench_us(fn: Callable[[], object]) -> float:
    from triton.testing import do_bench_cudagraph

    return do_bench_cudagraph(fn, rep=100, return_mode="median") * 1e3


def compiled(compile_fn: Callable, fn: Callable, args: tuple) -> tuple[Callable, float, float]:
    """``fn`` compiled, the seconds its first (tuning) call took, and its largest difference
    from eager on ``args``."""
    compiled_fn = compile_fn(fn)
    start = time.perf_counter()
    out = compiled_fn(*args)
    torch.cuda.synchronize()
    first_s = time.perf_counter() - start
    error = (out.float() - fn(*args).float()).abs().max().item()
    return compiled_fn, first_s, error


def measure(
    shape: tuple[int, int, int], dtype: torch.dtype, with_torch: bool, epilogues: list[str]
) -> list[str]:
    """One line per form (plain, then ``addmm`` with each of ``epilogues``) of ``shape``."""
    import torchkiln

    m, n, k = shape
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    w = torch.randn(k, n, device="cuda", dtype=dtype) / k**0.5
    bias = torch.randn(n, device="cuda", dtype=dtype)
    tflop = 2 * m * n * k / 1e12
    compilers = {"kiln": lambda f: torchkiln.compile(f, mode="max-autotune-no-cudagraphs")}
    if with_torch:
        compilers["torch"] = lambda f: torch.compile(f, mode="max-autotune-no-cudagraphs")
    lines = []
    forms = [("mm", plain, (a, w))]
    forms += [(f"mm+bias+{e}", with_epilogue(e), (a, w, bias)) for e in epilogues]
    for form, fn, args in forms:
        eager_us = bench_us(lambda fn=fn, args=args: fn(*args))
        cells = [
            f"{form:18s} {m}x{n}x{k:<6d} cublas {eager_us:8.1f}us {tflop / eager_us * 1e6:6.0f}TF/s"
        ]
        for name, compile_fn in compilers.items():
            torch.compiler.reset()
            torchkiln.reset()  # else a function compiled for 8 sizes runs new ones as captured
            run, first_s, error = compiled(compile_fn, fn, args)
            us = bench_us(lambda run=run, args=args: run(*args))
            cells.append(
                f"{name} {us:8.1f}us {eager_us / us:5.1%} of cublas (tune {first_s:5.1f}s, "
                f"max|diff| {error:.3g})"
            )
        lines.append(" | ".join(cells))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", help="comma list of MxNxK (default: 4096^3 and the zoo's)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument(
        "--torch-all", action="store_true", help="torch.compile max-autotune on every shape"
    )
    parser.add_argument(
        "--epilogues",
        default="gelu",
        help=f"comma list of activations after addmm, of {', '.join(EPILOGUES)} (default gelu)",
    )
    args = parser.parse_args()
    epilogues = args.epilogues.split(",")
    unknown = set(epilogues) - set(EPILOGUES)
    if unknown:
        parser.error(f"unknown epilogues {sorted(unknown)}; known: {', '.join(EPILOGUES)}")
    dtype = getattr(torch, args.dtype)
    if args.shapes:
        shapes = [tuple(int(d) for d in s.split("x")) for s in args.shapes.split(",")]
    else:
        shapes = [SQUARE, *sorted(zoo_shapes(torch.device("cuda"), dtype) - {SQUARE})]
    print(f"{torch.cuda.get_device_name()}, {dtype}, torch {torch.__version__}")
    print(
        "cublas: torch.mm, or addmm + the activation (eager); x% of cublas: cublas time / this time"
    )
    for shape in shapes:
        for line in measure(shape, dtype, args.torch_all or shape == SQUARE, epilogues):
            print(line, flush=True)


if __name__ == "__main__":
    main()
