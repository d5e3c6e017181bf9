"""Spec (issue 3): torch operations on tensors are put into one graph.

Each case compiles a function with the recording backend, compares it with
eager on fresh random inputs (twice: the second call must hit the cache) and
checks that exactly one graph was compiled.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from kiln_testing import check_compiled


@pytest.mark.parametrize(
    "op",
    [torch.sin, torch.exp, torch.tanh, torch.sigmoid, torch.abs, torch.rsqrt],
    ids=lambda op: op.__name__,
)
def test_torch_unary_function_is_one_graph(backend, op):
    def fn(x):
        return op(x.abs() + 0.5)

    check_compiled(fn, lambda: (torch.randn(4, 5),), backend=backend, graphs=1)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: F.relu(x),
        lambda x: F.gelu(x),
        lambda x: F.softmax(x, dim=-1),
        lambda x: F.log_softmax(x, dim=0),
        lambda x: F.layer_norm(x, (5,)),
        lambda x: F.normalize(x, dim=1),
    ],
    ids=["relu", "gelu", "softmax", "log_softmax", "layer_norm", "normalize"],
)
def test_functional_op_is_one_graph(backend, fn):
    check_compiled(fn, lambda: (torch.randn(4, 5),), backend=backend, graphs=1)


def test_functional_linear_with_weight_and_bias_arguments(backend):
    def fn(x, w, b):
        return F.linear(x, w, b)

    check_compiled(
        fn,
        lambda: (torch.randn(3, 4), torch.randn(6, 4), torch.randn(6)),
        backend=backend,
        graphs=1,
    )


def test_functional_conv2d_with_keyword_arguments(backend):
    def fn(x, w):
        return F.conv2d(x, w, stride=2, padding=1)

    check_compiled(
        fn, lambda: (torch.randn(1, 2, 8, 8), torch.randn(3, 2, 3, 3)), backend=backend, graphs=1
    )


def test_cross_entropy_with_integer_targets(backend):
    def fn(logits, target):
        return F.cross_entropy(logits, target)

    check_compiled(
        fn, lambda: (torch.randn(6, 4), torch.randint(0, 4, (6,))), backend=backend, graphs=1
    )


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, y: x + y,
        lambda x, y: x - y,
        lambda x, y: x * y,
        lambda x, y: x / (y.abs() + 1),
        lambda x, y: x.abs() ** y,
        lambda x, y: x @ y.T,
        lambda x, y: -x,
        lambda x, y: (x > y) & (x > 0),
        lambda x, y: (x < y) | ~(y > 0),
        lambda x, y: x // (y.abs() + 1),
        lambda x, y: x % (y.abs() + 1),
    ],
    ids=[
        "add",
        "sub",
        "mul",
        "div",
        "pow",
        "matmul",
        "neg",
        "gt_and",
        "lt_or_not",
        "floordiv",
        "mod",
    ],
)
def test_tensor_operator_is_one_graph(backend, fn):
    check_compiled(fn, lambda: (torch.randn(4, 4), torch.randn(4, 4)), backend=backend, graphs=1)


def test_reflected_operators_with_python_scalars(backend):
    def fn(x):
        return 2 - x, 1 / (x.abs() + 1), 3 * x, 2**x

    check_compiled(fn, lambda: (torch.randn(5),), backend=backend, graphs=1)


def test_broadcasting_between_inputs_of_different_ranks(backend):
    def fn(x, row, col):
        return x * row + col

    check_compiled(
        fn,
        lambda: (torch.randn(3, 4), torch.randn(4), torch.randn(3, 1)),
        backend=backend,
        graphs=1,
    )


def test_reductions_with_dim_and_keepdim(backend):
    def fn(x):
        return x.sum(1), x.mean(dim=0, keepdim=True), x.amax(-1), x.std(), x.norm()

    check_compiled(fn, lambda: (torch.randn(4, 6),), backend=backend, graphs=1)


def test_max_with_dim_values_and_indices(backend):
    def fn(x):
        values, indices = x.max(dim=1)
        return values * 2, indices + 1

    check_compiled(fn, lambda: (torch.randn(4, 6),), backend=backend, graphs=1)


def test_view_ops_reshape_permute_transpose(backend):
    def fn(x):
        a = x.view(2, 3, 4).permute(2, 0, 1)
        b = x.reshape(6, 4).t().contiguous()
        c = x.view(-1).unsqueeze(0).squeeze(0)
        return a, b, c.transpose(0, 0)

    check_compiled(fn, lambda: (torch.randn(6, 4),), backend=backend, graphs=1)


def test_view_using_the_input_shape(backend):
    def fn(x):
        return x.view(x.shape[0], -1).sum(-1) + x.size(1)

    check_compiled(fn, lambda: (torch.randn(3, 4, 5),), backend=backend, graphs=1)


def test_expand_and_expand_as(backend):
    def fn(x, y):
        return x.expand(3, 4) + y, x.expand_as(y) * y

    check_compiled(fn, lambda: (torch.randn(1, 4), torch.randn(3, 4)), backend=backend, graphs=1)


def test_chunk_split_and_unbind_results_are_used(backend):
    def fn(x):
        a, b = x.chunk(2, dim=1)
        c, d, e = x.split([1, 2, 1], dim=0)
        rows = x.unbind(0)
        return a * b, c + e, d.sum(), rows[-1] - rows[0]

    check_compiled(fn, lambda: (torch.randn(4, 6),), backend=backend, graphs=1)


def test_cat_and_stack_of_tensor_lists(backend):
    def fn(x, y):
        return torch.cat([x, y], dim=0), torch.stack((x, y, x), dim=-1)

    check_compiled(fn, lambda: (torch.randn(2, 3), torch.randn(2, 3)), backend=backend, graphs=1)


def test_where_and_clamp_with_keyword_arguments(backend):
    def fn(x, y):
        return torch.where(x > 0, x, y), x.clamp(min=-0.5, max=0.5), torch.clamp(y, max=0.0)

    check_compiled(fn, lambda: (torch.randn(5), torch.randn(5)), backend=backend, graphs=1)


def test_creation_ops_from_input_metadata(backend):
    def fn(x):
        zeros = torch.zeros(x.shape, dtype=x.dtype)
        ones = torch.ones_like(x)
        ramp = torch.arange(x.shape[-1], dtype=torch.float32)
        full = x.new_full((2,), 3.0)
        return x + zeros + ones * ramp, full

    check_compiled(fn, lambda: (torch.randn(3, 4),), backend=backend, graphs=1)


def test_dtype_conversions(backend):
    def fn(x):
        return x.to(torch.float64) * 2, (x * 10).int(), x.double().sum(), x.to(dtype=torch.float16)

    check_compiled(fn, lambda: (torch.randn(4),), backend=backend, graphs=1)


def test_integer_tensor_arithmetic(backend):
    def fn(a, b):
        return a * b + 3, a // 2, (a > b).sum()

    check_compiled(
        fn,
        lambda: (torch.randint(-5, 5, (6,)), torch.randint(-5, 5, (6,))),
        backend=backend,
        graphs=1,
    )


def test_zero_dim_tensor_arithmetic(backend):
    def fn(s, x):
        return s * x + s.exp()

    check_compiled(fn, lambda: (torch.randn(()), torch.randn(3)), backend=backend, graphs=1)


def test_batched_matmul_and_einsum(backend):
    def fn(a, b):
        return torch.bmm(a, b), torch.einsum("bij,bjk->bik", a, b).sum(0)

    check_compiled(
        fn, lambda: (torch.randn(2, 3, 4), torch.randn(2, 4, 5)), backend=backend, graphs=1
    )


def test_python_math_constant_in_tensor_expression(backend):
    def fn(x):
        return torch.sin(x * math.pi) / math.sqrt(2.0)

    check_compiled(fn, lambda: (torch.randn(5),), backend=backend, graphs=1)


def test_inplace_ops_on_an_intermediate(backend):
    def fn(x):
        y = x.clone()
        y.add_(1)
        y.mul_(2)
        y += x
        return y

    check_compiled(fn, lambda: (torch.randn(4),), backend=backend, graphs=1)


def test_inplace_op_on_an_input_is_visible_to_the_caller(backend):
    def fn(x, y):
        x.add_(y)
        return y * 2

    check_compiled(fn, lambda: (torch.randn(4), torch.randn(4)), backend=backend, graphs=1)


def test_inplace_op_through_a_view_mutates_the_base(backend):
    def fn(x):
        y = x.clone()
        row = y[0]
        row.fill_(0.0)
        y[1].mul_(3)
        return y

    check_compiled(fn, lambda: (torch.randn(3, 4),), backend=backend, graphs=1)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, i: x[1],
        lambda x, i: x[-1, 1:3],
        lambda x, i: x[:, None, ::2],
        lambda x, i: x[..., 0],
        lambda x, i: x[i],
        lambda x, i: x[:, i],
        lambda x, i: x[1:, ..., None],
    ],
    ids=[
        "int",
        "negative_int_and_slice",
        "none_and_step",
        "ellipsis",
        "tensor",
        "slice_and_tensor",
        "slice_ellipsis_none",
    ],
)
def test_indexing_is_one_graph(backend, fn):
    check_compiled(
        fn, lambda: (torch.randn(4, 5), torch.tensor([0, 2, 2])), backend=backend, graphs=1
    )


def test_setitem_with_int_slice_and_tensor_index(backend):
    def fn(x, v, idx):
        y = x.clone()
        y[0] = 0.0
        y[:, 1] = v
        y[idx] = -1.0
        return y

    check_compiled(
        fn,
        lambda: (torch.randn(4, 3), torch.randn(4), torch.tensor([2, 3])),
        backend=backend,
        graphs=1,
    )


def test_setitem_on_an_input_is_visible_to_the_caller(backend):
    def fn(x, v):
        x[1:3] = v
        return x.sum()

    check_compiled(fn, lambda: (torch.randn(5, 2), torch.randn(2)), backend=backend, graphs=1)


def test_tensor_attribute_T_and_mT(backend):
    def fn(x):
        return x.T @ x, x.mT.shape[0] * x

    check_compiled(fn, lambda: (torch.randn(3, 2),), backend=backend, graphs=1)
