"""Ops left to torch on large tensors, where its kernels beat OpenVINO's by more than a
partition switch costs (``decompositions.LARGE``): a training layer norm with its
statistics, softmax, sums, and the backwards of softmax, layer norm and GELU."""

from __future__ import annotations

import pytest

pytest.importorskip("openvino", reason="openvino is not installed")

import torch
import torch.nn.functional as F
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._pytree import tree_leaves

from tests.plugins.openvino.ov_checks import train_compared
from torchkiln_openvino import decompositions, ops, rewrites
from torchkiln_openvino.plugin import capabilities

aten = torch.ops.aten
F32 = {"rtol": 1e-4, "atol": 1e-4}


class Chain(nn.Module):
    """``softmax(layer_norm(gelu(x * w + b)))``, the zoo's chain."""

    def __init__(self, width: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(width))
        self.b = nn.Parameter(torch.randn(width))

    def forward(self, x):
        y = F.gelu(x * self.w + self.b)
        return torch.softmax(F.layer_norm(y, y.shape[-1:]), dim=-1)


def train_step(caplog, rows: int) -> str:
    """One training step of a 1024-wide chain of ``rows`` rows, checked against eager; the
    partition plans."""
    torch.manual_seed(0)
    return train_compared(Chain(1024), torch.randn(rows, 1024), caplog)


def test_a_large_chain_runs_its_norm_softmax_sums_and_backwards_in_torch(caplog):
    text = train_step(caplog, decompositions.LARGE // 1024)
    assert "a large layer norm whose statistics the graph reads" in text
    assert "a softmax of a large tensor" in text
    assert "a sum of a large tensor" in text
    for kept in ("_softmax_backward_data", "native_layer_norm_backward", "gelu_backward"):
        assert f"{kept}.default: openvino: a backward of a large tensor" in text


def test_a_large_chain_saves_what_torch_reads_in_its_backward(caplog):
    """``x * w + b`` and its GELU, read in the backward only by torch's fused backwards,
    are saved by the forward (``Capabilities.saves_for_others``): the backward recomputes
    neither for torch, which cost chain 5.75 ms a step."""
    text = train_step(caplog, decompositions.LARGE // 1024)
    backward = text[text.index("backward graph:") :]
    assert "gelu.default" not in backward
    assert "add.Tensor" not in backward
    assert capabilities().saves_for_others


def test_a_small_chain_runs_in_openvino_whole(caplog):
    text = train_step(caplog, 8)
    assert "forward graph: 1 partition (openvino: 1)" in text
    assert "backward graph: 1 partition (openvino: 1)" in text


@pytest.mark.parametrize("op", decompositions.FUSED_BACKWARDS, ids=lambda op: op.__name__)
def test_fused_backwards_stay_whole_written_out_for_openvino_below_large(op):
    """Traced whole (torch runs its fused kernel where it runs the graph), written out for
    OpenVINO below ``LARGE`` elements, left to torch from there."""
    assert op not in decompositions.table()
    arguments = {
        aten._softmax_backward_data.default: lambda g: (g, torch.softmax(g, -1), -1, g.dtype),
        aten.native_layer_norm_backward.default: lambda g: (
            g,
            g,
            [8],
            g.mean(-1, keepdim=True),
            g.var(-1, keepdim=True).add(1e-5).rsqrt(),
            None,
            None,
            [True, False, False],
        ),
        aten.gelu_backward.default: lambda g: (g, g),
    }[op]
    small, large = torch.randn(4, 8), torch.randn(decompositions.LARGE // 8, 8)
    gm, inputs = traced(op, arguments(large))
    node = next(n for n in gm.graph.nodes if n.target is op)
    assert "a backward of a large tensor" in ops.supports(node)
    gm, inputs = traced(op, arguments(small))
    node = next(n for n in gm.graph.nodes if n.target is op)
    assert ops.supports(node) is True
    written_out = rewrites.for_openvino(gm)
    assert op not in {n.target for n in written_out.graph.nodes}
    expected = tensors(op(*arguments(small)))
    torch.testing.assert_close(tensors(written_out(*inputs)), expected, **F32)
    torch.testing.assert_close(tensors(gm(*inputs)), expected, **F32)


def traced(op, args) -> tuple[torch.fx.GraphModule, list[torch.Tensor]]:
    """``op`` traced (fake) at ``args``, its tensors the graph's inputs; those tensors."""
    inputs = [a for a in args if isinstance(a, torch.Tensor)]

    def call(*given):
        supply = iter(given)
        return op(*(next(supply) if isinstance(a, torch.Tensor) else a for a in args))

    return make_fx(call, tracing_mode="fake")(*inputs), inputs


def tensors(result) -> list[torch.Tensor]:
    return [t for t in tree_leaves(result) if isinstance(t, torch.Tensor)]


def call_node(op, args) -> torch.fx.Node:
    """The node of ``op`` in a graph traced at ``args``."""
    graph = make_fx(lambda *a: op(*a))(*args).graph
    return next(n for n in graph.nodes if n.target is op)


def test_lower_precisions_run_large_softmaxes_in_openvino():
    """OpenVINO's bfloat16 and float16 kernels move half the bytes of torch's float32."""
    x = torch.randn(decompositions.LARGE // 1024, 1024)
    node = next(
        n
        for n in make_fx(lambda x: aten._softmax.default(x, -1, False))(x).graph.nodes
        if n.op == "call_function"
    )
    assert "softmax of a large tensor" in ops.supports(node)
    lower = capabilities().configure({"precision": "bf16"})
    assert lower.supports(node) is True
