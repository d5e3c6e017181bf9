"""Each aten op converter against eager, on fresh random inputs (forward, then gradients)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from onnxrt_checks import (
    Case,
    assert_matches,
    aten_compiled,
    backend_compiled,
    bf16,
    boolean,
    f16,
    f32,
    floats_requiring_grad,
    i64,
    positive,
    transposed,
)

POINTWISE = [
    Case("add_broadcast_alpha", lambda x, y: torch.add(x, y, alpha=2), [f32(3, 1, 4), f32(2, 1)]),
    Case("sub_scalar", lambda x: x - 1.5, [f32(3, 4)]),
    Case("rsub", lambda x: 2 - x, [f32(3, 4)]),
    Case("mul_int64", lambda x, y: x * y, [i64(3, 4), i64(4)]),
    Case("mul_int_by_float_scalar", lambda x: x * 0.5, [i64(3, 4)]),
    Case("div", lambda x, y: x / y, [f32(3, 4), positive(3, 4)]),
    Case("div_ints_is_true_division", lambda x, y: x / y, [i64(3, 4), i64(3, 4, low=1)]),
    Case(
        "floor_divide_negative_ints",
        lambda x, y: torch.div(x, y, rounding_mode="floor"),
        [i64(6), i64(6, low=1)],
    ),
    Case(
        "trunc_divide_floats",
        lambda x, y: torch.div(x, y, rounding_mode="trunc"),
        [f32(6), positive(6)],
    ),
    Case("remainder_floats", lambda x: torch.remainder(x, 0.7), [f32(8)]),
    Case("remainder_negative_ints", lambda x: torch.remainder(x, 3), [i64(8)]),
    Case("fmod", lambda x: torch.fmod(x, 0.7), [f32(8)]),
    Case(
        "booleans_mul_maximum_minimum",
        lambda x, y: (x * y, torch.maximum(x, y), torch.minimum(x, y)),
        [boolean(8), boolean(8)],
    ),
    Case("pow_scalar", lambda x: x**3, [f32(3, 4)]),
    Case("pow_tensor", lambda x, y: x**y, [positive(3, 4), f32(4)]),
    Case(
        "maximum_minimum",
        lambda x, y: (torch.maximum(x, y), torch.minimum(x, y)),
        [f32(3, 4), f32(4)],
    ),
    Case(
        "unary_math",
        lambda x: (x.abs(), -x, x.exp(), x.sin(), x.cos(), x.tanh(), x.sigmoid(), x.erf()),
        [f32(5)],
    ),
    Case(
        "unary_positive",
        lambda x: (x.log(), x.sqrt(), x.rsqrt(), x.reciprocal(), x.log1p(), x.log2()),
        [positive(5)],
    ),
    Case(
        "rounding",
        lambda x: (x.floor(), x.ceil(), x.round(), x.trunc(), x.sign()),
        [lambda: torch.randn(9) * 4],
    ),
    Case("expm1", lambda x: torch.expm1(x), [f32(5)]),
    Case("relu", lambda x: F.relu(x), [f32(3, 4)]),
    Case("gelu", lambda x: F.gelu(x), [f32(3, 4)]),
    Case("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), [f32(3, 4)]),
    Case("silu", lambda x: F.silu(x), [f32(3, 4)]),
    Case("leaky_relu", lambda x: F.leaky_relu(x, 0.2), [f32(3, 4)]),
    Case("hardswish", lambda x: F.hardswish(x), [lambda: torch.randn(3, 4) * 4]),
    Case("hardtanh", lambda x: F.hardtanh(x), [lambda: torch.randn(3, 4) * 2]),
    Case("clamp", lambda x: x.clamp(-0.5, 0.5), [f32(3, 4)]),
    Case("clamp_min_tensor", lambda x, y: torch.clamp(x, min=y), [f32(3, 4), f32(4)]),
    Case("where", lambda c, x, y: torch.where(c, x, y), [boolean(3, 4), f32(3, 4), f32(4)]),
    Case("where_scalar", lambda x: torch.where(x > 0, x, 0.0), [f32(3, 4)]),
    Case("masked_fill", lambda x, m: x.masked_fill(m, -1e4), [f32(3, 4), boolean(3, 4)]),
    Case(
        "compare_tensors",
        lambda x, y: (x == y, x != y, x < y, x <= y, x > y, x >= y),
        [i64(12, high=3), i64(12, high=3)],
    ),
    Case("compare_int_with_float_scalar", lambda x: (x > 1.5, x == 2), [i64(12, high=4)]),
    Case("compare_mixed_dtypes", lambda x, y: x < y, [i64(12), f32(12)]),
    Case(
        "logical",
        lambda a, b: (a & b, a | b, a ^ b, ~a, torch.logical_not(a)),
        [boolean(8), boolean(8)],
    ),
    Case("bitwise_ints", lambda a, b: (a & b, a | b, a ^ b), [i64(8, low=0), i64(8, low=0)]),
    Case(
        "isnan_isinf",
        lambda x: (x.isnan(), x.isinf()),
        [lambda: torch.tensor([1.0, float("nan"), float("inf"), -float("inf")])],
    ),
    Case(
        "casts",
        lambda x, n, b: (x.to(torch.int64), n.to(torch.float16), b.float(), x.double()),
        [lambda: torch.randn(6) * 5, i64(6), boolean(6)],
    ),
    Case("float16_add", lambda x, y: x + y, [f16(3, 4), f16(3, 4)]),
    Case("float16_with_float32_promotes", lambda x, y: x * y, [f16(3, 4), f32(3, 4)]),
    Case("non_contiguous_inputs", lambda x, y: x * 2 + y, [transposed(3, 5), f32(3, 5)]),
]

SHAPES = [
    Case(
        "view_permute_transpose",
        lambda x: (
            x.view(4, 6),
            x.permute(2, 0, 1),
            x.transpose(0, 2),
            x.mT,
        ),
        [f32(2, 3, 4)],
    ),
    Case(
        "expand_unsqueeze_squeeze",
        lambda x: (x.expand(3, 4, 5), x.unsqueeze(0), x.squeeze(1)),
        [f32(4, 1)],
    ),
    Case("select_negative_index", lambda x: x[:, -1], [f32(3, 4)]),
    Case("slice_with_step", lambda x: (x[1:, ::2], x[-3:-1], x[:, 10:]), [f32(5, 6)]),
    Case("narrow", lambda x: x.narrow(1, 1, 2), [f32(3, 4)]),
    Case(
        "slice_scatter_step",
        lambda x, s: torch.slice_scatter(x, s, 1, 1, 6, 2),
        [f32(3, 7), f32(3, 3)],
    ),
    Case(
        "slice_scatter_negative_start",
        lambda x, s: torch.slice_scatter(x, s, 0, -2),
        [f32(4, 3), f32(2, 3)],
    ),
    Case("cat_promotes_dtypes", lambda x, y: torch.cat([x, y], dim=-1), [f32(2, 3), i64(2, 2)]),
    Case("stack", lambda x, y: torch.stack([x, y], 1), [f32(2, 3), f32(2, 3)]),
    Case("split_chunk_unbind", lambda x: (*x.split(2, 1), *x.chunk(2), *x.unbind(0)), [f32(4, 5)]),
    Case("flip", lambda x: x.flip(0, -1), [f32(3, 4)]),
    Case("repeat", lambda x: x.repeat(2, 1, 3), [f32(3, 4)]),
    Case("roll", lambda x: x.roll(1, 0), [f32(3, 4)]),
    Case("pad_constant", lambda x: F.pad(x, (1, 2, 0, 1), value=0.5), [f32(2, 3, 4)]),
    Case("index_select", lambda x, i: x.index_select(1, i), [f32(3, 6), i64(4, low=0, high=6)]),
    Case("gather", lambda x, i: x.gather(1, i), [f32(3, 6), i64(3, 2, low=0, high=6)]),
    Case(
        "scatter_value",
        lambda x, i: x.scatter(1, i, 2.0),
        [f32(3, 6), lambda: torch.randperm(6)[:2].repeat(3, 1)],
    ),
    Case(
        "scatter_add",
        lambda x, i, s: x.scatter_add(0, i, s),
        [f32(4, 3), i64(5, 3, low=0, high=4), f32(5, 3)],
    ),
    Case("index_tensor_leading", lambda x, i: x[i], [f32(5, 3), i64(2, 4, low=-5, high=5)]),
    Case("index_tensor_middle", lambda x, i: x[:, i], [f32(3, 5, 2), i64(4, low=0, high=5)]),
    Case(
        "index_two_tensors",
        lambda x, i, j: x[i, j],
        [f32(4, 5, 2), i64(3, low=0, high=4), i64(3, low=0, high=5)],
    ),
    Case(
        "index_two_tensors_in_the_middle",
        lambda x, i, j: x[:, i, j],
        [f32(2, 4, 5, 3), i64(3, low=0, high=4), i64(3, low=0, high=5)],
    ),
    Case(
        "index_two_tensors_apart",
        lambda x, i, j: x[i, :, j],
        [f32(4, 2, 5), i64(3, low=0, high=4), i64(3, low=0, high=5)],
    ),
    Case(
        "index_put_two_tensors_in_the_middle",
        lambda x, i, j, v: torch.ops.aten.index_put(x, [None, i, j], v, True),
        [f32(2, 4, 5, 3), i64(3, low=0, high=4), i64(3, low=0, high=5), f32(2, 3, 3)],
    ),
    Case(
        "index_put_two_tensors_apart",
        lambda x, i, j, v: torch.ops.aten.index_put(x, [i, None, j], v, True),
        [f32(4, 2, 5), i64(3, low=0, high=4), i64(3, low=0, high=5), f32(3, 2)],
    ),
    Case(
        "index_put_accumulate",
        lambda x, i, v: x.index_put((i,), v, accumulate=True),
        [f32(5, 3), i64(7, low=0, high=5), f32(7, 3)],
    ),
    Case(
        "index_put_broadcast_value",
        lambda x, i: x.index_put((i,), torch.tensor(3.0)),
        [f32(5, 3), lambda: torch.randperm(5)[:2]],
    ),
    Case("embedding", lambda w, i: F.embedding(i, w), [f32(10, 4), i64(2, 3, low=0, high=10)]),
    Case(
        "creation",
        lambda x: (
            torch.arange(2, 11, 3),
            torch.full((2, 3), 7),
            torch.zeros_like(x),
            torch.ones(3, dtype=torch.float16) * 2,
        ),
        [f32(2, 3)],
    ),
    Case("tril_triu", lambda x: (x.tril(), x.triu(1)), [f32(4, 4)]),
    Case("contiguous_of_transpose", lambda x: x.t().contiguous() + 1, [f32(3, 4)]),
]

REDUCTIONS = [
    Case(
        "sum_dims_keepdim",
        lambda x: (x.sum(), x.sum((0, 2), keepdim=True), x.sum(-1)),
        [f32(2, 3, 4)],
    ),
    Case("sum_of_bools_is_int64", lambda b: b.sum(1), [boolean(3, 5)]),
    Case("mean", lambda x: (x.mean(), x.mean(1)), [f32(3, 4)]),
    Case("amax_amin", lambda x: (x.amax(0), x.amin((0, 1))), [f32(3, 4)]),
    Case(
        "max_dim_with_indices",
        lambda x: tuple(x.max(1)) + tuple(x.min(0, keepdim=True)),
        [f32(3, 5)],
    ),
    Case("max_all", lambda x: (x.max(), x.min()), [f32(3, 5)]),
    Case(
        "argmax_argmin", lambda x: (x.argmax(), x.argmax(1), x.argmin(0, keepdim=True)), [f32(3, 5)]
    ),
    Case("any_all", lambda b: (b.any(), b.all(1), b.any(0, keepdim=True)), [boolean(3, 5)]),
    Case("var_std", lambda x: (x.var(1), x.var(0, unbiased=False), x.std()), [f32(4, 5)]),
    Case("prod", lambda x: (x.prod(), x.prod(1)), [positive(3, 4)]),
    Case("logsumexp", lambda x: x.logsumexp(1), [f32(3, 5)]),
    Case("softmax_log_softmax", lambda x: (x.softmax(-1), x.log_softmax(0)), [f32(3, 5)]),
    Case("softmax_float16", lambda x: x.softmax(-1), [f16(3, 5)]),
    Case("cumsum", lambda x: (x.cumsum(1), x.cumsum(0)), [f32(3, 5)]),
    Case(
        "mm_bmm",
        lambda a, b, c, d: (a @ b, torch.bmm(c, d)),
        [f32(3, 4), f32(4, 5), f32(2, 3, 4), f32(2, 4, 2)],
    ),
    Case(
        "addmm_alpha_beta",
        lambda bias, a, b: torch.addmm(bias, a, b, beta=0.5, alpha=2),
        [f32(5), f32(3, 4), f32(4, 5)],
    ),
    Case("matmul_broadcast_batch", lambda a, b: a @ b, [f32(2, 1, 3, 4), f32(3, 4, 5)]),
    Case("matmul_vector", lambda a, v: a @ v, [f32(3, 4), f32(4)]),
    Case(
        "linear_non_contiguous_weight", lambda x, w: F.linear(x, w), [f32(2, 4), transposed(3, 4)]
    ),
    Case("einsum", lambda a, b: torch.einsum("bij,bjk->bik", a, b), [f32(2, 3, 4), f32(2, 4, 5)]),
]

NN = [
    Case(
        "conv2d_stride_padding_dilation",
        lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=2, dilation=2),
        [f32(2, 3, 9, 9), f32(4, 3, 3, 3), f32(4)],
    ),
    Case(
        "conv2d_groups",
        lambda x, w: F.conv2d(x, w, groups=2, padding=1),
        [f32(2, 4, 6, 6), f32(6, 2, 3, 3)],
    ),
    Case("conv1d", lambda x, w: F.conv1d(x, w, stride=2), [f32(2, 3, 10), f32(4, 3, 3)]),
    Case(
        "conv_transpose2d",
        lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1),
        [f32(2, 4, 5, 5), f32(4, 3, 3, 3)],
    ),
    Case("max_pool2d", lambda x: F.max_pool2d(x, 3, stride=2, padding=1), [f32(2, 3, 9, 9)]),
    Case("max_pool2d_unbatched", lambda x: F.max_pool2d(x, 2), [f32(3, 8, 8)]),
    Case(
        "avg_pool2d_without_pad_count",
        lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False),
        [f32(2, 3, 9, 9)],
    ),
    Case(
        "adaptive_avg_pool2d",
        lambda x: (F.adaptive_avg_pool2d(x, 2), F.adaptive_avg_pool2d(x, 1)),
        [f32(2, 3, 8, 8)],
    ),
    Case(
        "batch_norm_training",
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
        [f32(4, 3, 5, 5), f32(3), f32(3)],
    ),
    Case(
        "batch_norm_eval",
        lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, training=False),
        [f32(4, 3, 5, 5), f32(3), positive(3), f32(3), f32(3)],
    ),
    Case("layer_norm", lambda x, w, b: F.layer_norm(x, (4,), w, b), [f32(2, 3, 4), f32(4), f32(4)]),
    Case("group_norm", lambda x, w, b: F.group_norm(x, 2, w, b), [f32(2, 4, 3, 3), f32(4), f32(4)]),
    Case(
        "attention_causal",
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        [f32(2, 2, 5, 8), f32(2, 2, 5, 8), f32(2, 2, 5, 8)],
    ),
    Case(
        "attention_bool_mask",
        lambda q, k, v, m: F.scaled_dot_product_attention(
            q, k, v, attn_mask=m | torch.eye(5, 6, dtype=torch.bool)
        ),
        [f32(2, 5, 8), f32(2, 6, 8), f32(2, 6, 8), boolean(5, 6)],
    ),
    Case("cross_entropy", lambda x, t: F.cross_entropy(x, t), [f32(6, 5), i64(6, low=0, high=5)]),
    Case("mse_loss", lambda x, y: F.mse_loss(x, y), [f32(6, 5), f32(6, 5)]),
]

FLOAT16 = [
    Case("float16_matmul", lambda a, b: a @ b, [f16(4, 6), f16(6, 3)]),
    Case(
        "float16_conv2d", lambda x, w: F.conv2d(x, w, padding=1), [f16(1, 2, 5, 5), f16(3, 2, 3, 3)]
    ),
    Case("float16_layer_norm", lambda x: F.layer_norm(x, (6,)), [f16(4, 6)]),
    Case("float16_gelu", lambda x: F.gelu(x), [f16(4, 6)]),
]

#: onnxruntime's CPU provider has kernels for few bfloat16 ops: each computes in float32
#: inside the model, rounded back per op as eager does.
BFLOAT16 = [
    Case("bfloat16_matmul_bias", lambda a, b, c: a @ b + c, [bf16(4, 6), bf16(6, 3), bf16(3)]),
    Case(
        "bfloat16_conv2d",
        lambda x, w: F.conv2d(x, w, padding=1),
        [bf16(1, 2, 5, 5), bf16(3, 2, 3, 3)],
    ),
    Case("bfloat16_layer_norm_gelu", lambda x: F.gelu(F.layer_norm(x, (6,))), [bf16(4, 6)]),
    Case("bfloat16_softmax_sum", lambda x: (x.softmax(-1), x.sum(0), x.amax(1)), [bf16(4, 6)]),
    Case(
        "bfloat16_where_compare_cat",
        lambda x, y: torch.cat([torch.where(x > y, x, y * 2), x.expand(2, 4, 6)[0]]),
        [bf16(4, 6), bf16(6)],
    ),
    Case(
        "bfloat16_with_float32_and_rounding_casts",
        lambda x, y: ((x * y).to(torch.bfloat16), y.to(torch.bfloat16).float() - y),
        [bf16(3, 4), f32(3, 4)],
    ),
    Case(
        "bfloat16_attention",
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        [bf16(2, 5, 8), bf16(2, 5, 8), bf16(2, 5, 8)],
    ),
]

#: torch reduces, indexes and scatters a 0-dim tensor at ``dim=0`` or ``-1``; ONNX has no axis.
SCALAR_REDUCTIONS = [
    Case(
        "gather_scatter_0dim",
        lambda x, i: (
            torch.gather(x, 0, i),
            torch.scatter_add(x, -1, i, x * 2),
            x.index_select(0, i),
            x.argmax(0),
            x.argmin(-1, keepdim=True),
        ),
        [lambda: torch.randn(()), lambda: torch.tensor(0)],
    ),
    Case(
        "reduce_0dim_over_dim",
        lambda x: (x.sum(0), x.amax(-1), x.mean(0, keepdim=True), *torch.max(x, 0)),
        [lambda: torch.randn(())],
    ),
]

COMPOSITES = [
    Case("interpolate_nearest", lambda x: F.interpolate(x, scale_factor=2), [f32(1, 2, 4, 4)]),
    Case("topk", lambda x: x.topk(3, dim=1), [f32(4, 6)]),
    Case("sort_descending", lambda x: x.sort(dim=0, descending=True), [f32(5, 3)]),
    Case("elu_softplus_mish", lambda x: (F.elu(x), F.softplus(x), F.mish(x)), [f32(4, 6)]),
    Case("vector_norm_normalize", lambda x: (x.norm(dim=1), F.normalize(x, dim=-1)), [f32(4, 6)]),
    Case("reflection_pad", lambda x: F.pad(x, (1, 1, 1, 1), mode="reflect"), [f32(1, 2, 4, 4)]),
    Case("instance_norm", lambda x: F.instance_norm(x), [f32(2, 3, 4, 4)]),
    Case("std_mean", lambda x: torch.std_mean(x, 0), [f32(5, 3)]),
    Case(
        "pixel_shuffle_unfold", lambda x: (F.pixel_shuffle(x, 2), F.unfold(x, 2)), [f32(1, 8, 3, 3)]
    ),
    Case("glu_lerp", lambda x, y: (F.glu(x), torch.lerp(x, y, 0.3)), [f32(4, 6), f32(4, 6)]),
    Case("pool1d", lambda x: (F.max_pool1d(x, 2), F.avg_pool1d(x, 2)), [f32(1, 2, 8)]),
    Case(
        "bce_with_logits",
        lambda x, t: F.binary_cross_entropy_with_logits(x, t),
        [f32(6), lambda: torch.rand(6)],
    ),
    Case("smooth_l1", lambda x, t: F.smooth_l1_loss(x, t), [f32(6), f32(6)]),
]

ALL = POINTWISE + SHAPES + REDUCTIONS + NN + FLOAT16 + BFLOAT16 + SCALAR_REDUCTIONS + COMPOSITES


@pytest.mark.parametrize("case", ALL, ids=lambda c: c.name)
def test_converted_op_matches_eager(case: Case):
    compiled = aten_compiled(case.fn, case.make())
    fresh = case.make()
    assert_matches(compiled(*fresh), case.fn(*fresh))


def _has_float_input(case: Case) -> bool:
    return any(t.dtype == torch.float32 for t in case.make())


GRAD_CASES = [
    c
    for c in ALL
    if _has_float_input(c) and c.name not in {"isnan_isinf", "casts", "batch_norm_eval"}
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.name)
def test_gradients_match_eager(case: Case):
    compiled = backend_compiled(case.fn, floats_requiring_grad(case.make()))
    fresh = case.make()
    actual_inputs, expected_inputs = floats_requiring_grad(fresh), floats_requiring_grad(fresh)
    actual, expected = compiled(*actual_inputs), case.fn(*expected_inputs)
    assert_matches(actual, expected)
    actual_outs = [o for o in torch.utils._pytree.tree_leaves(actual) if o.requires_grad]
    expected_outs = [o for o in torch.utils._pytree.tree_leaves(expected) if o.requires_grad]
    cotangents = [torch.randn_like(o) for o in expected_outs]
    wrt = [i for i in range(len(fresh)) if actual_inputs[i].requires_grad]
    grads = torch.autograd.grad(
        actual_outs, [actual_inputs[i] for i in wrt], cotangents, allow_unused=True
    )
    expected_grads = torch.autograd.grad(
        expected_outs, [expected_inputs[i] for i in wrt], cotangents, allow_unused=True
    )
    for got, want in zip(grads, expected_grads, strict=True):
        if want is None:
            assert got is None or not got.any()
        else:
            torch.testing.assert_close(got, want)
