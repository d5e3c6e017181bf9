"""onnxrt with symbolic sizes: one ONNX model with dynamic axes serves every size.

``torchkiln.counters["onnxrt"]["conversions"]`` counts the models made; a graph the
converter can't express symbolically is compiled once per size instead
(``counters["static_shapes"]["specializations"]``). Every result is compared with
eager on fresh inputs, gradients too.
"""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import torchkiln
from torchkiln.exc import NeedsStaticShapes
from torchkiln_onnxrt.compiler import compile_aten_graph


@pytest.fixture(autouse=True)
def fresh_caches():
    torchkiln.reset()
    yield
    torchkiln.reset()


def conversions() -> int:
    return torchkiln.counters["onnxrt"]["conversions"]


def specializations() -> int:
    return torchkiln.counters["static_shapes"]["specializations"]


def heads(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A view chain from the input's sizes: ``view(b, t, h, d)``, then back."""
    b, t, c = x.shape
    h = 4
    q = (x @ w).view(b, t, h, c // h).transpose(1, 2)
    return q.reshape(b * h, t, c // h).softmax(-1) * t


class Attention(nn.Module):
    """A causal self-attention block with its MLP, written out (masks sized by ``t``)."""

    def __init__(self, c: int = 16, h: int = 2):
        super().__init__()
        self.h = h
        self.norm = nn.LayerNorm(c)
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        self.mlp = nn.Sequential(nn.Linear(c, 32), nn.GELU(), nn.Linear(32, c))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in (q, k, v))
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = (q @ k.transpose(-1, -2) / (c // self.h) ** 0.5).masked_fill(~mask, float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.mlp(x)


class SdpaBlock(nn.Module):
    """Fused causal attention (the ``_scaled_dot_product_flash_attention_for_cpu`` pair)."""

    def __init__(self, c: int = 16, h: int = 2):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(c, 3 * c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, c // self.h).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(b, t, c)


def check_training(model: nn.Module, sizes, c: int = 16) -> None:
    """Outputs and every gradient match eager for each ``(batch, length)``; the models
    converted for the first size (forward and backward graphs) serve all the others."""
    compiled = torchkiln.compile(model, backend="onnxrt", dynamic=True)
    first = None
    for b, t in sizes:
        x = torch.randn(b, t, c, requires_grad=True)
        out = compiled(x)
        grads = torch.autograd.grad(out.square().mean(), [x, *model.parameters()])
        ref = model(x)
        ref_grads = torch.autograd.grad(ref.square().mean(), [x, *model.parameters()])
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(grads, ref_grads)
        first = first or conversions()
    assert first >= 2  # a forward and a backward graph at least
    assert conversions() == first
    assert specializations() == 0


SIZES = [(2, 5), (3, 7), (4, 3), (2, 12)]


def test_mlp_trains_over_sizes_with_the_models_of_the_first():
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16), nn.LayerNorm(16))
    check_training(model, SIZES)


def test_view_chain_from_sizes_converts_once():
    compiled = torchkiln.compile(heads, backend="onnxrt", dynamic=True)
    w = torch.randn(16, 16)
    with torch.no_grad():
        for b, t in SIZES:
            x = torch.randn(b, t, 16)
            torch.testing.assert_close(compiled(x, w), heads(x, w))
    assert conversions() == 1
    assert specializations() == 0


@pytest.mark.parametrize("block", [Attention, SdpaBlock])
def test_attention_block_trains_over_sizes_with_the_models_of_the_first(block):
    torch.manual_seed(0)
    check_training(block(), SIZES)


def test_graph_the_converter_cannot_size_symbolically_compiles_per_size(caplog):
    def f(x):
        return (x.sigmoid() + 0.5).cumprod(1) * 2  # cumprod's steps need the length

    compiled = torchkiln.compile(f, backend="onnxrt", dynamic=True)
    with caplog.at_level(logging.INFO, logger="torchkiln"):
        for b, t in [*SIZES, (2, 5)]:
            x = torch.randn(b, t)
            torch.testing.assert_close(compiled(x), f(x))
    assert specializations() == 4  # once per distinct size
    assert "once per concrete size" in caplog.text
    assert "cumprod" in caplog.text


def test_symbolic_aten_graph_becomes_one_model_with_named_dynamic_axes():
    def f(x):
        n, m = x.shape
        return (x * 2).view(m, n), torch.arange(n) + m, n * m  # sizes in and out

    gm = make_fx(f, tracing_mode="symbolic")(torch.randn(4, 3))
    compiled = compile_aten_graph(
        gm, [n.meta["val"] for n in gm.graph.find_nodes(op="placeholder")]
    )
    dims = compiled.converted.model.graph.input[0].type.tensor_type.shape.dim
    assert all(d.dim_param for d in dims) and dims[0].dim_param != dims[1].dim_param
    for shape in [(4, 3), (5, 7), (2, 9)]:
        x = torch.randn(shape)
        torch.testing.assert_close(compiled(x), list(f(x)))


def test_symbolic_graph_needing_a_concrete_size_raises_needs_static_shapes():
    gm = make_fx(lambda x: x.cumprod(1), tracing_mode="symbolic")(torch.randn(4, 3))
    with pytest.raises(NeedsStaticShapes, match="cumprod"):
        compile_aten_graph(gm, [n.meta["val"] for n in gm.graph.find_nodes(op="placeholder")])


def test_a_float_computed_from_a_size_is_an_input_of_the_model(caplog):
    """``x * t ** 0.5``: the float, computed per call in an eager partition, is a float64
    input of the symbolic model (before, the model compiled per size, and each static
    compile failed on the float and ran eagerly with a warning)."""

    def scaled(x):
        return (x * x.shape[0] ** 0.5).relu() + 1

    compiled = torchkiln.compile(scaled, backend="onnxrt", dynamic=True)
    with caplog.at_level(logging.WARNING, logger="torchkiln"):
        for rows in (3, 5, 7):
            x = torch.randn(rows, 4)
            torch.testing.assert_close(compiled(x), scaled(x))
    assert specializations() == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    # one model: reading the size (``sym_size``, a partition of its own) runs eagerly, not in
    # a session of its own
    assert conversions() == 1
