"""Memory bandwidth: a measured copy as the ceiling for the memory-bound chain.

The chain reads its input once and writes its output once when fully fused,
so its achieved GB/s is (input bytes + output bytes) / step time, to be
read against what a plain ``copy_`` of the same size reaches.
"""

from __future__ import annotations

import torch

from benchmarks.measure import median, step_times_ms


def copy_bandwidth_gbps(nbytes: int, device: torch.device, dtype: torch.dtype) -> float:
    """GB/s of ``dst.copy_(src)`` on ``nbytes`` bytes (read + write counted)."""
    numel = max(1, nbytes // torch.tensor([], dtype=dtype).element_size())
    src = torch.randn(numel, device=device).to(dtype)
    dst = torch.empty_like(src)
    times = step_times_ms(lambda: dst.copy_(src), device, warmup=3, reps=20, budget_s=2.0)
    return 2 * numel * src.element_size() / (median(times) / 1e3) / 1e9


def tensor_bytes(tensors: tuple[torch.Tensor, ...]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)
