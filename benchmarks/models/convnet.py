"""A small ResNet-style CNN written out by hand: conv, BatchNorm, ReLU, residuals, pooling."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.models import Built, random_inputs

# size -> (batch, image side, base width)
SIZES = {"tiny": (2, 16, 8), "small": (8, 32, 16), "large": (256, 64, 64)}
NUM_CLASSES = 100


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.shortcut(x))


class ConvNet(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()
        )
        stages, c = [], width
        for i, c_out in enumerate((width, 2 * width, 4 * width)):
            stride = 1 if i == 0 else 2
            stages += [BasicBlock(c, c_out, stride), BasicBlock(c_out, c_out, 1)]
            c = c_out
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(c, NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stages(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


def build(size: str) -> Built:
    batch, side, width = SIZES[size]
    return Built(ConvNet(width), random_inputs((batch, 3, side, side)))
