"""onnxrt declares the ops it converts: graphs are split, the rest runs with the next backend."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

import torchkiln
from torchkiln import logs
from torchkiln.aot import KEEP_WHOLE
from torchkiln.chain import BackendChain
from torchkiln.exc import InvalidOptionError
from torchkiln.registry import lookup_backend
from torchkiln_onnxrt.converter import CONVERTERS
from torchkiln_onnxrt.decompositions import decompositions


def angle_mlp(x, w):
    """``atan2`` has no ONNX converter; the matmuls and the relu do."""
    y = torch.relu(x @ w)
    return torch.atan2(y, x + 1) @ w.t()


def with_grads(fn, x, w):
    out = fn(x, w)
    out.sum().backward()
    grads = (x.grad, w.grad)
    x.grad = w.grad = None
    return out, grads


def test_chain_sends_ops_without_a_converter_to_the_next_backend(caplog):
    assert torch.ops.aten.atan2.default not in CONVERTERS
    compiled = torchkiln.compile(angle_mlp, backend=["onnxrt", "inductor"])
    logs.set_logs("partitions")
    try:
        with caplog.at_level(logging.INFO, logger="torchkiln"):
            x, w = torch.randn(4, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True)
            torch.testing.assert_close(with_grads(compiled, x, w), with_grads(angle_mlp, x, w))
    finally:
        logs.set_logs("")
    x, w = torch.randn(4, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True)
    torch.testing.assert_close(with_grads(compiled, x, w), with_grads(angle_mlp, x, w))
    assert "forward graph: 3 partitions (onnxrt: 2, inductor: 1)" in caplog.text
    assert "atan2.default: onnxrt: not among its ops" in caplog.text


def test_onnxrt_alone_runs_the_rest_eagerly():
    compiler = torchkiln.api.resolve_backend("onnxrt", None, {"graph_optimization_level": "basic"})
    assert isinstance(compiler.compile_fn, BackendChain)
    assert [link.name for link in compiler.compile_fn.links] == ["onnxrt", "eager"]
    assert compiler.compile_fn.links[0].options == {"graph_optimization_level": "basic"}
    x = torch.randn(4, 4)
    torch.testing.assert_close(
        torchkiln.compile(angle_mlp, backend="onnxrt")(x, x), angle_mlp(x, x)
    )


def test_fused_cpu_attention_stays_whole_and_converts(caplog):
    assert not KEEP_WHOLE & decompositions().keys()
    assert lookup_backend("onnxrt").capabilities is not None
    compiled = torchkiln.compile(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        backend=["onnxrt", "eager"],
    )
    q, k, v = (torch.randn(2, 3, 5, 4, requires_grad=True) for _ in range(3))
    grad = torch.randn(2, 3, 5, 4)
    logs.set_logs("partitions")
    try:
        with caplog.at_level(logging.INFO, logger="torchkiln"):
            out = compiled(q, k, v)
            out.backward(grad)
    finally:
        logs.set_logs("")
    assert "forward graph: 1 partition (onnxrt: 1)" in caplog.text
    assert "backward graph: 1 partition (onnxrt: 1)" in caplog.text
    expected_in = [t.detach().requires_grad_() for t in (q, k, v)]
    expected = F.scaled_dot_product_attention(*expected_in, is_causal=True)
    expected.backward(grad)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close([q.grad, k.grad, v.grad], [t.grad for t in expected_in])


def test_chain_options_go_to_their_backend_and_are_checked():
    options = {"onnxrt": {"graph_optimization_level": "basic"}, "inductor": {"cpp.threads": 1}}
    chain = torchkiln.api.resolve_backend(["onnxrt", "inductor"], None, options).compile_fn
    assert [link.options for link in chain.links] == list(options.values())
    with pytest.raises(InvalidOptionError, match="graph_optimization_level"):
        torchkiln.api.resolve_backend(
            ["onnxrt", "inductor"], None, {"onnxrt": {"graph_optimization_level": 3}}
        )


def test_explain_shows_which_ops_onnxrt_left_to_the_next_backend():
    results = []

    def fn(x, w):
        results.append(angle_mlp(x, w))

    x, w = torch.randn(4, 4), torch.randn(4, 4)
    explained = torchkiln.explain(fn, backend="onnxrt")(x, w)
    torch.testing.assert_close(results, [angle_mlp(x, w)])
    ((plan,),) = explained.partition_plans
    eager = [p.nodes for p in plan.partitions if plan.backends[p.label] == "eager"]
    assert [[n.target for n in nodes] for nodes in eager] == [[torch.ops.aten.atan2.default]]
    assert "atan2.default: onnxrt: not among its ops" in str(explained)
