"""Converters of pointwise aten ops: arithmetic, comparisons, activations, casts.

Operands are cast to the node's result dtype (as torch computes them), except
for comparisons, which compare in the promoted dtype of their operands.
"""

from __future__ import annotations

import math

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from torchkiln_onnxrt.converter import GraphBuilder, Value, converts, out_dtype
from torchkiln_onnxrt.dtypes import onnx_dtype

aten = torch.ops.aten


def _example(x: Value | float | int | bool) -> torch.Tensor | float | int | bool:
    if isinstance(x, Value):
        return torch.empty((1,) * x.ndim, dtype=x.dtype)
    return x


def promoted_dtype(*operands: Value | float | int | bool) -> torch.dtype:
    """The dtype torch computes a binary op of these operands in."""
    compute, _ = elementwise_dtypes(
        *(_example(x) for x in operands),
        type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT,
    )
    return compute


def _unary(onnx_op: str):
    def convert(b: GraphBuilder, node, x: Value, *_, **__) -> str:
        return b.op(onnx_op, [b.as_dtype(x, out_dtype(node))])

    return convert


_UNARY = {
    aten.abs.default: "Abs",
    aten.neg.default: "Neg",
    aten.exp.default: "Exp",
    aten.log.default: "Log",
    aten.sqrt.default: "Sqrt",
    aten.sin.default: "Sin",
    aten.cos.default: "Cos",
    aten.tan.default: "Tan",
    aten.tanh.default: "Tanh",
    aten.sigmoid.default: "Sigmoid",
    aten.relu.default: "Relu",
    aten.erf.default: "Erf",
    aten.reciprocal.default: "Reciprocal",
    aten.floor.default: "Floor",
    aten.ceil.default: "Ceil",
    aten.round.default: "Round",
    aten.sign.default: "Sign",
    aten.asin.default: "Asin",
    aten.acos.default: "Acos",
    aten.atan.default: "Atan",
    aten.sinh.default: "Sinh",
    aten.cosh.default: "Cosh",
}
for _target, _onnx_op in _UNARY.items():
    converts(_target)(_unary(_onnx_op))


@converts(aten.rsqrt.default)
def rsqrt(b: GraphBuilder, node, x: Value) -> str:
    return b.op("Reciprocal", [b.op("Sqrt", [b.as_dtype(x, out_dtype(node))])])


@converts(aten.log1p.default)
def log1p(b: GraphBuilder, node, x: Value) -> str:
    dtype = out_dtype(node)
    return b.op("Log", [b.op("Add", [b.as_dtype(x, dtype), b.const(1, dtype)])])


@converts(aten.expm1.default)
def expm1(b: GraphBuilder, node, x: Value) -> str:
    dtype = out_dtype(node)
    return b.op("Sub", [b.op("Exp", [b.as_dtype(x, dtype)]), b.const(1, dtype)])


@converts(aten.log2.default)
def log2(b: GraphBuilder, node, x: Value) -> str:
    dtype = out_dtype(node)
    return b.op("Div", [b.op("Log", [b.as_dtype(x, dtype)]), b.const(math.log(2), dtype)])


@converts(aten.trunc.default)
def trunc(b: GraphBuilder, node, x: Value) -> str:
    return _trunc(b, b.as_dtype(x, out_dtype(node)))


def _trunc(b: GraphBuilder, x: str) -> str:
    return b.op("Mul", [b.op("Sign", [x]), b.op("Floor", [b.op("Abs", [x])])])


@converts(aten.gelu.default)
def gelu(b: GraphBuilder, node, x: Value, approximate: str = "none") -> str:
    """Written in the form onnxruntime's Gelu fusions match: ``x * (1 + core) * 0.5``."""
    dtype = out_dtype(node)
    x = b.as_dtype(x, dtype)
    if approximate == "tanh":
        cube = b.op("Mul", [b.op("Mul", [x, x]), x])
        inner = b.op("Add", [x, b.op("Mul", [cube, b.const(0.044715, dtype)])])
        core = b.op("Tanh", [b.op("Mul", [inner, b.const(math.sqrt(2 / math.pi), dtype)])])
    else:
        core = b.op("Erf", [b.op("Div", [x, b.const(math.sqrt(2), dtype)])])
    scaled = b.op("Mul", [x, b.op("Add", [core, b.const(1, dtype)])])
    return b.op("Mul", [scaled, b.const(0.5, dtype)])


@converts(aten.leaky_relu.default)
def leaky_relu(b: GraphBuilder, node, x: Value, negative_slope: float = 0.01) -> str:
    return b.op("LeakyRelu", [b.as_dtype(x, out_dtype(node))], alpha=float(negative_slope))


@converts(aten.logical_not.default)
def logical_not(b: GraphBuilder, node, x: Value) -> str:
    return b.op("Not", [b.as_dtype(x, torch.bool)])


@converts(aten.bitwise_not.default)
def bitwise_not(b: GraphBuilder, node, x: Value) -> str:
    return b.op("Not" if x.dtype == torch.bool else "BitwiseNot", [x.name])


@converts(aten.isnan.default)
def isnan(b: GraphBuilder, node, x: Value) -> str:
    return b.op("IsNaN", [x.name])


@converts(aten.isinf.default)
def isinf(b: GraphBuilder, node, x: Value) -> str:
    return b.op("IsInf", [x.name])


@converts(
    aten._to_copy.default,
    aten.clone.default,
    aten.alias.default,
    aten.lift_fresh_copy.default,
    aten.detach.default,
    torch.ops.prims.convert_element_type.default,
)
def to_dtype(b: GraphBuilder, node, x: Value, *_, **__) -> str:
    """Copies and casts: a value with the node's dtype (ONNX values are immutable)."""
    return b.as_dtype(x, out_dtype(node))


def _binary(onnx_op: str):
    def convert(b: GraphBuilder, node, x, y, *_, **__) -> str:
        dtype = out_dtype(node)
        # ONNX's Mul, Max and Min take no booleans: torch's of booleans are those of 0 and 1
        compute = torch.int32 if dtype == torch.bool else dtype
        result = b.op(onnx_op, [b.as_dtype(x, compute), b.as_dtype(y, compute)])
        return result if compute == dtype else b.op("Cast", [result], to=onnx_dtype(dtype))

    return convert


_BINARY = {
    aten.mul.Tensor: "Mul",
    aten.mul.Scalar: "Mul",
    aten.div.Tensor: "Div",
    aten.div.Scalar: "Div",
    aten.maximum.default: "Max",
    aten.minimum.default: "Min",
    aten.pow.Tensor_Tensor: "Pow",
    aten.pow.Tensor_Scalar: "Pow",
    aten.pow.Scalar: "Pow",
}
for _target, _onnx_op in _BINARY.items():
    converts(_target)(_binary(_onnx_op))


@converts(aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar)
def add_sub(b: GraphBuilder, node, x, y, alpha: float | int = 1) -> str:
    dtype = out_dtype(node)
    y = b.as_dtype(y, dtype)
    if alpha != 1:
        y = b.op("Mul", [y, b.const(alpha, dtype)])
    op_type = "Add" if node.target.overloadpacket is aten.add else "Sub"
    return b.op(op_type, [b.as_dtype(x, dtype), y])


@converts(aten.rsub.Scalar, aten.rsub.Tensor)
def rsub(b: GraphBuilder, node, x, y, alpha: float | int = 1) -> str:
    dtype = out_dtype(node)
    x = b.as_dtype(x, dtype)
    if alpha != 1:
        x = b.op("Mul", [x, b.const(alpha, dtype)])
    return b.op("Sub", [b.as_dtype(y, dtype), x])


@converts(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(b: GraphBuilder, node, x, y, rounding_mode: str | None = None) -> str:
    dtype = out_dtype(node)
    x, y = b.as_dtype(x, dtype), b.as_dtype(y, dtype)
    if rounding_mode is None:
        return b.op("Div", [x, y])
    if dtype.is_floating_point:
        quotient = b.op("Div", [x, y])
        return b.op("Floor", [quotient]) if rounding_mode == "floor" else _trunc(b, quotient)
    if rounding_mode == "trunc":
        return b.op("Div", [x, y])
    # Floor division of integers: (x - python_mod(x, y)) / y is exact.
    return b.op("Div", [b.op("Sub", [x, b.op("Mod", [x, y], fmod=0)]), y])


@converts(aten.remainder.Tensor, aten.remainder.Scalar)
def remainder(b: GraphBuilder, node, x, y) -> str:
    dtype = out_dtype(node)
    x, y = b.as_dtype(x, dtype), b.as_dtype(y, dtype)
    if not dtype.is_floating_point:
        return b.op("Mod", [x, y], fmod=0)
    floor_quotient = b.op("Floor", [b.op("Div", [x, y])])
    return b.op("Sub", [x, b.op("Mul", [floor_quotient, y])])


@converts(aten.fmod.Tensor, aten.fmod.Scalar)
def fmod(b: GraphBuilder, node, x, y) -> str:
    dtype = out_dtype(node)
    return b.op("Mod", [b.as_dtype(x, dtype), b.as_dtype(y, dtype)], fmod=1)


_COMPARISONS = {
    aten.eq: ("Equal", False),
    aten.ne: ("Equal", True),
    aten.lt: ("Less", False),
    aten.le: ("LessOrEqual", False),
    aten.gt: ("Greater", False),
    aten.ge: ("GreaterOrEqual", False),
}


@converts(*(getattr(packet, name) for packet in _COMPARISONS for name in ("Tensor", "Scalar")))
def compare(b: GraphBuilder, node, x, y) -> str:
    onnx_op, negate = _COMPARISONS[node.target.overloadpacket]
    dtype = promoted_dtype(x, y)
    if dtype == torch.bool and onnx_op != "Equal":
        dtype = torch.int32
    result = b.op(onnx_op, [b.as_dtype(x, dtype), b.as_dtype(y, dtype)])
    return b.op("Not", [result]) if negate else result


_LOGICAL = {
    aten.logical_and.default: "And",
    aten.logical_or.default: "Or",
    aten.logical_xor.default: "Xor",
}
_BITWISE = {
    aten.bitwise_and.Tensor: "And",
    aten.bitwise_or.Tensor: "Or",
    aten.bitwise_xor.Tensor: "Xor",
    aten.bitwise_and.Scalar: "And",
    aten.bitwise_or.Scalar: "Or",
    aten.bitwise_xor.Scalar: "Xor",
}


@converts(*_LOGICAL)
def logical(b: GraphBuilder, node, x, y) -> str:
    return b.op(_LOGICAL[node.target], [b.as_dtype(x, torch.bool), b.as_dtype(y, torch.bool)])


@converts(*_BITWISE)
def bitwise(b: GraphBuilder, node, x, y) -> str:
    dtype = out_dtype(node)
    onnx_op = _BITWISE[node.target]
    if dtype != torch.bool:
        onnx_op = "Bitwise" + onnx_op
    return b.op(onnx_op, [b.as_dtype(x, dtype), b.as_dtype(y, dtype)])


@converts(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where(b: GraphBuilder, node, condition: Value, x, y) -> str:
    dtype = out_dtype(node)
    return b.op(
        "Where", [b.as_dtype(condition, torch.bool), b.as_dtype(x, dtype), b.as_dtype(y, dtype)]
    )


@converts(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(b: GraphBuilder, node, x: Value, mask: Value, value) -> str:
    dtype = out_dtype(node)
    return b.op(
        "Where", [b.as_dtype(mask, torch.bool), b.as_dtype(value, dtype), b.as_dtype(x, dtype)]
    )


@converts(aten.clamp.default, aten.clamp.Tensor)
def clamp(b: GraphBuilder, node, x: Value, lower=None, upper=None) -> str:
    dtype = out_dtype(node)
    result = b.as_dtype(x, dtype)
    if lower is not None:
        result = b.op("Max", [result, b.as_dtype(lower, dtype)])
    if upper is not None:
        result = b.op("Min", [result, b.as_dtype(upper, dtype)])
    return result


@converts(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(b: GraphBuilder, node, x: Value, lower) -> str:
    return clamp(b, node, x, lower=lower)


@converts(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(b: GraphBuilder, node, x: Value, upper) -> str:
    return clamp(b, node, x, upper=upper)


@converts(aten.hardtanh.default)
def hardtanh(b: GraphBuilder, node, x: Value, min_val: float = -1.0, max_val: float = 1.0) -> str:
    return clamp(b, node, x, min_val, max_val)


@converts(aten.sigmoid_backward.default)
def sigmoid_backward(b: GraphBuilder, node, grad: Value, y: Value) -> str:
    dtype = out_dtype(node)
    y = b.as_dtype(y, dtype)
    one_minus_y = b.op("Sub", [b.const(1, dtype), y])
    return b.op("Mul", [b.as_dtype(grad, dtype), b.op("Mul", [y, one_minus_y])])


@converts(aten.tanh_backward.default)
def tanh_backward(b: GraphBuilder, node, grad: Value, y: Value) -> str:
    dtype = out_dtype(node)
    y = b.as_dtype(y, dtype)
    one_minus_y2 = b.op("Sub", [b.const(1, dtype), b.op("Mul", [y, y])])
    return b.op("Mul", [b.as_dtype(grad, dtype), one_minus_y2])


@converts(aten.threshold_backward.default)
def threshold_backward(b: GraphBuilder, node, grad: Value, x: Value, threshold: float) -> str:
    dtype = out_dtype(node)
    keep = b.op("Greater", [x.name, b.as_dtype(threshold, x.dtype)])
    return b.op("Where", [keep, b.as_dtype(grad, dtype), b.const(0, dtype)])
