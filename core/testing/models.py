"""The kit's small models: each stands for a family of real ones, at a size that compiles fast."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class ConvBN(nn.Module):
    """Convolution, BatchNorm (running statistics: buffers the train mode updates), pooling."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn(self.conv(x)))
        return self.head(F.adaptive_avg_pool2d(y, 1).flatten(1))


class TransformerBlock(nn.Module):
    """Pre-norm causal self-attention and an MLP, with residuals."""

    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class EmbeddingClassifier(nn.Module):
    """Token embeddings, mean-pooled, and the cross-entropy loss of a next-token guess."""

    def __init__(self, vocab: int = 50, dim: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.out = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.out(self.embed(tokens).mean(1)), targets)


@dataclass(frozen=True)
class ModelCase:
    """A model, a batch maker, and whether the model is in train mode when it runs."""

    name: str
    make: Callable[[], nn.Module]
    batch: Callable[[str], tuple]
    train_mode: bool
    slow: bool = False


def _tokens(device: str) -> tuple:
    return torch.randint(0, 50, (4, 6), device=device), torch.randint(0, 50, (4,), device=device)


#: Each runs once in inference (no grad) and once in training (gradients, SGD steps).
MODELS = [
    ModelCase("mlp", MLP, lambda d: (torch.randn(4, 16, device=d),), train_mode=True),
    ModelCase("embedding-cross-entropy", EmbeddingClassifier, _tokens, train_mode=True, slow=False),
    ModelCase(
        "cnn-batchnorm-train-mode",
        ConvBN,
        lambda d: (torch.randn(2, 3, 8, 8, device=d),),
        train_mode=True,
        slow=True,
    ),
    ModelCase(
        "cnn-batchnorm-eval-mode",
        ConvBN,
        lambda d: (torch.randn(2, 3, 8, 8, device=d),),
        train_mode=False,
        slow=True,
    ),
    ModelCase(
        "transformer-block",
        TransformerBlock,
        lambda d: (torch.randn(2, 5, 16, device=d),),
        train_mode=True,
        slow=True,
    ),
]
