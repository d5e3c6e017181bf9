"""Ops and graphs OpenVINO fails to convert or compile, which the capabilities leave to torch
(found by the conformance kit's gradient sweep): the compile of the graph around them must not
fail (it would run the whole graph in the next backend, with a warning), and each matches
eager, gradients too."""

from __future__ import annotations

import pytest

pytest.importorskip("openvino", reason="openvino is not installed")

import torch

import torchkiln


def _scalar() -> list[torch.Tensor]:
    return [torch.tensor(1.5)]


CASES = {
    "sum over a dim of a 0-d tensor": (lambda x: x.sum(0, keepdim=True) * 2, _scalar),
    "amax over a dim of a 0-d tensor": (lambda x: x.amax(0, keepdim=True) * 2, _scalar),
    "logsumexp over a dim of a 0-d tensor": (lambda x: x.logsumexp(0) * 2, _scalar),
    "max.dim of a 0-d tensor": (lambda x: x.max(0).values * 2, _scalar),
    "flip of a 0-d tensor": (lambda x: x.flip(0) * 2, _scalar),
    "index_select of a 0-d tensor": (
        lambda x, i: x.index_select(0, i) * 2,
        lambda: [torch.tensor(1.5), torch.tensor([0])],
    ),
    "gather with an index smaller than its input outside dim": (
        lambda x, i: x.gather(1, i) * 2,
        lambda: [torch.randn(10, 5), torch.randint(0, 5, (5, 5))],
    ),
    "a matmul of an empty tensor (its backward's beside transposes)": (
        lambda a, b: a @ b,
        lambda: [torch.randn(0, 5), torch.randn(5, 10)],
    ),
    "a backward that reads none of its inputs (zeros)": (lambda x: x.repeat(0, 2), _scalar),
}


@pytest.mark.parametrize("fn, make", CASES.values(), ids=CASES.keys())
def test_ops_openvino_does_not_convert_run_in_torch(fn, make, caplog, monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))  # no plan of an earlier run
    torchkiln.reset()
    inputs = make()
    eager = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
    mine = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
    with caplog.at_level("WARNING", logger="torchkiln"):
        actual = torchkiln.compile(fn, backend="openvino")(*mine)
        (grad,) = torch.autograd.grad(actual.sum(), mine[0])
    expected = fn(*eager)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(grad, torch.autograd.grad(expected.sum(), eager[0])[0])
    assert "failed to compile" not in caplog.text


def test_an_unsqueeze_of_a_0d_tensor_stays_in_openvino():
    """Its dim is one of its result's: OpenVINO converts it (an embedding's backward has one)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from torchkiln_openvino import ops

    gm = make_fx(lambda x: x.unsqueeze(0))(torch.tensor(1.5))
    (node,) = [n for n in gm.graph.nodes if n.target is torch.ops.aten.unsqueeze.default]
    assert ops.supports(node) is True
