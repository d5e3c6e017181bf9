"""A graph whose backward has a size that depends on the data runs as captured.

``y[mask] = v`` has a static forward, so the capture keeps it in the graph; the gradient of
``v`` is ``grad[mask]``, whose size the joint trace can't know. Such a graph runs as
captured (uncompiled) when it needs gradients, with a warning, instead of failing to compile.
So does one whose backward branches on a value read from a tensor under symbolic sizes (a
custom op's backward, as transformers' grouped MoE matmul has).
"""

from __future__ import annotations

import logging

import pytest
import torch

import torchkiln
from torchkiln.aot import aot_autograd


def masked_assign(x, mask, v):
    y = x * 1.5
    y[mask] = v.exp()
    return y.sin()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_boolean_mask_assignment_trains_like_eager(backend, caplog):
    torchkiln.reset()
    compiled = torchkiln.compile(masked_assign, backend=backend)
    for _ in range(2):  # a fresh mask each call: the count of its True values varies
        mask = torch.rand(7) > 0.5
        x, v = torch.randn(7), torch.randn(int(mask.sum()))
        leaves = [x.requires_grad_(), v.requires_grad_()]
        cotangent = torch.randn(7)
        with caplog.at_level(logging.WARNING):
            out = compiled(x, mask, v)
        expected = masked_assign(x, mask, v)
        torch.testing.assert_close(out, expected)
        actual = torch.autograd.grad(out, leaves, cotangent)
        for a, e in zip(actual, torch.autograd.grad(expected, leaves, cotangent), strict=True):
            torch.testing.assert_close(a, e)
    assert "runs as captured" in caplog.text


def test_without_gradients_the_graph_still_compiles():
    compiled_graphs = []

    def record(gm, example_inputs):
        compiled_graphs.append(gm)
        return gm.forward

    torchkiln.reset()
    mask = torch.tensor([True, False, True])
    x, v = torch.randn(3), torch.randn(2)
    with torch.no_grad():
        out = torchkiln.compile(masked_assign, backend=aot_autograd(record))(x, mask, v)
    torch.testing.assert_close(out, masked_assign(x, mask, v))
    assert len(compiled_graphs) == 1  # the inference graph


@torch.library.custom_op("kiln_tests::double_unless_empty", mutates_args=())
def double_unless_empty(x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    return x * 2


@double_unless_empty.register_fake
def _(x, counts):
    return torch.empty_like(x)


def _double_unless_empty_backward(ctx, grad):
    (counts,) = ctx.saved_tensors
    if counts.max().item() == 0:  # a guard on a value the trace can't know
        return grad * 0, None
    return grad * 2, None


double_unless_empty.register_autograd(
    _double_unless_empty_backward,
    setup_context=lambda ctx, inputs, output: ctx.save_for_backward(inputs[1]),
)


def doubled_sin(x, counts):
    return double_unless_empty(x, counts).sin()


def test_a_backward_branching_on_a_tensor_value_under_symbolic_sizes_trains_like_eager(caplog):
    torchkiln.reset()
    x, counts = torch.randn(5, requires_grad=True), torch.tensor([3, 1])
    with caplog.at_level(logging.WARNING):
        out = torchkiln.compile(doubled_sin, backend="aot_eager", dynamic=True)(x, counts)
    out.sum().backward()
    torch.testing.assert_close(out, torch.sin(2 * x.detach()))
    torch.testing.assert_close(x.grad, 2 * torch.cos(2 * x.detach()))
    assert "branches on a value that depends on the data" in caplog.text
