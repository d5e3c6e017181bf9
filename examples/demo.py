"""torchkiln demo: what compiling buys on a model made of many small ops.

    python examples/demo.py [backend]      # default backend: inductor

The model is the normalization and gating ops of a LLaMA-style network, without
its matmuls: per layer an RMS norm, a SiLU-gated product and a residual, then a
layer norm and a softmax.
Eager PyTorch runs each of its ~40 ops as its own pass over memory; torchkiln's
inductor fuses each layer into a couple of loops over the activations (C++ on the
CPU, Triton on a GPU), which is where a just-in-time compiler wins. Matmuls and
convolutions run through aten, compiled or not: models made mostly of them gain
less. The demo prints the backends usable here, the compile time, eager and
compiled time per call (medians, calls interleaved) and the largest difference.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

import torchkiln
from torchkiln.registry import backend_status, lookup_backend

WIDTH, TOKENS, LAYERS, CALLS = 1024, 512, 4, 50


class GatedResidual(torch.nn.Module):
    """RMS norm, then ``x + silu(h * gate) * (h * up)``: a dozen elementwise ops and a reduction."""

    def __init__(self, width: int):
        super().__init__()
        self.norm = torch.nn.Parameter(torch.ones(width))
        self.gate = torch.nn.Parameter(torch.randn(width))
        self.up = torch.nn.Parameter(torch.randn(width) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm
        return x + F.silu(h * self.gate) * (h * self.up)


class Model(torch.nn.Module):
    def __init__(self, width: int = WIDTH, layers: int = LAYERS):
        super().__init__()
        self.layers = torch.nn.ModuleList(GatedResidual(width) for _ in range(layers))
        self.out_norm = torch.nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return torch.softmax(self.out_norm(x), dim=-1)


def backends_here() -> list[str]:
    """One line per backend: usable here, or what to install."""
    lines = []
    for name in torchkiln.list_backends():
        status = backend_status(lookup_backend(name))
        lines.append(f"  {name:12s} {'usable here' if status.usable else status.reason}")
    return lines


@contextmanager
def ticking(label: str) -> Iterator[None]:
    """Say what is running; on a terminal, count the seconds until it is done."""
    if not sys.stdout.isatty():
        print(f"{label} ...", flush=True)
        yield
        return
    done = threading.Event()

    def tick() -> None:
        start = time.perf_counter()
        while not done.wait(1.0):
            print(f"\r{label} ... {time.perf_counter() - start:.0f} s", end="", flush=True)

    print(f"{label} ...", end="", flush=True)
    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
        print("\r\033[K", end="")  # the finished line replaces the ticking one


def median_ms(fns: list[Callable[[], object]], sync: Callable[[], None]) -> list[float]:
    """Median milliseconds per call of each fn; calls alternate, so background load hits all."""
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(CALLS):
        for fn, times in zip(fns, samples):
            start = time.perf_counter()
            fn()
            sync()
            times.append((time.perf_counter() - start) * 1e3)
    return [statistics.median(times) for times in samples]


def main() -> None:
    backend = sys.argv[1] if len(sys.argv) > 1 else "inductor"
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    print("torchkiln: a just-in-time compiler for PyTorch programs. Backends:")
    print("\n".join(backends_here()))

    torch.manual_seed(0)
    model = Model().to(device).eval()
    x = torch.randn(TOKENS, WIDTH, device=device)
    compiled = torchkiln.compile(model, backend=backend)
    where = "cuda" if device == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    print(
        f"\nmodel: {LAYERS} x (RMS norm, SiLU gate, residual), layer norm, softmax; "
        f"input {TOKENS} x {WIDTH} float32 ({where})"
    )
    with torch.no_grad():
        with ticking(f"compiling with backend {backend!r} (first call)"):
            start = time.perf_counter()
            compiled(x)
            sync()
            compile_s = time.perf_counter() - start
        print(
            f"first call with backend {backend!r} (capture and compile, or load them from "
            f"the on-disk cache): {compile_s:.1f} s"
        )
        for _ in range(3):  # warm both up
            model(x), compiled(x)
        eager_ms, compiled_ms = median_ms([lambda: model(x), lambda: compiled(x)], sync)
        max_diff = (compiled(x) - model(x)).abs().max().item()
    print(f"eager     {eager_ms:8.3f} ms per call (median of {CALLS})")
    print(f"compiled  {compiled_ms:8.3f} ms per call (median of {CALLS})")
    print(f"speedup   {eager_ms / compiled_ms:8.2f}x")
    print(f"max |compiled - eager| = {max_diff:.1e}")


if __name__ == "__main__":
    main()
