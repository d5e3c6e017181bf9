"""C++/OpenMP code generation for fused kernels.

In: a :class:`~torchkiln_inductor.kernel_plan.KernelPlan` (its segments, and
each node's ops list). Out: one ``extern "C"`` function. The outer loops run
in parallel with OpenMP (when the work is big enough, unless the kernel is generated
``serial``: a variant that max_autotune measures, ``autotune/cpp_configs.py``); each
node's ops are emitted through :class:`CppOpsHandler`, which turns every op into a typed
C++ statement with common-subexpression elimination. The nodes of a segment share
one loop; a value stored and read at the same index in a segment is forwarded
in a register, and a reduction result read later in the kernel stays a local
scalar. Reductions accumulate in ``simdlen`` independent lanes so gcc
vectorizes them, then combine the lanes (sums pairwise); long float sums and
Welford states move their lanes into double totals block by block
(:mod:`.cpp_blocked`), as accurate as eager's; Welford reductions accumulate
their inputs less the first one, so data far from zero keeps var's accuracy.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sympy
import torch

from ..indexing import Expr, Indirect, Var, contiguous_strides, linear_index
from ..ir import GraphIR, Reduction, Scatter
from ..kernel_plan import KernelPlan, Segment, merge_loops, node_indices
from ..loop_body import Op, Value, compute_dtype
from ..scheduler import INNER, OUTER, SchedulerNode, kernel_vars
from ..sizes import (
    Size,
    all_static,
    as_size,
    floor_quotient,
    hint,
    is_static,
    size_text,
    symbols_in,
)
from .cpp_blocked import Blocked, BlockPlan, plan_blocks, stepping_loop
from .naming import param_names, positional_params, renamed

PRELUDE = (Path(__file__).with_name("cpp_prelude.h")).read_text()

STORAGE_TYPES = {
    torch.float32: "float",
    torch.float64: "double",
    torch.float16: "uint16_t",
    torch.bfloat16: "uint16_t",
    torch.int8: "int8_t",
    torch.uint8: "uint8_t",
    torch.int16: "int16_t",
    torch.int32: "int32_t",
    torch.int64: "int64_t",
    torch.bool: "bool",
}
COMPUTE_TYPES = {**STORAGE_TYPES, torch.float16: "float", torch.bfloat16: "float"}
FLOAT_TYPES = (torch.float32, torch.float64)
#: a half-precision value computed in float, rounded to what its dtype holds
_ROUND = {torch.bfloat16: "kiln_round_bf16", torch.float16: "kiln_round_f16"}
#: a kernel's local: the number of a bounds check of a run-time index that failed
BAD_INDEX = "kiln_bad_index"


def _checking(line: str) -> str:
    """A line of a kernel that checks its run-time indices: each thread's :data:`BAD_INDEX`
    is its own, the largest kept (``reduction(max:...)``), and ``omp simd`` loops become
    ``GCC ivdep`` ones (the same promise of independent iterations): under ``omp simd`` the
    check's rare store kept gcc from hoisting an index that is the same on every iteration
    (an embedding's row), and the loop ran at half speed; under ``ivdep`` gcc hoists the
    check out of the loop and vectorizes the rest as without it."""
    code = line.lstrip()
    indent = line[: len(line) - len(code)]
    if code.startswith("#pragma omp parallel for"):
        code = code.replace("parallel for simd", "parallel for", 1)
        return f"{indent}{code} reduction(max:{BAD_INDEX})"
    if code.startswith("#pragma omp simd"):
        return f"{indent}#pragma GCC ivdep"
    return line


def ctype(dtype: torch.dtype) -> str:
    return COMPUTE_TYPES[compute_dtype(dtype)]


@dataclass(frozen=True)
class CppValue:
    name: str
    dtype: torch.dtype  # a compute dtype

    def __str__(self) -> str:
        return self.name


class _Scope:
    """Emitted lines plus the CSE table; nested scopes see their parents' entries."""

    def __init__(self, parent: _Scope | None = None):
        self.lines: list[str] = []
        self.cse: dict[str, CppValue] = {}
        self.parent = parent

    def lookup(self, key: str) -> CppValue | None:
        scope: _Scope | None = self
        while scope is not None:
            if key in scope.cse:
                return scope.cse[key]
            scope = scope.parent
        return None


def cpp_literal(value: Any, dtype: torch.dtype) -> str:
    dtype = compute_dtype(dtype)
    if isinstance(value, sympy.Expr):  # a symbolic size: computed from the kernel's arguments
        return f"static_cast<{COMPUTE_TYPES[dtype]}>({size_text(value)})"
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype.is_floating_point:
        t = COMPUTE_TYPES[dtype]
        value = float(value)
        if math.isnan(value):
            return f"std::numeric_limits<{t}>::quiet_NaN()"
        if math.isinf(value):
            sign = "-" if value < 0 else ""
            return f"{sign}std::numeric_limits<{t}>::infinity()"
        return f"static_cast<{t}>({value!r})"
    value = int(value)
    if dtype == torch.int64 and value == -(2**63):
        return "std::numeric_limits<int64_t>::min()"
    return f"static_cast<{COMPUTE_TYPES[dtype]}>({value}LL)"


_UNARY_FLOAT = {
    "exp": "std::exp({x})",
    "exp2": "std::exp2({x})",
    "expm1": "std::expm1({x})",
    "log": "std::log({x})",
    "log2": "std::log2({x})",
    "log10": "std::log10({x})",
    "log1p": "std::log1p({x})",
    "sqrt": "std::sqrt({x})",
    "rsqrt": "{one} / std::sqrt({x})",
    "sin": "std::sin({x})",
    "cos": "std::cos({x})",
    "tan": "std::tan({x})",
    "asin": "std::asin({x})",
    "acos": "std::acos({x})",
    "atan": "std::atan({x})",
    "sinh": "std::sinh({x})",
    "cosh": "std::cosh({x})",
    "tanh": "std::tanh({x})",
    "asinh": "std::asinh({x})",
    "acosh": "std::acosh({x})",
    "atanh": "std::atanh({x})",
    "erf": "kiln_erf({x})",
    "erfc": "std::erfc({x})",
    "erfinv": "static_cast<{t}>(kiln_erfinv({x}))",
    "sigmoid": "kiln_sigmoid({x})",
    "reciprocal": "{one} / {x}",
    "floor": "std::floor({x})",
    "ceil": "std::ceil({x})",
    "round": "std::nearbyint({x})",
    "trunc": "std::trunc({x})",
    "lgamma": "std::lgamma({x})",
    "frac": "({x} - std::trunc({x}))",
}


@dataclass
class _Env:
    """What one body's values became in C++, and the indices its ``indirect_indexing`` read."""

    values: dict[Value, CppValue] = field(default_factory=dict)
    indices: dict[Indirect, Expr] = field(default_factory=dict)

    def resolve(self, arg: Any) -> Any:
        """An op's argument in C++ terms: its value, or an index with its run-time atoms."""
        if isinstance(arg, Value):
            return self.values[arg]
        if isinstance(arg, Expr) and self.indices:
            return arg.subs(self.indices)
        return arg


class CppOpsHandler:
    """Emits ops as C++ into the current scope of a kernel, one method per op."""

    def __init__(self, kernel: CppKernel, scope: _Scope):
        self.kernel = kernel
        self.scope = scope

    # -- reading an ops list ----------------------------------------------------------
    def run(self, ops: tuple[Op, ...], env: _Env) -> None:
        """Emit ``ops`` (a body's ops before its ``reduction`` and ``store``) into ``env``."""
        for op in ops:
            args = [env.resolve(a) for a in op.args]
            if op.name == "masked":
                block = op.block
                assert block is not None

                def run_block(block=block) -> CppValue:
                    self.run(block.ops, env)
                    return env.values[block.result]

                env.values[op.out] = self.masked(args[0], run_block, args[1])
            elif op.name == "indirect_indexing":
                env.indices[op.indirect_atom()] = self.indirect_indexing(*args)
            else:
                env.values[op.out] = getattr(self, op.name)(*args)

    # -- plumbing -------------------------------------------------------------
    def _emit(self, text: str, dtype: torch.dtype, lines: list[str] | None = None) -> CppValue:
        """``text`` as a new temporary (or the one computed before); ``lines``: where, if not here."""
        dtype = compute_dtype(dtype)
        key = f"{COMPUTE_TYPES[dtype]}|{text}"
        hit = self.scope.lookup(key)
        if hit is not None:
            return hit
        name = self.kernel.new_tmp()
        (self.scope.lines if lines is None else lines).append(
            f"{COMPUTE_TYPES[dtype]} {name} = {text};"
        )
        value = CppValue(name, dtype)
        self.scope.cse[key] = value
        return value

    def index(self, expr: Expr) -> str:
        return expr.render()

    # -- memory and constants ----------------------------------------------------
    def load(self, name: str, index: Expr) -> CppValue:
        forwarded = self.kernel.forwarded(name, index)
        if forwarded is not None:
            return forwarded
        slot = self.kernel.local_slot(name)
        if slot is not None:
            return self._emit(slot, self.kernel.graph.buffer(name).dtype)
        ptr, dtype = self.kernel.input_pointer(name)
        raw = f"{ptr}[{self.index(index)}]"
        if dtype == torch.bfloat16:
            raw = f"kiln_bf16_to_float({raw})"
        elif dtype == torch.float16:
            raw = f"kiln_f16_to_float({raw})"
        hoisted = self.kernel.hoisted
        if (
            hoisted is not None
            and self.scope.parent is None
            and self.kernel.is_loop_invariant(name, index)
        ):
            return self._emit(raw, dtype, hoisted)
        return self._emit(raw, dtype)

    def constant(self, value: Any, dtype: torch.dtype) -> CppValue:
        return self._emit(cpp_literal(value, dtype), dtype)

    def index_expr(self, expr: Expr, dtype: torch.dtype) -> CppValue:
        return self._emit(f"static_cast<{ctype(dtype)}>({self.index(expr)})", dtype)

    def to_dtype(self, x: CppValue, dtype: torch.dtype) -> CppValue:
        target = compute_dtype(dtype)
        if dtype == torch.bool:
            return x if x.dtype == torch.bool else self._emit(f"({x} != 0)", torch.bool)
        if target == x.dtype:
            out = x
        else:
            out = self._emit(f"static_cast<{COMPUTE_TYPES[target]}>({x})", target)
        if dtype in _ROUND:
            out = self._emit(f"{_ROUND[dtype]}({out})", target)
        return out

    def indirect_indexing(self, x: CppValue, size: Size, wrap: bool = True) -> Expr:
        """An index read at run time, negative ones counted from the end; one outside
        ``[0, size)`` is reported (the kernel returns its check's number: the wrapper raises
        IndexError, as eager does) and read as 0, so that no access leaves the buffer."""
        name = self.kernel.new_tmp("idx")
        text = f"static_cast<int64_t>({x})"
        signed = f"{size}LL" if is_static(size) else size_text(size)
        unsigned = f"{size}ULL" if is_static(size) else f"static_cast<uint64_t>({signed})"
        if wrap:
            self.scope.lines.append(f"int64_t {name} = {text} < 0 ? {text} + {signed} : {text};")
        else:
            self.scope.lines.append(f"int64_t {name} = {text};")
        self.kernel.index_sizes.append(size)
        check = len(self.kernel.index_sizes)
        self.scope.lines.append(
            f"if (__builtin_expect(static_cast<uint64_t>({name}) >= {unsigned}, 0)) "
            f"{{ {BAD_INDEX} = {check}; {name} = 0; }}"
        )
        return Expr.of(Indirect(name, size))

    def masked(self, mask: CppValue, body, other: Any) -> CppValue:
        """``body()`` where ``mask`` holds, else ``other``; body's loads run only under the mask."""
        outer = self.scope
        inner = _Scope(parent=outer)
        self.scope = inner
        try:
            result = body()
        finally:
            self.scope = outer
        dtype = result.dtype
        name = self.kernel.new_tmp()
        t = COMPUTE_TYPES[dtype]
        lines = [f"{t} {name} = {cpp_literal(other, dtype)};", f"if ({mask}) {{"]
        lines += ["    " + line for line in inner.lines]
        lines += [f"    {name} = {result};", "}"]
        outer.lines.extend(lines)
        return CppValue(name, dtype)

    def where(self, cond: CppValue, a: CppValue, b: CppValue) -> CppValue:
        dtype = a.dtype
        return self._emit(f"({cond} ? {a} : static_cast<{COMPUTE_TYPES[dtype]}>({b}))", dtype)

    def rand(self, seed_index: int, offset: Expr, dtype: torch.dtype) -> CppValue:
        seed = self.load(self.kernel.seed_buffer, Expr.of(seed_index))
        return self._emit(
            f"static_cast<{ctype(dtype)}>(kiln_rand({seed}, {self.index(offset)}))", dtype
        )

    def randn(self, seed_index: int, offset: Expr, dtype: torch.dtype) -> CppValue:
        seed = self.load(self.kernel.seed_buffer, Expr.of(seed_index))
        return self._emit(
            f"static_cast<{ctype(dtype)}>(kiln_randn({seed}, {self.index(offset)}))", dtype
        )

    # -- math ----------------------------------------------------------------------
    def __getattr__(self, name: str):
        if name in _UNARY_FLOAT:
            template = _UNARY_FLOAT[name]

            def unary(x: CppValue) -> CppValue:
                t = COMPUTE_TYPES[x.dtype]
                if x.dtype not in FLOAT_TYPES:
                    raise TypeError(f"ops.{name} needs a floating value, got {x.dtype}")
                return self._emit(template.format(x=x, t=t, one=f"static_cast<{t}>(1)"), x.dtype)

            return unary
        raise AttributeError(name)

    def neg(self, x):
        if x.dtype == torch.bool:
            return x
        return self._emit(f"static_cast<{COMPUTE_TYPES[x.dtype]}>(-{x})", x.dtype)

    def abs(self, x):
        if x.dtype == torch.bool:
            return x
        return self._emit(f"static_cast<{COMPUTE_TYPES[x.dtype]}>(std::abs({x}))", x.dtype)

    def relu(self, x):
        zero = cpp_literal(0, x.dtype)
        return self._emit(f"({x} < {zero} ? {zero} : {x})", x.dtype)

    def sign(self, x):
        return self._emit(f"kiln_sign({x})", x.dtype)

    def signbit(self, x):
        if x.dtype in FLOAT_TYPES:
            return self._emit(f"std::signbit({x})", torch.bool)
        return self._emit(f"({x} < 0)", torch.bool)

    def logical_not(self, x):
        return self._emit(f"!({x})", torch.bool)

    def bitwise_not(self, x):
        if x.dtype == torch.bool:
            return self._emit(f"!({x})", torch.bool)
        return self._emit(f"static_cast<{COMPUTE_TYPES[x.dtype]}>(~{x})", x.dtype)

    def isnan(self, x):
        return self._emit(f"std::isnan({x})" if x.dtype in FLOAT_TYPES else "false", torch.bool)

    def isinf(self, x):
        return self._emit(f"std::isinf({x})" if x.dtype in FLOAT_TYPES else "false", torch.bool)

    def isfinite(self, x):
        return self._emit(f"std::isfinite({x})" if x.dtype in FLOAT_TYPES else "true", torch.bool)

    def _arith(self, a, b, op):
        t = COMPUTE_TYPES[a.dtype]
        return self._emit(f"static_cast<{t}>({a} {op} {b})", a.dtype)

    def add(self, a, b):
        return self._arith(a, b, "+")

    def sub(self, a, b):
        return self._arith(a, b, "-")

    def mul(self, a, b):
        if a.dtype == torch.bool:
            return self._emit(f"({a} && {b})", torch.bool)
        return self._arith(a, b, "*")

    def truediv(self, a, b):
        return self._arith(a, b, "/")

    def trunc_div(self, a, b):
        if a.dtype in FLOAT_TYPES:
            return self._emit(f"std::trunc({a} / {b})", a.dtype)
        return self._arith(a, b, "/")

    def floordiv(self, a, b):
        return self._emit(f"kiln_floordiv({a}, {b})", a.dtype)

    def remainder(self, a, b):
        return self._emit(f"kiln_remainder({a}, {b})", a.dtype)

    def fmod(self, a, b):
        if a.dtype in FLOAT_TYPES:
            return self._emit(f"std::fmod({a}, {b})", a.dtype)
        return self._arith(a, b, "%")

    def pow(self, a, b):
        if a.dtype in FLOAT_TYPES:
            return self._emit(f"std::pow({a}, {b})", a.dtype)
        return self._emit(f"kiln_ipow({a}, {b})", a.dtype)

    def maximum(self, a, b):
        return self._emit(f"kiln_max({a}, {b})", a.dtype)

    def minimum(self, a, b):
        return self._emit(f"kiln_min({a}, {b})", a.dtype)

    def atan2(self, a, b):
        return self._emit(f"std::atan2({a}, {b})", a.dtype)

    def hypot(self, a, b):
        return self._emit(f"std::hypot({a}, {b})", a.dtype)

    def copysign(self, a, b):
        return self._emit(f"std::copysign({a}, {b})", a.dtype)

    def _compare(self, a, b, op):
        return self._emit(f"({a} {op} {b})", torch.bool)

    def eq(self, a, b):
        return self._compare(a, b, "==")

    def ne(self, a, b):
        return self._compare(a, b, "!=")

    def lt(self, a, b):
        return self._compare(a, b, "<")

    def le(self, a, b):
        return self._compare(a, b, "<=")

    def gt(self, a, b):
        return self._compare(a, b, ">")

    def ge(self, a, b):
        return self._compare(a, b, ">=")

    def logical_and(self, a, b):
        return self._emit(f"(({a} != 0) && ({b} != 0))", torch.bool)

    def logical_or(self, a, b):
        return self._emit(f"(({a} != 0) || ({b} != 0))", torch.bool)

    def logical_xor(self, a, b):
        return self._emit(f"(({a} != 0) != ({b} != 0))", torch.bool)

    def bitwise_and(self, a, b):
        return self._arith(a, b, "&")

    def bitwise_or(self, a, b):
        return self._arith(a, b, "|")

    def bitwise_xor(self, a, b):
        if a.dtype == torch.bool:
            return self._emit(f"({a} != {b})", torch.bool)
        return self._arith(a, b, "^")

    def lshift(self, a, b):
        return self._arith(a, b, "<<")

    def rshift(self, a, b):
        return self._arith(a, b, ">>")


# ---------------------------------------------------------------------------
# Kernel emission
# ---------------------------------------------------------------------------

_INIT = {
    "sum": lambda dt: cpp_literal(0, dt),
    "prod": lambda dt: cpp_literal(1, dt),
    "any": lambda dt: "false",
    "all": lambda dt: "true",
    "max": lambda dt: (
        cpp_literal(float("-inf"), dt)
        if dt in FLOAT_TYPES
        else (
            "false" if dt == torch.bool else f"std::numeric_limits<{COMPUTE_TYPES[dt]}>::lowest()"
        )
    ),
    "min": lambda dt: (
        cpp_literal(float("inf"), dt)
        if dt in FLOAT_TYPES
        else ("true" if dt == torch.bool else f"std::numeric_limits<{COMPUTE_TYPES[dt]}>::max()")
    ),
}
_COMBINE = {
    "sum": "{a} = {a} + {b};",
    "prod": "{a} = {a} * {b};",
    "any": "{a} = {a} || {b};",
    "all": "{a} = {a} && {b};",
    "max": "{a} = kiln_max({a}, {b});",
    "min": "{a} = kiln_min({a}, {b});",
}


@dataclass
class _Accumulator:
    names: list[str]
    dtype: torch.dtype
    reduction_type: str
    blocked: Blocked | None = None  # a long float sum or welford: double totals (cpp_blocked)
    # a float welford's shift: the C++ value (``{lane}``: the lane's, in column mode) taken
    # from every input and added back to the mean; "" when unshifted
    shift: str = ""


class CppKernel:
    """Emits one fused kernel as an ``extern "C"`` C++ function."""

    def __init__(
        self,
        plan: KernelPlan,
        graph: GraphIR,
        simdlen: int,
        threads: int | None,
        parallel_threshold: int,
        serial: bool = False,
    ):
        self.plan = plan
        self.graph = graph
        self.simdlen = simdlen
        self.threads = threads
        self.parallel_threshold = parallel_threshold
        self.serial = serial  # no OpenMP loop, whatever the work
        self.seed_buffer = graph.seed_buffer.name if graph.seed_buffer is not None else ""
        #: per bounds check of a run-time index (numbered from 1), the size it checks against
        self.index_sizes: list[Size] = []
        #: the size symbols the kernel takes as ``int64_t`` arguments, after ``emit``
        self.size_params: list = []
        self._tmp = 0
        self.params: dict[str, tuple[str, bool]] = {}  # buffer -> (param name, written)
        self._forward: dict[tuple[str, Expr], CppValue] = {}
        self._locals: dict[tuple[str, Expr], CppValue] = {}
        self._inner_vars: list[Expr] = []
        # while a segment is generated (not in column mode, whose lanes run over an outer
        # variable): its loads that read one element on every inner iteration, emitted once
        # before its loops (gcc leaves a loop that reloads one through a pointer scalar)
        self.hoisted: list[str] | None = None

    def new_tmp(self, prefix: str = "tmp") -> str:
        self._tmp += 1
        return f"{prefix}{self._tmp}"

    # -- buffers ----------------------------------------------------------------
    def _param(self, name: str, written: bool) -> str:
        if name not in self.params:
            self.params[name] = (f"{'out' if written else 'in'}_{name}", written)
        elif written and not self.params[name][1]:
            self.params[name] = (self.params[name][0], True)
        return self.params[name][0]

    def is_loop_invariant(self, name: str, index: Expr) -> bool:
        """Whether loading ``name[index]`` may move before the inner loops: an index of outer
        variables only, from a buffer this kernel does not write."""
        if not self._inner_vars or any(not isinstance(a, Var) for a, _ in index.terms):
            return False  # no inner loop, or an indirect / div / mod index
        if any(v.name.startswith(INNER) for v in index.free_vars()):
            return False
        written = {n.name for n in self.plan.kernel.nodes} | {
            n for n, (_, w) in self.params.items() if w
        }
        return name not in written

    def input_pointer(self, name: str) -> tuple[str, torch.dtype]:
        return self._param(name, False), self.graph.buffer(name).dtype

    def forwarded(self, name: str, index: Expr) -> CppValue | None:
        return self._forward.get((name, index)) or self._locals.get((name, index))

    def local_slot(self, name: str) -> str | None:
        """``local_<name>[flat inner index]`` for a buffer kept in a per-thread array."""
        if name not in self.plan.local:
            return None
        flat = linear_index(self._inner_vars, contiguous_strides(self.plan.local[name]))
        return f"local_{name}[{flat.render()}]"

    # -- emission -------------------------------------------------------------------
    def emit(self) -> tuple[str, list[tuple[str, bool]]]:
        """Returns (function body with placeholder name ``KERNEL_NAME``, [(buffer, written)])."""
        kernel = self.plan.kernel
        outer = kernel.outer
        outer_vars = kernel_vars(OUTER, outer)
        body: list[str] = []
        for name, inner in self.plan.local.items():
            t = ctype(self.graph.buffer(name).dtype)
            body.append(f"alignas(64) {t} local_{name}[{math.prod(inner)}];")
        pointwise_only = len(self.plan.segments) == 1 and not self.plan.segments[0].inner
        if self._column_mode():
            loops = self._column_kernel(outer, outer_vars)
        else:
            if pointwise_only:
                nodes = kernel.nodes
                outer, outer_vars = merge_loops(
                    outer, OUTER, lambda candidate: node_indices(nodes, candidate, [])
                )
            for seg in self.plan.segments:
                body += self._segment(seg, outer_vars)
            loops = self._outer_loops(outer, body, pointwise_only)
        # params and local arrays named by position (naming.py): a layer's kernel is the
        # same text as the one before it, compiled once
        ordered = positional_params(self.params, "\n".join(loops))
        names = param_names(self.params, ordered)
        names |= {f"local_{name}": f"local{i}" for i, name in enumerate(self.plan.local)}
        loops = renamed(loops, names)
        params = []
        for name in ordered:
            pname, written = self.params[name]
            const = "" if written else "const "
            params.append(f"{const}{STORAGE_TYPES[self.graph.buffer(name).dtype]}* {names[pname]}")
        text = "\n".join(loops)
        self.size_params = symbols_in(text, self.graph.size_sources)
        params += [f"int64_t {s}" for s in self.size_params]
        if self.index_sizes:  # returns which check failed, 0 if none
            sig = f'extern "C" int64_t KERNEL_NAME({", ".join(params)})'
            loops = [f"int64_t {BAD_INDEX} = 0;", *map(_checking, loops), f"return {BAD_INDEX};"]
        else:
            sig = f'extern "C" void KERNEL_NAME({", ".join(params)})'
        text = "\n".join([sig + " {", *("    " + line for line in loops), "}"])
        return text, [(name, self.params[name][1]) for name in ordered]

    # -- column reductions: lanes run along the last outer dimension ---------------------
    def _column_mode(self) -> bool:
        """A reduction whose reduced elements are strided but whose outputs are contiguous.

        Reducing dim 0 of a row-major matrix reads memory column-wise; vectorizing over
        the inner loop would gather. Instead the lanes are consecutive outputs: each lane
        accumulates its own output while the reduction loop walks down the rows.
        """
        segs = self.plan.segments
        outer = self.plan.kernel.outer
        if not outer or not segs or not segs[0].inner or any(s.inner for s in segs[1:]):
            return False
        if self.simdlen < 2 or not any(n.is_reduction for n in segs[0].nodes):
            return False
        last_outer = kernel_vars(OUTER, outer)[-1]
        last_inner = kernel_vars(INNER, segs[0].inner)[-1]
        contiguous_out = strided_in = False
        for node in segs[0].nodes:
            reads, _ = node.accesses(outer)
            for _, index in reads:
                ov = next(iter(last_outer.free_vars()))
                iv = next(iter(last_inner.free_vars()))
                if index.coefficient(iv) == 1:
                    return False
                if index.coefficient(ov) == 1:
                    contiguous_out = True
                if index.coefficient(iv) not in (0, 1):
                    strided_in = True
        return contiguous_out and strided_in

    def _column_kernel(self, outer: tuple[int, ...], outer_vars: list[Expr]) -> list[str]:
        lanes = self.simdlen * 4
        first, rest = self.plan.segments[0], self.plan.segments[1:]
        n = len(outer) - 1
        body, updates, results, inner = self._segment_body(first, outer_vars)
        shifts = self._welford_shifts(first, outer_vars, inner, results)
        blocks = self._plan_blocks(updates, lanes, inner[-1], _product(inner[:-1]), "nb")
        lines = blocks.declare() if blocks else []
        for acc, _, _ in updates:
            lines += self._acc_init(acc, lanes)
        lines += self._shift_init(*shifts, lanes, f"int64_t o{n} = ob + l;")
        for d, size in enumerate(inner[:-1]):
            lines.append(f"{'    ' * d}for (int64_t i{d} = 0; i{d} < {size_text(size)}; ++i{d}) {{")
        step = [p for a, _, _ in updates for p in self._block_prologue(a)]
        step += ["#pragma omp simd", "for (int64_t l = 0; l < nb; ++l) {"]
        step.append(f"    int64_t o{n} = ob + l;")
        step += [f"    {b}" for b in body]
        step += [f"    {self._acc_update(a, v, f, 'l', 'lane')}" for a, v, f in updates]
        step.append("}")
        last = len(inner) - 1
        ind = "    " * last
        lines += [ind + x for x in stepping_loop(f"i{last}", inner[-1], 1, step, blocks)]
        lines += ["    " * d + "}" for d in reversed(range(last))]
        lines += self._blocks_finish(updates)
        for acc, _, _ in updates:
            if acc.reduction_type == "welford":
                b = acc.names[0]
                lines.append(f"for (int l = 0; l < nb; ++l) {acc.names[2]}[l] = {b}_count;")
        tail = [f"int64_t o{n} = ob + l;", *self._results(results, "l")]
        for seg in rest:
            tail += self._segment(seg, outer_vars)
        lines += ["for (int64_t l = 0; l < nb; ++l) {", *("    " + t for t in tail), "}"]
        out = []
        parallel = not self.serial and self._work() >= self.parallel_threshold
        if parallel:
            clauses = [f"collapse({len(outer)})"] if len(outer) > 1 else []
            if self.threads:
                clauses.append(f"num_threads({self.threads})")
            out.append(" ".join(["#pragma omp parallel for", *clauses]))
        for d, size in enumerate(outer[:-1]):
            out.append(f"{'    ' * d}for (int64_t o{d} = 0; o{d} < {size_text(size)}; ++o{d}) {{")
        ind = "    " * n
        last = size_text(outer[-1])
        out.append(f"{ind}for (int64_t ob = 0; ob < {last}; ob += {lanes}) {{")
        out.append(f"{ind}    const int64_t nb = std::min<int64_t>({lanes}, {last} - ob);")
        out += [f"{ind}    {line}" for line in lines]
        out.append(f"{ind}}}")
        out += ["    " * d + "}" for d in reversed(range(n))]
        return out

    def _work(self) -> int:
        """Elements the kernel visits (at the hint's sizes: it decides on threads only)."""
        outer = hint(_product(self.plan.kernel.outer))
        inner = sum(max(hint(_product(s.inner)), 1) for s in self.plan.segments)
        return outer * inner

    def _outer_loops(
        self, outer: tuple[int, ...], body: list[str], pointwise_only: bool
    ) -> list[str]:
        if not outer:
            return ["{", *("    " + b for b in body), "}"]
        # a pointwise-only kernel keeps its last dimension serial for gcc to vectorize
        vector_last = pointwise_only and len(outer) > 1
        parallel_dims = len(outer) - 1 if vector_last else len(outer)
        scatter = any(n.is_scatter for n in self.plan.kernel.nodes)
        parallel = (
            not self.serial
            and self._work() >= self.parallel_threshold
            and hint(_product(outer[:parallel_dims])) > 1
            and not scatter
        )
        lines = []
        for d, size in enumerate(outer):
            ind = "    " * d
            if d == 0 and parallel:
                clauses = [f"collapse({parallel_dims})"] if parallel_dims > 1 else []
                if self.threads:
                    clauses.append(f"num_threads({self.threads})")
                simd = " simd" if pointwise_only and len(outer) == 1 else ""
                lines.append(" ".join([f"#pragma omp parallel for{simd}", *clauses]))
            last = d == len(outer) - 1 and not (parallel and len(outer) == 1)
            # A scatter may write one element twice (index_put accumulate with repeated
            # indices): its loop stays serial. Other pointwise loops carry no dependency.
            if pointwise_only and last and not scatter:
                lines.append(f"{ind}#pragma omp simd")
            lines.append(f"{ind}for (int64_t o{d} = 0; o{d} < {size_text(size)}; ++o{d}) {{")
        ind = "    " * len(outer)
        lines += [ind + b for b in body]
        lines += ["    " * d + "}" for d in reversed(range(len(outer)))]
        return lines

    def _segment(self, seg: Segment, outer_vars: list[Expr]) -> list[str]:
        lines: list[str] = []
        self.hoisted = lines
        try:
            body, updates, results, inner = self._segment_body(seg, outer_vars)
        finally:
            self.hoisted = None
        shifts = self._welford_shifts(seg, outer_vars, inner, results)
        # lanes run along the last inner loop; one shorter than them runs as one lane
        lanes = self.simdlen if inner and updates and hint(inner[-1]) >= self.simdlen else 1
        blocks = None
        if inner:
            per_pass = floor_quotient(inner[-1], lanes)
            blocks = self._plan_blocks(updates, lanes, per_pass, _product(inner[:-1]))
        if blocks:
            lines += blocks.declare()
        for acc, _, _ in updates:
            lines += self._acc_init(acc, lanes)
        lines += self._shift_init(*shifts, lanes)
        serial = any(n.is_scatter for n in seg.nodes)
        lines += self._loops(inner, body, updates, lanes, serial, blocks)
        lines += self._blocks_finish(updates)
        for acc, _, _ in updates:
            lines += self._acc_finish(acc, lanes)
        return lines + self._results(results, "0")

    def _results(self, results, lane: str) -> list[str]:
        lines = []
        for node, acc, store in results:
            data = node.buffer.data
            dtype = node.buffer.dtype
            t = ctype(dtype)
            text = f"static_cast<{t}>({self._acc_result(acc, data.output_index, lane)})"
            if dtype in _ROUND:  # read later in the kernel: what memory would hold
                text = f"{_ROUND[dtype]}({text})"
            name = self.new_tmp("red")
            lines.append(f"{t} {name} = {text};")
            final = CppValue(name, compute_dtype(node.buffer.dtype))
            self._locals[(node.name, store)] = final
            if node.name in self.plan.stored:
                lines.append(self._store_line(node.name, store, final))
        return lines

    def _segment_body(self, seg: Segment, outer_vars: list[Expr]):
        """Emit the segment's nodes: (body lines, accumulator updates, reduction results,
        the inner loop sizes, adjacent loops merged where the indices allow)."""
        inner, inner_vars = seg.inner, kernel_vars(INNER, seg.inner)
        if len(inner) > 1:
            inner, inner_vars = merge_loops(
                inner, INNER, lambda candidate: node_indices(seg.nodes, outer_vars, candidate)
            )
        self._inner_vars = inner_vars
        self._forward = {}
        scope = _Scope()
        handler = CppOpsHandler(self, scope)
        accs: dict[tuple[str, str], _Accumulator] = {}
        updates: list[tuple[_Accumulator, CppValue, Expr | None]] = []
        results: list[tuple[SchedulerNode, _Accumulator, Expr]] = []
        for node in seg.nodes:
            body = node.body_at(outer_vars, inner_vars)
            env = _Env()
            handler.run(body.compute, env)
            store = body.store  # store(buffer, index, value[, mode])
            store_index = env.resolve(store.args[1])
            reduction = body.reduction  # reduction(type, value[, position])
            if reduction is None:
                self._store(node, env.resolve(store.args[2]), store_index, scope)
                continue
            data = node.buffer.data
            assert isinstance(data, Reduction)
            _, value, *position = (env.resolve(a) for a in reduction.args)
            key = (data.reduction_type, value.name)
            if key not in accs:
                acc = self._accumulator(data, value)
                accs[key] = acc
                updates.append((acc, value, position[0] if position else None))
            results.append((node, accs[key], store_index))
        return scope.lines, updates, results, inner

    def _welford_shifts(
        self, seg: Segment, outer_vars: list[Expr], inner: tuple[int, ...], results
    ) -> tuple[list[str], list[tuple[_Accumulator, CppValue]]]:
        """The inputs of the segment's float Welford reductions at reduction index 0: (the
        lines computing them, [(accumulator, its input there)]), after ``_segment_body``.

        Welford's float running mean rounds at ~ulp(mean) every step and m2 takes each
        rounding in, so data far from zero (BatchNorm inputs) lost ~27x eager's accuracy in
        var. Each reduction instead accumulates ``x - K``, with K its first input: lanes and
        blocks share K (their merges are unchanged), m2 is shift-invariant and the mean gets
        K back. The inputs are computed again without stores; none for a segment that
        scatters (side effects) or reduces fewer than two elements.
        """
        shifted = {
            n.name: a
            for n, a, _ in results
            if a.reduction_type == "welford" and a.dtype in FLOAT_TYPES
        }
        if not shifted or hint(_product(inner)) < 2 or any(n.is_scatter for n in seg.nodes):
            return [], []
        inner_vars, forward, hoisted = self._inner_vars, self._forward, self.hoisted
        self._inner_vars = [Expr.of(0)] * len(inner_vars)
        self._forward, self.hoisted = {}, None
        scope = _Scope()
        handler = CppOpsHandler(self, scope)
        values: dict[int, tuple[_Accumulator, CppValue]] = {}
        try:
            for node in seg.nodes:
                body = node.body_at(outer_vars, self._inner_vars)
                env = _Env()
                handler.run(body.compute, env)
                store = body.store
                if body.reduction is None:
                    self._store(
                        node, env.resolve(store.args[2]), env.resolve(store.args[1]), scope, False
                    )
                    continue
                acc = shifted.get(node.name)
                if acc is not None:
                    values.setdefault(id(acc), (acc, env.resolve(body.reduction.args[1])))
        finally:
            self._inner_vars, self._forward, self.hoisted = inner_vars, forward, hoisted
        return scope.lines, list(values.values())

    def _shift_init(self, computed: list[str], shifts, lanes: int, column: str = "") -> list[str]:
        """Declare the shifts ``_welford_shifts`` computes; ``column``: the line that sets the
        lane's output variable, in column mode (one shift per lane, over the ``nb`` live ones)."""
        sets = []
        for acc, value in shifts:
            t = COMPUTE_TYPES[acc.dtype]
            name = f"{acc.names[0]}_shift"
            acc.shift = f"{name}[{{lane}}]" if column else name
            # an inf or NaN shift would turn every shifted input into NaN: those shift by 0
            sets.append((t, name, f"std::isfinite({value}) ? {value} : {t}(0)"))
        if not sets:
            return []
        if not column:
            return [*computed, *(f"const {t} {name} = {v};" for t, name, v in sets)]
        loop = [column, *computed, *(f"{name}[l] = {v};" for _, name, v in sets)]
        return [
            *(f"{t} {name}[{lanes}] = {{}};" for t, name, _ in sets),
            "for (int64_t l = 0; l < nb; ++l) {",
            *("    " + line for line in loop),
            "}",
        ]

    def _store(
        self, node: SchedulerNode, value: CppValue, store: Expr, scope: _Scope, emit: bool = True
    ) -> None:
        """Store a pointwise node's value (forwarded to later loads); ``emit``: write memory."""
        data = node.buffer.data
        if isinstance(data, Scatter):
            scope.lines.append(self._scatter_line(data, store, value))
            return
        dtype = node.buffer.dtype
        if value.dtype != compute_dtype(dtype):
            value = CppOpsHandler(self, scope).to_dtype(value, dtype)
        self._forward[(node.name, store)] = value
        if not emit:
            return
        if node.name in self.plan.stored:
            scope.lines.append(self._store_line(node.name, store, value))
        slot = self.local_slot(node.name)
        if slot is not None:
            scope.lines.append(f"{slot} = {value};")

    def _scatter_line(self, data: Scatter, index: Expr, value: CppValue) -> str:
        ptr = self._param(data.target, True)
        dtype = self.graph.buffer(data.target).dtype
        slot = f"{ptr}[{index.render()}]"
        text = value.name
        if data.mode == "add":
            current = slot
            if dtype == torch.bfloat16:
                current = f"kiln_bf16_to_float({slot})"
            elif dtype == torch.float16:
                current = f"kiln_f16_to_float({slot})"
            text = f"static_cast<{ctype(dtype)}>({current} + {text})"
        if dtype == torch.bfloat16:
            text = f"kiln_float_to_bf16({text})"
        elif dtype == torch.float16:
            text = f"kiln_float_to_f16({text})"
        return f"{slot} = {text};"

    def _store_line(self, name: str, index: Expr, value: CppValue) -> str:
        ptr = self._param(name, True)
        dtype = self.graph.buffer(name).dtype
        text = value.name
        if dtype == torch.bfloat16:
            text = f"kiln_float_to_bf16({text})"
        elif dtype == torch.float16:
            text = f"kiln_float_to_f16({text})"
        return f"{ptr}[{index.render()}] = {text};"

    # -- reductions --------------------------------------------------------------------
    def _accumulator(self, data: Reduction, value: CppValue) -> _Accumulator:
        rtype = data.reduction_type
        base = self.new_tmp("acc")
        if rtype == "welford":
            names = [f"{base}_mean", f"{base}_m2", f"{base}_weight"]
        elif rtype in ("argmax", "argmin"):
            names = [f"{base}_val", f"{base}_idx"]
        else:
            names = [base]
        return _Accumulator(names, value.dtype, rtype)

    def _plan_blocks(
        self, updates, lanes: int, per_pass: Size, passes: Size, live: str = ""
    ) -> BlockPlan | None:
        """Double totals for the float sum and welford accumulators of lanes that take
        ``passes`` passes of ``per_pass`` steps, if they are long enough to need them
        (``live``: how many lanes hold values, when not all)."""
        accs = [
            acc
            for acc, _, _ in updates
            if acc.reduction_type in ("sum", "welford") and acc.dtype in FLOAT_TYPES
        ]
        blocked = []
        for acc in accs:
            count = ""
            if acc.reduction_type == "welford":
                count = f"{acc.names[0]}_count" if lanes > 1 else f"{acc.names[2]}[0]"
            blocked.append(Blocked(acc.reduction_type, acc.names, lanes, count, live))
        plan = plan_blocks(blocked, per_pass, passes)
        if plan is not None:
            for acc, b in zip(accs, blocked):
                acc.blocked = b
        return plan

    def _blocks_finish(self, updates) -> list[str]:
        return [a.blocked.finish() for a, _, _ in updates if a.blocked is not None]

    def _acc_init(self, acc: _Accumulator, lanes: int) -> list[str]:
        t = COMPUTE_TYPES[acc.dtype]
        totals = acc.blocked.declare() if acc.blocked is not None else []
        if acc.reduction_type == "welford":
            lines = [f"{t} {n}[{lanes}] = {{}};" for n in acc.names]
            if lanes > 1:
                # all lanes see one element per block: one shared count and reciprocal;
                # leftover elements go to a separate "tail" state
                b = acc.names[0]
                lines.append(
                    f"{t} {b}_count = 0, {b}_rw = 0, {b}_tmean = 0, {b}_tm2 = 0, {b}_tw = 0;"
                )
            return lines + totals
        if acc.reduction_type in ("argmax", "argmin"):
            init = _INIT["max" if acc.reduction_type == "argmax" else "min"](acc.dtype)
            return [
                f"{t} {acc.names[0]}[{lanes}]; int64_t {acc.names[1]}[{lanes}];",
                f"for (int l = 0; l < {lanes}; ++l) {{ {acc.names[0]}[l] = {init}; "
                f"{acc.names[1]}[l] = std::numeric_limits<int64_t>::max(); }}",
            ]
        init = _INIT[acc.reduction_type](acc.dtype)
        return [
            f"{t} {acc.names[0]}[{lanes}];",
            f"for (int l = 0; l < {lanes}; ++l) {acc.names[0]}[l] = {init};",
            *totals,
        ]

    def _block_prologue(self, acc: _Accumulator) -> list[str]:
        if acc.reduction_type != "welford":
            return []
        b = acc.names[0]
        t = COMPUTE_TYPES[acc.dtype]
        return [f"{b}_count += {t}(1); {b}_rw = {t}(1) / {b}_count;"]

    def _acc_update(
        self, acc: _Accumulator, value: CppValue, flat: Expr | None, lane: str, mode: str = "single"
    ) -> str:
        n = [f"{name}[{lane}]" for name in acc.names]
        if acc.reduction_type == "welford":
            b = acc.names[0]
            if acc.shift:
                value = f"({value} - {acc.shift.format(lane=lane)})"
            if mode == "lane":
                return f"kiln_welford_update_rw({n[0]}, {n[1]}, {value}, {b}_rw);"
            if mode == "tail":
                return f"kiln_welford_update({b}_tmean, {b}_tm2, {b}_tw, {value});"
            return f"kiln_welford_update({n[0]}, {n[1]}, {n[2]}, {value});"
        if acc.reduction_type in ("argmax", "argmin"):
            assert flat is not None
            return f"kiln_{acc.reduction_type}_update({n[0]}, {n[1]}, {value}, {flat.render()});"
        return _COMBINE[acc.reduction_type].format(a=n[0], b=value)

    def _acc_finish(self, acc: _Accumulator, lanes: int) -> list[str]:
        if lanes == 1:
            return []
        n = acc.names
        if acc.reduction_type == "welford":
            b = n[0]
            lane0 = f"{n[0]}[0], {n[1]}[0], {n[2]}[0]"
            return [
                f"kiln_welford_merge_lanes({n[0]}, {n[1]}, {b}_count, {lane0});",
                f"kiln_welford_combine({lane0}, {b}_tmean, {b}_tm2, {b}_tw);",
            ]
        elif acc.reduction_type in ("argmax", "argmin"):
            body = f"kiln_{acc.reduction_type}_update({n[0]}[0], {n[1]}[0], {n[0]}[l], {n[1]}[l]);"
        elif acc.reduction_type == "sum":
            return [f"{n[0]}[0] = kiln_pairwise_total({n[0]});"]
        else:
            body = _COMBINE[acc.reduction_type].format(a=f"{n[0]}[0]", b=f"{n[0]}[l]")
        return [f"for (int l = 1; l < {lanes}; ++l) {{ {body} }}"]

    def _acc_result(self, acc: _Accumulator, output_index: int, lane: str = "0") -> str:
        if acc.reduction_type == "welford":
            out = f"{acc.names[output_index]}[{lane}]"
            if acc.shift and output_index == 0:  # the mean; m2 is shift-invariant
                return f"({out} + {acc.shift.format(lane=lane)})"
            return out
        if acc.reduction_type in ("argmax", "argmin"):
            return f"{acc.names[1]}[{lane}]"
        return f"{acc.names[0]}[{lane}]"

    def _loops(
        self,
        inner: tuple[Size, ...],
        body: list[str],
        updates,
        lanes: int,
        serial: bool,
        blocks: BlockPlan | None,
    ) -> list[str]:
        """The segment's inner loops; ``serial`` (a scatter) gets no vectorization pragma;
        ``blocks``: where the lanes' blocks move into their totals."""
        if not inner:
            return [
                "{",
                *("    " + b for b in body),
                *("    " + self._acc_update(a, v, f, "0") for a, v, f in updates),
                "}",
            ]
        lines = []
        depth = len(inner)
        for d, size in enumerate(inner[:-1]):
            lines.append(f"{'    ' * d}for (int64_t i{d} = 0; i{d} < {size_text(size)}; ++i{d}) {{")
        ind = "    " * (depth - 1)
        last, size = depth - 1, inner[-1]
        if lanes > 1:
            main = size - size % lanes if is_static(size) else _whole_lanes(size, lanes)
            step = [p for a, _, _ in updates for p in self._block_prologue(a)]
            step += ["#pragma omp simd", f"for (int64_t l = 0; l < {lanes}; ++l) {{"]
            step.append(f"    int64_t i{last} = ib + l;")
            step += [f"    {b}" for b in body]
            step += [f"    {self._acc_update(a, v, f, 'l', 'lane')}" for a, v, f in updates]
            step.append("}")
            lines += [ind + x for x in stepping_loop("ib", main, lanes, step, blocks)]
            if not is_static(size) or main < size:
                start, end = size_text(main), size_text(size)
                lines.append(f"{ind}for (int64_t i{last} = {start}; i{last} < {end}; ++i{last}) {{")
                lines += [f"{ind}    {b}" for b in body]
                lines += [
                    f"{ind}    {self._acc_update(a, v, f, '0', 'tail')}" for a, v, f in updates
                ]
                lines.append(f"{ind}}}")
        else:
            # scalar accumulators: only the memory accesses are independent
            pragma = "" if serial else f"#pragma {'GCC ivdep' if updates else 'omp simd'}"
            step = [*body, *(self._acc_update(a, v, f, "0") for a, v, f in updates)]
            lines += [ind + x for x in stepping_loop(f"i{last}", size, 1, step, blocks, pragma)]
        for d in reversed(range(depth - 1)):
            lines.append(f"{'    ' * d}}}")
        return ["{", *("    " + line for line in lines), "}"]


def _product(sizes) -> Size:
    return math.prod(sizes) if all_static(sizes) else as_size(math.prod(sizes))


def _whole_lanes(size: Size, lanes: int) -> Size:
    """The iterations of ``size`` that fill whole groups of ``lanes``: ``size - size % lanes``."""
    return as_size(floor_quotient(size, lanes) * lanes)


@dataclass
class GeneratedKernel:
    name: str
    source: str
    params: list[tuple[str, bool]]  # (buffer name, written)
    #: the sizes its run-time indices are checked against: the kernel returns the number
    #: (from 1) of a check that failed, 0 if none; no checks: it returns nothing
    index_sizes: tuple[Size, ...] = ()
    #: the size symbols it takes after the pointers, as ``int64_t``
    size_params: tuple[str, ...] = ()


def generate_kernel(
    plan: KernelPlan,
    graph: GraphIR,
    simdlen: int,
    threads: int | None,
    parallel_threshold: int,
    serial: bool = False,
) -> GeneratedKernel:
    """The C++ source of one planned kernel, named by the hash of its text (identical kernels
    share a name); ``serial``: its loops run on the calling thread, without OpenMP."""
    emitter = CppKernel(plan, graph, simdlen, threads, parallel_threshold, serial)
    text, params = emitter.emit()
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    name = f"kiln_{digest}"
    return GeneratedKernel(
        name,
        text.replace("KERNEL_NAME", name),
        params,
        tuple(emitter.index_sizes),
        tuple(s.name for s in emitter.size_params),
    )


def generate_kernels(
    plans: dict[str, KernelPlan],
    graph: GraphIR,
    simdlen: int,
    threads: int | None,
    parallel_threshold: int,
) -> dict[str, GeneratedKernel]:
    """C++ source of every planned kernel (by kernel name), as :func:`generate_kernel` makes it."""
    return {
        kernel_name: generate_kernel(plan, graph, simdlen, threads, parallel_threshold)
        for kernel_name, plan in plans.items()
    }


def translation_unit(kernels: list[GeneratedKernel]) -> str:
    """One C++ source for many kernels (duplicates dropped): one compiler run per graph."""
    seen, parts = set(), [PRELUDE]
    for k in kernels:
        if k.name not in seen:
            seen.add(k.name)
            parts.append(k.source)
    return "\n\n".join(parts) + "\n"
