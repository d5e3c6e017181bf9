"""The ops written out for OpenVINO's frontend (``rewrites``): the attention of a training
graph and its backward, the convolution backward; each against torch's own op, and in
training steps against eager."""

from __future__ import annotations

import copy
import logging

import pytest

pytest.importorskip("openvino", reason="openvino is not installed")

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchkiln
from torchkiln import logs
from torchkiln_openvino import ops, rewrites

aten = torch.ops.aten
F32 = {"rtol": 1e-4, "atol": 1e-4}


def plans(caplog, compiled, model, x) -> str:
    """The partition plans of one training step of ``compiled``, checked against eager's
    outputs and gradients (``model``'s twin)."""
    twin = copy.deepcopy(model)
    logs.set_logs("partitions")
    try:
        with caplog.at_level(logging.INFO, logger="torchkiln"):
            y = compiled(x)
            y.square().mean().backward()
    finally:
        logs.set_logs("")
    expected = twin(x)
    expected.square().mean().backward()
    torch.testing.assert_close(y, expected, **F32)
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **F32)
    return caplog.text


ATTENTIONS = {
    "plain": {},
    "causal": {"is_causal": True},
    "grouped": {"kv_heads": 2},
    "float-mask": {"attn_mask": torch.randn(1, 1, 6, 6)},
    "bool-mask": {"attn_mask": torch.rand(2, 1, 6, 6) > 0.3},
    "scale": {"scale": 0.3},
}


@pytest.mark.parametrize("options", ATTENTIONS.values(), ids=ATTENTIONS.keys())
def test_attention_and_its_backward_match_torchs(options):
    torch.manual_seed(0)
    options = dict(options)
    kv_heads = options.pop("kv_heads", 4)
    q = torch.randn(2, 4, 6, 8, dtype=torch.float64)
    k, v = torch.randn(2, 2, kv_heads, 6, 8, dtype=torch.float64)
    mask, scale = options.get("attn_mask"), options.get("scale")
    causal = options.get("is_causal", False)
    if mask is not None and mask.dtype == torch.bool:  # torch's fused CPU attention takes
        zeros = torch.zeros(mask.shape, dtype=torch.float64)  # masks of q's dtype: -inf
        options["attn_mask"] = zeros.masked_fill(~mask, -torch.inf)
    elif mask is not None:
        mask = options["attn_mask"] = mask.double()
    if kv_heads != 4:  # and grouped heads repeated
        k, v = (t.repeat_interleave(2, dim=1) for t in (k, v))
    out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, **options)
    ours = rewrites.attention(q, k, v, mask, causal=causal, scale=scale)
    torch.testing.assert_close(ours, (out, lse), rtol=1e-9, atol=1e-9)
    grad = torch.randn_like(out)
    expected = aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad, q, k, v, out, lse, 0.0, causal, attn_mask=options.get("attn_mask"), scale=scale
    )
    ours = rewrites.attention_backward(grad, q, k, v, out, lse, mask, causal=causal, scale=scale)
    torch.testing.assert_close(ours, expected, rtol=1e-9, atol=1e-9)


def test_grouped_heads_are_repeated_and_their_gradients_summed():
    torch.manual_seed(0)
    q = torch.randn(1, 4, 5, 8, dtype=torch.float64)
    k, v = (torch.randn(1, 2, 5, 8, dtype=torch.float64, requires_grad=True) for _ in range(2))
    out, lse = rewrites.attention(q, k, v)
    expected = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.testing.assert_close(out, expected, rtol=1e-9, atol=1e-9)
    grad = torch.randn_like(out)
    expected.backward(grad)
    _, grad_k, grad_v = rewrites.attention_backward(grad, q, k.detach(), v.detach(), out, lse)
    torch.testing.assert_close((grad_k, grad_v), (k.grad, v.grad), rtol=1e-9, atol=1e-9)


class Attention(nn.Module):
    def __init__(self, kv_heads: int = 4, **options):
        super().__init__()
        self.q, self.kv = nn.Linear(32, 32), nn.Linear(32, 2 * 8 * kv_heads)
        self.kv_heads, self.options = kv_heads, options

    def forward(self, x):
        b, n, _ = x.shape
        q = self.q(x).view(b, n, 4, 8).transpose(1, 2)
        k, v = self.kv(x).view(b, n, 2, self.kv_heads, 8).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, enable_gqa=self.kv_heads != 4, **self.options)
        return y.transpose(1, 2).reshape(b, n, 32)


@pytest.mark.parametrize("options", ATTENTIONS.values(), ids=ATTENTIONS.keys())
def test_a_training_attention_runs_in_openvino_forward_and_backward(caplog, options):
    """Its forward saves the log-sum-exp for the backward: both graphs are one partition."""
    torch.manual_seed(0)
    model = Attention(**options)
    text = plans(caplog, torchkiln.compile(model, backend="openvino"), model, torch.randn(2, 6, 32))
    assert "forward graph: 1 partition (openvino: 1)" in text
    assert "backward graph: 1 partition (openvino: 1)" in text


def test_an_attention_backward_with_dropout_is_left_to_the_next_backend():
    graph = torch.fx.Graph()
    tensors = [graph.placeholder(name) for name in ("grad", "q", "k", "v", "out", "lse")]
    for node in tensors:
        node.meta["val"] = torch.randn(1, 1, 2, 4)
    with_dropout = graph.call_function(rewrites.ATTENTION_BACKWARD, (*tensors, 0.1, False))
    without = graph.call_function(rewrites.ATTENTION_BACKWARD, (*tensors, 0.0, False))
    assert rewrites.expands(without) and not rewrites.expands(with_dropout)
    assert "written out only for plain convolutions" in ops.supports(with_dropout)


CONVOLUTIONS = {
    "3x3": ((2, 3, 9, 9), (6, 3, 3, 3), dict(stride=1, padding=1, dilation=1)),
    "strided": ((2, 3, 10, 11), (6, 3, 3, 3), dict(stride=2, padding=1, dilation=1)),
    "uneven": ((2, 3, 13, 14), (4, 3, 3, 2), dict(stride=(2, 3), padding=(1, 0), dilation=(2, 1))),
    "1x1": ((2, 4, 8, 8), (8, 4, 1, 1), dict(stride=2, padding=0, dilation=1)),
    "1d": ((2, 3, 17), (5, 3, 4), dict(stride=3, padding=2, dilation=1)),
}


@pytest.mark.parametrize("shapes", CONVOLUTIONS.values(), ids=CONVOLUTIONS.keys())
@pytest.mark.parametrize("mask", [(True, True, True), (False, True, False), (True, False, True)])
def test_convolution_backward_matches_torchs(shapes, mask):
    torch.manual_seed(0)
    input_shape, weight_shape, options = shapes
    x = torch.randn(input_shape, dtype=torch.float64)
    w = torch.randn(weight_shape, dtype=torch.float64)
    spatial = len(input_shape) - 2
    stride, padding, dilation = (
        [options[k]] * spatial if isinstance(options[k], int) else list(options[k])
        for k in ("stride", "padding", "dilation")
    )
    y = aten.convolution(x, w, None, stride, padding, dilation, False, [0] * spatial, 1)
    grad = torch.randn_like(y)
    args = (stride, padding, dilation, False, [0] * spatial, 1, list(mask))
    expected = aten.convolution_backward(grad, x, w, [w.shape[0]], *args)
    ours = rewrites.convolution_backward(*args, grad, x, w)
    assert [t is None for t in ours] == [not m for m in mask]
    torch.testing.assert_close(
        [t for t in ours if t is not None],
        [t for t, m in zip(expected, mask) if m],
        rtol=1e-9,
        atol=1e-9,
    )


def test_a_cnns_backward_is_one_openvino_graph(caplog):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 4, 1),
    )
    text = plans(
        caplog, torchkiln.compile(model, backend="openvino"), model, torch.randn(2, 3, 9, 9)
    )
    # every gradient, the weights' too (torch runs the graph where it is faster: choice.py)
    assert "backward graph: 1 partition (openvino: 1)" in text


def test_a_grouped_convolutions_backward_runs_in_torch(caplog):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(4, 8, 3, groups=2), nn.ReLU(), nn.Conv2d(8, 4, 3))
    text = plans(
        caplog, torchkiln.compile(model, backend="openvino"), model, torch.randn(2, 4, 9, 9)
    )
    # the grouped convolution's whole backward
    assert "backward graph: 2 partitions (openvino: 1, eager: 1)" in text
    assert "eager (1 op): convolution_backward.default" in text
    assert "written out only for plain convolutions" in text
