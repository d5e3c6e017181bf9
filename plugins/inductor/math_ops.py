"""The names of the elementwise math a loop body's ops list may hold (``ops.exp``, ...).

Plain data, apart from the ops lists themselves (``loop_body``): the device capabilities
(``device``) name what each generator emits without importing the IR, so that a process
that only loads compiled graphs from the plan cache never imports it.
"""

from __future__ import annotations

#: elementwise math of one value
UNARY_OPS = frozenset(
    [
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
        "sigmoid",
        "reciprocal",
        "floor",
        "ceil",
        "round",
        "trunc",
        "lgamma",
        "frac",
        "neg",
        "abs",
        "relu",
        "sign",
        "signbit",
        "logical_not",
        "bitwise_not",
        "isnan",
        "isinf",
        "isfinite",
    ]
)
#: elementwise math of two values of one dtype
BINARY_OPS = frozenset(
    [
        "add",
        "sub",
        "mul",
        "truediv",
        "trunc_div",
        "floordiv",
        "remainder",
        "fmod",
        "pow",
        "maximum",
        "minimum",
        "atan2",
        "hypot",
        "copysign",
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "logical_and",
        "logical_or",
        "logical_xor",
        "bitwise_and",
        "bitwise_or",
        "bitwise_xor",
        "lshift",
        "rshift",
    ]
)
MATH_OPS = UNARY_OPS | BINARY_OPS
#: math whose result is a bool whatever its arguments
PREDICATES = frozenset(
    [
        "signbit",
        "logical_not",
        "isnan",
        "isinf",
        "isfinite",
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "logical_and",
        "logical_or",
        "logical_xor",
    ]
)
