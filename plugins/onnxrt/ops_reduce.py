"""Converters of reductions, scans, softmax and matrix products."""

from __future__ import annotations

import math

import torch

from torchkiln_onnxrt.converter import GraphBuilder, Value, converts, out_dtype, out_shape
from torchkiln_onnxrt.dtypes import onnx_dtype
from torchkiln_onnxrt.sizes import concrete, is_symbolic, known_nonnegative

aten = torch.ops.aten


def _axes(x: Value, dim) -> list[int]:
    """Reduced axes, non-negative; ``None`` or ``[]`` means every axis, as in torch.

    A 0-dim tensor has none: torch takes ``dim=0`` or ``-1`` on it and returns it whole.
    """
    if x.ndim == 0:
        return []
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.ndim))
    dims = [dim] if isinstance(dim, int) else dim
    return sorted({d + x.ndim if d < 0 else d for d in dims})


def _reduce(b: GraphBuilder, onnx_op: str, data: str, x: Value, dim, keepdim: bool) -> str:
    axes = _axes(x, dim)
    if not axes:
        return data
    return b.op(onnx_op, [data, b.ints(axes)], keepdims=int(keepdim))


@converts(aten.sum.dim_IntList, aten.sum.default, aten.mean.dim, aten.mean.default)
def sum_mean(b: GraphBuilder, node, x: Value, dim=None, keepdim: bool = False, dtype=None) -> str:
    onnx_op = "ReduceSum" if node.target.overloadpacket is aten.sum else "ReduceMean"
    return _reduce(b, onnx_op, b.as_dtype(x, out_dtype(node)), x, dim, keepdim)


@converts(aten.prod.default, aten.prod.dim_int)
def prod(b: GraphBuilder, node, x: Value, dim=None, keepdim: bool = False, dtype=None) -> str:
    return _reduce(b, "ReduceProd", b.as_dtype(x, out_dtype(node)), x, dim, keepdim)


@converts(aten.amax.default, aten.amin.default, aten.max.default, aten.min.default)
def amax_amin(b: GraphBuilder, node, x: Value, dim=None, keepdim: bool = False) -> str:
    packet = node.target.overloadpacket
    onnx_op = "ReduceMax" if packet in (aten.amax, aten.max) else "ReduceMin"
    return _reduce(b, onnx_op, x.name, x, dim, keepdim)


@converts(aten.max.dim, aten.min.dim)
def max_min_dim(b: GraphBuilder, node, x: Value, dim: int, keepdim: bool = False) -> list[str]:
    is_max = node.target.overloadpacket is aten.max
    if x.ndim == 0:
        return [x.name, b.const(0, torch.int64)]
    values = _reduce(b, "ReduceMax" if is_max else "ReduceMin", x.name, x, dim, keepdim)
    axis = _axes(x, dim)[0]
    indices = b.op("ArgMax" if is_max else "ArgMin", [x.name], axis=axis, keepdims=int(keepdim))
    return [values, indices]


@converts(aten.argmax.default, aten.argmin.default)
def argmax_argmin(b: GraphBuilder, node, x: Value, dim=None, keepdim: bool = False) -> str:
    onnx_op = "ArgMax" if node.target.overloadpacket is aten.argmax else "ArgMin"
    if x.ndim == 0:
        return b.const(0, torch.int64)
    if dim is None:
        flat = b.reshape(x.name, [-1])
        return b.reshape(b.op(onnx_op, [flat], axis=0, keepdims=0), out_shape(node))
    return b.op(onnx_op, [x.name], axis=_axes(x, dim)[0], keepdims=int(keepdim))


@converts(
    aten.any.default, aten.any.dim, aten.any.dims, aten.all.default, aten.all.dim, aten.all.dims
)
def any_all(b: GraphBuilder, node, x: Value, dim=None, keepdim: bool = False) -> str:
    onnx_op = "ReduceMax" if node.target.overloadpacket is aten.any else "ReduceMin"
    # ReduceMax/ReduceMin have no bool kernels: reduce 0/1 as int32.
    as_int = b.op("Cast", [b.as_dtype(x, torch.bool)], to=onnx_dtype(torch.int32))
    reduced = _reduce(b, onnx_op, as_int, x, dim, keepdim)
    return b.op("Cast", [reduced], to=onnx_dtype(torch.bool))


@converts(aten.var.correction, aten.var_mean.correction)
def var(b: GraphBuilder, node, x: Value, dim=None, *, correction=None, keepdim: bool = False):
    """Variance (and, for var_mean, the mean) over ``dim``; ``correction`` defaults to 1."""
    dtype = out_dtype(node)
    data = b.as_dtype(x, dtype)
    axes = _axes(x, dim)
    mean = b.op("ReduceMean", [data, b.ints(axes)], keepdims=1)
    centered = b.op("Sub", [data, mean])
    squares = b.op("Mul", [centered, centered])
    sum_sq = b.op("ReduceSum", [squares, b.ints(axes)], keepdims=int(keepdim))
    divisor = math.prod(x.shape[a] for a in axes) - (1 if correction is None else correction)
    if not is_symbolic(divisor):
        divisor = max(divisor, 0)
    elif not known_nonnegative(divisor):
        concrete([divisor], "a variance's divisor")
    variance = b.op("Div", [sum_sq, b.const(divisor, dtype)])
    if node.target is aten.var.correction:
        return variance
    return [variance, mean if keepdim else b.reshape(mean, out_shape(node, 1))]


@converts(aten.cumsum.default)
def cumsum(b: GraphBuilder, node, x: Value, dim: int, dtype=None) -> str:
    axis = dim + x.ndim if dim < 0 else dim
    if x.ndim == 0:
        return b.as_dtype(x, out_dtype(node))
    return b.op("CumSum", [b.as_dtype(x, out_dtype(node)), b.const(axis, torch.int64)])


@converts(aten._softmax.default, aten._log_softmax.default)
def softmax(b: GraphBuilder, node, x: Value, dim: int, half_to_float: bool = False) -> str:
    onnx_op = "Softmax" if node.target is aten._softmax.default else "LogSoftmax"
    data = b.as_dtype(x, out_dtype(node))
    if x.ndim == 0:
        return b.reshape(b.op(onnx_op, [b.reshape(data, [1])], axis=0), [])
    return b.op(onnx_op, [data], axis=dim + x.ndim if dim < 0 else dim)


@converts(aten.mm.default, aten.bmm.default, aten.matmul.default)
def matmul(b: GraphBuilder, node, x: Value, y: Value) -> str:
    dtype = out_dtype(node)
    if x.ndim == y.ndim == 2 and dtype.is_floating_point:
        return _gemm(b, x, y, None, dtype)
    return b.op("MatMul", [b.as_dtype(x, dtype), b.as_dtype(y, dtype)])


@converts(aten.addmm.default, aten.baddbmm.default)
def addmm(b: GraphBuilder, node, bias: Value, x: Value, y: Value, beta=1, alpha=1) -> str:
    dtype = out_dtype(node)
    if x.ndim == 2 and dtype.is_floating_point:
        return _gemm(b, x, y, None if beta == 0 else bias, dtype, alpha, beta)
    product = b.op("MatMul", [b.as_dtype(x, dtype), b.as_dtype(y, dtype)])
    if alpha != 1:
        product = b.op("Mul", [product, b.const(alpha, dtype)])
    if beta == 0:
        return product
    bias_name = b.as_dtype(bias, dtype)
    if beta != 1:
        bias_name = b.op("Mul", [bias_name, b.const(beta, dtype)])
    return b.op("Add", [product, bias_name])


def _gemm(b: GraphBuilder, x: Value, y: Value, bias, dtype, alpha=1, beta=1) -> str:
    """``alpha * x @ y + beta * bias`` as one Gemm, reading transposed operands in place."""
    a, trans_a = b.untransposed(b.as_dtype(x, dtype))
    c, trans_b = b.untransposed(b.as_dtype(y, dtype))
    inputs = [a, c] + ([b.as_dtype(bias, dtype)] if bias is not None else [])
    return b.op(
        "Gemm", inputs, alpha=float(alpha), beta=float(beta), transA=trans_a, transB=trans_b
    )


@converts(aten.cumprod.default)
def cumprod(b: GraphBuilder, node, x: Value, dim: int, dtype=None) -> str:
    """Inclusive product scan in log2(n) steps of shifted products (exact with zeros)."""
    dtype = out_dtype(node)
    data = b.as_dtype(x, dtype)
    if x.ndim == 0:
        return data
    axis = dim + x.ndim if dim < 0 else dim
    (length,) = concrete([x.shape[axis]], "a cumprod's steps")
    shift = 1
    while shift < length:
        pads = [0] * (2 * x.ndim)
        pads[axis] = shift
        shifted = b.op("Pad", [data, b.ints(pads), b.const(1, dtype)], mode="constant")
        shifted = b.op("Slice", [shifted, b.ints([0]), b.ints([length]), b.ints([axis])])
        data = b.op("Mul", [data, shifted])
        shift *= 2
    return data


@converts(aten.topk.default)
def topk(b: GraphBuilder, node, x: Value, k: int, dim: int = -1, largest=True, sorted=True):
    """Values and int64 indices; among equal values the order may differ from torch's."""
    axis = dim + x.ndim if dim < 0 else dim
    if x.ndim == 0:
        return [x.name, b.const(0, torch.int64)]
    values, indices = b.op(
        "TopK", [x.name, b.ints([k])], outputs=2, axis=axis, largest=int(largest), sorted=1
    )
    return [values, indices]


@converts(aten.sort.default, aten.sort.stable)
def sort(
    b: GraphBuilder, node, x: Value, *args, dim: int = -1, descending: bool = False, stable=None
):
    """Sorted values and indices; among equal values the order may differ from torch's."""
    if node.target is aten.sort.default and args:
        dim, descending = args[0], args[1] if len(args) > 1 else descending
    axis = dim + x.ndim if dim < 0 else dim
    return topk(b, node, x, x.shape[axis] if x.ndim else 1, axis, largest=descending)
