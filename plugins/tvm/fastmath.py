"""Vectorizable float32 ``exp``, ``tanh``, ``erf`` (option ``fast_math``, on by default).

TVM lowers ``exp``, ``tanh`` and ``erf`` to LLVM's intrinsics, which LLVM splits into one
libm call a vector lane (``expf``, ``tanhf``, ``erff``): GELU, softmax and SiLU were the
slowest kernels of every transformer (1M floats, one thread: ``erf`` 15-26 ms, ``tanh``
11-17 ms, ``exp`` 4-8 ms; torch 1-2 ms). Here they are polynomials of plain arithmetic,
which the default schedule vectorizes (0.4-0.5 ms): Cephes' ``expf`` (Cody-Waite range
reduction, 2^n built in the exponent bits) and Eigen's rational ``tanh`` and ``erf``. Against
torch on 1M inputs (normal at scales 1, 10 and 100, and -110..100): at most 2.8 ulp
(float64 reference), 3.6e-7 absolute; NaN and infinities as torch; ``exp`` below -87 is 0
where torch gives a subnormal (under 1.7e-38), so that no lane computes with subnormals.

:func:`legalize` is Relax's ``LegalizeOps`` with these in float32 ``exp``, ``tanh``,
``erf``, ``sigmoid``, ``gelu``, ``gelu_tanh``, ``silu`` and ``softmax``; other dtypes keep
TVM's legalization.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import tvm
from tvm import relax, te, tirx, topi

F32 = "float32"

#: Cephes' ``expf``: ln 2 split in two for an exact range reduction, and the polynomial
#: of e^r - 1 - r on [-ln2/2, ln2/2] (highest power first).
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4
EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2)
EXP_POLY += (1.6666665459e-1, 5.0000001201e-1)
#: Above this e^x overflows (ln of float32's largest value is 88.7228...).
EXP_HIGH = 88.75
#: Below this e^x is subnormal: 0 here.
EXP_LOW = -87.0

#: Eigen's ``tanh``: an odd rational polynomial of x^2, clamped where it reaches 1 in
#: float32 (0.99999976); from :data:`TANH_ONE` on, +-1 as torch's (else GELU's
#: ``x * (1 + tanh)`` keeps ``x * 2.4e-7`` where torch's is 0: 1.2e-5 at x = -100);
#: below :data:`TANH_TINY` tanh x is x.
TANH_CLAMP = 7.90531110763549805
TANH_ONE = 9.0
TANH_TINY = 0.0004
TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11)
TANH_P += (5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04)
TANH_P += (4.89352455891786e-03,)
TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03)
TANH_Q += (4.89352518554385e-03,)

#: Eigen's ``erf``: the same form, clamped to [-4, 4] (erf is +-1 in float32 beyond).
ERF_CLAMP = 4.0
ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06)
ERF_P += (-5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03)
ERF_P += (-1.60960333262415e-02,)
ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03)
ERF_Q += (-7.37332916720468e-03, -1.42647390514189e-02)


def _c(value: float) -> tirx.PrimExpr:
    return tirx.const(value, F32)


def _horner(x: tirx.PrimExpr, coefficients: tuple[float, ...]) -> tirx.PrimExpr:
    result = _c(coefficients[0])
    for k in coefficients[1:]:
        result = result * x + _c(k)
    return result


def _clamp(x: tirx.PrimExpr, low: float, high: float) -> tirx.PrimExpr:
    return tirx.max(tirx.min(x, _c(high)), _c(low))


def _nan_kept(x: tirx.PrimExpr, result: tirx.PrimExpr) -> tirx.PrimExpr:
    """``result``, or ``x`` where it is NaN (the clamps' min and max drop NaNs)."""
    return tirx.Select(tirx.isnan(x), x, result)


def exp(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """e^x = 2^n e^r, n = round(x / ln 2), r = x - n ln 2; 2^n as ``2^(n-1) * 2`` so that
    n = 128 (x up to :data:`EXP_HIGH`, overflowing to inf) fits the exponent bits."""
    clamped = _clamp(x, EXP_LOW, EXP_HIGH)
    n = tirx.floor(clamped * _c(1 / math.log(2)) + _c(0.5))
    r = clamped - n * _c(LN2_HI) - n * _c(LN2_LO)
    e_r = _horner(r, EXP_POLY) * r * r + r + _c(1.0)
    scale = tirx.reinterpret(F32, (n.astype("int32") + 126) << 23)
    return _nan_kept(x, tirx.Select(x < _c(EXP_LOW), _c(0.0), e_r * _c(2.0) * scale))


def tanh(x: tirx.PrimExpr) -> tirx.PrimExpr:
    clamped = _clamp(x, -TANH_CLAMP, TANH_CLAMP)
    x2 = clamped * clamped
    result = clamped * _horner(x2, TANH_P) / _horner(x2, TANH_Q)
    result = tirx.Select(tirx.abs(x) < _c(TANH_ONE), result, tirx.copysign(_c(1.0), x))
    return _nan_kept(x, tirx.Select(tirx.abs(x) < _c(TANH_TINY), x, result))


def erf(x: tirx.PrimExpr) -> tirx.PrimExpr:
    clamped = _clamp(x, -ERF_CLAMP, ERF_CLAMP)
    x2 = clamped * clamped
    return _nan_kept(x, clamped * _horner(x2, ERF_P) / _horner(x2, ERF_Q))


def sigmoid(x: tirx.PrimExpr) -> tirx.PrimExpr:
    return _c(1.0) / (_c(1.0) + exp(-x))


def gelu(x: tirx.PrimExpr) -> tirx.PrimExpr:
    return x * (_c(0.5) + erf(x * _c(math.sqrt(0.5))) * _c(0.5))


def gelu_tanh(x: tirx.PrimExpr) -> tirx.PrimExpr:
    inner = _c(math.sqrt(2 / math.pi)) * x * (_c(1.0) + _c(0.044715) * x * x)
    return _c(0.5) * x * (_c(1.0) + tanh(inner))


def silu(x: tirx.PrimExpr) -> tirx.PrimExpr:
    return x * sigmoid(x)


def softmax(x: te.Tensor, axis: int) -> te.Tensor:
    """topi's softmax (max, e^(x - max), sum, divide), with :func:`exp`, and the division
    a multiplication by the sum's reciprocal (one division a row)."""
    axis %= len(x.shape)

    def reduced(indices, k):
        return (*indices[:axis], k, *indices[axis:])

    def kept(indices):
        return tuple(v for i, v in enumerate(indices) if i != axis)

    shape = tuple(x.shape)
    rows = tuple(d for i, d in enumerate(shape) if i != axis)
    k1 = te.reduce_axis((0, shape[axis]), name="k")
    k2 = te.reduce_axis((0, shape[axis]), name="k")
    high = te.compute(rows, lambda *i: te.max(x[reduced(i, k1)], axis=k1), name="T_softmax_maxelem")
    e = te.compute(shape, lambda *i: exp(x[i] - high[kept(i)]), name="T_softmax_exp")
    total = te.compute(rows, lambda *i: te.sum(e[reduced(i, k2)], axis=k2), name="T_softmax_expsum")
    inverse = te.compute(rows, lambda *i: _c(1.0) / total[i], name="T_softmax_inverse")
    return te.compute(shape, lambda *i: e[i] * inverse[kept(i)], name="T_softmax_norm")


def _elementwise(fn: Callable, name: str) -> Callable:
    def compute(x: te.Tensor) -> te.Tensor:
        return te.compute(x.shape, lambda *i: fn(x[i]), name=name)

    return compute


#: Relax op → (its float32 TE computation, the kernel's name).
COMPUTES: dict[str, tuple[Callable, str]] = {
    "relax.exp": (_elementwise(exp, "T_exp"), "tir_exp"),
    "relax.tanh": (_elementwise(tanh, "T_tanh"), "tir_tanh"),
    "relax.erf": (_elementwise(erf, "T_erf"), "erf"),
    "relax.sigmoid": (_elementwise(sigmoid, "T_sigmoid"), "tir_sigmoid"),
    "relax.nn.gelu": (_elementwise(gelu, "T_gelu"), "gelu"),
    "relax.nn.gelu_tanh": (_elementwise(gelu_tanh, "T_gelu_tanh"), "gelu_tanh"),
    "relax.nn.silu": (_elementwise(silu, "T_silu"), "silu"),
}


def _legalization(op: str) -> Callable:
    compute, name = COMPUTES[op]
    default = tvm.ir.Op.get(op).get_attr("FLegalize")

    def legalize_one(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        if call.ty.dtype != F32:
            return default(bb, call)
        return bb.call_te(compute, call.args[0], primfunc_name_hint=name)

    return legalize_one


def _legalize_softmax(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    if call.ty.dtype != F32:
        return bb.call_te(topi.nn.softmax, call.args[0], call.attrs.axis)
    return bb.call_te(softmax, call.args[0], int(call.attrs.axis), primfunc_name_hint="softmax")


def legalize() -> tvm.transform.Pass:
    """``LegalizeOps`` with the fast float32 functions."""
    custom = {op: _legalization(op) for op in COMPUTES}
    custom["relax.nn.softmax"] = _legalize_softmax
    return relax.transform.LegalizeOps(customize_legalize_map=custom)
