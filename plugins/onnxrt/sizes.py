"""Symbolic sizes: a graph's SymInts computed from its inputs, in ONNX and in Python.

A graph traced with symbolic sizes carries SymInts (the sizes of its fake tensors, the
values of ``sym_size`` and of arithmetic on sizes), each a sympy expression over the
ShapeEnv's symbols. :class:`SizeSources` says where a call gives each symbol: a
dimension of an input tensor, or an input that is a SymInt itself. :func:`fold` walks an
expression; the converter folds it into ONNX nodes (int64 tensors of shape ``[1]``, from
``Shape`` of the inputs), the runtime into a Python function of the call's arguments
(the sizes of the outputs it allocates). What neither can express (a symbol no input
gives, an expression outside integer arithmetic) raises ``NeedsStaticShapes``: the core
then compiles the graph once per concrete size.

sympy is imported where an expression is first made, not with this module: a process that
loads its compiled graphs from the plan cache converts nothing, and importing sympy (and
torch's symbolic-shape modules) was most of its first call.
"""

from __future__ import annotations

import functools
import operator
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from torchkiln.exc import NeedsStaticShapes

if TYPE_CHECKING:
    import sympy

    #: A size: an int, a SymInt, or a sympy expression over the ShapeEnv's symbols.
    Size = int | torch.SymInt | sympy.Expr

T = TypeVar("T")


@functools.cache
def operations() -> dict[type, str]:
    """sympy's functions of integer sizes, by the name of the operation folded in their place
    (n-ary ones reduce their arguments left to right)."""
    import sympy
    from torch.utils._sympy import functions as fn

    return {
        sympy.Add: "add",
        sympy.Mul: "mul",
        fn.FloorDiv: "floordiv",
        fn.CleanDiv: "floordiv",
        fn.CeilDiv: "ceildiv",
        fn.PythonMod: "mod",
        fn.Mod: "mod",
        fn.Max: "max",
        fn.Min: "min",
        sympy.Max: "max",
        sympy.Min: "min",
    }


PYTHON = {
    "add": operator.add,
    "mul": operator.mul,
    "floordiv": operator.floordiv,
    "ceildiv": lambda a, b: -(-a // b),
    "mod": operator.mod,
    "max": max,
    "min": min,
}


def _is_expr(value: Any) -> bool:
    """Whether ``value`` is a sympy expression (none exists before sympy is imported)."""
    sympy = sys.modules.get("sympy")
    return sympy is not None and isinstance(value, sympy.Expr)


def size_expr(size: Size) -> sympy.Expr:
    """The sympy expression of a size (the ShapeEnv's replacements applied)."""
    import sympy

    if isinstance(size, sympy.Expr):
        return size
    return sympy.Integer(size) if isinstance(size, int) else sympy.sympify(size.node.expr)


def is_symbolic(size: Any) -> bool:
    """A SymInt (SymFloat, SymBool, sympy expression) whose value the ShapeEnv does not fix."""
    if _is_expr(size):
        return not size.is_number
    if not isinstance(size, torch.SymInt | torch.SymFloat | torch.SymBool):
        return False
    return not size_expr(size).is_number


def concrete(sizes: Sequence, why: str) -> tuple[int, ...]:
    """``sizes`` as ints; ``NeedsStaticShapes`` naming ``why`` when one is symbolic."""
    if any(is_symbolic(s) for s in sizes):
        raise NeedsStaticShapes(f"the onnxrt converter needs concrete sizes for {why}")
    return tuple(int(s) for s in sizes)


def same_sizes(a: Sequence, b: Sequence) -> bool:
    """Whether two shapes are the same expressions (compares no values: adds no guards)."""
    return len(a) == len(b) and all(size_expr(x) == size_expr(y) for x, y in zip(a, b))


def broadcast(shapes: Sequence[Sequence[Size]]) -> tuple[Size, ...]:
    """The shape ``shapes`` broadcast to, as sizes; adds no guard.

    The traced graph broadcast them, so the sizes of a dimension are equal or 1, and a
    symbolic dimension (never 0 or 1: those sizes are specialized) broadcasts to the
    largest of them.
    """
    if not any(is_symbolic(s) for shape in shapes for s in shape):
        return tuple(torch.broadcast_shapes(*(tuple(map(int, shape)) for shape in shapes)))
    import sympy

    ndim = max(map(len, shapes))
    padded = [(1,) * (ndim - len(shape)) + tuple(shape) for shape in shapes]
    result: list[Size] = []
    for sizes in zip(*padded):
        exprs = {size_expr(s) for s in sizes} - {sympy.Integer(1)}
        expr = sympy.Max(*exprs) if exprs else sympy.Integer(1)
        result.append(int(expr) if expr.is_Integer else expr)
    return tuple(result)


def known_nonnegative(size: int | torch.SymInt) -> bool:
    """Whether ``size >= 0`` holds for every size the graph serves (adds no guard)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return size >= 0 if isinstance(size, int) else statically_known_true(size >= 0)


def fold(
    expr: sympy.Expr,
    symbol: Callable[[sympy.Symbol], T],
    number: Callable[[int], T],
    apply: Callable[[str, T, T], T],
) -> T:
    """Evaluate ``expr`` bottom-up: symbols, integers, then binary integer operations."""
    import sympy
    from torch.utils._sympy import functions as fn

    if expr.is_Integer:
        return number(int(expr))
    if expr.is_Symbol:
        return symbol(expr)
    args = expr.args
    if isinstance(expr, fn.ModularIndexing):  # (x // d) % m
        x, d, m = (fold(a, symbol, number, apply) for a in args)
        return apply("mod", apply("floordiv", x, d), m)
    if isinstance(expr, sympy.Pow | fn.PowByNatural) and args[1].is_Integer and args[1] > 0:
        args = (args[0],) * int(args[1])
        name = "mul"
    else:
        name = operations().get(type(expr))
    if name is None or (expr.is_Mul and not all(a.is_Integer or not a.is_number for a in args)):
        raise NeedsStaticShapes(
            f"the onnxrt converter computes sizes with integer arithmetic, not {expr}"
        )
    folded = [fold(a, symbol, number, apply) for a in args]
    return functools.reduce(lambda a, b: apply(name, a, b), folded)


class SizeSources:
    """Where a call gives each symbol: ``(argument index, dim)``, ``dim`` None for a SymInt
    argument. Built from the graph's placeholders' fake values."""

    def __init__(self, example_inputs: Sequence[Any]):
        self.of: dict[sympy.Symbol, tuple[int, int | None]] = {}
        for i, value in enumerate(example_inputs):
            if isinstance(value, torch.Tensor):
                for d, size in enumerate(value.shape):
                    self._add(size_expr(size), (i, d))
        #: the SymInt arguments whose symbol no tensor's size gives: bound as ONNX inputs
        self.scalar_args = [
            i
            for i, value in enumerate(example_inputs)
            if isinstance(value, torch.SymInt) and self._add(size_expr(value), (i, None))
        ]

    def _add(self, expr: sympy.Expr, source: tuple[int, int | None]) -> bool:
        if expr.is_Symbol and expr not in self.of:
            self.of[expr] = source
            return True
        return False

    def source(self, symbol: sympy.Symbol) -> tuple[int, int | None]:
        if symbol not in self.of:
            raise NeedsStaticShapes(
                f"the size {symbol} is neither a dimension of an input nor an input of the graph"
            )
        return self.of[symbol]

    def python(self, size: int | torch.SymInt) -> Callable[[Sequence], int]:
        """``size`` as a function of a call's arguments."""

        def symbol(s: sympy.Symbol) -> Callable[[Sequence], int]:
            i, d = self.source(s)
            return (lambda args: int(args[i])) if d is None else (lambda args: args[i].shape[d])

        def apply(name: str, a: Callable, b: Callable) -> Callable[[Sequence], int]:
            op = PYTHON[name]
            return lambda args: op(a(args), b(args))

        return fold(size_expr(size), symbol, lambda n: lambda args: n, apply)

    def shape(self, sizes: Sequence) -> Callable[[Sequence], tuple[int, ...]] | tuple[int, ...]:
        """A shape as ints, or as a function of a call's arguments if a size is symbolic."""
        if not any(is_symbolic(s) for s in sizes):
            return tuple(int(s) for s in sizes)
        parts = [self.python(s) for s in sizes]
        return lambda args: tuple([p(args) for p in parts])
