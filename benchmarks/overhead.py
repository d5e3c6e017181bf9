"""Per-call overhead: µs per call of a compiled ``x + 1`` on a one-element tensor.

The work is nothing, so what is measured is what a compiler adds to every
call: guard checks, argument handling, the call into compiled code.
"""

from __future__ import annotations

import time

import torch

from benchmarks.measure import synchronize
from benchmarks.variants import Variant

WARMUP_CALLS = 20


def add_one(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def per_call_overhead_us(variant: Variant, device: torch.device, calls: int) -> float:
    """Mean µs per call over ``calls`` calls, after compiling and warming up."""
    fn = variant.compile(add_one)
    x = torch.zeros(1, device=device)
    with torch.no_grad():
        for _ in range(WARMUP_CALLS):
            fn(x)
        synchronize(device)
        start = time.perf_counter()
        for _ in range(calls):
            fn(x)
        synchronize(device)
    return (time.perf_counter() - start) / calls * 1e6
