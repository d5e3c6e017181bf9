"""Symbolic sizes in the loop IR: ``int`` where a size is static, a sympy expression over
the graph's size symbols (the capture's ShapeEnv: ``s0``, ``s1``...) where it is not.

A graph whose inputs have symbolic sizes (``dynamic=True``, automatic dynamic shapes) is
lowered once for every size in range: sizes, strides and index coefficients may be
polynomials in the symbols; kernels take the symbols as ``int64_t`` arguments, which the
wrapper reads off its inputs' sizes. A static graph never meets sympy: every helper here
takes plain ints through plain int arithmetic.

Sizes only the data gives (``nonzero``'s count, ``x[mask]``'s length:
``config.capture_dynamic_output_shape_ops``) are *unbacked* symbols ``u0``, ``u1``...: the
wrapper reads each off the result of the aten call that makes it, right after that call.

Decisions that must hold for every size (is ``i < n``? is ``c >= 0``?) are *proved* from the
symbols' ranges (:func:`known_nonnegative`; input sizes are at least 2: torch specializes 0
and 1; unbacked ones may be 0 or 1); what can't be proved takes the branch that is right for
every size. Heuristics (run in parallel? how many lanes?) read a hint instead: the size of
the call that compiled the graph (:func:`hint`), :data:`UNBACKED_HINT` for an unbacked
symbol, which no call gave. What the IR can't express symbolically raises
:class:`SymbolicUnsupported`, a ``NeedsStaticShapes``: the core then compiles the graph once
per size instead (no compile per size serves an unbacked size: there it is an error).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
from torch.utils._sympy.functions import FloatTrueDiv, IntTrueDiv, PowByNatural, ToFloat
from torch.utils._sympy.functions import FloorDiv as SympyFloorDiv
from torch.utils._sympy.functions import Max as TorchMax
from torch.utils._sympy.functions import Min as TorchMin
from torch.utils._sympy.symbol import SymT, symbol_is_type
from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

from torchkiln.exc import NeedsStaticShapes

Size = int | sympy.Expr
#: the hint of an unbacked size (within its range): torch's inductor guesses the same
#: (``unbacked_symint_fallback``); it only steers heuristics, never what a kernel computes
UNBACKED_HINT = 8192
#: torch's ShapeEnv writes its own Max and Min (contiguous strides take ``Max(1, size)``)
_MIN_MAX = (sympy.Max, sympy.Min, TorchMax, TorchMin)


class SymbolicUnsupported(NeedsStaticShapes):
    """Something the inductor can only compile for concrete sizes."""


@dataclass
class SizeFacts:
    """What is known of the symbols while a graph compiles: their ranges and first values."""

    ranges: dict[sympy.Symbol, ValueRanges] = field(default_factory=dict)
    hints: dict[sympy.Symbol, int] = field(default_factory=dict)
    #: the ShapeEnv itself, whose facts simplify what ranges can't (divisibility, equalities)
    shape_env: Any = None

    @staticmethod
    def of(values: list) -> SizeFacts:
        """The facts of the ShapeEnv behind ``values``' symbolic sizes (fake tensors, SymInts)."""
        facts = SizeFacts()
        for value in values:
            for size in _symbolic_ints(value):
                env = facts.shape_env = size.node.shape_env
                for symbol in size.node.expr.free_symbols:
                    known = env.var_to_range.get(symbol, ValueRanges(0, sympy.oo))
                    facts.ranges[symbol] = known
                    if is_unbacked(symbol):
                        facts.hints[symbol] = _clamped(UNBACKED_HINT, known)
                    else:
                        facts.hints[symbol] = int(env.backed_var_to_val[symbol])
        return facts


def is_unbacked(symbol: sympy.Symbol) -> bool:
    """Whether ``symbol`` is a size only the data gives (``u0``: no input's size backs it)."""
    return symbol_is_type(symbol, (SymT.UNBACKED_INT, SymT.UNBACKED_FLOAT))


def _clamped(value: int, known: ValueRanges) -> int:
    """``value`` moved into ``known`` (an unbacked size's range: ``x[mask]`` of 10 elements
    has at most 10)."""
    if value > known.upper:  # never true of an unbounded range's infinity
        return int(known.upper)
    if value < known.lower:
        return int(known.lower)
    return value


def _symbolic_ints(value) -> Iterator[torch.SymInt | torch.SymFloat]:
    if isinstance(value, (torch.SymInt, torch.SymFloat)):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _symbolic_ints(item)
    elif isinstance(value, torch.Tensor):
        for s in (*value.shape, *value.stride(), value.storage_offset()):
            if isinstance(s, torch.SymInt):
                yield s


_FACTS: contextvars.ContextVar[SizeFacts | None] = contextvars.ContextVar(
    "torchkiln_inductor_size_facts", default=None
)


def _facts() -> SizeFacts:
    return _FACTS.get() or SizeFacts()


@contextlib.contextmanager
def size_facts(facts: SizeFacts) -> Iterator[SizeFacts]:
    """Make ``facts`` what :func:`known_nonnegative` and :func:`hint` use."""
    token = _FACTS.set(facts)
    try:
        yield facts
    finally:
        _FACTS.reset(token)


def as_size(value, nonempty: bool = False) -> Size:
    """An ``int``, or a sympy expression where ``value`` (a SymInt, an expression) is symbolic.
    A SymFloat (``1 / numel`` in a norm's backward) becomes its expression too. ``nonempty``:
    ``value`` matters only where every size is at least 1 (a stride: see :func:`strides_of`)."""
    if type(value) is int:
        return value
    if isinstance(value, (torch.SymInt, torch.SymFloat)):
        value = value.node.expr
    if isinstance(value, sympy.Expr):
        env = _facts().shape_env
        if env is not None and not value.is_Symbol:
            value = env.simplify(value)
        if value.has(*_MIN_MAX):
            value = value.replace(lambda e: isinstance(e, _MIN_MAX), lambda e: _settle(e, nonempty))
        value = sympy.expand(value)
        if value.is_Integer:
            return int(value)
        return float(value) if value.is_Float else value
    return int(value)


def _settle(e: sympy.Expr, nonempty: bool) -> sympy.Expr:
    """``Max(a, b)`` or ``Min(a, b)`` as the argument the ranges prove it to be (torch writes
    ``x[:, 1:]``'s size as ``Max(0, s0 - 1)``), else unchanged."""
    is_max = isinstance(e, (sympy.Max, TorchMax))
    for a in e.args:
        others = [b for b in e.args if b is not a]
        if all(
            known_at_least(a, b, nonempty) if is_max else known_at_least(b, a, nonempty)
            for b in others
        ):
            return a
    return e


def strides_of(t: torch.Tensor) -> tuple[Size, ...]:
    """``t``'s strides, which address its elements: they matter only where it has some, so
    every size counts as at least 1 (torch writes a contiguous stride over an unbacked size
    ``u0``, which may be 0, as ``Max(1, u0)``: ``u0`` here)."""
    return tuple(as_size(s, nonempty=True) for s in t.stride())


def sizes_of(values) -> tuple[Size, ...]:
    """:func:`as_size` of each of ``values`` (a tensor's shape or strides, a list of sizes)."""
    return tuple(as_size(v) for v in values)


def is_real_valued(value: sympy.Expr) -> bool:
    """Whether a symbolic scalar is a float (a SymFloat's expression), not a size."""
    return not value.is_integer


def is_static(value: Size) -> bool:
    return isinstance(value, int)


def all_static(values) -> bool:
    return all(isinstance(v, int) for v in values)


def hint(value: Size) -> int:
    """``value`` at the sizes of the call that compiled the graph: for heuristics only."""
    if isinstance(value, int):
        return value
    return int(value.subs(_facts().hints))


def known_nonnegative(value: Size, nonempty: bool = False) -> bool:
    """Whether ``value >= 0`` holds for every size in range (False where unknown);
    ``nonempty``: for every size in range that is at least 1 (an unbacked one may be 0)."""
    if isinstance(value, int):
        return value >= 0
    ranges = dict(_facts().ranges)
    for symbol in value.free_symbols:
        known = ranges.get(symbol, ValueRanges(0, sympy.oo))
        if nonempty and is_unbacked(symbol) and known.lower < 1:
            known = ValueRanges(1, known.upper)
        ranges[symbol] = known
    return bool(bound_sympy(value, ranges).lower >= 0)


def known_positive_divisor(value: Size) -> bool:
    """Whether ``value >= 1`` for every size in range where an index divides by it: an
    unbacked size may be 0, but an index divides only by the sizes of loops around it, and
    loops over an empty size run no iteration (torch's inductor reasons "size-obliviously"
    the same way)."""
    return known_at_least(value, 1, nonempty=True)


def known_at_least(a: Size, b: Size, nonempty: bool = False) -> bool:
    """Whether ``a >= b`` for every size in range (``nonempty``: see :func:`known_nonnegative`).
    The ShapeEnv's facts prove what ranges can't: ``s0 // 4 >= 1`` of an ``s0`` guarded
    divisible by 4, or of a non-negative ``s0 // 4`` guarded non-zero (as a view to
    ``(s0 // 4, -1)`` guards it)."""
    if known_nonnegative(a - b, nonempty):
        return True
    env = _facts().shape_env
    if env is None or all_static((a, b)):
        return False
    if env._maybe_evaluate_static(sympy.Ge(a, b)):
        return True
    return (
        b == 1
        and known_nonnegative(a, nonempty)
        and bool(env._maybe_evaluate_static(sympy.Ne(a, 0)))
    )


def known_less(a: Size, b: Size) -> bool:
    """Whether ``a < b`` for every size in range."""
    return known_nonnegative(b - a - 1)


def floor_quotient(a: Size, d: Size) -> Size:
    """``a // d`` of non-negative sizes: ``q`` where ``a == q*d + r`` with ``0 <= r < d`` proved
    (``(s0*s1 - 1) // s1`` is ``s0 - 1``), else a ``FloorDiv``."""
    if isinstance(a, int) and isinstance(d, int):
        return a // d
    parts = sympy.Add.make_args(sympy.expand(a))
    q = as_size(sum(exact_quotient(t, d) for t in parts if divides(d, t)))
    r = as_size(a - q * d)
    if known_nonnegative(r) and known_less(r, d):
        return q
    if known_less(r, 0) and known_nonnegative(r + d):
        return as_size(q - 1)
    return as_size(SympyFloorDiv(a, d))


def divides(d: Size, c: Size) -> bool:
    """Whether ``d`` divides ``c`` for every size (False where unknown)."""
    if isinstance(c, int) and isinstance(d, int):
        return c % d == 0
    return sympy.Mod(c, d) == 0


def exact_quotient(c: Size, d: Size) -> Size:
    """``c / d`` where :func:`divides` says it is exact."""
    if isinstance(c, int) and isinstance(d, int):
        return c // d
    return as_size(sympy.cancel(sympy.sympify(c) / d))


def gcd(a: Size, b: Size) -> Size:
    if isinstance(a, int) and isinstance(b, int):
        return math.gcd(a, b)
    return as_size(sympy.gcd(a, b))


def symbols_of(values) -> set[sympy.Symbol]:
    """The size symbols in ``values`` (sizes, or nested tuples and lists of them)."""
    found: set[sympy.Symbol] = set()
    for value in values:
        if isinstance(value, (tuple, list)):
            found |= symbols_of(value)
        elif isinstance(value, sympy.Expr):
            found |= value.free_symbols
    return found


def symbols_in(text: str, symbols) -> list[sympy.Symbol]:
    """The ``symbols`` that generated ``text`` (a kernel's source) names, sorted by name: the
    sizes a kernel takes as arguments."""
    return [s for s in sorted(symbols, key=str) if re.search(rf"\b{s.name}\b", text)]


def size_text(value: Size, python: bool = False) -> str:
    """``value`` as C text, or Python text with ``python``: sums, products and floor divisions
    of ints and symbols (a symbol printed as its name; products of int64 symbols stay int64
    in C, and every operand of a division is non-negative, so C's ``/`` floors); a SymFloat's
    expression (``ToFloat``, true divisions) in double precision."""
    if isinstance(value, (int, float)):
        return repr(value)
    return _print(sympy.sympify(value), "//" if python else "/")


def _print(e: sympy.Expr, div: str) -> str:
    if e.is_Integer:
        return str(int(e))
    if e.is_Float:
        return repr(float(e))
    if e.is_Symbol:
        return e.name
    if isinstance(e, ToFloat):
        inner = _print(e.args[0], div)
        return f"float({inner})" if div == "//" else f"static_cast<double>({inner})"
    if isinstance(e, (FloatTrueDiv, IntTrueDiv)):
        a, b = (_print(x, div) for x in e.args)
        return f"({a} / {b})" if div == "//" else f"(static_cast<double>({a}) / {b})"
    if isinstance(e, PowByNatural):
        return "*".join([_factor(e.args[0], div)] * int(e.args[1]))
    if e.is_Add:
        terms = [_print(t, div) for t in e.as_ordered_terms()]
        return "(" + " + ".join(terms).replace("+ -", "- ") + ")"
    if e.is_Mul:
        return "*".join(_factor(f, div) for f in e.as_ordered_factors())
    if e.is_Pow and e.exp.is_Integer and int(e.exp) > 0:
        return "*".join([_factor(e.base, div)] * int(e.exp))
    if isinstance(e, SympyFloorDiv):
        return f"(({_print(e.args[0], div)}) {div} ({_print(e.args[1], div)}))"
    raise SymbolicUnsupported(f"the inductor prints sums, products and quotients of sizes, not {e}")


def _factor(e: sympy.Expr, div: str) -> str:
    text = _print(e, div)
    return f"({text})" if text.startswith("-") else text
