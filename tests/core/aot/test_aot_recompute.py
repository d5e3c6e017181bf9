"""What the min-cut partitioner may recompute in backward."""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from torchkiln.aot.recompute import SMALL_REDUCTION_NUMEL, is_recomputable

aten = torch.ops.aten


def _node(fn, *inputs):
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    return next(n for n in gm.graph.nodes if n.op == "call_function")


def test_pointwise_and_view_ops_are_recomputable() -> None:
    x = torch.randn(8, 8)
    assert is_recomputable(_node(torch.sin, x))
    assert is_recomputable(_node(lambda t: t.view(-1), x))


def test_matmul_is_not_recomputable() -> None:
    assert not is_recomputable(_node(torch.mm, torch.randn(4, 4), torch.randn(4, 4)))


def test_random_op_is_not_recomputable() -> None:
    assert not is_recomputable(_node(torch.rand_like, torch.randn(4)))


def test_only_small_reductions_are_recomputable() -> None:
    small = torch.randn(SMALL_REDUCTION_NUMEL)
    large = torch.randn(SMALL_REDUCTION_NUMEL + 1)
    assert is_recomputable(_node(lambda t: t.sum(0), small))
    assert not is_recomputable(_node(lambda t: t.sum(0), large))


def test_dtype_conversions_are_recomputable_but_device_copies_are_not() -> None:
    x = torch.randn(8, 8)
    assert is_recomputable(_node(lambda t: t.to(torch.bfloat16), x))
    assert not is_recomputable(_node(lambda t: t.to("meta"), x))
