"""The aten → Relax converters against eager, each family whole in tvm (no op partitioned away)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchkiln
from tests.plugins.tvm.tvm_checks import assert_all_in_tvm, partition_log

aten = torch.ops.aten


def pointwise(x, y):
    a = x + y - 2 * y * x / (y.abs() + 1)
    b = torch.pow(x.abs(), 1.5) + torch.maximum(x, y) - torch.minimum(x, y) + torch.atan2(x, y)
    c = torch.exp(x) + torch.log(x.abs() + 1) + torch.sqrt(y.abs()) + torch.rsqrt(y.abs() + 1)
    d = torch.tanh(x) * torch.sigmoid(y) + torch.relu(x) - torch.sin(y) * torch.cos(x)
    e = torch.erf(x) + torch.floor(x) + torch.ceil(y) + torch.trunc(x) + torch.round(y)
    f = torch.sign(x) + F.silu(y) + F.gelu(x) + F.gelu(y, approximate="tanh") + F.leaky_relu(x)
    g = F.hardtanh(y) + x.clamp(-0.5, 0.5) + y.clamp(min=0) + torch.reciprocal(y.abs() + 1)
    h = torch.where(x > y, x, y) + (x >= 0).float() - (y != x).float() + (x < 1) * (y <= 2)
    i = torch.remainder(x, 0.7) + torch.div(x, 0.3, rounding_mode="floor") - 1 - x
    # logical ops on floats: their truth values (0.25 is true), a bool result
    j = torch.logical_and(x.round(), y * 0.25).float() + torch.logical_or(x.round(), 0 * y)
    j = j + torch.logical_xor(x.round(), y.round()).float()
    return a + b + c + d + e + f + g + h + i + j


def integers(n, m):
    q = torch.div(n, m, rounding_mode="trunc") + torch.div(n, m, rounding_mode="floor")
    r = (n & m) | (n ^ 3)
    s = (n > 0) & ~(m > 2) | (n == m)
    return q + r + s.long(), n / m, (n * 2.5).to(torch.int32)


def reductions(x):
    values, indices = x.max(dim=1)
    low, low_at = x.min(dim=0, keepdim=True)
    return (
        x.sum(),
        x.sum(dim=(0, 2)),
        x.mean(dim=-1, keepdim=True),
        x.amax(dim=1),
        x.amin(dim=(1, 2)),
        values,
        indices,
        low,
        low_at,
        x.argmax(),
        x.argmin(dim=2),
        x.var(dim=1),
        torch.var_mean(x, dim=2, correction=0),
        x.prod(dim=1),
        (x > 0).any(dim=1),
        (x > -3).all(),
        torch.cumsum(x, dim=1),
        F.softmax(x, dim=-1),
        F.log_softmax(x, dim=1),
    )


def shapes(x, y):
    a = x.view(4, 6).t().reshape(2, 12).unsqueeze(1).squeeze(1)
    b = x.permute(2, 0, 1).expand(2, 3, 2, 4)
    c = torch.cat([x[:, 1:], x[:, :1]], dim=1)[..., ::2]
    d = x.select(1, -1) + x[0, 1, :]
    q, k, v = y.split([2, 3, 1], dim=1)
    parts = y.unbind(0)
    e = torch.triu(y) - torch.tril(y, -1) + torch.flip(y, [0, 1])
    f = F.pad(x, (1, 2, 0, 1), value=0.5)
    return a, b, c, d, q, k + 1, v, parts[0] * parts[1], e, f, torch.full_like(y, 7.0)


def creations(x):
    r = torch.arange(6, dtype=torch.float32) + torch.arange(1, 12, 2)
    return x + r + torch.full((6,), 2.0) + torch.zeros(6) + torch.ones_like(x)


def linear_algebra(a, b, c, bias):
    return a @ b, torch.addmm(bias, a, b), torch.addmm(bias, a, b, beta=0.5, alpha=2), c @ c.mT


def nn_ops(x, w, bias, w1, table, idx):
    conv = F.conv2d(x, w, bias, stride=2, padding=1)
    grouped = F.conv2d(x, w1, None, padding=1, dilation=2, groups=3)
    pooled = F.max_pool2d(conv, 2) + F.avg_pool2d(conv, 2)
    adaptive = F.adaptive_avg_pool2d(grouped, 1)
    conv1d = F.conv1d(x.flatten(2), w1[..., 0], padding=1, groups=3)
    looked_up = F.embedding(idx, table)
    gathered = torch.gather(table, 1, idx[:, :2].clamp(max=2))
    return pooled, adaptive, conv1d, looked_up, gathered, table.index_select(0, idx[0])


CASES = {
    "pointwise": (pointwise, lambda: (torch.randn(4, 5), torch.randn(4, 5))),
    "integers": (
        integers,
        lambda: (torch.randint(-9, 9, (8,)), torch.randint(1, 5, (8,))),
    ),
    "reductions": (reductions, lambda: (torch.randn(3, 4, 5),)),
    "shapes": (shapes, lambda: (torch.randn(2, 4, 3), torch.randn(6, 6))),
    "creations": (creations, lambda: (torch.randn(6),)),
    "linear-algebra": (
        linear_algebra,
        lambda: (torch.randn(4, 8), torch.randn(8, 5), torch.randn(2, 3, 4), torch.randn(5)),
    ),
    "index_select-of-a-0-d-tensor": (
        lambda x, i: x.index_select(0, i) * 2,
        lambda: (torch.tensor(1.5), torch.tensor([0])),
    ),
    "nn": (
        nn_ops,
        lambda: (
            torch.randn(2, 3, 8, 8),
            torch.randn(4, 3, 3, 3),
            torch.randn(4),
            torch.randn(3, 1, 3, 3),
            torch.randn(10, 3),
            torch.randint(0, 10, (2, 4)),
        ),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_family_matches_eager_whole_in_tvm(case, caplog):
    fn, make_inputs = CASES[case]
    compiled = torchkiln.compile(fn, backend="tvm")
    with partition_log(caplog):
        compiled(*make_inputs())
    assert_all_in_tvm(caplog.text)
    inputs = make_inputs()  # fresh values, same shapes: no new compile
    torch.testing.assert_close(compiled(*inputs), fn(*inputs))


#: The aten ops of the zoo's and the kit's graphs (after the backend's decompositions):
#: each must have a converter, or graphs split around it.
ZOO_OPS = [
    aten.mm.default,
    aten.addmm.default,
    aten.bmm.default,
    aten.convolution.default,
    aten.add.Tensor,
    aten.sub.Tensor,
    aten.mul.Tensor,
    aten.div.Tensor,
    aten.pow.Tensor_Scalar,
    aten.exp.default,
    aten.tanh.default,
    aten.rsqrt.default,
    aten.erf.default,
    aten.gelu.default,
    aten.relu.default,
    aten.sigmoid.default,
    aten.where.self,
    aten.sum.dim_IntList,
    aten.mean.dim,
    aten.amax.default,
    aten.var_mean.correction,
    aten._softmax.default,
    aten._log_softmax.default,
    aten.max_pool2d_with_indices.default,
    aten.avg_pool2d.default,
    aten._adaptive_avg_pool2d.default,
    aten.view.default,
    aten._unsafe_view.default,
    aten.permute.default,
    aten.expand.default,
    aten.unsqueeze.default,
    aten.squeeze.dims,
    aten.slice.Tensor,
    aten.select.int,
    aten.cat.default,
    aten.split_with_sizes.default,
    aten.embedding.default,
    aten.gather.default,
    aten.index_select.default,
    aten.full.default,
    aten.scalar_tensor.default,
    aten.arange.start_step,
    aten._to_copy.default,
    aten.clone.default,
]


def test_converter_table_covers_the_zoo_ops():
    from torchkiln_tvm.converters import CONVERTERS

    missing = [str(op) for op in ZOO_OPS if op not in CONVERTERS]
    assert not missing, missing


def with_reversed_empty_half(x):
    """``x[..., :0].flip(-1)`` is empty: torch computes it (no converter takes an empty
    result) and hands it to TVM's concatenate with torch's strides of an empty tensor."""
    return torch.cat([x, x[..., : x.shape[-1] // 2].flip(-1)], -1) * 2


@pytest.mark.parametrize("shape", [(2, 1), (1, 8), (3, 5)])
def test_empty_and_size_one_inputs_reach_tvm_with_its_strides(shape):
    compiled = torchkiln.compile(with_reversed_empty_half, backend="tvm")
    x = torch.randn(*shape)
    torch.testing.assert_close(compiled(x), with_reversed_empty_half(x))
    # size-1 dimensions with strides torch ignores and TVM checks
    y = torch.randn(shape[::-1]).t()
    torch.testing.assert_close(compiled(y), with_reversed_empty_half(y))
