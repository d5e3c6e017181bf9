"""A 4-layer MLP, 1024 wide: Linear -> GELU -> LayerNorm, four times, then a head."""

from __future__ import annotations

import torch
from torch import nn

from benchmarks.models import Built, random_inputs

# size -> (batch, width)
SIZES = {"tiny": (8, 64), "small": (64, 1024), "large": (16384, 1024)}


class MLP(nn.Module):
    def __init__(self, width: int, depth: int = 4):
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.GELU(), nn.LayerNorm(width)]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def build(size: str) -> Built:
    batch, width = SIZES[size]
    return Built(MLP(width), random_inputs((batch, width)))
