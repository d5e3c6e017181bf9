"""Small models through the onnxrt backend (AOT layer + ONNX), against eager.

Each model is turned into a flat graph (parameters and buffers as leading
placeholders, as the capture core passes them), compiled once, then called
on several fresh inputs: outputs, parameter gradients and buffer updates
must match eager.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnxrt_checks import whole_graphs_compiled

from kiln_testing import flat_graph


class TransformerBlock(nn.Module):
    """Pre-norm causal self-attention and a GELU MLP, for sequences of ``length``."""

    def __init__(self, dim: int = 16, heads: int = 2, length: int = 6):
        super().__init__()
        self.dim, self.heads, self.length = dim, heads, length
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.register_buffer("causal", torch.ones(length, length, dtype=torch.bool).tril())

    def forward(self, x):
        head_dim = self.dim // self.heads
        qkv = self.qkv(self.norm1(x)).view(-1, self.length, 3, self.heads, head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        scores = (q @ k.transpose(-2, -1)) / head_dim**0.5
        attn = scores.masked_fill(~self.causal, float("-inf")).softmax(-1) @ v
        x = x + self.proj(attn.transpose(1, 2).reshape(-1, self.length, self.dim))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 20, dim: int = 16):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.block = TransformerBlock(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens, targets):
        logits = self.head(self.block(self.embed(tokens)))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def mlp():
    model = nn.Sequential(
        nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4)
    )
    return model, lambda: (torch.randn(5, 8),)


def cnn():
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, stride=2, groups=2),
        nn.AvgPool2d(2, ceil_mode=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 3),
    )
    return model, lambda: (torch.randn(2, 3, 16, 16),)


def transformer():
    return TransformerBlock(), lambda: (torch.randn(2, 6, 16),)


def tiny_lm():
    return TinyLM(), lambda: (torch.randint(0, 20, (2, 6)), torch.randint(0, 20, (2, 6)))


MODELS = {"mlp": mlp, "cnn": cnn, "transformer": transformer, "tiny_lm": tiny_lm}


def _compiled(model: nn.Module, example: tuple):
    gm, state = flat_graph(model)
    compiled = whole_graphs_compiled(gm, [*state, *example])
    return lambda *inputs: compiled(*state, *inputs)


@pytest.mark.parametrize("name", MODELS)
def test_training_steps_match_eager(name: str):
    model, make_inputs = MODELS[name]()
    reference = copy.deepcopy(model)
    compiled = _compiled(model, make_inputs())
    for _ in range(3):
        inputs = make_inputs()
        actual, expected = compiled(*inputs), reference(*inputs)
        torch.testing.assert_close(actual, expected)
        cotangent = torch.randn_like(expected)
        actual.backward(cotangent)
        expected.backward(cotangent)
        for (pname, p), ref in zip(model.named_parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p.grad, ref.grad, msg=f"gradient of {pname}")
        for (bname, buf), ref in zip(model.named_buffers(), reference.buffers(), strict=True):
            torch.testing.assert_close(buf, ref, msg=f"buffer {bname}")
        model.zero_grad()
        reference.zero_grad()


@pytest.mark.parametrize("name", MODELS)
def test_inference_matches_eager(name: str):
    model, make_inputs = MODELS[name]()
    model.eval()
    compiled = _compiled(model, make_inputs())
    with torch.no_grad():
        for _ in range(2):
            inputs = make_inputs()
            torch.testing.assert_close(compiled(*inputs), model(*inputs))
