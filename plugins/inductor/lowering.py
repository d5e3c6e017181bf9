"""Lowerings: one function per aten op, from IR values to IR values.

A lowering is ``fn(graph, meta, *args, **kwargs)`` where ``graph`` is the
:class:`~.graph.GraphLowering` (to realize values, create reductions, get
seeds), ``meta`` the node's fake result (its shape and dtype are the truth),
and args are :class:`~.ir.TensorValue` or Python values. It returns values
in the same structure as the op. Raising :class:`Unlowerable` sends the node
to an extern aten call instead, so unusual argument combinations never fail.

Bodies follow one convention: a body returns its value in the *compute*
dtype of the tensor's dtype (float32 for float16/bfloat16).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from .indexing import Expr, contiguous_strides, linear_index, unflatten
from .ir import Index, PointwiseValue, StorageView, TensorValue
from .loop_body import compute_dtype, ops
from .sizes import (
    Size,
    SymbolicUnsupported,
    all_static,
    as_size,
    floor_quotient,
    hint,
    is_real_valued,
    is_static,
    known_less,
    known_nonnegative,
    sizes_of,
    strides_of,
)

aten = torch.ops.aten
prims = torch.ops.prims

LOWERINGS: dict[Any, Callable[..., Any]] = {}
RANDOM_OPS: set[Any] = set()

TRANSCENDENTAL = {
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "erf",
    "erfc",
    "erfinv",
    "tanh",
    "sin",
    "cos",
    "tan",
    "sigmoid",
    "pow",
    "atan2",
    "lgamma",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "asinh",
    "acosh",
    "atanh",
}


class Unlowerable(Exception):
    """This call's arguments are outside what the lowering handles: use an extern call."""


def register(*targets: Any, random: bool = False):
    def deco(fn):
        for target in targets:
            overloads = (
                [getattr(target, o) for o in target.overloads()]
                if isinstance(target, torch._ops.OpOverloadPacket)
                else [target]
            )
            for ov in overloads:
                LOWERINGS[ov] = fn
                if random:
                    RANDOM_OPS.add(ov)
        return fn

    return deco


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def _size(meta: torch.Tensor) -> tuple[Size, ...]:
    return sizes_of(meta.shape)


def cost_of(*values: Any) -> int:
    return sum(v.cost for v in values if isinstance(v, PointwiseValue))


def broadcast_loader(
    value: Any, out_size: Sequence[int], dtype: torch.dtype
) -> Callable[[Index], Any]:
    """Read ``value`` (tensor or scalar) broadcast to ``out_size``, as ``dtype``'s compute type."""
    target = compute_dtype(dtype)
    if not isinstance(value, TensorValue):
        return lambda index: ops.constant(value, target)
    loader = value.loader()
    size = value.size
    shift = len(out_size) - len(size)
    src = compute_dtype(value.dtype)

    def load(index: Index) -> Any:
        sub = [Expr() if size[d] == 1 else index[shift + d] for d in range(len(size))]
        v = loader(sub)
        return v if src == target else ops.to_dtype(v, target)

    return load


def pointwise(
    meta: torch.Tensor,
    fn: Callable[..., Any],
    *args: Any,
    dtype: torch.dtype | None = None,
    weight: int = 1,
) -> PointwiseValue:
    """Elementwise ``fn`` over broadcast ``args``, computed in ``dtype`` (default: the output's)."""
    out_size = _size(meta)
    out_dtype = meta.dtype
    work = compute_dtype(dtype or out_dtype)
    loaders = [broadcast_loader(a, out_size, work) for a in args]

    def body(index: Index) -> Any:
        return ops.to_dtype(fn(*[load(index) for load in loaders]), compute_dtype(out_dtype))

    return PointwiseValue(out_size, out_dtype, meta.device, body, weight + cost_of(*args))


def promoted(*args: Any) -> torch.dtype:
    """The dtype torch computes ``args`` in (tensors count by dtype and by being 0-d or not)."""
    fakes = [
        torch.empty([1] * len(a.size), dtype=a.dtype, device="meta")
        if isinstance(a, TensorValue)
        else (0.0 if is_real_valued(a) else 0)
        if isinstance(a, sympy.Expr)  # a symbolic size (an int) or a SymFloat's expression
        else a
        for a in args
        if a is not None
    ]
    return elementwise_dtypes(*fakes, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)[
        1
    ]


def _is_int_like(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex


# ---------------------------------------------------------------------------
# elementwise
# ---------------------------------------------------------------------------

_UNARY = {
    aten.exp: "exp",
    aten.exp2: "exp2",
    aten.expm1: "expm1",
    aten.log: "log",
    aten.log2: "log2",
    aten.log10: "log10",
    aten.log1p: "log1p",
    aten.sqrt: "sqrt",
    aten.rsqrt: "rsqrt",
    aten.sin: "sin",
    aten.cos: "cos",
    aten.tan: "tan",
    aten.asin: "asin",
    aten.acos: "acos",
    aten.atan: "atan",
    aten.sinh: "sinh",
    aten.cosh: "cosh",
    aten.tanh: "tanh",
    aten.asinh: "asinh",
    aten.acosh: "acosh",
    aten.atanh: "atanh",
    aten.erf: "erf",
    aten.erfc: "erfc",
    aten.erfinv: "erfinv",
    aten.sigmoid: "sigmoid",
    aten.reciprocal: "reciprocal",
    aten.lgamma: "lgamma",
    aten.frac: "frac",
}
_INT_IDENTITY = {aten.floor: "floor", aten.ceil: "ceil", aten.trunc: "trunc", aten.round: "round"}


def _math(g, name: str) -> Callable[..., Any]:
    """``ops.<name>``, if the device's code generator has it (else an aten call runs the op)."""
    if not g.caps.has_op(name):
        raise Unlowerable(f"the {g.caps.name} code generator has no {name}")
    return getattr(ops, name)


def _unary_lowering(name: str):
    def lower(g, meta, x):
        return pointwise(meta, _math(g, name), x, weight=5 if name in TRANSCENDENTAL else 1)

    return lower


for _op, _name in _UNARY.items():
    LOWERINGS[_op.default] = _unary_lowering(_name)


def _int_identity_lowering(name: str):
    def lower(g, meta, x):
        if _is_int_like(x.dtype):
            return pointwise(meta, lambda v: v, x)
        return pointwise(meta, _math(g, name), x)

    return lower


for _op, _name in _INT_IDENTITY.items():
    LOWERINGS[_op.default] = _int_identity_lowering(_name)


@register(aten.abs.default)
def _abs(g, meta, x):
    return pointwise(meta, ops.abs, x)


@register(aten.neg.default)
def _neg(g, meta, x):
    return pointwise(meta, ops.neg, x)


@register(aten.relu.default)
def _relu(g, meta, x):
    return pointwise(meta, ops.relu, x)


@register(aten.sign.default, aten.sgn.default)
def _sign(g, meta, x):
    if x.dtype == torch.bool:
        return pointwise(meta, lambda v: v, x)
    return pointwise(meta, ops.sign, x)


@register(aten.signbit.default)
def _signbit(g, meta, x):
    return pointwise(meta, ops.signbit, x, dtype=x.dtype)


@register(aten.logical_not.default)
def _logical_not(g, meta, x):
    return pointwise(meta, ops.logical_not, x, dtype=x.dtype)


@register(aten.bitwise_not.default)
def _bitwise_not(g, meta, x):
    return pointwise(meta, ops.bitwise_not, x)


@register(aten.isnan.default)
def _isnan(g, meta, x):
    return pointwise(meta, ops.isnan, x, dtype=x.dtype)


@register(aten.isinf.default)
def _isinf(g, meta, x):
    return pointwise(meta, ops.isinf, x, dtype=x.dtype)


def _binary(name: str, compare: bool = False):
    def lower(g, meta, a, b):
        dtype = promoted(a, b) if compare else None
        return pointwise(
            meta, _math(g, name), a, b, dtype=dtype, weight=5 if name in TRANSCENDENTAL else 1
        )

    return lower


for _op, _name in {
    aten.mul: "mul",
    aten.maximum: "maximum",
    aten.minimum: "minimum",
    aten.atan2: "atan2",
    aten.hypot: "hypot",
    aten.copysign: "copysign",
    aten.fmod: "fmod",
    aten.remainder: "remainder",
    aten.bitwise_and: "bitwise_and",
    aten.bitwise_or: "bitwise_or",
    aten.bitwise_xor: "bitwise_xor",
    aten.bitwise_left_shift: "lshift",
    aten.bitwise_right_shift: "rshift",
    aten.floor_divide: "floordiv",
}.items():
    register(_op)(_binary(_name))

for _op, _name in {
    aten.eq: "eq",
    aten.ne: "ne",
    aten.lt: "lt",
    aten.le: "le",
    aten.gt: "gt",
    aten.ge: "ge",
    aten.logical_and: "logical_and",
    aten.logical_or: "logical_or",
    aten.logical_xor: "logical_xor",
}.items():
    register(_op)(_binary(_name, compare=True))


@register(aten.add.Tensor, aten.add.Scalar)
def _add(g, meta, a, b, alpha=1):
    if alpha != 1:
        return pointwise(meta, lambda x, y, k: ops.add(x, ops.mul(y, k)), a, b, alpha, weight=2)
    return pointwise(meta, ops.add, a, b)


@register(aten.sub.Tensor, aten.sub.Scalar, aten.rsub.Tensor, aten.rsub.Scalar)
def _sub(g, meta, a, b, alpha=1):
    if g.current_node.target in (aten.rsub.Tensor, aten.rsub.Scalar):
        a, b = b, a
    if alpha != 1:
        return pointwise(meta, lambda x, y, k: ops.sub(x, ops.mul(y, k)), a, b, alpha, weight=2)
    return pointwise(meta, ops.sub, a, b)


@register(aten.div.Tensor, aten.div.Scalar)
def _div(g, meta, a, b):
    return pointwise(meta, ops.truediv, a, b)


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(g, meta, a, b, rounding_mode=None):
    if rounding_mode is None:
        return pointwise(meta, ops.truediv, a, b)
    if rounding_mode == "floor":
        return pointwise(meta, ops.floordiv, a, b)
    if _is_int_like(meta.dtype):
        raise Unlowerable("integer division with rounding_mode='trunc'")
    return pointwise(meta, lambda x, y: ops.trunc(ops.truediv(x, y)), a, b, weight=2)


@register(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar)
def _pow(g, meta, a, b):
    if not isinstance(b, TensorValue) and meta.dtype.is_floating_point:
        # the exponents ATen's pow computes by multiplication, computed the same way
        if b == 2:
            return pointwise(meta, lambda x: ops.mul(x, x), a)
        if b == 3:
            return pointwise(meta, lambda x: ops.mul(ops.mul(x, x), x), a)
        if b == 0.5:
            return pointwise(meta, ops.sqrt, a)
        if b == -1:
            return pointwise(meta, ops.reciprocal, a)
        if b == 1:
            return pointwise(meta, lambda x: x, a)
    if _is_int_like(meta.dtype) and not isinstance(b, TensorValue) and b < 0:
        raise Unlowerable("integer power with a negative exponent")
    return pointwise(meta, ops.pow, a, b, weight=5)


@register(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(g, meta, cond, a, b):
    out_size = _size(meta)
    load_c = broadcast_loader(cond, out_size, torch.bool)
    load_a = broadcast_loader(a, out_size, meta.dtype)
    load_b = broadcast_loader(b, out_size, meta.dtype)

    def body(index):
        return ops.where(load_c(index), load_a(index), load_b(index))

    return PointwiseValue(out_size, meta.dtype, meta.device, body, 1 + cost_of(cond, a, b))


@register(aten.clamp.default, aten.clamp.Tensor)
def _clamp(g, meta, x, min=None, max=None):
    def fn(v, lo, hi):
        if lo is not None:
            v = ops.maximum(v, lo)
        if hi is not None:
            v = ops.minimum(v, hi)
        return v

    args = [x, min, max]
    present = [a for a in args if a is not None]
    return pointwise(
        meta,
        lambda *vals: fn(
            vals[0], vals[1] if min is not None else None, vals[-1] if max is not None else None
        ),
        *present,
    )


@register(aten.clamp_min.default, aten.clamp_min.Tensor)
def _clamp_min(g, meta, x, lo):
    return pointwise(meta, ops.maximum, x, lo)


@register(aten.clamp_max.default, aten.clamp_max.Tensor)
def _clamp_max(g, meta, x, hi):
    return pointwise(meta, ops.minimum, x, hi)


@register(aten.gelu.default)
def _gelu(g, meta, x, approximate="none"):
    work = compute_dtype(meta.dtype)

    def c(value):
        return ops.constant(value, work)

    def tanh_gelu(v):
        inner = ops.mul(
            c(math.sqrt(2.0 / math.pi)), ops.add(v, ops.mul(c(0.044715), ops.mul(v, ops.mul(v, v))))
        )
        return ops.mul(ops.mul(c(0.5), v), ops.add(c(1.0), ops.tanh(inner)))

    def erf_gelu(v):
        return ops.mul(
            ops.mul(c(0.5), v), ops.add(c(1.0), ops.erf(ops.mul(v, c(0.7071067811865476))))
        )

    return pointwise(meta, tanh_gelu if approximate == "tanh" else erf_gelu, x, weight=6)


@register(aten.silu.default)
def _silu(g, meta, x):
    return pointwise(meta, lambda v: ops.mul(v, ops.sigmoid(v)), x, weight=6)


@register(aten._to_copy.default, prims.convert_element_type.default)
def _to_copy(g, meta, x, dtype=None, **kwargs):
    if meta.device != x.device:
        raise Unlowerable("device transfer")
    loader = x.loader()

    def body(index):
        return ops.to_dtype(loader(index), meta.dtype)

    return PointwiseValue(_size(meta), meta.dtype, meta.device, body, 1 + cost_of(x))


@register(aten.clone.default, aten.lift_fresh_copy.default, aten.contiguous.default)
def _clone(g, meta, x, **kwargs):
    return PointwiseValue(_size(meta), x.dtype, x.device, x.loader(), 1 + cost_of(x))


@register(aten.copy.default)
def _copy(g, meta, dst, src, non_blocking=False):
    return pointwise(meta, lambda v: ops.to_dtype(v, meta.dtype), src)


@register(aten.alias.default, aten.lift_fresh.default)
def _alias(g, meta, x):
    return x


@register(aten.fill.Scalar)
def _fill(g, meta, x, value):
    return _constant_value(meta, value)


def _constant_value(meta, value) -> PointwiseValue:
    dtype = meta.dtype

    def body(index):
        return ops.constant(value, dtype)

    return PointwiseValue(_size(meta), dtype, meta.device, body, 0)


@register(
    aten.full.default, aten.full_like.default, aten.scalar_tensor.default, aten.new_full.default
)
def _full(g, meta, *args, **kwargs):
    value = args[0] if g.current_node.target == aten.scalar_tensor.default else args[-1]
    return _constant_value(meta, value)


@register(
    aten.zeros.default,
    aten.zeros_like.default,
    aten.new_zeros.default,
    aten.empty.memory_format,
    aten.empty_like.default,
    aten.new_empty.default,
    aten.empty_strided.default,
    aten.new_empty_strided.default,
)
def _zeros(g, meta, *args, **kwargs):
    return _constant_value(meta, 0)


@register(aten.ones.default, aten.ones_like.default, aten.new_ones.default)
def _ones(g, meta, *args, **kwargs):
    return _constant_value(meta, 1)


@register(aten.arange.start_step, aten.arange.start, aten.arange.default)
def _arange(g, meta, *args, **kwargs):
    nums = [a for a in args if isinstance(a, (int, float, sympy.Expr))]
    start, step = 0, 1
    if len(nums) == 1:
        pass
    elif len(nums) == 2:
        start = nums[0]
    else:
        start, step = nums[0], nums[2]
    size = _size(meta)
    dtype = meta.dtype
    wide = torch.float64 if dtype.is_floating_point else torch.int64

    def body(index):
        i = ops.index_expr(index[0], wide)
        v = ops.add(ops.mul(i, ops.constant(step, wide)), ops.constant(start, wide))
        return ops.to_dtype(v, dtype)

    return PointwiseValue(size, dtype, meta.device, body, 2)


@register(prims.iota.default)
def _iota(g, meta, length, *, start, step, dtype, device, requires_grad):
    def body(index):
        i = ops.index_expr(index[0], torch.int64)
        v = ops.add(ops.mul(i, ops.constant(step, torch.int64)), ops.constant(start, torch.int64))
        return ops.to_dtype(v, dtype)

    return PointwiseValue(_size(meta), dtype, meta.device, body, 2)


# ---------------------------------------------------------------------------
# random (counter-based: seed per op, offset = flat element index)
# ---------------------------------------------------------------------------


def _random_value(g, meta, kind: str) -> PointwiseValue:
    _, seed = g.new_seed(meta.device)
    size = _size(meta)
    strides = contiguous_strides(size)
    dtype = meta.dtype
    if not dtype.is_floating_point:
        raise Unlowerable("integer random values")

    def body(index):
        offset = linear_index(index, strides)
        return getattr(ops, kind)(seed, offset, dtype)

    return PointwiseValue(size, dtype, meta.device, body, 5)


@register(aten.rand.default, aten.rand_like.default, random=True)
def _rand(g, meta, *args, **kwargs):
    if kwargs.get("generator") is not None:
        raise Unlowerable("explicit generator")
    return _random_value(g, meta, "rand")


@register(aten.randn.default, aten.randn_like.default, random=True)
def _randn(g, meta, *args, **kwargs):
    if kwargs.get("generator") is not None:
        raise Unlowerable("explicit generator")
    return _random_value(g, meta, "randn")


@register(aten.native_dropout.default, random=True)
def _native_dropout(g, meta, x, p, train):
    out_meta, mask_meta = meta
    if train is False or p == 0:
        raise Unlowerable("dropout outside training")
    uniform = g.realize(
        _random_value(g, out_meta if out_meta.dtype.is_floating_point else mask_meta, "rand")
    )
    u_dtype = compute_dtype(uniform.dtype)
    keep = pointwise(
        mask_meta, lambda u: ops.ge(u, ops.constant(p, u_dtype)), uniform, dtype=u_dtype
    )
    work = compute_dtype(out_meta.dtype)
    scale = 1.0 / (1.0 - p) if p < 1 else 0.0

    def out_fn(v, u):
        kept = ops.ge(u, ops.constant(p, u_dtype))
        return ops.where(kept, ops.mul(v, ops.constant(scale, work)), ops.constant(0, work))

    out = pointwise(out_meta, out_fn, x, uniform)
    return [out, keep]


@register(aten.bernoulli.p, aten.bernoulli.default, random=True)
def _bernoulli(g, meta, x, p=None, **kwargs):
    if kwargs.get("generator") is not None:
        raise Unlowerable("explicit generator")
    uniform = _random_value(g, meta, "rand")
    prob = x if p is None else p
    return pointwise(meta, lambda u, q: ops.to_dtype(ops.lt(u, q), meta.dtype), uniform, prob)


# ---------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------


def _dims(x: TensorValue, dims: Any) -> list[int]:
    nd = len(x.size)
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(nd))
    if isinstance(dims, int):
        dims = [dims]
    if nd == 0:
        return []
    return sorted({d % nd for d in dims})


def make_reduction(
    g,
    x: TensorValue,
    dims: list[int],
    keepdim: bool,
    rtype: str,
    dtype: torch.dtype,
    acc_dtype: torch.dtype | None = None,
    output_index: int = 0,
    loader: Callable | None = None,
) -> StorageView:
    """Store ``reduce(x over dims)``; ``acc_dtype`` is what the body yields (default: dtype's)."""
    acc = compute_dtype(acc_dtype or dtype)
    convert = rtype not in ("argmax", "argmin")  # those compare the values as they are
    ranges, rranges, body = _reduction_body(x, dims, keepdim, acc if convert else None, loader)
    chunks = (
        _split_chunks(g.caps, hint(_numel(ranges)), hint(_numel(rranges)))
        if rtype in _SPLITTABLE
        else 1
    )
    if chunks > 1:
        return _split_reduction(g, x, ranges, rranges, body, rtype, dtype, acc, chunks)
    return g.reduction(x.device, ranges, rranges, body, rtype, dtype, x.dtype, output_index)


def _reduction_body(
    x: TensorValue,
    dims: list[int],
    keepdim: bool,
    acc: torch.dtype | None,
    loader: Callable | None = None,
) -> tuple[tuple[int, ...], tuple[int, ...], Callable]:
    """The output ranges, the reduced ranges, and ``body(index, rindex)``: the element of
    ``x`` a reduction over ``dims`` reads there (converted to ``acc`` unless ``None``)."""
    size = x.size
    kept = [d for d in range(len(size)) if d not in dims]
    ranges = (
        tuple(1 if d in dims else size[d] for d in range(len(size)))
        if keepdim
        else tuple(size[d] for d in kept)
    )
    rranges = tuple(size[d] for d in dims)
    load = loader or x.loader()

    def body(index, rindex):
        full: list[Expr] = [Expr()] * len(size)
        for pos, d in enumerate(kept):
            full[d] = index[d] if keepdim else index[pos]
        for pos, d in enumerate(dims):
            full[d] = rindex[pos]
        v = load(full)
        return v if acc is None else ops.to_dtype(v, acc)

    return ranges, rranges, body


#: a reduction of everything, when large, runs in parallel chunks, then reduces the chunks
_SPLITTABLE = {"sum": 0, "prod": 1, "max": float("-inf"), "min": float("inf"), "any": 0, "all": 1}
#: a reduction into fewer outputs than this, over at least SPLIT_LONG elements each, splits
#: where the device asks for it (``split_partial_reductions``), into chunks of SPLIT_ROWS or more
SPLIT_FEW_OUTPUTS, SPLIT_LONG, SPLIT_ROWS = 8192, 4096, 128


def _numel(sizes) -> Size:
    return as_size(math.prod(sizes))


def _split_chunks(caps, outputs: int, reduced: int) -> int:
    """Into how many parallel parts a reduction of ``reduced`` elements into each of
    ``outputs`` values splits (1: it does not). A reduction of everything always splits when
    large; one into few outputs when the device has many cores to keep busy (a GPU): then
    ``chunks x outputs`` partial results are about 64K."""
    if outputs == 1:
        return caps.split_chunks if reduced >= caps.split_reduction_min else 1
    if (
        caps.split_partial_reductions
        and outputs < SPLIT_FEW_OUTPUTS
        and reduced >= SPLIT_LONG
        and outputs * reduced >= caps.split_reduction_min
    ):
        return min(reduced // SPLIT_ROWS, max(2, 65536 // outputs))
    return 1


def _split_reduction(g, x, ranges, rranges, body, rtype, dtype, acc, chunks) -> StorageView:
    """``chunks`` partial reductions over consecutive parts of the reduced elements (a buffer
    of ``(chunks, *ranges)``), then the reduction of those. A symbolic count of elements
    splits into ``chunks`` of a symbolic length, the last ones masked (empty ones, at small
    sizes, give the reduction's initial value)."""
    total = _numel(rranges)
    if is_static(total):
        chunk = -(-total // chunks)
        chunks = -(-total // chunk)  # no empty chunk
        masked = chunks * chunk != total
    else:
        chunk, masked = floor_quotient(total + chunks - 1, chunks), True
    init = _SPLITTABLE[rtype]
    if rtype in ("max", "min") and not acc.is_floating_point:
        init = torch.iinfo(acc).min if rtype == "max" else torch.iinfo(acc).max

    def partial(outer, inner):
        index, flat = list(outer[1:]), outer[0] * chunk + inner[0]
        if not masked:
            return body(index, unflatten(flat, rranges))
        inside = ops.lt(ops.index_expr(flat, torch.int64), ops.constant(total, torch.int64))
        return ops.masked(inside, lambda: body(index, unflatten(flat, rranges)), init)

    parts = g.reduction(x.device, (chunks, *ranges), (chunk,), partial, rtype, acc, x.dtype)
    load_parts = parts.loader()
    return g.reduction(
        x.device, ranges, (chunks,), lambda i, r: load_parts([r[0], *i]), rtype, dtype, acc
    )


def _reduce_lowering(rtype: str):
    def lower(g, meta, x, dims=None, keepdim=False, *, dtype=None, out=None):
        if isinstance(dims, bool):
            dims, keepdim = None, dims
        d = _dims(x, dims)
        out_dtype = meta.dtype
        if rtype in ("any", "all"):
            return make_reduction(g, x, d, keepdim, rtype, out_dtype, acc_dtype=torch.bool)
        return make_reduction(g, x, d, keepdim, rtype, out_dtype)

    return lower


register(aten.sum.dim_IntList, aten.sum.default)(_reduce_lowering("sum"))
register(aten.prod.default, aten.prod.dim_int)(_reduce_lowering("prod"))
register(aten.amax.default, aten.max.default)(_reduce_lowering("max"))
register(aten.amin.default, aten.min.default)(_reduce_lowering("min"))
register(aten.any.default, aten.any.dim, aten.any.dims)(_reduce_lowering("any"))
register(aten.all.default, aten.all.dim, aten.all.dims)(_reduce_lowering("all"))


@register(aten.mean.dim, aten.mean.default)
def _mean(g, meta, x, dims=None, keepdim=False, *, dtype=None):
    d = _dims(x, dims)
    n = math.prod(x.size[i] for i in d) if d else 1
    total = make_reduction(g, x, d, keepdim, "sum", meta.dtype)
    work = compute_dtype(meta.dtype)
    return pointwise(meta, lambda s: ops.truediv(s, ops.constant(n, work)), total)


@register(aten.argmax.default, aten.argmin.default)
def _argmax(g, meta, x, dim=None, keepdim=False):
    rtype = "argmax" if g.current_node.target == aten.argmax.default else "argmin"
    if dim is None:
        if keepdim:
            raise Unlowerable("argmax over all dims with keepdim")
        return make_reduction(g, x, list(range(len(x.size))), False, rtype, torch.int64)
    return make_reduction(g, x, _dims(x, dim), keepdim, rtype, torch.int64)


@register(aten.max.dim, aten.min.dim)
def _max_dim(g, meta, x, dim, keepdim=False):
    is_max = g.current_node.target == aten.max.dim
    d = _dims(x, dim)
    values = make_reduction(g, x, d, keepdim, "max" if is_max else "min", x.dtype)
    indices = make_reduction(g, x, d, keepdim, "argmax" if is_max else "argmin", torch.int64)
    return [values, indices]


def _welford(g, x, dims, keepdim, dtype):
    """The mean of ``x`` over ``dims`` and its m2 (sum of squared deviations), in one pass."""
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    x = g.reuse(x)
    ranges, rranges, body = _reduction_body(x, dims, keepdim, acc)
    total = _numel(rranges)
    target = _split_chunks(g.caps, hint(_numel(ranges)), hint(total))
    chunks = _even_chunks(target, total) if is_static(total) else 1  # equal parts: static counts
    if chunks > 1:
        return _split_welford(g, x, ranges, rranges, body, acc, chunks)
    mean = g.reduction(x.device, ranges, rranges, body, "welford", acc, x.dtype, 0)
    m2 = g.reduction(x.device, ranges, rranges, body, "welford", acc, x.dtype, 1)
    return mean, m2


def _even_chunks(target: int, total: int) -> int:
    """The most equal parts, up to ``target``, that ``total`` elements split into, if at least
    half of ``target`` (Welford's partial results combine simply only for equal counts)."""
    for chunks in range(target, max(1, target // 2) - 1, -1):
        if total % chunks == 0:
            return chunks
    return 1


def _split_welford(g, x, ranges, rranges, body, acc, chunks) -> tuple[StorageView, StorageView]:
    """Welford over ``chunks`` equal parts of the reduced elements (a batch norm's statistics
    of few channels over many rows, on a GPU: parallel programs rather than one per channel),
    then Chan's combination: the mean of the parts' means, and the parts' m2s plus
    ``n * (part mean - mean)**2`` for parts of ``n`` elements."""
    n = math.prod(rranges) // chunks

    def part(outer, inner):
        return body(list(outer[1:]), unflatten(outer[0] * n + inner[0], rranges))

    shape = (chunks, *ranges)
    means = g.reduction(x.device, shape, (n,), part, "welford", acc, x.dtype, 0).loader()
    m2s = g.reduction(x.device, shape, (n,), part, "welford", acc, x.dtype, 1).loader()

    def share_of_mean(i, r):
        return ops.mul(means([r[0], *i]), ops.constant(1 / chunks, acc))

    mean = g.reduction(x.device, ranges, (chunks,), share_of_mean, "sum", acc, acc)
    load_mean = mean.loader()

    def m2_of_part(i, r):
        deviation = ops.sub(means([r[0], *i]), load_mean(i))
        spread = ops.mul(ops.constant(n, acc), ops.mul(deviation, deviation))
        return ops.add(m2s([r[0], *i]), spread)

    m2 = g.reduction(x.device, ranges, (chunks,), m2_of_part, "sum", acc, acc)
    return mean, m2


@register(aten.var.correction, aten.var_mean.correction, aten.std.correction)
def _var(g, meta, x, dims=None, *, correction=None, keepdim=False):
    if not x.dtype.is_floating_point:
        raise Unlowerable("variance of an integer tensor")
    target = g.current_node.target
    d = _dims(x, dims)
    n = math.prod(x.size[i] for i in d) if d else 1
    corr = 1 if correction is None else correction
    var_meta = meta[0] if target == aten.var_mean.correction else meta
    mean, m2 = _welford(g, x, d, keepdim, var_meta.dtype)
    denom = max(n - corr, 0)

    work = compute_dtype(m2.dtype)

    def var_fn(v):
        return ops.truediv(v, ops.constant(denom, work))

    var = pointwise(var_meta, var_fn, m2)
    if target == aten.std.correction:
        return pointwise(meta, lambda v: ops.sqrt(var_fn(v)), m2)
    if target == aten.var_mean.correction:
        return [var, pointwise(meta[1], lambda v: v, mean)]
    return var


@register(aten._softmax.default, aten._log_softmax.default)
def _softmax(g, meta, x, dim, half_to_float):
    log = g.current_node.target == aten._log_softmax.default
    d = _dims(x, dim)
    x = g.reuse(x, cost=2)
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    loader = broadcast_loader(x, x.size, work)
    fake_x = PointwiseValue(x.size, work, x.device, loader, 0)
    mx = make_reduction(g, fake_x, d, True, "max", work)
    load_max = broadcast_loader(mx, x.size, work)

    def shifted_exp(index):
        return ops.exp(ops.sub(loader(index), load_max(index)))

    exps = PointwiseValue(x.size, work, x.device, shifted_exp, 5)
    if not log and d == [len(x.size) - 1]:
        # a row softmax fuses into one loop nest: keep exp(x - max) instead of computing it twice
        exps = g.realize(exps)
    load_exp = exps.loader()
    total = make_reduction(g, exps, d, True, "sum", work)
    load_sum = broadcast_loader(total, x.size, work)

    def body(index):
        if log:
            v = ops.sub(ops.sub(loader(index), load_max(index)), ops.log(load_sum(index)))
        else:
            v = ops.mul(load_exp(index), ops.reciprocal(load_sum(index)))
        return ops.to_dtype(v, meta.dtype)

    return PointwiseValue(_size(meta), meta.dtype, meta.device, body, 8)


@register(aten.native_layer_norm.default)
def _layer_norm(g, meta, x, normalized_shape, weight, bias, eps):
    out_meta, mean_meta, rstd_meta = meta
    nd = len(x.size)
    k = len(normalized_shape)
    dims = list(range(nd - k, nd))
    n = math.prod(normalized_shape)
    x = g.reuse(x)
    mean, m2 = _welford(g, x, dims, True, torch.float32)
    work = mean.dtype
    size = x.size
    load_x = broadcast_loader(x, size, work)
    load_mean = broadcast_loader(mean, size, work)
    load_m2 = broadcast_loader(m2, size, work)
    load_w = broadcast_loader(weight, size, work) if weight is not None else None
    load_b = broadcast_loader(bias, size, work) if bias is not None else None

    def rstd_of(v):
        return ops.rsqrt(ops.add(ops.truediv(v, ops.constant(n, work)), ops.constant(eps, work)))

    def body(index):
        v = ops.mul(ops.sub(load_x(index), load_mean(index)), rstd_of(load_m2(index)))
        if load_w is not None:
            v = ops.mul(v, load_w(index))
        if load_b is not None:
            v = ops.add(v, load_b(index))
        return ops.to_dtype(v, out_meta.dtype)

    out = PointwiseValue(size, out_meta.dtype, x.device, body, 8)
    mean_out = pointwise(mean_meta, lambda v: v, mean)
    rstd_out = pointwise(rstd_meta, rstd_of, m2)
    return [out, mean_out, rstd_out]


@register(aten._native_batch_norm_legit.default)
def _batch_norm_inference(g, meta, x, weight, bias, running_mean, running_var, training, _, eps):
    """Batch norm with running statistics (eval mode), as eager computes it: a per-channel
    scale and shift (two small [C] buffers), then one multiply-add per element that fuses
    with the convolution's epilogue (ReLU, residual add) instead of an aten pass of its own."""
    if training:
        raise Unlowerable("batch norm in training mode")
    out_meta, mean_meta, rstd_meta = meta
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    channels = (x.size[1],)
    load_mean, load_var = _channel_loader(running_mean, work), _channel_loader(running_var, work)
    load_w, load_b = _channel_loader(weight, work), _channel_loader(bias, work)

    def scale_of(index):
        rstd = ops.rsqrt(ops.add(load_var(index), ops.constant(eps, work)))
        return rstd if load_w is None else ops.mul(load_w(index), rstd)

    scale = g.realize(PointwiseValue(channels, work, x.device, scale_of, 4))
    load_scale = scale.loader()

    def shift_of(index):
        shift = ops.neg(ops.mul(load_mean(index), load_scale(index)))
        return shift if load_b is None else ops.add(load_b(index), shift)

    load_shift = g.realize(PointwiseValue(channels, work, x.device, shift_of, 3)).loader()
    load_x = broadcast_loader(x, x.size, work)

    def body(index):
        c = [index[1]]
        v = ops.add(ops.mul(load_x(index), load_scale(c)), load_shift(c))
        return ops.to_dtype(v, out_meta.dtype)

    out = PointwiseValue(x.size, out_meta.dtype, x.device, body, 2 + cost_of(x))
    return [out, _constant_value(mean_meta, 0), _constant_value(rstd_meta, 0)]


def _channel_loader(v: TensorValue | None, work: torch.dtype):
    """Read a [C] tensor (or None) at a one-element index, in ``work``."""
    if v is None:
        return None
    load, src = v.loader(), compute_dtype(v.dtype)

    def read(index):
        value = load(index)
        return value if src == work else ops.to_dtype(value, work)

    return read


# ---------------------------------------------------------------------------
# views: new strides on stored values, index functions on computed ones
# ---------------------------------------------------------------------------


def view_strides(old_size, old_stride, new_size) -> list[Size] | None:
    """Strides of ``view(new_size)`` on a strided tensor, or None if it needs a copy (as torch).
    Symbolic sizes group as static ones do: a product of sizes only grows as it takes in more
    dimensions, so "not yet equal" stands for "less" (sizes, normalized, compare exactly)."""
    if math.prod(old_size) == 0 or not old_size:
        return list(contiguous_strides(new_size))
    new_stride = [0] * len(new_size)
    view_d = len(new_size) - 1
    chunk_base = old_stride[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(old_size) - 1, -1, -1):
        tensor_numel = as_size(tensor_numel * old_size[tensor_d])
        if tensor_d == 0 or (
            old_size[tensor_d - 1] != 1
            and old_stride[tensor_d - 1] != as_size(tensor_numel * chunk_base)
        ):
            while view_d >= 0 and (_below(view_numel, tensor_numel) or new_size[view_d] == 1):
                new_stride[view_d] = as_size(view_numel * chunk_base)
                view_numel = as_size(view_numel * new_size[view_d])
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base = old_stride[tensor_d - 1]
                tensor_numel = view_numel = 1
    if view_d != -1:
        return None
    return new_stride


def _below(a: Size, b: Size) -> bool:
    return a < b if all_static((a, b)) else a != b


def remap(x: TensorValue, size, fn: Callable[[Index], Index]) -> PointwiseValue:
    loader = x.loader()
    return PointwiseValue(size, x.dtype, x.device, lambda index: loader(fn(index)), cost_of(x))


def reshape(x: TensorValue, new_size: Sequence[Size]) -> TensorValue:
    new_size = sizes_of(new_size)
    if new_size == x.size:
        return x
    if isinstance(x, StorageView):
        strides = view_strides(x.size, x.stride, new_size)
        if strides is not None:
            return StorageView(x.buffer, new_size, strides, x.offset)
    new_strides = contiguous_strides(new_size)
    old = x.size

    def fn(index):
        return unflatten(linear_index(index, new_strides), old)

    return remap(x, new_size, fn)


@register(aten.view.default, aten._unsafe_view.default, aten.reshape.default, prims.reshape.default)
def _view(g, meta, x, size):
    return reshape(x, _size(meta))


@register(aten.permute.default, prims.transpose.default)
def _permute(g, meta, x, dims):
    nd = len(x.size)
    dims = [d % nd for d in dims]
    if isinstance(x, StorageView):
        return StorageView(
            x.buffer, [x.size[d] for d in dims], [x.stride[d] for d in dims], x.offset
        )
    inverse = [0] * nd
    for i, d in enumerate(dims):
        inverse[d] = i
    return remap(x, [x.size[d] for d in dims], lambda index: [index[inverse[d]] for d in range(nd)])


@register(aten.t.default)
def _t(g, meta, x):
    return _permute(g, meta, x, list(reversed(range(len(x.size)))))


@register(aten.transpose.int)
def _transpose(g, meta, x, d0, d1):
    dims = list(range(len(x.size)))
    if dims:
        d0, d1 = d0 % len(dims), d1 % len(dims)
        dims[d0], dims[d1] = dims[d1], dims[d0]
    return _permute(g, meta, x, dims)


def expand(x: TensorValue, size: Sequence[Size]) -> TensorValue:
    size = sizes_of(size)
    if size == x.size:
        return x
    shift = len(size) - len(x.size)
    if isinstance(x, StorageView):
        strides = [0] * shift + [
            0 if (x.size[d] == 1 and size[shift + d] != 1) else x.stride[d]
            for d in range(len(x.size))
        ]
        return StorageView(x.buffer, size, strides, x.offset)
    old = x.size
    return remap(
        x,
        size,
        lambda index: [Expr() if old[d] == 1 else index[shift + d] for d in range(len(old))],
    )


@register(aten.expand.default, prims.broadcast_in_dim.default)
def _expand(g, meta, x, size, *rest, **kwargs):
    target = g.current_node.target
    if target == prims.broadcast_in_dim.default:
        dims = rest[0] if rest else kwargs["broadcast_dimensions"]
        shape = [1] * len(size)
        for src, d in enumerate(dims):
            shape[d] = x.size[src]
        x = reshape(x, shape)
    return expand(x, _size(meta))


@register(aten.slice.Tensor)
def _slice(g, meta, x, dim=0, start=None, end=None, step=1):
    nd = len(x.size)
    dim %= nd
    n = x.size[dim]
    start = 0 if start is None else as_size(start)
    if all_static((start, n)):
        start = min(max(start + n if start < 0 else start, 0), n)
    else:
        start = as_size(start + n) if is_static(start) and start < 0 else start
        if not (known_nonnegative(start) and known_nonnegative(n - start)):
            raise SymbolicUnsupported(f"a slice from {start} of a dimension of size {n}")
    out_size = _size(meta)
    if isinstance(x, StorageView):
        stride = list(x.stride)
        offset = x.offset + start * stride[dim]
        stride[dim] *= step
        return StorageView(x.buffer, out_size, stride, offset)

    def fn(index):
        index = list(index)
        index[dim] = index[dim] * step + start
        return index

    return remap(x, out_size, fn)


@register(aten.select.int)
def _select(g, meta, x, dim, index):
    nd = len(x.size)
    dim %= nd
    index = index + x.size[dim] if index < 0 else index
    if isinstance(x, StorageView):
        size = [s for d, s in enumerate(x.size) if d != dim]
        stride = [s for d, s in enumerate(x.stride) if d != dim]
        return StorageView(x.buffer, size, stride, x.offset + index * x.stride[dim])
    return remap(x, _size(meta), lambda idx: [*idx[:dim], Expr.of(index), *idx[dim:]])


@register(
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.squeeze.default,
    aten.unsqueeze.default,
    prims.squeeze.default,
)
def _squeeze(g, meta, x, *args):
    return reshape(x, _size(meta))


@register(aten.as_strided.default)
def _as_strided(g, meta, x, size, stride, storage_offset=None):
    base = g.realize(x)
    if not base.is_whole_buffer() and storage_offset is None:
        raise Unlowerable("as_strided of a view without an explicit storage offset")
    if storage_offset is not None and not _holds_traced_storage(g, base):
        raise Unlowerable("as_strided of a value stored unlike its traced storage")
    offset = base.buffer.layout.offset if storage_offset is None else storage_offset
    return StorageView(base.buffer, size, stride, offset)


def _holds_traced_storage(g, base: StorageView) -> bool:
    """Whether ``base``'s buffer is laid out as the traced operand's storage: the whole
    operand (the AOT layer passes a view chain's root, ``torchkiln.aot.storage_views``) in
    its traced strides from the storage's start (inputs are traced from there)."""
    traced = g.current_node.args[0].meta.get("val") if g.current_node is not None else None
    return (
        isinstance(traced, torch.Tensor)
        and base.is_whole_buffer()
        and base.buffer.layout.stride == strides_of(traced)
        and traced.storage_offset() == 0
    )


@register(aten.split.Tensor, aten.split_with_sizes.default)
def _split(g, meta, x, split, dim=0):
    dim %= len(x.size)
    outs, start = [], 0
    for m in meta:
        length = m.shape[dim]
        outs.append(_slice(g, m, x, dim, start, start + length, 1))
        start += length
    return outs


@register(aten.unbind.int)
def _unbind(g, meta, x, dim=0):
    return [_select(g, m, x, dim, i) for i, m in enumerate(meta)]


# ---------------------------------------------------------------------------
# indexing, cat, padding
# ---------------------------------------------------------------------------


def _indirect(value: Any, size: int, negative_ok: bool = False) -> Expr:
    """An index read from a tensor: in ``[0, size)``, or, ``negative_ok`` (advanced indexing,
    ``x[i]``), in ``[-size, size)`` with negatives counted from the end, as eager takes them;
    the kernel checks it (:meth:`~.codegen.cpp.CppOpsHandler.indirect_indexing`)."""
    return ops.indirect_indexing(value, size, negative_ok)


@register(aten.embedding.default)
def _embedding(g, meta, weight, indices, *args):
    load_w, load_i = weight.loader(), indices.loader()
    rows = weight.size[0]
    nd = len(indices.size)

    def body(index):
        row = _indirect(load_i(index[:nd]), rows)
        return load_w([row, *index[nd:]])

    return PointwiseValue(
        _size(meta), weight.dtype, weight.device, body, 2 + cost_of(weight, indices)
    )


@register(aten.gather.default)
def _gather(g, meta, x, dim, index, sparse_grad=False):
    nd = len(x.size)
    dim = dim % nd if nd else 0
    load_x, load_i = x.loader(), index.loader()
    if nd == 0:
        return remap(x, _size(meta), lambda idx: idx)

    def body(idx):
        j = _indirect(load_i(idx), x.size[dim])
        return load_x([*idx[:dim], j, *idx[dim + 1 :]])

    return PointwiseValue(_size(meta), x.dtype, x.device, body, 2 + cost_of(x, index))


@register(aten.index_select.default)
def _index_select(g, meta, x, dim, index):
    nd = len(x.size)
    dim = dim % nd if nd else 0
    load_x, load_i = x.loader(), index.loader()
    if nd == 0:
        return remap(x, _size(meta), lambda idx: idx)

    def body(idx):
        j = _indirect(load_i([idx[dim]] if index.size else []), x.size[dim])
        return load_x([*idx[:dim], j, *idx[dim + 1 :]])

    return PointwiseValue(_size(meta), x.dtype, x.device, body, 2 + cost_of(x, index))


def _broadcast_sizes(shapes: list[tuple[Size, ...]]) -> list[Size]:
    """The shape ``shapes`` broadcast to (tracing checked that they do)."""
    ndim = max(len(shape) for shape in shapes)
    padded = [(1,) * (ndim - len(shape)) + tuple(shape) for shape in shapes]
    return [next((s for s in sizes if s != 1), 1) for sizes in zip(*padded)]


def _advanced_index(x: TensorValue, indices: Sequence[Any]):
    """(iteration sizes, index -> x index) of ``x[indices]`` with integer index tensors."""
    present = [(d, t) for d, t in enumerate(indices) if t is not None]
    if not present or any(t.dtype in (torch.bool, torch.uint8) for _, t in present):
        raise Unlowerable("boolean mask indexing (data-dependent shape)")
    bshape = _broadcast_sizes([t.size for _, t in present])
    dims = [d for d, _ in present]
    adjacent = dims == list(range(dims[0], dims[-1] + 1))
    nb = len(bshape)
    rest = [d for d in range(len(x.size)) if d not in dims]
    first = dims[0]
    loaders = [(d, broadcast_loader(t, bshape, torch.int64)) for d, t in present]
    if adjacent:
        sizes = [*x.size[:first], *bshape, *[x.size[d] for d in rest if d > first]]
    else:
        sizes = [*bshape, *[x.size[d] for d in rest]]

    def to_x(idx: Index) -> Index:
        if adjacent:
            bidx = idx[first : first + nb]
            others = [*idx[:first], *idx[first + nb :]]
        else:
            bidx = idx[:nb]
            others = idx[nb:]
        full: list[Expr] = [Expr()] * len(x.size)
        for d, load in loaders:
            full[d] = _indirect(load(bidx), x.size[d], negative_ok=True)
        for d, e in zip(rest, others):
            full[d] = e
        return full

    return tuple(sizes), to_x, [t for _, t in present]


@register(aten.index.Tensor, aten._unsafe_index.Tensor)
def _index(g, meta, x, indices):
    _, to_x, tensors = _advanced_index(x, indices)
    load_x = x.loader()
    return PointwiseValue(
        _size(meta), x.dtype, x.device, lambda idx: load_x(to_x(idx)), 2 + cost_of(x, *tensors)
    )


def _scatter(g, meta, x: TensorValue, sizes, dest, value_loader, mode: str | None):
    """Copy ``x`` into a fresh buffer, then write ``value_loader(i)`` at ``dest(i)`` for i in sizes."""
    if not g.caps.scatter:
        raise Unlowerable(f"the {g.caps.name} code generator has no scatters yet")
    if mode == "add" and not g.caps.supports_scatter_add(meta.dtype):
        raise Unlowerable(f"the {g.caps.name} code generator has no atomic add of {meta.dtype}")
    base = g.realize(PointwiseValue(x.size, x.dtype, x.device, x.loader(), 1))
    return g.scatter(base, tuple(sizes), value_loader, dest, mode, meta.dtype)


@register(aten.index_put.default)
def _index_put(g, meta, x, indices, values, accumulate=False):
    sizes, to_x, _ = _advanced_index(x, indices)
    load_v = broadcast_loader(values, sizes, meta.dtype)
    return _scatter(g, meta, x, sizes, to_x, load_v, "add" if accumulate else None)


@register(aten.scatter_add.default, aten.scatter.src, aten.scatter.value)
def _scatter_add(g, meta, x, dim, index, src):
    target = g.current_node.target
    nd = len(x.size)
    dim = dim % nd if nd else 0
    if nd == 0 or len(index.size) != nd:
        raise Unlowerable("scatter on a 0-d tensor")
    load_i = index.loader()
    if isinstance(src, TensorValue):
        load_src = src.loader()
        src_dtype = compute_dtype(src.dtype)
        work = compute_dtype(meta.dtype)

        def value(idx):
            v = load_src(idx)
            return v if src_dtype == work else ops.to_dtype(v, work)
    else:
        value = broadcast_loader(src, index.size, meta.dtype)

    def dest(idx):
        return [*idx[:dim], _indirect(load_i(idx), x.size[dim]), *idx[dim + 1 :]]

    mode = "add" if target == aten.scatter_add.default else None
    return _scatter(g, meta, x, index.size, dest, value, mode)


@register(aten.flip.default)
def _flip(g, meta, x, dims):
    nd = len(x.size)
    flipped = {d % nd for d in dims}
    return remap(
        x,
        x.size,
        lambda idx: [(x.size[d] - 1) - idx[d] if d in flipped else idx[d] for d in range(nd)],
    )


def _in_range(e: Expr, lo: Size, hi: Size) -> Any:
    """ops value: lo <= e < hi (a check left out where the bounds of e prove it)."""
    elo, ehi = e.bounds()
    checks = []
    if not known_nonnegative(elo - lo):
        checks.append(ops.ge(ops.index_expr(e, torch.int64), ops.constant(lo, torch.int64)))
    if not known_less(ehi, hi):
        checks.append(ops.lt(ops.index_expr(e, torch.int64), ops.constant(hi, torch.int64)))
    if not checks:
        return None
    out = checks[0]
    for c in checks[1:]:
        out = ops.logical_and(out, c)
    return out


@register(aten.cat.default)
def _cat(g, meta, tensors, dim=0):
    tensors = [t for t in tensors if not (len(t.size) == 1 and t.size[0] == 0)]
    if len(tensors) > 16:
        raise Unlowerable("cat of more than 16 tensors")
    out_size = _size(meta)
    dim %= len(out_size)
    dtype = meta.dtype
    starts, pos = [], 0
    for t in tensors:
        starts.append(pos)
        pos += t.size[dim]
    loaders = [broadcast_loader(t, t.size, dtype) for t in tensors]

    def body(index):
        result = None
        for k in reversed(range(len(tensors))):
            lo, hi = starts[k], starts[k] + tensors[k].size[dim]
            if hi == lo:
                continue
            sub = list(index)
            sub[dim] = index[dim] - lo
            cond = _in_range(index[dim], lo, hi)
            load = loaders[k]
            if cond is None:
                value = load(sub)
            else:
                value = ops.masked(cond, lambda load=load, sub=sub: load(sub), 0)
            result = (
                value
                if result is None
                else ops.where(cond, value, result)
                if cond is not None
                else value
            )
        return result if result is not None else ops.constant(0, dtype)

    return PointwiseValue(out_size, dtype, meta.device, body, 2 + cost_of(*tensors))


@register(aten.constant_pad_nd.default)
def _constant_pad(g, meta, x, pad, value=0):
    out_size = _size(meta)
    nd = len(out_size)
    pairs = [(pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)]
    load = x.loader()
    dtype = meta.dtype

    def body(index):
        src = list(index)
        conds = []
        for i, (left, _) in enumerate(pairs):
            d = nd - 1 - i
            src[d] = index[d] - left
            c = _in_range(src[d], 0, x.size[d])
            if c is not None:
                conds.append(c)
        if not conds:
            return load(src)
        mask = conds[0]
        for c in conds[1:]:
            mask = ops.logical_and(mask, c)
        return ops.masked(mask, lambda: load(src), value)

    return PointwiseValue(out_size, dtype, meta.device, body, 2 + cost_of(x))


@register(aten.slice_scatter.default)
def _slice_scatter(g, meta, x, src, dim=0, start=None, end=None, step=1):
    nd = len(x.size)
    dim %= nd
    n = x.size[dim]
    start = 0 if start is None else (start + n if start < 0 else start)
    start = min(max(start, 0), n)
    length = src.size[dim]
    load_x, load_s = x.loader(), src.loader()
    dtype = meta.dtype

    # ``index - start`` goes negative below the slice, and FloorDiv/Mod take non-negative
    # operands only: shift by ``lead`` (start rounded up to a multiple of step, minus start).
    lead = -start % step
    first = (start + lead) // step

    def body(index):
        sub = list(index)
        cond = _in_range(index[dim], start, start + length * step)
        if step == 1:
            sub[dim] = index[dim] - start
        else:
            shifted = index[dim] + lead
            sub[dim] = shifted.floordiv(step) - first
            aligned = ops.eq(
                ops.index_expr(shifted.mod(step), torch.int64), ops.constant(0, torch.int64)
            )
            cond = aligned if cond is None else ops.logical_and(cond, aligned)
        if cond is None:
            return load_s(sub)
        return ops.where(cond, ops.masked(cond, lambda: load_s(sub), 0), load_x(index))

    return PointwiseValue(_size(meta), dtype, meta.device, body, 3 + cost_of(x, src))


@register(aten.select_scatter.default)
def _select_scatter(g, meta, x, src, dim, index):
    nd = len(x.size)
    dim %= nd
    index = index + x.size[dim] if index < 0 else index
    load_x, load_s = x.loader(), src.loader()

    def body(idx):
        hit = ops.eq(ops.index_expr(idx[dim], torch.int64), ops.constant(index, torch.int64))
        return ops.where(hit, load_s([*idx[:dim], *idx[dim + 1 :]]), load_x(idx))

    return PointwiseValue(_size(meta), meta.dtype, meta.device, body, 3 + cost_of(x, src))


# prims versions of the elementwise ops (decompositions through torch._refs produce them)
for _name in (
    "abs",
    "neg",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "erf",
    "erfc",
    "erfinv",
    "reciprocal",
    "lgamma",
    "floor",
    "ceil",
    "round",
    "trunc",
    "sign",
    "bitwise_not",
    "signbit",
):
    if hasattr(prims, _name) and hasattr(aten, _name):
        LOWERINGS[getattr(prims, _name).default] = LOWERINGS[getattr(aten, _name).default]
for _name in (
    "add",
    "sub",
    "mul",
    "maximum",
    "minimum",
    "atan2",
    "hypot",
    "fmod",
    "remainder",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "pow",
):
    _packet = getattr(aten, _name)
    _default = next(
        getattr(_packet, o) for o in ("Tensor", "default", "Tensor_Tensor") if hasattr(_packet, o)
    )
    LOWERINGS[getattr(prims, _name).default] = LOWERINGS[_default]


@register(prims.div.default)
def _prims_div(g, meta, a, b):
    if _is_int_like(meta.dtype):
        return pointwise(meta, lambda x, y: ops.trunc_div(x, y), a, b)
    return pointwise(meta, ops.truediv, a, b)


@register(prims.where.default)
def _prims_where(g, meta, cond, a, b):
    return _where(g, meta, cond, a, b)


# ---------------------------------------------------------------------------
# pooling
# ---------------------------------------------------------------------------


def _all_of(*conditions: Any) -> Any:
    """ops value: every condition that is not ``None`` (``None`` if none is left)."""
    kept = [c for c in conditions if c is not None]
    if not kept:
        return None
    out = kept[0]
    for c in kept[1:]:
        out = ops.logical_and(out, c)
    return out


def _pair(v: Any, default: Any = None) -> tuple[int, int]:
    if isinstance(v, (list, tuple)):
        if not v:
            return _pair(default)
        return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])
    return (v, v)


@register(aten.max_pool2d_with_indices.default)
def _max_pool2d(g, meta, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """Each output is the max of its window, its index that of the first max (NaN wins), as
    eager's kernels choose them: the window's taps are unrolled, taps in the padding skipped.
    Inference reads only the values: the indices then cost nothing."""
    (kh, kw), (sh, sw) = _pair(kernel_size), _pair(stride, kernel_size)
    (ph, pw), (dh, dw) = _pair(padding), _pair(dilation)
    values_meta = meta[0]
    height, width = x.size[-2], x.size[-1]
    load = x.loader()
    work = compute_dtype(x.dtype)

    def window(index, want_index: bool):
        best = ops.constant(float("-inf"), work)
        where_best = ops.constant(0, torch.int64)
        found = ops.constant(False, torch.bool)
        for i in range(kh):
            for j in range(kw):
                src = list(index)
                src[-2] = index[-2] * sh + (i * dh - ph)
                src[-1] = index[-1] * sw + (j * dw - pw)
                inside = _all_of(_in_range(src[-2], 0, height), _in_range(src[-1], 0, width))
                if inside is None:
                    value = ops.to_dtype(load(src), work)
                else:
                    value = ops.masked(inside, lambda src=src: ops.to_dtype(load(src), work), 0)
                better = ops.logical_or(ops.gt(value, best), ops.isnan(value))
                take = ops.logical_or(ops.logical_not(found), better)
                if inside is not None:
                    take = ops.logical_and(inside, take)
                best = ops.where(take, value, best)
                if want_index:
                    flat = ops.index_expr(src[-2] * width + src[-1], torch.int64)
                    where_best = ops.where(take, flat, where_best)
                found = ops.logical_or(found, take)
        return where_best if want_index else ops.to_dtype(best, compute_dtype(values_meta.dtype))

    size, cost = _size(values_meta), kh * kw * 3 + cost_of(x)
    values = PointwiseValue(
        size, values_meta.dtype, meta[0].device, lambda i: window(i, False), cost
    )
    indices = PointwiseValue(size, torch.int64, meta[1].device, lambda i: window(i, True), cost)
    return [values, indices]


@register(aten.max_pool2d_with_indices_backward.default)
def _max_pool2d_backward(
    g, meta, grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices
):
    """Each input element gathers the gradients of the windows whose max it was: for each
    tap of the kernel, the one output window that could hold the element there (if its
    position divides by the stride and lies inside the output) adds its gradient where its
    index names the element. Eager's scatter in reverse, without atomics."""
    (kh, kw), (sh, sw) = _pair(kernel_size), _pair(stride, kernel_size)
    (ph, pw), (dh, dw) = _pair(padding), _pair(dilation)
    out_h, out_w = grad.size[-2], grad.size[-1]
    width = x.size[-1]
    load_grad, load_index = grad.loader(), indices.loader()
    work = compute_dtype(meta.dtype)

    def window_of(position: Expr, tap: int, stride: int, pad: int, dilate: int, size: int):
        """The output position whose window has ``position`` at ``tap``, and when it exists.
        ``position + pad - tap * dilate`` may be negative: shifted up by whole strides first
        (floor division and modulo take non-negative operands)."""
        lead = stride * (-(-(tap * dilate) // stride))
        shifted = position + (pad - tap * dilate + lead)
        window = shifted.floordiv(stride) - lead // stride
        exists = _all_of(
            ops.eq(ops.index_expr(shifted.mod(stride), torch.int64), ops.constant(0, torch.int64))
            if stride > 1
            else None,
            _in_range(window, 0, size),
        )
        return window, exists

    def body(index):
        flat = ops.index_expr(index[-2] * width + index[-1], torch.int64)
        total = ops.constant(0.0, work)
        for i in range(kh):
            row, row_ok = window_of(index[-2], i, sh, ph, dh, out_h)
            for j in range(kw):
                col, col_ok = window_of(index[-1], j, sw, pw, dw, out_w)
                src = [*index[:-2], row, col]
                ok = _all_of(row_ok, col_ok)

                def gradient_if_max(src=src):
                    hit = ops.eq(load_index(src), flat)
                    return ops.where(
                        hit, ops.to_dtype(load_grad(src), work), ops.constant(0.0, work)
                    )

                part = gradient_if_max() if ok is None else ops.masked(ok, gradient_if_max, 0.0)
                total = ops.add(total, part)
        return ops.to_dtype(total, work)

    cost = kh * kw * 4 + cost_of(grad, indices)
    # stored once: the batch norm backward before it reads it twice (its reduction, then
    # its pointwise part), and each read would gather every tap again
    return g.realize(PointwiseValue(_size(meta), meta.dtype, meta.device, body, cost))
