"""Triton code generation for fused kernels.

In: a :class:`~torchkiln_inductor.kernel_plan.KernelPlan` (its segments, and
each node's ops list). Out: one ``@triton.jit`` function per kernel, collected
into a :class:`TritonModule` (source text plus, per kernel, its launch: grid
and block sizes, fixed at compile time where shapes are static).

Each program handles ``XBLOCK`` elements of the kernel's flattened outer loops
(``xindex``, the grid's axis). A segment with inner loops (or a reduction)
works on ``[XBLOCK, RBLOCK]`` tiles of its flattened inner loops
(``r<k>index``): *persistent* when the inner loops fit one block
(``RBLOCK = next_power_of_2(rnumel)`` up to
:data:`~..device.TRITON_PERSISTENT_MAX`), else a loop over blocks with per-lane
accumulators reduced at the end. Persistent segments over the same inner loops share
their index variable, so a value one computes and a later one reads (the plan's
``local`` buffers: softmax's exponentials, layer norm's centred values) stays in
registers instead of a round trip through memory. Index math
is the plan's index expressions over those two variables (``//`` and ``%``
unflatten them), masked by ``xindex < xnumel`` and ``rindex < rnumel`` (``kiln_mask``:
all true, and folded away, where the block divides the extent).
Values are computed in float32 for float16/bfloat16 storage; welford keeps
(mean, m2, weight) per lane and merges the lanes with sums (Chan's formula).

With symbolic sizes (:mod:`..sizes`), a kernel takes the size symbols it uses as ``int64``
arguments after its buffers, and ``xnumel``, each ``rnumel``, index math and loop bounds are
expressions of them; masks compare for real. Block sizes come from the first call's sizes
(:func:`~..sizes.hint`); a segment is persistent only where its block holds a row at every
size in range, else it loops, which serves any length. The launcher computes such a kernel's
grid at each call (``triton_launch``).

:class:`TritonOpsHandler` turns each op into one Triton expression (with
common-subexpression elimination) and tracks which tile axes every value
varies over, so pointers and masks get the same shape. Ops outside
:data:`~.device.TRITON_MATH_OPS` never reach it: lowering asks the device's
capabilities and runs them as aten calls.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, field, replace
from typing import Any

import sympy
import torch

from ..autotune.tuner import TuningSettings
from ..device import TRITON_PERSISTENT_MAX
from ..indexing import Expr, FloorDiv, Indirect, Mod, Var, unflatten
from ..ir import GraphIR, Reduction
from ..kernel_plan import KernelPlan, Segment
from ..loop_body import Op, Value, compute_dtype
from ..scheduler import INNER, OUTER, SchedulerNode
from ..sizes import Size, as_size, hint, is_static, known_less, size_text, symbols_in
from .naming import param_names, positional_params, renamed
from .triton_libdevice import libdevice_binding
from .triton_module import KernelLaunch, TritonModule

#: elements of one ``[XBLOCK, RBLOCK]`` tile
TILE_ELEMENTS = 4096
#: rows at least this long get a program each (``XBLOCK=1``), with warps spread along the row,
#: as torch's inductor gives them (it tunes only shorter rows): several rows per program
#: ran layer norm's backward at half torch's speed on the H200 (more registers per thread,
#: fewer programs)
ROW_PER_PROGRAM = 256
#: elements one program of a pointwise kernel handles
POINTWISE_BLOCK = 1024
#: tile elements per thread, which set a kernel's warps (``num_warps_for``): pointwise
#: blocks, whole rows and [XBLOCK, RBLOCK] tiles. In a light-tuning log of five training and
#: two inference models on the H200 (306 reduction kernels, bf16), half the warps of 8 elements
#: a thread ran faster in most reductions: rows of 1024 elements at 4 warps instead of 8
#: (median 0.81x the time), tiles of 4096 at 4 instead of 8 (0.86x); tiles of 2048 now take 2
#: (a second log: 4 warps there ran 1.01x the time of 2)
POINTWISE_PER_THREAD, ROW_PER_THREAD, TILE_PER_THREAD = 8, 8, 32
#: reduced elements per block of a kernel that reduces down columns (see ``_reads_down_columns``)
COLUMN_RBLOCK = 64
#: programs such a kernel keeps at least, with fewer columns each (down to
#: ``COLUMN_MIN_XBLOCK``, a 32-byte sector of float32 per row) and more of each column per
#: block: the merge of a batch norm's partial statistics (64 channels, 1024 partials each)
#: ran as one program for 20-29 us on the H200
COLUMN_MIN_PROGRAMS, COLUMN_MIN_XBLOCK = 128, 8

#: float32 -> bfloat16 conversions round to nearest-even on a GPU; Triton's interpreter
#: truncates, so under it the value is rounded first (bit arithmetic, NaN kept)
_ROUND_BF16 = {
    False: """@triton.jit
def kiln_round_bf16(x):
    return x""",
    True: """@triton.jit
def kiln_round_bf16(x):
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return tl.where(x != x, x, bits.to(tl.float32, bitcast=True))""",
}

TL_TYPES = {
    torch.float32: "tl.float32",
    torch.float64: "tl.float64",
    torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16",
    torch.int8: "tl.int8",
    torch.uint8: "tl.uint8",
    torch.int16: "tl.int16",
    torch.int32: "tl.int32",
    torch.int64: "tl.int64",
    torch.bool: "tl.int1",
}

PRELUDE = '''\
import triton
import triton.language as tl

{libdevice}


{round_bf16}


@triton.jit
def kiln_maximum(a, b):
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def kiln_minimum(a, b):
    return tl.where((a < b) | (a != a), a, b)


@triton.jit
def kiln_reduce_max(a, b):
    """A max reduction's combine, NaN kept: one ``max.NaN`` on sm_80+ where kiln_maximum's
    compares and select take four (between -0.0 and +0.0, eager's pick depends on order)."""
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def kiln_reduce_min(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def kiln_mask(index, numel: tl.constexpr, BLOCK: tl.constexpr):
    """``index < numel``; all true, a constant, where blocks of ``BLOCK`` tile ``numel``
    exactly (decided at compile time, per launch's block size): Triton then drops the
    masks of loads, stores and selects."""
    if numel % BLOCK == 0:
        return tl.full(index.shape, True, tl.int1)
    else:
        return index < numel


@triton.jit
def kiln_prod(a, b):
    return a * b


@triton.jit
def kiln_trunc(x):
    return tl.where(x < 0, tl.ceil(x), tl.floor(x))


@triton.jit
def kiln_round(x):
    """Half to even, as torch.round."""
    r = tl.floor(x + 0.5)
    tie = (r - x) == 0.5
    odd = (r - 2.0 * tl.floor(r * 0.5)) != 0.0
    return tl.where(tie & odd, r - 1.0, r)


@triton.jit
def kiln_sign(x):
    return (x > 0).to(x.dtype) - (x < 0).to(x.dtype)


@triton.jit
def kiln_floordiv_int(a, b):
    q = a // b
    return tl.where(((a % b) != 0) & ((a < 0) != (b < 0)), q - 1, q)


@triton.jit
def kiln_floordiv_float(a, b):
    """As ATen's div_floor for floating types."""
    mod = a % b
    div = (a - mod) / b
    div = tl.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1.0, div)
    floor = tl.floor(div)
    floor = tl.where(div - floor > 0.5, floor + 1.0, floor)
    return tl.where(div != 0, floor, 0.0 * (a / b))


@triton.jit
def kiln_remainder(a, b):
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


@triton.jit
def kiln_pow_int(a, b):
    """Square and multiply; a negative exponent gives 0 unless the base is 1 or -1 (as ATen)."""
    result = tl.full(a.shape, 1, a.dtype) + 0 * b
    base = a + 0 * b
    e = b + 0 * a
    for _ in tl.static_range(63):
        result = tl.where((e & 1) != 0, result * base, result)
        base = base * base
        e = e >> 1
    odd = (b & 1) != 0
    negative = tl.where(a == 1, 1, tl.where(a == -1, tl.where(odd, -1, 1), 0))
    return tl.where(b < 0, negative, result)
'''


@dataclass(frozen=True)
class TritonValue:
    """A Triton expression's variable, its compute dtype and the tile axes it varies over."""

    name: str
    dtype: torch.dtype
    dims: frozenset[str]  # subset of {"x", "r"}

    def __str__(self) -> str:
        return self.name


def _floating(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def _literal(value: Any, dtype: torch.dtype) -> str:
    """A ``[1, 1]`` constant of compute ``dtype``."""
    dtype = compute_dtype(dtype)
    if isinstance(value, sympy.Expr):  # a symbolic size: computed from the kernel's arguments
        text = size_text(value, python=True)
    elif dtype == torch.bool:
        text = "1" if value else "0"
    elif _floating(dtype):
        value = float(value)
        text = f'float("{value}")' if math.isnan(value) or math.isinf(value) else repr(value)
    else:
        text = str(int(value))
    return f"tl.full([1, 1], {text}, {TL_TYPES[dtype]})"


@dataclass
class _Tile:
    """The tile a segment's values live in: names of its index variables and masks."""

    rindex: str | None  # ``r<k>index``, None for a segment over the outer loops only
    rblock: str  # the RBLOCK constexpr name ("1" without one)
    # expressions defined in the segment's region, by text -> value (CSE)
    cse: dict[str, TritonValue] = field(default_factory=dict)
    xblock: str = "XBLOCK"  # the x axis's block (a template's rows: BLOCK_M)

    def shape(self, dims: frozenset[str]) -> str:
        return f"[{self.xblock if 'x' in dims else 1}, {self.rblock if 'r' in dims else 1}]"

    def mask(self, dims: frozenset[str]) -> str | None:
        parts = (["xmask"] if "x" in dims else []) + ([f"{self.rindex}mask"] if "r" in dims else [])
        return " & ".join(parts) or None


class TritonOpsHandler:
    """Emits ops as Triton statements into the kernel's current region, one method per op."""

    def __init__(self, kernel: TritonKernel, tile: _Tile):
        self.kernel = kernel
        self.tile = tile
        self.masks: list[TritonValue] = []  # enclosing ``masked`` conditions
        self.indirect: dict[str, TritonValue] = {}  # Indirect atom name -> its value

    # -- reading an ops list ----------------------------------------------------------
    def run(self, ops: tuple[Op, ...], values: dict[Value, TritonValue]) -> None:
        """Emit ``ops`` (a body's ops before its ``reduction`` and ``store``) into ``values``."""
        for op in ops:
            args = [values[a] if isinstance(a, Value) else a for a in op.args]
            if op.name == "masked":
                block = op.block
                assert block is not None
                self.masks.append(args[0])
                try:
                    self.run(block.ops, values)
                finally:
                    self.masks.pop()
                values[op.out] = self.masked(args[0], values[block.result], args[1])
            elif op.name == "indirect_indexing":
                self.indirect[op.out.name] = self.indirect_indexing(*args)
            else:
                values[op.out] = getattr(self, op.name)(*args)

    # -- plumbing -------------------------------------------------------------------
    def emit(self, text: str, dtype: torch.dtype, dims: frozenset[str]) -> TritonValue:
        """``text`` as a new variable (or the one computed before in this region)."""
        dtype = compute_dtype(dtype) if dtype != torch.bool else dtype
        key = f"{dtype}|{text}"
        hit = self.tile.cse.get(key)
        if hit is not None:
            return hit
        value = TritonValue(self.kernel.new_tmp(), dtype, dims)
        self.kernel.line(f"{value} = {text}")
        self.tile.cse[key] = value
        return value

    def index_dims(self, expr: Expr) -> frozenset[str]:
        dims: set[str] = set()
        for atom, _ in expr.terms:
            if isinstance(atom, Indirect):
                dims |= self.indirect[atom.name].dims
            elif isinstance(atom, (FloorDiv, Mod)):
                dims |= self.index_dims(atom.arg)
            else:
                dims.add("x" if atom.name == "xindex" else "r")
        return frozenset(dims)

    def render(self, expr: Expr) -> str:
        return expr.render(
            lambda a: self.indirect[a.name].name if isinstance(a, Indirect) else a.name,
            python=True,
        )

    def index(self, expr: Expr, dims: frozenset[str]) -> str:
        """``expr`` as Triton text, broadcast to the tile shape of ``dims``."""
        text = self.render(expr)
        if self.index_dims(expr) != dims:
            text = f"({text}) + tl.zeros({self.tile.shape(dims)}, tl.int32)"
        return text

    def mask(self, dims: frozenset[str]) -> str | None:
        parts = [m for m in [self.tile.mask(dims)] if m] + [m.name for m in self.masks]
        return " & ".join(parts) or None

    def _dims(self, *values: Any) -> frozenset[str]:
        out: frozenset[str] = frozenset()
        for v in values:
            if isinstance(v, TritonValue):
                out |= v.dims
        return out

    # -- memory and constants ----------------------------------------------------------
    def load(self, name: str, index: Expr) -> TritonValue:
        forwarded = self.kernel.forwarded.get((name, index))
        if forwarded is not None:
            return forwarded
        # the scheduler fuses only reads at a value's store index: the lane that holds it
        assert name not in self.kernel.plan.local, f"local {name} read at another index"
        ptr = self.kernel.param(name, written=False)
        dims = self.index_dims(index) | self._dims(*self.masks)
        mask = self.mask(dims)
        offsets = self.index(index, dims)
        if not dims:  # a [1, 1] block, as constants are: the interpreter mishandles scalars
            offsets = f"{offsets} + tl.zeros([1, 1], tl.int32)"
        text = f"tl.load({ptr} + ({offsets})"
        text += f", {mask}, other=0)" if mask else ")"
        dtype = self.kernel.graph.buffer(name).dtype
        if dtype in (torch.float16, torch.bfloat16):
            text += ".to(tl.float32)"
        return self.emit(text, dtype, dims)

    def store(self, name: str, index: Expr, value: TritonValue, mode: str | None = None) -> None:
        """``name[index] = value``; ``mode="add"`` (a scatter whose indices may repeat):
        an atomic add."""
        ptr = self.kernel.param(name, written=True)
        # a block of pointers, masked by xmask, even where the index is one element
        dims = self.index_dims(index) | value.dims | {"x"}
        dtype = self.kernel.graph.buffer(name).dtype
        text = value.name
        if dtype == torch.bfloat16:
            text = f"kiln_round_bf16({text})"
        if value.dtype != dtype:
            text = f"{text}.to({TL_TYPES[dtype]})"
        if value.dims != dims:
            text = f"tl.broadcast_to({text}, {self.tile.shape(dims)})"
        mask = self.mask(dims)
        target = f"{ptr} + ({self.index(index, dims)})"
        if mode == "add":
            tail = f", mask={mask}" if mask else ""
            self.kernel.line(f"tl.atomic_add({target}, {text}{tail}, sem='relaxed')")
        else:
            self.kernel.line(f"tl.store({target}, {text}{f', {mask}' if mask else ''})")

    def constant(self, value: Any, dtype: torch.dtype) -> TritonValue:
        return self.emit(_literal(value, dtype), dtype, frozenset())

    def index_expr(self, expr: Expr, dtype: torch.dtype) -> TritonValue:
        dims = self.index_dims(expr)
        if not dims:
            return self.constant(expr.const, dtype)
        return self.emit(f"({self.render(expr)}).to({TL_TYPES[compute_dtype(dtype)]})", dtype, dims)

    def to_dtype(self, x: TritonValue, dtype: torch.dtype) -> TritonValue:
        if dtype == torch.bool:
            return x if x.dtype == torch.bool else self.emit(f"({x} != 0)", torch.bool, x.dims)
        target = compute_dtype(dtype)
        out = x if target == x.dtype else self.emit(f"{x}.to({TL_TYPES[target]})", target, x.dims)
        if dtype == torch.bfloat16:  # round to the storage type's precision
            out = self.emit(
                f"kiln_round_bf16({out}).to(tl.bfloat16).to(tl.float32)", target, x.dims
            )
        elif dtype == torch.float16:
            out = self.emit(f"{out}.to(tl.float16).to(tl.float32)", target, x.dims)
        return out

    def indirect_indexing(self, x: TritonValue, size: Size, wrap: bool = True) -> TritonValue:
        """An index read at run time, negative ones counted from the end. One outside
        ``[0, size)`` fails a device-side assert where it is read (as eager's CUDA
        kernels do), so no access leaves the buffer unnoticed; the kernel is compiled
        with Triton's ``debug`` on, which keeps its asserts."""
        idx = self.emit(f"{x}.to(tl.int64)", torch.int64, x.dims)
        numel = size_text(size, python=True)
        if wrap:
            idx = self.emit(f"tl.where({idx} < 0, {idx} + {numel}, {idx})", torch.int64, x.dims)
        in_range = f"(0 <= {idx}) & ({idx} < {numel})"
        mask = self.mask(x.dims)
        check = f"({in_range}) | ~({mask})" if mask else in_range
        if f"assert|{check}" not in self.tile.cse:
            self.tile.cse[f"assert|{check}"] = idx
            message = f"index out of bounds: 0 <= {idx} < {numel}"
            self.kernel.line(f'tl.device_assert({check}, "{message}")')
            self.kernel.checks_indices = True
        return idx

    def rand(self, seed_index: int, offset: Expr, dtype: torch.dtype) -> TritonValue:
        return self._random("tl.rand", seed_index, offset)

    def randn(self, seed_index: int, offset: Expr, dtype: torch.dtype) -> TritonValue:
        return self._random("tl.randn", seed_index, offset)

    def _random(self, fn: str, seed_index: int, offset: Expr) -> TritonValue:
        """Philox at the element's ``offset``, keyed by the graph's seed number ``seed_index``
        (float32, as every floating dtype computes; stores round it)."""
        seed_buffer = self.kernel.graph.seed_buffer
        assert seed_buffer is not None, "a random op without the graph's seeds"
        seeds = self.kernel.param(seed_buffer.name, written=False)
        seed = self.emit(f"tl.load({seeds} + {seed_index})", torch.int64, frozenset())
        dims = self.index_dims(offset)
        offsets = self.index(offset, dims) if dims else self.index(offset, frozenset("x"))
        return self.emit(f"{fn}({seed}, {offsets})", torch.float32, dims or frozenset("x"))

    def masked(self, mask: TritonValue, result: TritonValue, other: Any) -> TritonValue:
        dims = mask.dims | result.dims
        return self.emit(
            f"tl.where({mask}, {result}, {_literal(other, result.dtype)})", result.dtype, dims
        )

    def where(self, cond: TritonValue, a: TritonValue, b: TritonValue) -> TritonValue:
        return self.emit(f"tl.where({cond}, {a}, {b})", a.dtype, self._dims(cond, a, b))

    # -- math -------------------------------------------------------------------------
    def _fn(self, template: str, dtype: torch.dtype, *args: TritonValue) -> TritonValue:
        return self.emit(template.format(*args), dtype, self._dims(*args))

    def __getattr__(self, name: str):
        if name in _UNARY_FLOAT:

            def unary(x: TritonValue) -> TritonValue:
                if not _floating(x.dtype):
                    raise TypeError(f"ops.{name} needs a floating value, got {x.dtype}")
                return self._fn(_UNARY_FLOAT[name], x.dtype, x)

            return unary
        if name in _BINARY_SAME:
            return lambda a, b: self._fn(_BINARY_SAME[name], a.dtype, a, b)
        if name in _COMPARE:
            return lambda a, b: self._fn(f"({{}} {_COMPARE[name]} {{}})", torch.bool, a, b)
        raise AttributeError(name)

    def neg(self, x):
        return x if x.dtype == torch.bool else self._fn("(-{})", x.dtype, x)

    def abs(self, x):
        return x if x.dtype == torch.bool else self._fn("tl.abs({})", x.dtype, x)

    def relu(self, x):
        return self._fn("tl.where({0} < 0, 0, {0})", x.dtype, x)

    def sign(self, x):
        return x if x.dtype == torch.bool else self._fn("kiln_sign({})", x.dtype, x)

    def signbit(self, x):
        if x.dtype == torch.float32:
            return self._fn("({}.to(tl.int32, bitcast=True) < 0)", torch.bool, x)
        if x.dtype == torch.float64:
            return self._fn("({}.to(tl.int64, bitcast=True) < 0)", torch.bool, x)
        return self._fn("({} < 0)", torch.bool, x)

    def logical_not(self, x):
        return self._fn("({} == 0)", torch.bool, x)

    def bitwise_not(self, x):
        if x.dtype == torch.bool:
            return self._fn("({} == 0)", torch.bool, x)
        return self._fn("(~{})", x.dtype, x)

    def isnan(self, x):
        return self._fn("({0} != {0})", torch.bool, x)  # False for integers

    def isinf(self, x):
        if not _floating(x.dtype):
            return self._fn("({0} != {0})", torch.bool, x)
        return self._fn("(tl.abs({}) == float('inf'))", torch.bool, x)

    def isfinite(self, x):
        if not _floating(x.dtype):
            return self._fn("({0} == {0})", torch.bool, x)
        return self._fn("(tl.abs({}) < float('inf'))", torch.bool, x)

    def mul(self, a, b):
        if a.dtype == torch.bool:
            return self._fn("({} & {})", torch.bool, a, b)
        return self._fn("({} * {})", a.dtype, a, b)

    def truediv(self, a, b):
        return self._fn("({} / {})", a.dtype, a, b)

    def trunc_div(self, a, b):
        if _floating(a.dtype):
            return self._fn("kiln_trunc({} / {})", a.dtype, a, b)
        return self._fn("({} // {})", a.dtype, a, b)  # integer ``//`` truncates, as C

    def floordiv(self, a, b):
        helper = "kiln_floordiv_float" if _floating(a.dtype) else "kiln_floordiv_int"
        return self._fn(helper + "({}, {})", a.dtype, a, b)

    def pow(self, a, b):
        helper = "libdevice.pow" if _floating(a.dtype) else "kiln_pow_int"
        return self._fn(helper + "({}, {})", a.dtype, a, b)

    def fmod(self, a, b):
        # libdevice's fmod, as std::fmod; Triton's integer ``%`` keeps the dividend's sign
        return self._fn(
            "libdevice.fmod({}, {})" if _floating(a.dtype) else "({} % {})", a.dtype, a, b
        )

    def atan2(self, a, b):
        return self._float_binary("atan2", a, b)

    def hypot(self, a, b):
        return self._float_binary("hypot", a, b)

    def copysign(self, a, b):
        return self._float_binary("copysign", a, b)

    def _float_binary(self, name: str, a: TritonValue, b: TritonValue) -> TritonValue:
        if not (_floating(a.dtype) and _floating(b.dtype)):
            raise TypeError(f"ops.{name} needs floating values, got {a.dtype} and {b.dtype}")
        return self._fn(f"libdevice.{name}({{}}, {{}})", a.dtype, a, b)

    def logical_and(self, a, b):
        return self._fn("(({} != 0) & ({} != 0))", torch.bool, a, b)

    def logical_or(self, a, b):
        return self._fn("(({} != 0) | ({} != 0))", torch.bool, a, b)

    def logical_xor(self, a, b):
        return self._fn("(({} != 0) != ({} != 0))", torch.bool, a, b)


_UNARY_FLOAT = {
    "exp": "tl.exp({})",
    "exp2": "tl.exp2({})",
    "log": "tl.log({})",
    "log2": "tl.log2({})",
    "log10": "libdevice.log10({})",
    "sqrt": "tl.sqrt({})",
    "rsqrt": "tl.rsqrt({})",
    "sin": "tl.sin({})",
    "cos": "tl.cos({})",
    "tanh": "libdevice.tanh({})",
    "erf": "tl.erf({})",
    "sigmoid": "tl.sigmoid({})",
    "reciprocal": "(1.0 / {})",
    "floor": "tl.floor({})",
    "ceil": "tl.ceil({})",
    "round": "kiln_round({})",
    "trunc": "kiln_trunc({})",
    "frac": "({0} - kiln_trunc({0}))",
    # libdevice (see :mod:`.triton_libdevice`)
    **{
        name: f"libdevice.{name}({{}})"
        for name in (
            *("expm1", "log1p", "tan", "asin", "acos", "atan", "sinh", "cosh"),
            *("asinh", "acosh", "atanh", "erfc", "erfinv", "lgamma"),
        )
    },
}
_BINARY_SAME = {
    "add": "({} + {})",
    "sub": "({} - {})",
    "remainder": "kiln_remainder({}, {})",
    "maximum": "kiln_maximum({}, {})",
    "minimum": "kiln_minimum({}, {})",
    "bitwise_and": "({} & {})",
    "bitwise_or": "({} | {})",
    "bitwise_xor": "({} ^ {})",
    "lshift": "({} << {})",
    "rshift": "({} >> {})",
}
_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


# ---------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------


def _identity(rtype: str, dtype: torch.dtype) -> Any:
    if rtype in ("sum", "any", "welford"):
        return 0
    if rtype in ("prod", "all"):
        return 1
    maximum = rtype in ("max", "argmax")
    if _floating(dtype):
        return float("-inf") if maximum else float("inf")
    if dtype == torch.bool:
        return 0 if maximum else 1
    info = torch.iinfo(dtype)
    return info.min if maximum else info.max


_COMBINE = {
    "sum": "{a} + {b}",
    "prod": "{a} * {b}",
    "max": "kiln_reduce_max({a}, {b})",
    "min": "kiln_reduce_min({a}, {b})",
    "any": "{a} | {b}",
    "all": "{a} & {b}",
}
_REDUCE = {
    "sum": "tl.sum({v}, 1)",
    "prod": "tl.reduce({v}, 1, kiln_prod)",
    "any": "tl.max({v}, 1)",
    "all": "tl.min({v}, 1)",
}
_NO_INDEX = 2**62


@dataclass
class _Accumulator:
    """One reduction of one value in a segment: its per-lane state and final results."""

    rtype: str
    value: TritonValue
    position: TritonValue | None  # argmax/argmin: the flat inner position
    names: list[str]
    results: list[tuple[SchedulerNode, Expr]] = field(default_factory=list)  # (node, store index)


class TritonKernel:
    """Emits one fused kernel as a ``@triton.jit`` function."""

    def __init__(self, plan: KernelPlan, graph: GraphIR):
        self.plan = plan
        self.graph = graph
        self.params: dict[str, tuple[str, bool]] = {}  # buffer -> (param name, written)
        self.lines: list[str] = []
        self.depth = 1
        self.meta: dict[str, int] = {}  # constexpr block sizes
        self.forwarded: dict[tuple[str, Expr], TritonValue] = {}
        self._reduced: dict[tuple[str, Expr], TritonValue] = {}  # reduction results, whole kernel
        self._locals: dict[tuple[str, Expr], TritonValue] = {}  # the plan's local buffers
        self._tile_names: dict[tuple[int, ...], int] = {}  # inner loops -> first segment over them
        self._columns = False  # tiles wide in x, short in r (decided in ``emit``)
        self._column_xblock = TILE_ELEMENTS // COLUMN_RBLOCK  # their columns per program
        self.xnumel = _numel(plan.kernel.outer)
        self.rnumels: dict[str, Size] = {}  # RBLOCK constexpr -> its segments' inner elements
        #: the size symbols the kernel takes as ``int64`` arguments, after ``header``
        self.size_params: list[str] = []
        self.checks_indices = False  # asserts that run-time indices are in range
        self._stored: set[str] = set()
        self._tmp = 0

    def new_tmp(self) -> str:
        self._tmp += 1
        return f"tmp{self._tmp}"

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def _mask(self, mask: str, index: str, numel: Size, block: str) -> None:
        """``mask = index < numel``, through ``kiln_mask``: a constant where ``block`` (a
        constexpr the autotuner varies with the same source) divides ``numel``. A symbolic
        ``numel`` is no constexpr: its mask compares."""
        if numel == 0:  # 0 % BLOCK == 0, but no index is in range
            self.line(f"{mask} = {index} < 0")
        elif not is_static(numel):
            self.line(f"{mask} = {index} < {size_text(numel, python=True)}")
        else:
            self.line(f"{mask} = kiln_mask({index}, {numel}, {block})")

    def param(self, name: str, written: bool) -> str:
        if name not in self.params:
            self.params[name] = (f"{'out' if written else 'in'}_{name}", written)
        elif written and not self.params[name][1]:
            self.params[name] = (self.params[name][0], True)
        return self.params[name][0]

    # -- the kernel -------------------------------------------------------------------
    def emit(self) -> tuple[str, list[str], dict[str, int], tuple[int, ...]]:
        """(source with placeholder name ``KERNEL_NAME``, buffer arguments, block sizes, grid;
        a kernel that takes sizes gets its grid per call: this one is the first call's)."""
        xnumel = self.xnumel
        size = hint(xnumel)  # block sizes: for the first call's sizes
        self._columns = self._reads_down_columns()
        if self._columns:
            tiled = [g for g in self.plan.segments if self._tiled(g)]
            inner = max(_pow2(hint(_numel(g.inner))) for g in tiled)
            self._column_xblock = _column_xblock(size, min(inner, COLUMN_RBLOCK))
        rblocks = [self._rblock(seg) for seg in self.plan.segments if self._tiled(seg)]
        rows = bool(rblocks) and not self._columns and max(rblocks) >= ROW_PER_PROGRAM
        if rows:
            xblock = 1
        elif self._columns:
            xblock = self._column_xblock
        elif rblocks:
            xblock = min(_pow2(size), max(1, TILE_ELEMENTS // max(rblocks)))
        else:
            xblock = min(_pow2(size), POINTWISE_BLOCK)
        self.meta["XBLOCK"] = xblock
        tile = xblock * max(rblocks, default=1)
        per_thread = (
            ROW_PER_THREAD if rows else TILE_PER_THREAD if rblocks else POINTWISE_PER_THREAD
        )
        self.num_warps = num_warps_for(tile, per_thread)
        pid = "tl.program_id(0).to(tl.int64)" if self._wide() else "tl.program_id(0)"
        self.line(f"xindex = {pid} * XBLOCK + tl.arange(0, XBLOCK)[:, None]")
        self._mask("xmask", "xindex", xnumel, "XBLOCK")
        outer_vars = unflatten(Expr.of(Var("xindex", xnumel)), self.plan.kernel.outer)
        for k, seg in enumerate(self.plan.segments):
            self._segment(k, seg, outer_vars)
        head, buffers = self.header(self.meta)
        grid = (-(-size // xblock),)
        return "\n".join(head + self.lines), buffers, self.meta, grid

    def header(self, constexprs) -> tuple[list[str], list[str]]:
        """The ``@triton.jit`` lines (buffers read, then written; the size symbols the body
        uses; then the ``constexprs``) and the buffers in argument order.

        Buffer params are renamed ``in_ptr0``, ``out_ptr0``, ... in the order the body first
        uses them, in ``self.lines`` too (``naming.py``): a layer's kernel is the same text as
        the one before it, one function compiled once (``generate_triton``).

        Sizes are ``int64`` (products of sizes may pass int32) and not specialized: Triton
        would compile a kernel of its own for a size of 1 or a multiple of 16, which the
        launcher, compiling once per pointer alignment, would then run at other sizes."""
        ordered = positional_params(self.params, "\n".join(self.lines))
        names = param_names(self.params, ordered)
        self.lines = renamed(self.lines, names)
        self.params = {b: (names[pname], w) for b, (pname, w) in self.params.items()}
        body = "\n".join(self.lines)
        self.size_params = [s.name for s in symbols_in(body, self.graph.size_sources)]
        sizes = [f"{s}: tl.int64" for s in self.size_params]
        consts = [f"{name}: tl.constexpr" for name in constexprs]
        options = [f"do_not_specialize={self.size_params}"] if self.size_params else []
        if self.checks_indices:  # keeps its asserts (``triton_launch.compile_options``)
            options.append("debug=True")
        jit = f"@triton.jit({', '.join(options)})" if options else "@triton.jit"
        pointers = [self.params[b][0] for b in ordered]
        head = [jit, f"def KERNEL_NAME({', '.join(pointers + sizes + consts)}):"]
        return head, ordered

    def emit_pointwise(self, handler: TritonOpsHandler, outer_vars: list[Expr]) -> None:
        """Emit the plan's nodes, pointwise over its outer loops only, at ``outer_vars`` in
        ``handler``'s tile: a matmul or convolution template's fused epilogue
        (``triton_templates.py``)."""
        for seg in self.plan.segments:
            self._nodes(seg, handler, outer_vars, [])

    def _wide(self) -> bool:
        """Whether an index may pass int32: a buffer of 2**31 elements or more (at some size
        in range, where sizes are symbolic)."""
        names = {n for node in self.plan.kernel.nodes for n in node.read_names()}
        names |= {n.name for n in self.plan.kernel.nodes}
        numels = (self.graph.buffer(n).layout.storage_numel() for n in names)
        return not all(known_less(numel, 2**31) for numel in numels)

    @staticmethod
    def _tiled(seg: Segment) -> bool:
        return bool(seg.inner) or any(n.is_reduction for n in seg.nodes)

    def _rblock(self, seg: Segment) -> int:
        rows = _pow2(hint(_numel(seg.inner)))
        if not self._columns:
            return min(rows, TRITON_PERSISTENT_MAX)
        largest = TILE_ELEMENTS // self._column_xblock
        if rows > largest and any(_is_welford(n) for n in seg.nodes):
            # a looped Welford keeps three accumulators a lane: batch-norm statistics ran
            # in 38 us with 64 x 32 tiles against 54 us with 64 x 64 (H200, tuned)
            largest //= 2
        return min(rows, largest)

    def _reads_down_columns(self) -> bool:
        """Whether the kernel's reductions mostly read memory contiguous along the outer loops
        and strided along the reduced ones (a sum over a matrix's rows: a bias's gradient).
        Tiles are then wide in x and short in r, so that each row of a tile is one coalesced
        read; whole rows per program would read one element per 32-byte sector."""
        outer = self.plan.kernel.outer
        if self.plan.local or not outer:  # kept values need whole rows in one block
            return False
        last_outer = Var(f"{OUTER}{len(outer) - 1}", outer[-1])
        down = along = 0
        for seg in self.plan.segments:
            if not seg.inner:
                continue
            last_inner = Var(f"{INNER}{len(seg.inner) - 1}", seg.inner[-1])
            for node in seg.nodes:
                for _, index in self.plan.body(node).loads():
                    if index.coefficient(last_inner) == 1:
                        along += 1
                    elif index.coefficient(last_outer) == 1:
                        down += 1
        return down > along

    # -- segments ---------------------------------------------------------------------
    def _segment(self, k: int, seg: Segment, outer_vars: list[Expr]) -> None:
        """Emit one segment: straight-line code, a persistent tile or a loop over r blocks."""
        # results of earlier segments' reductions, and values they keep in registers
        self.forwarded = {**self._reduced, **self._locals}
        if any(n in self._stored for node in seg.nodes for n in node.read_names()):
            self.line("tl.debug_barrier()")  # other threads of this program wrote them
        if not self._tiled(seg):
            tile = _Tile(None, "1")
            self._nodes(seg, TritonOpsHandler(self, tile), outer_vars, [])
            return
        rnumel = _numel(seg.inner)
        rblock = self._rblock(seg)
        defined = seg.inner in self._tile_names
        k = self._tile_names.setdefault(seg.inner, k)  # one index variable per inner loops
        rname = f"r{k}index"
        self.meta[f"RBLOCK{k}"] = rblock
        self.rnumels[f"RBLOCK{k}"] = rnumel
        tile = _Tile(rname, f"RBLOCK{k}")
        inner_vars = unflatten(Expr.of(Var(rname, rnumel)), seg.inner)
        looped = not known_less(rnumel, rblock + 1)  # a block may hold a row at every size
        if not looped:
            if not defined:  # else an earlier persistent segment defined it at this level
                self.line(f"{rname} = tl.arange(0, RBLOCK{k})[None, :]")
                self._mask(f"{rname}mask", rname, rnumel, f"RBLOCK{k}")
            handler = TritonOpsHandler(self, tile)
            accs = self._nodes(seg, handler, outer_vars, inner_vars)
            for acc in accs:
                self._persistent(acc, tile, rnumel)
        else:
            loop_lines, self.lines = self.lines, []
            self.depth += 1
            self.line(f"{rname} = r{k}offset + tl.arange(0, RBLOCK{k})[None, :]")
            self._mask(f"{rname}mask", rname, rnumel, f"RBLOCK{k}")
            handler = TritonOpsHandler(self, tile)
            accs = self._nodes(seg, handler, outer_vars, inner_vars)
            for acc in accs:
                self._update(acc, tile)
            self.depth -= 1
            body, self.lines = self.lines, loop_lines
            for acc in accs:
                self._init(acc, tile)
            self.line(f"for r{k}offset in range(0, {size_text(rnumel, python=True)}, RBLOCK{k}):")
            self.lines += body
            for acc in accs:
                self._finish(acc)
        self._store_results(seg, accs, handler)

    def _nodes(self, seg, handler: TritonOpsHandler, outer_vars, inner_vars) -> list[_Accumulator]:
        """Emit each node's ops; pointwise ones store, reductions get accumulators."""
        accs: dict[tuple, _Accumulator] = {}
        for node in seg.nodes:
            body = node.body_at(outer_vars, inner_vars)
            values: dict[Value, TritonValue] = {}
            handler.run(body.compute, values)
            store = body.store
            index = store.args[1]
            if node.is_scatter:  # store(target, index, value[, mode]) into the target's storage
                handler.store(store.args[0], index, values[store.args[2]], *store.args[3:])
                continue
            reduction = body.reduction
            if reduction is None:
                self._store(node, handler, index, values[store.args[2]])
                continue
            data = node.buffer.data
            assert isinstance(data, Reduction)
            _, value, *position = reduction.args
            value = values[value]
            pos = handler.index_expr(position[0], torch.int64) if position else None
            key = (data.reduction_type, value.name)
            if key not in accs:
                names = [f"acc{len(self._reduced)}_{len(accs)}_{i}" for i in range(3)]
                accs[key] = _Accumulator(data.reduction_type, value, pos, names)
            accs[key].results.append((node, index))
        return list(accs.values())

    def _store(self, node, handler: TritonOpsHandler, index: Expr, value: TritonValue) -> None:
        dtype = node.buffer.dtype
        if value.dtype != (torch.bool if dtype == torch.bool else compute_dtype(dtype)):
            value = handler.to_dtype(value, dtype)
        self.forwarded[(node.name, index)] = value
        if node.name in self.plan.local:
            self._locals[(node.name, index)] = value
        if node.name in self.plan.stored:
            handler.store(node.name, index, value)
            self._stored.add(node.name)

    def _store_results(self, seg, accs: list[_Accumulator], handler: TritonOpsHandler) -> None:
        tile = _Tile(None, "1")
        out = TritonOpsHandler(self, tile)
        for acc in accs:
            for node, index in acc.results:
                data = node.buffer.data
                result = self._result(acc, data.output_index)
                value = out.to_dtype(result, node.buffer.dtype)
                self._reduced[(node.name, index)] = value
                if node.name in self.plan.stored:
                    out.store(node.name, index, value)
                    self._stored.add(node.name)

    # -- accumulators -----------------------------------------------------------------
    def _masked_value(self, acc: _Accumulator, tile: _Tile) -> str:
        """The value with the reduction's identity outside the tile (bool as int32)."""
        v = acc.value.name
        if acc.rtype in ("any", "all"):
            v = f"{v}.to(tl.int32)"
        init = _literal(_identity(acc.rtype, acc.value.dtype), self._acc_dtype(acc))
        return f"tl.where(xmask & {tile.rindex}mask, {v}, {init})"

    @staticmethod
    def _acc_dtype(acc: _Accumulator) -> torch.dtype:
        return torch.int32 if acc.rtype in ("any", "all") else acc.value.dtype

    def _persistent(self, acc: _Accumulator, tile: _Tile, rnumel: Size) -> None:
        """A tile holding whole rows: reduce it along r at once."""
        m = f"xmask & {tile.rindex}mask"
        v = self._masked_value(acc, tile)
        n = acc.names
        if acc.rtype == "welford":
            # each row counts ``rnumel`` elements, rows past xnumel too (never stored)
            if is_static(rnumel):
                count, divisor = float(rnumel), float(max(rnumel, 1))
            else:  # a symbolic size is at least 2
                count = divisor = f"({size_text(rnumel, python=True)})"
            self.line(f"{n[2]} = tl.full([{tile.xblock}, 1], {count}, tl.float32)")
            self.line(f"{n[0]} = tl.sum({v}, 1)[:, None] / {divisor}")
            self.line(f"{n[1]} = tl.where({m}, {acc.value} - {n[0]}, 0.0)")
            self.line(f"{n[1]} = tl.sum({n[1]} * {n[1]}, 1)[:, None]")
        elif acc.rtype in ("argmax", "argmin", "max", "min"):
            self.line(f"{n[0]}_lanes = {v}")
            self.line(f"{n[0]} = {self._extreme(acc, f'{n[0]}_lanes')}[:, None]")
            if acc.rtype in ("argmax", "argmin"):
                self._pick_position(acc, f"{n[0]}_lanes", str(acc.position), m)
        else:
            self.line(f"{n[0]} = {_REDUCE[acc.rtype].format(v=v)}[:, None]")

    def _init(self, acc: _Accumulator, tile: _Tile) -> None:
        shape = f"[XBLOCK, {tile.rblock}]"
        n = acc.names
        dtype = TL_TYPES[self._acc_dtype(acc)]
        if acc.rtype == "welford":
            for name in n:
                self.line(f"{name} = tl.zeros({shape}, tl.float32)")
            return
        init = _identity(acc.rtype, acc.value.dtype)
        text = f'float("{init}")' if isinstance(init, float) else str(init)
        self.line(f"{n[0]} = tl.full({shape}, {text}, {dtype})")
        if acc.rtype in ("argmax", "argmin"):
            self.line(f"{n[1]} = tl.full({shape}, {_NO_INDEX}, tl.int64)")

    def _update(self, acc: _Accumulator, tile: _Tile) -> None:
        """One r block into the per-lane accumulators."""
        m = f"xmask & {tile.rindex}mask"
        n = acc.names
        v = acc.value
        if acc.rtype == "welford":
            self.line(f"{n[2]} = {n[2]} + ({m}).to(tl.float32)")
            self.line(f"{n[0]}_delta = {v} - {n[0]}")
            self.line(
                f"{n[0]} = tl.where({m}, {n[0]} + {n[0]}_delta / tl.maximum({n[2]}, 1.0), {n[0]})"
            )
            self.line(f"{n[1]} = tl.where({m}, {n[1]} + {n[0]}_delta * ({v} - {n[0]}), {n[1]})")
        elif acc.rtype in ("argmax", "argmin"):
            cmp = ">" if acc.rtype == "argmax" else "<"
            better = f"({m}) & (({n[1]} == {_NO_INDEX}) | ({v} {cmp} {n[0]}) | (({v} != {v}) & ({n[0]} == {n[0]})))"
            self.line(f"{n[0]}_better = {better}")
            self.line(f"{n[0]} = tl.where({n[0]}_better, {v}, {n[0]})")
            self.line(f"{n[1]} = tl.where({n[0]}_better, {acc.position}, {n[1]})")
        else:
            combine = _COMBINE[acc.rtype].format(a=n[0], b=self._masked_value(acc, tile))
            self.line(f"{n[0]} = {combine}")

    def _finish(self, acc: _Accumulator) -> None:
        """The per-lane accumulators reduced along r."""
        n = acc.names
        if acc.rtype == "welford":
            # Chan's merge of all lanes at once: the weighted mean of the lane means, and m2
            # plus each lane's weight times its mean's squared distance from it. Sums only:
            # a tree on the GPU (the interpreter reduces lane after lane, which loses digits
            # merging pairs of states), and no 3-tuple combine function.
            mean, m2, weight = n
            self.line(f"{weight}_row = tl.sum({weight}, 1)[:, None]")
            self.line(
                f"{mean}_row = tl.sum({mean} * {weight}, 1)[:, None] / tl.maximum({weight}_row, 1.0)"
            )
            self.line(f"{mean}_spread = {mean} - {mean}_row")
            self.line(f"{m2} = tl.sum({m2} + {weight} * {mean}_spread * {mean}_spread, 1)[:, None]")
            self.line(f"{mean}, {weight} = {mean}_row, {weight}_row")
        elif acc.rtype in ("argmax", "argmin", "max", "min"):
            self.line(f"{n[0]}_lanes = {n[0]}")
            self.line(f"{n[0]} = {self._extreme(acc, f'{n[0]}_lanes')}[:, None]")
            if acc.rtype in ("argmax", "argmin"):
                self._pick_position(acc, f"{n[0]}_lanes", n[1], f"{n[1]} != {_NO_INDEX}")
        else:
            self.line(f"{n[0]} = {_REDUCE[acc.rtype].format(v=n[0])}[:, None]")

    @staticmethod
    def _extreme(acc: _Accumulator, lanes: str) -> str:
        """The row maximum (minimum) of ``lanes``: NaN where the row holds one, as in eager
        (``tl.max`` may skip NaN), in one reduction whose combine keeps NaN."""
        maximum = acc.rtype in ("max", "argmax")
        fn = "tl.max" if maximum else "tl.min"
        if acc.value.dtype == torch.bool:
            return f"({fn}({lanes}.to(tl.int32), 1) != 0)"
        if not _floating(acc.value.dtype):
            return f"{fn}({lanes}, 1)"
        return f"tl.reduce({lanes}, 1, {'kiln_reduce_max' if maximum else 'kiln_reduce_min'})"

    def _pick_position(self, acc: _Accumulator, lanes: str, positions: str, valid: str) -> None:
        """The first position whose value is the extreme (NaN counts as the extreme)."""
        n = acc.names
        hit = f"(({lanes} == {n[0]}) | (({lanes} != {lanes}) & ({n[0]} != {n[0]})))"
        self.line(
            f"{n[1]} = tl.min(tl.where({hit} & ({valid}), {positions}, {_NO_INDEX}), 1)[:, None]"
        )

    def _result(self, acc: _Accumulator, output_index: int) -> TritonValue:
        n = acc.names
        if acc.rtype == "welford":
            return TritonValue(n[output_index], torch.float32, frozenset("x"))
        if acc.rtype in ("argmax", "argmin"):
            return TritonValue(n[1], torch.int64, frozenset("x"))
        if acc.rtype in ("any", "all"):
            return TritonValue(f"({n[0]} != 0)", torch.bool, frozenset("x"))
        return TritonValue(n[0], acc.value.dtype, frozenset("x"))


#: longest run of op names in a kernel's name (profilers cut long names)
NAME_OPS_CHARS = 60


def _kernel_name(plan: KernelPlan, key: str) -> str:
    """``kiln_{red|poi}_{the ops it fuses}_{hash of its text and launch}``, as profilers list
    it: ``kiln_red_native_batch_norm_backward_threshold_backward_5f0c2a1e``."""
    nodes = plan.kernel.nodes
    kind = "red" if any(n.is_reduction for n in nodes) else "poi"
    ops = "_".join(dict.fromkeys(n.buffer.origin for n in nodes if n.buffer.origin))
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return f"kiln_{kind}_{ops[:NAME_OPS_CHARS].rstrip('_')}_{digest}".replace("__", "_")


def num_warps_for(tile_elements: int, per_thread: int = POINTWISE_PER_THREAD) -> int:
    """Warps per program: ``per_thread`` elements of a tile per thread, between 2 and 8
    warps (a 1024-element pointwise block gets Triton's default 4, and so does a row of
    1024 elements)."""
    return max(2, min(8, tile_elements // (32 * per_thread)))


def _is_welford(node) -> bool:
    data = node.buffer.data
    return isinstance(data, Reduction) and data.reduction_type == "welford"


def _numel(sizes: tuple[Size, ...]) -> Size:
    return as_size(math.prod(sizes))


def _column_xblock(xnumel: int, rblock: int) -> int:
    """Columns per program of a kernel reducing down columns ``rblock`` rows at a time: a
    tile's worth, halved (not below ``COLUMN_MIN_XBLOCK``) while that leaves fewer than
    ``COLUMN_MIN_PROGRAMS`` programs."""
    xblock = min(_pow2(xnumel), TILE_ELEMENTS // rblock)
    while xblock > COLUMN_MIN_XBLOCK and -(-xnumel // xblock) < COLUMN_MIN_PROGRAMS:
        xblock //= 2
    return xblock


def _pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


# ---------------------------------------------------------------------------
# Module and launches
# ---------------------------------------------------------------------------


def generate_triton(
    plans: dict[str, KernelPlan], graph: GraphIR, autotune: TuningSettings | None = None
) -> tuple[TritonModule, dict]:
    """The Triton module of every planned kernel, and per kernel name its launch; ``autotune``:
    tune kernels at their first call (``TritonModule.autotune``).

    Kernels of the same text and launch (dtypes, blocks, grid: all but the buffers passed)
    share one function, named by their hash: a model's layers compile each kernel once. Its
    ``in_place`` marks a param where any of its launches writes over values."""
    sources: dict[str, str] = {}
    names: dict[str, str] = {}  # text and launch signature -> the function that runs them
    shared: dict[str, KernelLaunch] = {}  # function name -> the launch its tuner sees
    by_step: dict[str, KernelLaunch] = {}
    for kernel_name, plan in plans.items():
        kernel = TritonKernel(plan, graph)
        text, params, meta, grid = kernel.emit()
        buffers = [graph.buffer(p) for p in params]
        launch = KernelLaunch(
            "",
            tuple(params),
            grid,
            tuple(meta.items()),
            kernel.num_warps,
            tuple(b.dtype for b in buffers),
            str(buffers[0].layout.device),
            kernel.xnumel,
            tuple(kernel.rnumels.items()),
            tuple(kernel.params[p][1] and p not in plan.stored for p in params),
            tuple(kernel.size_params),
        )
        key = f"{text}\n{replace(launch, params=(), in_place=())!r}"
        name = names.get(key)
        if name is None:  # the first of its kind names it, by the ops it fuses
            name = names[key] = _kernel_name(plan, key)
            sources[name] = text.replace("KERNEL_NAME", name)
        launch = by_step[kernel_name] = replace(launch, name=name)
        first = shared.setdefault(name, launch)
        in_place = tuple(a or b for a, b in zip(first.in_place, launch.in_place, strict=True))
        shared[name] = replace(first, in_place=in_place)
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    prelude = PRELUDE.replace("{round_bf16}", _ROUND_BF16[interpreted])
    prelude = prelude.replace("{libdevice}", libdevice_binding(interpreted)).rstrip("\n")
    source = "\n\n\n".join([prelude, *sources.values()]) + "\n"
    return TritonModule(source, tuple(shared.values()), autotune), by_step
