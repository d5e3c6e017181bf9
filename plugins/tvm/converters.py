"""The aten → Relax table: one converter per aten overload, public ``relax.op.*`` only.

A converter gets the :class:`Context` (the block builder, each FX node's Relax value,
whether matmuls and convolutions call torch's kernels: :mod:`torchkiln_tvm.extern`) and
the node, and returns the Relax expression of its result, which the compiler emits.
Dtypes follow torch: each node's fake value (``meta["val"]``) says the result's
dtype, and operands are cast to the dtype torch computes in, so that Relax (which
never promotes) gets operands of one dtype. :data:`CONVERTERS` is also the backend's
``Capabilities.ops``; :func:`supports` rejects the nodes a converter can't take
(argument values it does not handle), which the core then runs with the next backend.
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx as fx
from torch.utils._pytree import tree_leaves

import tvm
from torchkiln_tvm import extern
from tvm import relax
from tvm.relax import op as R

aten = torch.ops.aten

Converter = Callable[["Context", fx.Node], relax.Expr]

#: aten overload → its converter.
CONVERTERS: dict[Any, Converter] = {}

#: Ops whose result may share memory with their operand in Relax (a view, an identity):
#: an output reached from an input through these alone is copied at run time.
VIEW_OPS = frozenset(
    {
        aten.view.default,
        aten._unsafe_view.default,
        aten.reshape.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
        aten.squeeze.default,
        aten.unsqueeze.default,
        aten.clone.default,
        aten.alias.default,
        aten.lift_fresh_copy.default,
        aten._to_copy.default,
    }
)

#: Ops whose Relax value may be a constant's memory (tensors made from nothing).
CONSTANT_OPS = frozenset(
    {
        aten.full.default,
        aten.full_like.default,
        aten.scalar_tensor.default,
        aten.arange.start_step,
        aten.arange.default,
        aten.arange.start,
    }
)

#: The dtypes Relax computes with, as torch names them.
DTYPES = frozenset(
    {
        torch.float32,
        torch.float64,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
    }
)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def converts(*ops: Any) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        for op in ops:
            CONVERTERS[op] = fn
        return fn

    return register


class Context:
    """What converters share: the block builder, each node's Relax value, and whether
    matmuls and convolutions call torch's kernels (:mod:`torchkiln_tvm.extern`)."""

    def __init__(self, bb: relax.BlockBuilder, extern_ops: bool = False):
        self.bb = bb
        self.extern_ops = extern_ops
        self.values: dict[fx.Node, relax.Expr] = {}

    def value(self, arg: Any) -> Any:
        """``arg`` with its FX nodes replaced by their Relax values."""
        if isinstance(arg, fx.Node):
            return self.values[arg]
        if isinstance(arg, (list, tuple)):
            return [self.value(a) for a in arg]
        return arg

    def tensor(self, arg: Any, dtype: torch.dtype) -> relax.Expr:
        """``arg`` (a node or a Python number) as a Relax tensor of ``dtype``."""
        if not isinstance(arg, fx.Node):
            return relax.const(arg, dtype_name(dtype))
        value = self.values[arg]
        return value if val(arg).dtype == dtype else R.astype(value, dtype_name(dtype))


def val(node: fx.Node) -> Any:
    return node.meta["val"]


def arg(node: fx.Node, index: int, name: str, default: Any = None) -> Any:
    """Argument ``name`` of ``node`` (positional at ``index``), or ``default``."""
    if index < len(node.args):
        return node.args[index]
    return node.kwargs.get(name, default)


def out_dtype(node: fx.Node) -> torch.dtype:
    return tree_leaves(val(node))[0].dtype


def compute_dtype(*args: Any) -> torch.dtype:
    """The dtype torch computes ``args`` (nodes, numbers) in."""
    return torch.result_type(*(val(a) if isinstance(a, fx.Node) else a for a in args))


def dims(dim: Any, rank: int) -> list[int]:
    """``dim`` (an int, a list, ``None``/``[]`` for all) as non-negative axes."""
    if dim is None or (isinstance(dim, (list, tuple)) and not dim):
        return list(range(rank))
    if isinstance(dim, int):
        dim = [dim]
    return [d % max(rank, 1) for d in dim]


def rank(node: fx.Node) -> int:
    return val(node).dim()


# -- pointwise ------------------------------------------------------------------------


def _binary(fn: Callable, scaled: bool = False) -> Converter:
    """A binary op computed in the node's dtype (``alpha`` scales the second operand);
    booleans in uint8, cast back (Relax's arithmetic takes no booleans)."""

    def convert(cx: Context, node: fx.Node) -> relax.Expr:
        dtype = out_dtype(node)
        compute = torch.uint8 if dtype == torch.bool else dtype
        a, b = cx.tensor(node.args[0], compute), cx.tensor(node.args[1], compute)
        alpha = node.kwargs.get("alpha", 1)
        if scaled and alpha != 1:
            b = R.multiply(b, relax.const(alpha, dtype_name(compute)))
        result = fn(a, b)
        return R.astype(result, "bool") if dtype == torch.bool else result

    return convert


def _compare(fn: Callable) -> Converter:
    """A comparison, its operands in the dtype torch promotes them to."""

    def convert(cx: Context, node: fx.Node) -> relax.Expr:
        a, b = node.args[0], node.args[1]
        dtype = compute_dtype(a, b)
        return fn(cx.tensor(a, dtype), cx.tensor(b, dtype))

    return convert


def _logical(fn: Callable) -> Converter:
    """A logical op, on its operands' truth values (Relax's keep their dtype: on floats,
    a float result, where torch's is bool)."""

    def convert(cx: Context, node: fx.Node) -> relax.Expr:
        return fn(cx.tensor(node.args[0], torch.bool), cx.tensor(node.args[1], torch.bool))

    return convert


def _unary(fn: Callable) -> Converter:
    """A unary op computed in the node's dtype (integers promoted as torch does)."""

    def convert(cx: Context, node: fx.Node) -> relax.Expr:
        return fn(cx.tensor(node.args[0], out_dtype(node)))

    return convert


for _ops, _fn in (
    ((aten.add.Tensor, aten.add.Scalar), R.add),
    ((aten.sub.Tensor, aten.sub.Scalar), R.subtract),
):
    converts(*_ops)(_binary(_fn, scaled=True))
for _ops, _fn in (
    ((aten.mul.Tensor, aten.mul.Scalar), R.multiply),
    ((aten.div.Tensor, aten.div.Scalar), R.divide),
    ((aten.pow.Tensor_Tensor, aten.pow.Scalar), R.power),
    ((aten.maximum.default,), R.maximum),
    ((aten.minimum.default,), R.minimum),
    ((aten.atan2.default,), R.atan2),
    ((aten.remainder.Tensor, aten.remainder.Scalar), R.floor_mod),
    ((aten.bitwise_and.Tensor, aten.bitwise_and.Scalar), R.bitwise_and),
    ((aten.bitwise_or.Tensor, aten.bitwise_or.Scalar), R.bitwise_or),
    ((aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar), R.bitwise_xor),
):
    converts(*_ops)(_binary(_fn))
for _ops, _fn in (
    ((aten.eq.Tensor, aten.eq.Scalar), R.equal),
    ((aten.ne.Tensor, aten.ne.Scalar), R.not_equal),
    ((aten.lt.Tensor, aten.lt.Scalar), R.less),
    ((aten.le.Tensor, aten.le.Scalar), R.less_equal),
    ((aten.gt.Tensor, aten.gt.Scalar), R.greater),
    ((aten.ge.Tensor, aten.ge.Scalar), R.greater_equal),
):
    converts(*_ops)(_compare(_fn))
for _op, _fn in (
    (aten.logical_and.default, R.logical_and),
    (aten.logical_or.default, R.logical_or),
    (aten.logical_xor.default, R.logical_xor),
):
    converts(_op)(_logical(_fn))
for _op, _fn in (
    (aten.exp.default, R.exp),
    (aten.log.default, R.log),
    (aten.sqrt.default, R.sqrt),
    (aten.rsqrt.default, R.rsqrt),
    (aten.tanh.default, R.tanh),
    (aten.sigmoid.default, R.sigmoid),
    (aten.relu.default, R.nn.relu),
    (aten.abs.default, R.abs),
    (aten.neg.default, R.negative),
    (aten.sin.default, R.sin),
    (aten.cos.default, R.cos),
    (aten.erf.default, R.erf),
    (aten.floor.default, R.floor),
    (aten.ceil.default, R.ceil),
    (aten.trunc.default, R.trunc),
    (aten.round.default, R.round),
    (aten.sign.default, R.sign),
    (aten.silu.default, R.nn.silu),
    (aten.bitwise_not.default, R.bitwise_not),
):
    converts(_op)(_unary(_fn))


@converts(aten.pow.Tensor_Scalar)
def _pow_scalar(cx: Context, node: fx.Node) -> relax.Expr:
    """Float powers by 2, 3, -1, -2, 0.5 and -0.5 as torch's CPU kernel computes them
    (products, a reciprocal, square roots): TVM's ``power`` is a libm ``powf`` call a
    lane (GPT-2's GELU, ``x ** 3``: 1.5 of its 1.6 ms of kernels)."""
    dtype = out_dtype(node)
    x, exponent = cx.tensor(node.args[0], dtype), node.args[1]
    if not dtype.is_floating_point or exponent not in POWERS:
        return R.power(x, cx.tensor(exponent, dtype))
    return POWERS[exponent](x, relax.const(1, dtype_name(dtype)))


#: Exponent → ``power(x, one)``, the float powers torch's CPU kernel special-cases.
POWERS: dict[float, Callable[[relax.Expr, relax.Expr], relax.Expr]] = {
    2: lambda x, one: R.multiply(x, x),
    3: lambda x, one: R.multiply(R.multiply(x, x), x),
    -1: lambda x, one: R.divide(one, x),
    -2: lambda x, one: R.divide(one, R.multiply(x, x)),
    0.5: lambda x, one: R.sqrt(x),
    -0.5: lambda x, one: R.rsqrt(x),
}


@converts(aten.logical_not.default)
def _logical_not(cx: Context, node: fx.Node) -> relax.Expr:
    return R.logical_not(cx.tensor(node.args[0], torch.bool))


@converts(aten.isnan.default)
def _isnan(cx: Context, node: fx.Node) -> relax.Expr:
    return R.isnan(cx.value(node.args[0]))


@converts(aten.reciprocal.default)
def _reciprocal(cx: Context, node: fx.Node) -> relax.Expr:
    dtype = out_dtype(node)
    return R.divide(relax.const(1, dtype_name(dtype)), cx.tensor(node.args[0], dtype))


@converts(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(cx: Context, node: fx.Node) -> relax.Expr:
    dtype = out_dtype(node)
    scaled = R.multiply(
        cx.tensor(node.args[0], dtype), relax.const(node.kwargs.get("alpha", 1), dtype_name(dtype))
    )
    return R.subtract(cx.tensor(node.args[1], dtype), scaled)


@converts(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(cx: Context, node: fx.Node) -> relax.Expr:
    dtype = out_dtype(node)
    a, b = cx.tensor(node.args[0], dtype), cx.tensor(node.args[1], dtype)
    mode = node.kwargs.get("rounding_mode")
    if dtype.is_floating_point:
        quotient = R.divide(a, b)
        return R.floor(quotient) if mode == "floor" else R.trunc(quotient)
    if mode == "floor":
        return R.floor_divide(a, b)
    # integers rounded toward zero: |a| // |b| with the sign of a * b
    magnitude = R.floor_divide(R.abs(a), R.abs(b))
    return R.multiply(magnitude, R.multiply(R.sign(a), R.sign(b)))


@converts(aten.where.self)
def _where(cx: Context, node: fx.Node) -> relax.Expr:
    dtype = out_dtype(node)
    condition = cx.tensor(node.args[0], torch.bool)
    return R.where(condition, cx.tensor(node.args[1], dtype), cx.tensor(node.args[2], dtype))


def _bounded(cx: Context, node: fx.Node, low: Any, high: Any) -> relax.Expr:
    """``node.args[0]`` between ``low`` and ``high`` (``None``: unbounded); maximum and
    minimum, not clip, whose bounds must be constants of the tensor's dtype."""
    dtype = out_dtype(node)
    x = cx.tensor(node.args[0], dtype)
    if low is not None:
        x = R.maximum(x, cx.tensor(low, dtype))
    if high is not None:
        x = R.minimum(x, cx.tensor(high, dtype))
    return x


@converts(aten.clamp.default, aten.clamp.Tensor)
def _clamp(cx: Context, node: fx.Node) -> relax.Expr:
    return _bounded(cx, node, arg(node, 1, "min"), arg(node, 2, "max"))


@converts(aten.clamp_min.default, aten.clamp_min.Tensor)
def _clamp_min(cx: Context, node: fx.Node) -> relax.Expr:
    return _bounded(cx, node, node.args[1], None)


@converts(aten.clamp_max.default, aten.clamp_max.Tensor)
def _clamp_max(cx: Context, node: fx.Node) -> relax.Expr:
    return _bounded(cx, node, None, node.args[1])


@converts(aten.gelu.default)
def _gelu(cx: Context, node: fx.Node) -> relax.Expr:
    x = cx.value(node.args[0])
    return R.nn.gelu_tanh(x) if node.kwargs.get("approximate") == "tanh" else R.nn.gelu(x)


@converts(aten.leaky_relu.default)
def _leaky_relu(cx: Context, node: fx.Node) -> relax.Expr:
    return R.nn.leakyrelu(cx.value(node.args[0]), arg(node, 1, "negative_slope", 0.01))


@converts(aten.hardtanh.default)
def _hardtanh(cx: Context, node: fx.Node) -> relax.Expr:
    return _bounded(cx, node, arg(node, 1, "min_val", -1.0), arg(node, 2, "max_val", 1.0))


@converts(aten._to_copy.default, aten.clone.default, aten.alias.default)
@converts(aten.lift_fresh_copy.default)
def _copy(cx: Context, node: fx.Node) -> relax.Expr:
    return cx.tensor(node.args[0], out_dtype(node))


# -- reductions -----------------------------------------------------------------------


#: The dtype a sum of each float dtype adds up in: Relax adds one element after the
#: other where torch adds pairwise, so it sums wider to round no more than torch does.
#: (Matmuls add up as torch's CPU kernels do instead: :data:`MATMUL_ACCUMULATE`.)
ACCUMULATE = {
    torch.float16: torch.float32,
    torch.bfloat16: torch.float32,
    torch.float32: torch.float64,
}


def _widened(x: relax.Expr, dtype: torch.dtype) -> relax.Expr:
    """``x`` (of ``dtype``) cast to the dtype its sums add up in; each call casts anew,
    so that each sum gets a cast of its own to fuse (one cast read by two sums is a kernel
    of its own, writing the whole tensor in float64)."""
    wide = ACCUMULATE.get(dtype)
    return x if wide is None else R.astype(x, dtype_name(wide))


def _narrowed(x: relax.Expr, dtype: torch.dtype) -> relax.Expr:
    return x if dtype not in ACCUMULATE else R.astype(x, dtype_name(dtype))


def summed(fn: Callable, x: relax.Expr, dtype: torch.dtype, *args: Any) -> relax.Expr:
    """``fn(x, *args)``, a sum over ``x`` (of ``dtype``), added up in its wider dtype."""
    return _narrowed(fn(_widened(x, dtype), *args), dtype)


def _sum_divided(
    x: relax.Expr, dtype: torch.dtype, axes: list[int], keepdim: bool, divisor: float
) -> relax.Expr:
    """``sum(x) / divisor`` in the wider dtype, as a sum and a division: Relax's own mean
    and variance are kernels that end in a division, and fuse no cast before them."""
    wide = dtype_name(ACCUMULATE.get(dtype, dtype))
    return R.divide(R.sum(_widened(x, dtype), axes, keepdim), relax.const(divisor, wide))


def _reduce(fn: Callable, sums: bool = False) -> Converter:
    def convert(cx: Context, node: fx.Node) -> relax.Expr:
        source, dtype = node.args[0], out_dtype(node)
        x = cx.tensor(source, dtype)
        if rank(source) == 0:
            return x
        axes = dims(arg(node, 1, "dim"), rank(source))
        keepdim = arg(node, 2, "keepdim", False)
        return summed(fn, x, dtype, axes, keepdim) if sums else fn(x, axes, keepdim)

    return convert


converts(aten.sum.dim_IntList, aten.sum.default)(_reduce(R.sum, sums=True))


@converts(aten.mean.dim, aten.mean.default)
def _mean(cx: Context, node: fx.Node) -> relax.Expr:
    source, dtype = node.args[0], out_dtype(node)
    x = cx.tensor(source, dtype)
    if rank(source) == 0:
        return x
    axes = dims(arg(node, 1, "dim"), rank(source))
    count = math.prod(val(source).shape[a] for a in axes)
    mean = _sum_divided(x, dtype, axes, arg(node, 2, "keepdim", False), count)
    return _narrowed(mean, dtype)


for _ops, _fn in (
    ((aten.amax.default,), R.max),
    ((aten.amin.default,), R.min),
    ((aten.max.default,), R.max),
    ((aten.min.default,), R.min),
    ((aten.prod.dim_int, aten.prod.default), R.prod),
):
    converts(*_ops)(_reduce(_fn))


@converts(aten.any.dim, aten.any.dims, aten.any.default, aten.all.dim, aten.all.dims)
@converts(aten.all.default)
def _any_all(cx: Context, node: fx.Node) -> relax.Expr:
    source = node.args[0]
    x = cx.tensor(source, torch.int8)
    fn = R.max if node.target.overloadpacket is aten.any else R.min
    keepdim = arg(node, 2, "keepdim", False)
    reduced = x if rank(source) == 0 else fn(x, dims(arg(node, 1, "dim"), rank(source)), keepdim)
    return R.astype(reduced, "bool")


@converts(aten.max.dim, aten.min.dim)
def _max_dim(cx: Context, node: fx.Node) -> relax.Expr:
    x, dim = cx.value(node.args[0]), node.args[1] % max(rank(node.args[0]), 1)
    keepdim = arg(node, 2, "keepdim", False)
    if rank(node.args[0]) == 0:
        return relax.Tuple([x, R.zeros([], "int64")])
    if node.target is aten.max.dim:
        values, indices = R.max(x, dim, keepdim), R.argmax(x, dim, keepdim)
    else:
        values, indices = R.min(x, dim, keepdim), R.argmin(x, dim, keepdim)
    return relax.Tuple([values, R.astype(indices, "int64")])


@converts(aten.argmax.default, aten.argmin.default)
def _argmax(cx: Context, node: fx.Node) -> relax.Expr:
    x, dim = cx.value(node.args[0]), arg(node, 1, "dim")
    keepdim = arg(node, 2, "keepdim", False)
    fn = R.argmax if node.target is aten.argmax.default else R.argmin
    if rank(node.args[0]) == 0:  # Relax has no axis 0 of a scalar: its index is 0
        return R.zeros(list(val(node).shape), "int64")
    if dim is None:
        flat = fn(R.reshape(x, [-1]), 0, False)
        shape = [1] * rank(node.args[0]) if keepdim else []
        return R.reshape(R.astype(flat, "int64"), shape)
    return R.astype(fn(x, dim % max(rank(node.args[0]), 1), keepdim), "int64")


def _moments(cx: Context, node: fx.Node) -> tuple[relax.Expr, relax.Expr]:
    """The variance and the mean of ``node``'s operand: the mean, then the squared
    deviations' sum divided by ``count - correction`` (two passes, as torch), in the
    wider dtype."""
    source = node.args[0]
    axes = dims(arg(node, 1, "dim"), rank(source))
    correction = node.kwargs.get("correction", 1)
    keepdim = node.kwargs.get("keepdim", False)
    dtype = val(source).dtype
    x = cx.value(source)
    count = math.prod(val(source).shape[a] for a in axes)
    mean = cx.bb.emit(_sum_divided(x, dtype, axes, True, count))
    deviation = cx.bb.emit(R.subtract(_widened(x, dtype), mean))
    squares = cx.bb.emit(R.multiply(deviation, deviation))
    divisor = relax.const(max(0, count - correction), dtype_name(ACCUMULATE.get(dtype, dtype)))
    variance = R.divide(R.sum(squares, axes, keepdim), divisor)
    if not keepdim:
        mean = R.squeeze(mean, axes)
    return _narrowed(variance, dtype), _narrowed(mean, dtype)


@converts(aten.var.correction)
def _var(cx: Context, node: fx.Node) -> relax.Expr:
    return _moments(cx, node)[0]


@converts(aten.var_mean.correction)
def _var_mean(cx: Context, node: fx.Node) -> relax.Expr:
    variance, mean = _moments(cx, node)
    return relax.Tuple([cx.bb.emit(variance), cx.bb.emit(mean)])


@converts(aten.cumsum.default)
def _cumsum(cx: Context, node: fx.Node) -> relax.Expr:
    dtype = out_dtype(node)
    source = node.args[0]
    return summed(R.cumsum, cx.tensor(source, dtype), dtype, node.args[1] % max(rank(source), 1))


@converts(aten._softmax.default, aten._log_softmax.default)
def _softmax(cx: Context, node: fx.Node) -> relax.Expr:
    x, dim = cx.tensor(node.args[0], out_dtype(node)), node.args[1]
    fn = R.nn.softmax if node.target is aten._softmax.default else R.nn.log_softmax
    return fn(x, dim % max(rank(node.args[0]), 1))


# -- linear algebra and neural-network ops --------------------------------------------


#: The dtype a matmul of each float dtype adds its products up in: torch's CPU kernels'
#: (BLAS adds float32 products in float32; half types in float32). float32 in float64
#: made matmuls twice as slow (256x1024x1024: 74.7 ms, 37.3 ms in float32).
MATMUL_ACCUMULATE = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


@converts(aten.mm.default, aten.bmm.default)
def _matmul(cx: Context, node: fx.Node) -> relax.Expr:
    if cx.extern_ops:
        (a, b), transposed = _operands(cx, node.args[0], node.args[1])
        return _torch_kernel(extern.MATMUL, [a, b, relax.prim_value(transposed)], node)
    return matmul(cx.value(node.args[0]), cx.value(node.args[1]), out_dtype(node))


def matmul(a: relax.Expr, b: relax.Expr, dtype: torch.dtype) -> relax.Expr:
    """``a @ b``, its products added up in :data:`MATMUL_ACCUMULATE`'s dtype."""
    wide = MATMUL_ACCUMULATE.get(dtype)
    if wide is None:
        return R.matmul(a, b)
    return R.astype(R.matmul(a, b, out_dtype=dtype_name(wide)), dtype_name(dtype))


def _operands(cx: Context, a: fx.Node, b: fx.Node) -> tuple[list[relax.Expr], int]:
    """The Relax values of a matmul's operands for :data:`extern.MATMUL`, and its
    ``transposed`` bits: an operand that transposes its last two dims (a linear layer's
    weight) is given untransposed, so that torch reads it where it lies."""
    values, transposed = [], 0
    for operand, bit in ((a, extern.TRANSPOSED_A), (b, extern.TRANSPOSED_B)):
        n = rank(operand)
        if (
            operand.target is aten.permute.default
            and n >= 2
            and [d % n for d in operand.args[1]] == [*range(n - 2), n - 1, n - 2]
        ):
            operand, transposed = operand.args[0], transposed | bit
        values.append(cx.values[operand])
    return values, transposed


def _torch_kernel(name: str, args: list[relax.Expr], node: fx.Node) -> relax.Expr:
    """A call of torch's kernel ``name`` (:mod:`torchkiln_tvm.extern`) into a buffer of
    ``node``'s shape and dtype."""
    result = relax.TensorType(list(val(node).shape), dtype_name(out_dtype(node)))
    return R.call_dps_packed(name, args, result)


@converts(aten.addmm.default)
def _addmm(cx: Context, node: fx.Node) -> relax.Expr:
    dtype = dtype_name(out_dtype(node))
    beta, alpha = node.kwargs.get("beta", 1), node.kwargs.get("alpha", 1)
    if cx.extern_ops:
        (a, b), transposed = _operands(cx, node.args[1], node.args[2])
        flags = [relax.prim_value(v) for v in (transposed, float(beta), float(alpha))]
        return _torch_kernel(extern.ADDMM, [cx.value(node.args[0]), a, b, *flags], node)
    bias, a, b = cx.value(node.args[:3])
    product = matmul(a, b, out_dtype(node))
    if alpha != 1:
        product = R.multiply(product, relax.const(alpha, dtype))
    if beta == 0:
        return product
    if beta != 1:
        bias = R.multiply(bias, relax.const(beta, dtype))
    return R.add(product, bias)


CONVOLUTIONS = {1: R.nn.conv1d, 2: R.nn.conv2d, 3: R.nn.conv3d}
LAYOUTS = {1: ("NCW", "OIW"), 2: ("NCHW", "OIHW"), 3: ("NCDHW", "OIDHW")}


@converts(aten.convolution.default)
def _convolution(cx: Context, node: fx.Node) -> relax.Expr:
    x, weight, bias = cx.value(node.args[:3])
    stride, padding, dilation = node.args[3:6]
    groups = node.args[8]
    spatial = rank(node.args[1]) - 2
    if cx.extern_ops:
        spec = json.dumps([list(stride), list(padding), list(dilation), groups])
        operands = [x, weight] if bias is None else [x, weight, bias]
        result = relax.TensorType(list(val(node).shape), dtype_name(out_dtype(node)))
        return R.call_pure_packed(
            extern.CONVOLUTION, *operands, tvm.ir.StringImm(spec), ty_args=result
        )
    data_layout, kernel_layout = LAYOUTS[spatial]
    out = CONVOLUTIONS[spatial](
        x,
        weight,
        strides=list(stride),
        padding=list(padding),
        dilation=list(dilation),
        groups=groups,
        data_layout=data_layout,
        kernel_layout=kernel_layout,
    )
    if bias is None:
        return out
    return R.add(out, R.reshape(bias, [1, -1] + [1] * spatial))


def _pair(value: Sequence[int] | int) -> list[int]:
    value = [value] if isinstance(value, int) else list(value)
    return value * 2 if len(value) == 1 else value


@converts(aten.max_pool2d_with_indices.default)
def _max_pool2d(cx: Context, node: fx.Node) -> relax.Expr:
    kernel = _pair(node.args[1])
    stride = _pair(arg(node, 2, "stride") or kernel)
    padding = _pair(arg(node, 3, "padding", 0))
    dilation = _pair(arg(node, 4, "dilation", 1))
    pooled = R.nn.max_pool2d(
        cx.value(node.args[0]),
        kernel,
        stride,
        padding,
        dilation,
        ceil_mode=arg(node, 5, "ceil_mode", False),
    )
    # the indices are never read (``supports``): a placeholder keeps the tuple's shape
    return relax.Tuple([pooled, relax.const(0, "int64")])


@converts(aten.avg_pool2d.default)
def _avg_pool2d(cx: Context, node: fx.Node) -> relax.Expr:
    kernel = _pair(node.args[1])
    stride = _pair(arg(node, 2, "stride") or kernel)
    return R.nn.avg_pool2d(
        cx.value(node.args[0]),
        kernel,
        stride,
        _pair(arg(node, 3, "padding", 0)),
        ceil_mode=arg(node, 4, "ceil_mode", False),
        count_include_pad=arg(node, 5, "count_include_pad", True),
    )


@converts(aten._adaptive_avg_pool2d.default)
def _adaptive_avg_pool2d(cx: Context, node: fx.Node) -> relax.Expr:
    return R.nn.adaptive_avg_pool2d(cx.value(node.args[0]), _pair(node.args[1]))


@converts(aten.constant_pad_nd.default)
def _pad(cx: Context, node: fx.Node) -> relax.Expr:
    pad = list(node.args[1])
    widths = [0, 0] * rank(node.args[0])
    for k in range(len(pad) // 2):  # torch pads the last dimension first
        axis = rank(node.args[0]) - 1 - k
        widths[2 * axis : 2 * axis + 2] = pad[2 * k : 2 * k + 2]
    return R.nn.pad(cx.value(node.args[0]), widths, "constant", arg(node, 2, "value", 0.0))


@converts(aten.embedding.default)
def _embedding(cx: Context, node: fx.Node) -> relax.Expr:
    return R.take(cx.value(node.args[0]), cx.value(node.args[1]), axis=0, mode="clip")


@converts(aten.index_select.default)
def _index_select(cx: Context, node: fx.Node) -> relax.Expr:
    if rank(node.args[0]) == 0:  # Relax's take has no axis 0 of a 0-d tensor; torch's is its value
        return R.reshape(cx.value(node.args[0]), list(val(node).shape))
    axis = node.args[1] % rank(node.args[0])
    return R.take(cx.value(node.args[0]), cx.value(node.args[2]), axis=axis, mode="clip")


@converts(aten.gather.default)
def _gather(cx: Context, node: fx.Node) -> relax.Expr:
    axis = node.args[1] % max(rank(node.args[0]), 1)
    return R.gather_elements(cx.value(node.args[0]), cx.value(node.args[2]), axis)


# -- shapes and views -----------------------------------------------------------------


def _to_shape(cx: Context, node: fx.Node) -> relax.Expr:
    """Any reshaping op: its result's shape is the fake value's."""
    return R.reshape(cx.value(node.args[0]), list(val(node).shape))


for _op in (
    aten.view.default,
    aten._unsafe_view.default,
    aten.reshape.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.squeeze.default,
    aten.unsqueeze.default,
):
    converts(_op)(_to_shape)


@converts(aten.permute.default)
def _permute(cx: Context, node: fx.Node) -> relax.Expr:
    n = rank(node.args[0])
    return R.permute_dims(cx.value(node.args[0]), [d % max(n, 1) for d in node.args[1]])


@converts(aten.expand.default)
def _expand(cx: Context, node: fx.Node) -> relax.Expr:
    return R.broadcast_to(cx.value(node.args[0]), list(val(node).shape))


@converts(aten.slice.Tensor)
def _slice(cx: Context, node: fx.Node) -> relax.Expr:
    source = node.args[0]
    dim = arg(node, 1, "dim", 0) % max(rank(source), 1)
    size = val(source).shape[dim]
    start = arg(node, 2, "start") or 0
    end = arg(node, 3, "end")
    step = arg(node, 4, "step", 1)
    start = max(0, min(size, start + size if start < 0 else start))
    end = size if end is None else max(0, min(size, end + size if end < 0 else end))
    return R.strided_slice(cx.value(source), [dim], [start], [max(start, end)], [step])


@converts(aten.select.int)
def _select(cx: Context, node: fx.Node) -> relax.Expr:
    source = node.args[0]
    dim = node.args[1] % rank(source)
    index = node.args[2] % val(source).shape[dim]
    picked = R.strided_slice(cx.value(source), [dim], [index], [index + 1])
    return R.squeeze(picked, [dim])


@converts(aten.cat.default)
def _cat(cx: Context, node: fx.Node) -> relax.Expr:
    dtype = out_dtype(node)
    # torch skips 1-d empty tensors in a cat of any rank
    parts = [t for t in node.args[0] if not (rank(t) == 1 and val(t).shape[0] == 0)]
    axis = arg(node, 1, "dim", 0) % rank(node)
    return R.concat([cx.tensor(t, dtype) for t in parts], axis)


@converts(aten.split_with_sizes.default, aten.split.Tensor)
def _split(cx: Context, node: fx.Node) -> relax.Expr:
    source = node.args[0]
    dim = arg(node, 2, "dim", 0) % rank(source)
    sizes = [t.shape[dim] for t in val(node)]
    boundaries = [sum(sizes[: k + 1]) for k in range(len(sizes) - 1)]
    return R.split(cx.value(source), boundaries, dim)


@converts(aten.unbind.int)
def _unbind(cx: Context, node: fx.Node) -> relax.Expr:
    source = node.args[0]
    dim = arg(node, 1, "dim", 0) % rank(source)
    count = val(source).shape[dim]
    parts = cx.bb.emit(R.split(cx.value(source), count, dim))
    return relax.Tuple(
        [R.squeeze(cx.bb.emit(relax.TupleGetItem(parts, k)), [dim]) for k in range(count)]
    )


@converts(aten.triu.default, aten.tril.default)
def _triangle(cx: Context, node: fx.Node) -> relax.Expr:
    fn = R.triu if node.target is aten.triu.default else R.tril
    return fn(cx.value(node.args[0]), arg(node, 1, "diagonal", 0))


@converts(aten.flip.default)
def _flip(cx: Context, node: fx.Node) -> relax.Expr:
    x = cx.value(node.args[0])
    for axis in dims(node.args[1], rank(node.args[0])):
        x = cx.bb.emit(R.flip(x, axis))
    return x


# -- tensors made from nothing --------------------------------------------------------


@converts(aten.full.default, aten.scalar_tensor.default)
def _full(cx: Context, node: fx.Node) -> relax.Expr:
    dtype = dtype_name(out_dtype(node))
    fill = node.args[1] if node.target is aten.full.default else node.args[0]
    return R.broadcast_to(relax.const(fill, dtype), list(val(node).shape))


@converts(aten.full_like.default)
def _full_like(cx: Context, node: fx.Node) -> relax.Expr:
    dtype = dtype_name(out_dtype(node))
    return R.broadcast_to(relax.const(node.args[1], dtype), list(val(node).shape))


@converts(aten.arange.start_step, aten.arange.default, aten.arange.start)
def _arange(cx: Context, node: fx.Node) -> relax.Expr:
    # the values are known: a constant, exactly as torch makes them
    return relax.const(tvm_tensor(torch.arange(*node.args, dtype=out_dtype(node))))


def tvm_tensor(tensor: torch.Tensor) -> Any:
    """A TVM tensor of a copy of ``tensor`` (a constant: TVM keeps it)."""
    from tvm import runtime

    return runtime.from_dlpack(tensor.detach().cpu().contiguous().clone())


@converts(operator.getitem)
def _getitem(cx: Context, node: fx.Node) -> relax.Expr:
    return relax.TupleGetItem(cx.value(node.args[0]), node.args[1])


# -- what the table's converters do not take ------------------------------------------


def supports(node: fx.Node) -> bool | str:
    """Whether the converter of ``node`` takes it, else why not."""
    values = [v for v in tree_leaves(node.meta.get("val")) if isinstance(v, torch.Tensor)]
    if not values:
        return "no tensor result"
    inputs = [a for a in tree_leaves((node.args, node.kwargs)) if isinstance(a, fx.Node)]
    tensors = values + [
        v for a in inputs for v in tree_leaves(a.meta.get("val")) if isinstance(v, torch.Tensor)
    ]
    dtypes = {v.dtype for v in tensors} - DTYPES
    if dtypes:
        return f"{', '.join(sorted(map(str, dtypes)))} tensors"
    if any(0 in v.shape for v in values):
        return "an empty result"
    check = SUPPORTS.get(node.target)
    return check(node) if check else True


def _max_pool_supported(node: fx.Node) -> bool | str:
    if any(user.args[1] != 0 for user in node.users):
        return "the graph reads its indices (max pooling's backward)"
    return True


def _to_copy_supported(node: fx.Node) -> bool | str:
    if val(node).device != val(node.args[0]).device:
        return "a copy to another device"
    return True


def _convolution_supported(node: fx.Node) -> bool | str:
    if node.args[6]:
        return "a transposed convolution"
    if rank(node.args[1]) - 2 not in CONVOLUTIONS:
        return f"a {rank(node.args[1]) - 2}-d convolution"
    return True


def _avg_pool_supported(node: fx.Node) -> bool | str:
    if arg(node, 6, "divisor_override") is not None:
        return "a divisor_override"
    return True


def _pad_supported(node: fx.Node) -> bool | str:
    return True if min(node.args[1], default=0) >= 0 else "negative padding (a crop)"


SUPPORTS: dict[Any, Callable[[fx.Node], bool | str]] = {
    aten.max_pool2d_with_indices.default: _max_pool_supported,
    aten._to_copy.default: _to_copy_supported,
    aten.convolution.default: _convolution_supported,
    aten.avg_pool2d.default: _avg_pool_supported,
    aten.constant_pad_nd.default: _pad_supported,
}
