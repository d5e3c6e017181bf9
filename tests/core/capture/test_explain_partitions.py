"""``torchkiln.explain(fn, backend=...)``: each graph's partition plan, as data and in the summary."""

from __future__ import annotations

import pytest
import torch

import torchkiln
from torchkiln import registry
from torchkiln.exc import UnknownBackendError
from torchkiln.plugin import Backend, Capabilities

aten = torch.ops.aten


@pytest.fixture
def add_mul(monkeypatch):
    """Registers ``add_mul``, a backend that runs add and mul only (eager runs the rest)."""
    registry._registry._discover()
    monkeypatch.setattr(registry._registry, "_backends", dict(registry._registry._backends))
    caps = Capabilities(
        compile_partition=lambda gm, example_inputs: gm.forward,
        ops=frozenset({aten.add.Tensor, aten.mul.Tensor}),
    )
    torchkiln.register_backend(Backend("add_mul", capabilities=caps))


def step(x, w, results):
    """A training step: the backward graph is compiled, and planned, within the call.

    ``backward()`` breaks the graph: what follows it is a second graph.
    """
    out = ((x * 2 + x) @ w).tanh() * 3
    out.sum().backward()
    results.append(out.detach())
    return x.grad * 2


def test_explain_reports_each_graphs_partition_plans(add_mul):
    x, w = torch.randn(4, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True)
    results: list[torch.Tensor] = []
    explained = torchkiln.explain(step, backend="add_mul")(x, w, results)
    x_ref, w_ref = x.detach().requires_grad_(), w.detach().requires_grad_()
    torch.testing.assert_close(results, [((x_ref * 2 + x_ref) @ w_ref).tanh() * 3])

    assert explained.graph_count == 3
    assert [[plan.title for plan in plans] for plans in explained.partition_plans] == [
        ["forward graph", "backward graph"],
        ["inference graph"],
        ["inference graph"],
    ]
    forward = explained.partition_plans[0][0]
    first, second = forward.partitions[:2]
    assert (forward.backends[first.label], first.op_count) == ("add_mul", 2)
    assert forward.backends[second.label] == "eager"
    (last,) = explained.partition_plans[2][0].partitions
    assert [n.target for n in last.nodes] == [aten.mul.Tensor]
    text = str(explained)
    assert "Partition plans:\n  graph 0:\n    forward graph: " in text
    assert "tanh.default: add_mul: not among its ops" in text
    assert "  graph 2:\n    inference graph: 1 partition (add_mul: 1)" in text


def test_explain_without_backend_or_with_a_whole_graph_backend_has_no_plans(add_mul):
    fn = lambda x: (x * 2).sin()  # noqa: E731
    for backend in (None, "eager"):
        explained = torchkiln.explain(fn, backend=backend)(torch.randn(3))
        assert explained.partition_plans == [[]]
        assert "Partition plans" not in str(explained)


def test_explain_checks_its_backend_and_options_when_called():
    with pytest.raises(UnknownBackendError, match="no_such_backend"):
        torchkiln.explain(torch.sin, backend="no_such_backend")
    with pytest.raises(TypeError, match="needs backend="):
        torchkiln.explain(torch.sin, options={"graph_optimization_level": "basic"})
