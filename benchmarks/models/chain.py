"""The memory-bound chain ``softmax(layer_norm(gelu(x * w + b)))``.

Every op is pointwise or a row reduction, so an unfused run reads and writes
the whole tensor once per op while a fused one reads ``x`` once and writes
the result once: the harness reports GB/s against a measured copy.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.models import Built, random_inputs

# size -> (rows, row length)
SIZES = {"tiny": (16, 64), "small": (4096, 1024), "large": (32768, 4096)}


class Chain(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(width))
        self.b = nn.Parameter(torch.randn(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.gelu(x * self.w + self.b)
        return torch.softmax(F.layer_norm(y, y.shape[-1:]), dim=-1)


def build(size: str) -> Built:
    rows, width = SIZES[size]
    return Built(Chain(width), random_inputs((rows, width)))
