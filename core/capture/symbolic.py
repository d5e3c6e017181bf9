"""Symbolic sizes on PyTorch's own machinery: a ``ShapeEnv`` behind the capture's fake mode.

A dynamic dimension of a graph input becomes a SymInt whose sympy symbol the
ShapeEnv creates (at least 2: sizes 0 and 1 are specialized). Fake propagation
then computes with SymInts; where Python needs a concrete value (``bool``,
``int``, an index) the ShapeEnv records a guard (``s0 > 4``, ``Eq(s0, 8)``).
``ShapeGuards`` turns those guards, the symbols' ranges and the equalities
between inputs of one size into Python expressions over the inputs' sizes
(``L_x.size()[0]``), which ``GuardSet`` adds to the entry's guard function.

Imported on first need: sympy and the ShapeEnv cost a second to import.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import types
from collections.abc import Callable
from typing import Any

import sympy
import torch
from torch._guards import GuardSource, Source
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental import symbolic_shapes
from torch.fx.experimental.symbolic_shapes import (
    DimDynamic,
    StatelessSymbolicContext,
    free_unbacked_symbols,
)
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.printers import PythonPrinter

import torchkiln
from torchkiln.capture import dynamic
from torchkiln.exc import Unsupported

#: where torch's and torchkiln's own frames live: not the user's code
_FRAMEWORK_DIRS = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch, torchkiln))


class ShapeEnv(symbolic_shapes.ShapeEnv):
    """torch's ShapeEnv, but for the user frame it notes as a symbol's or guard's source
    location (shown in messages only) it skips torch's and torchkiln's files by folder.
    torch's own version skips the files of modules it imports on first use (torch.export,
    AOT autograd, the inductor): 1.7 s at the first symbolic size of a process."""

    def _get_user_frame(self) -> types.FrameType | None:
        frame = inspect.currentframe()
        while frame is not None and frame.f_code.co_filename.startswith(_FRAMEWORK_DIRS):
            frame = frame.f_back
        return frame


@dataclasses.dataclass(frozen=True)
class InputSource(Source):
    """Where a graph input is read, for the ShapeEnv's bookkeeping (its name is the source)."""

    expr: str

    def name(self) -> str:
        return self.expr

    def guard_source(self) -> GuardSource:
        return GuardSource.LOCAL


def unbacked_mode() -> FakeTensorMode:
    """A fake mode whose ops with data-dependent output sizes (``nonzero``, ``x[mask]``) return
    tensors sized by new unbacked symbols instead of raising."""
    return FakeTensorMode(shape_env=ShapeEnv(allow_dynamic_output_shape_ops=True))


def symbolic_fake(
    mode: FakeTensorMode, value: torch.Tensor, source: str, dims: dict[int, tuple[int, Any]]
) -> torch.Tensor:
    """The fake tensor of ``value`` with dimensions ``dims`` (``{dim: (min, max)}``) symbolic.
    Ops with data-dependent output sizes still raise in that mode where the capture breaks the
    graph at them (``dynamic.Policy.data_dependent_break``): the ShapeEnv would give them
    unbacked sizes, which the backend was said not to take."""
    if mode.shape_env is None:
        keeps = dynamic.current().data_dependent_break is None
        mode.shape_env = ShapeEnv(allow_dynamic_output_shape_ops=keeps)
    context = StatelessSymbolicContext(
        dynamic_sizes=[
            DimDynamic.DYNAMIC if d in dims else DimDynamic.STATIC for d in range(value.dim())
        ]
    )
    fake = mode.from_tensor(
        value, static_shapes=False, source=InputSource(source), symbolic_context=context
    )
    for dim, (low, high) in dims.items():
        expr = _expr(fake.shape[dim])
        if isinstance(expr, sympy.Symbol):
            mode.shape_env.constrain_symbol_range(expr, low, int_oo if high is None else high)
    return fake


def _expr(value: Any) -> Any:
    return value.node.expr if isinstance(value, torch.SymInt) else sympy.Integer(value)


def is_symbolic(value: Any) -> bool:
    """A SymInt, SymFloat or SymBool that the ShapeEnv has not reduced to a constant."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return not value.node.expr.is_number
    return False


def has_symbolic_shape(t: torch.Tensor) -> bool:
    return any(isinstance(s, torch.SymInt) for s in t.shape)


class _SourcePrinter(PythonPrinter):
    """Python text of a guard, each symbol printed as the input size it stands for."""

    def __init__(self, names: dict[sympy.Symbol, str]):
        super().__init__()
        self.names = names

    def _print_Symbol(self, expr: sympy.Symbol) -> str:
        name = self.names.get(expr)
        if name is None:
            raise Unsupported(f"a shape guard reads {expr}, which no graph input's size gives")
        return name


class ShapeGuards:
    """The symbolic inputs of one capture: which input size each symbol is."""

    def __init__(self, shape_env: ShapeEnv):
        self.shape_env = shape_env
        #: Every input size each symbol stands for, in the order they were read.
        self.sizes: dict[sympy.Symbol, list[str]] = {}
        #: ``(source, fake)`` of each symbolic input, for its stride guards.
        self.inputs: list[tuple[str, torch.Tensor]] = []
        #: ``(check, symbols, description)``: functions of sizes that held at capture and
        #: must hold on every call, given the symbols' values (``causal_masks.SizedMask``).
        self.predicates: list[tuple[Callable[..., bool], list[sympy.Symbol], str]] = []

    def add_input(self, source: str, fake: torch.Tensor) -> None:
        """Note the sizes ``fake`` (read through ``source``) stands for; its strides and
        offset must follow from sizes (a dense layout), since only sizes are guarded."""
        sizes = [
            (expr, f"{source}.shape[{dim}]")
            for dim, expr in enumerate(map(_expr, fake.shape))
            if isinstance(expr, sympy.Symbol)
        ]
        known = self.sizes.keys() | {expr for expr, _ in sizes}
        layout = [_expr(s) for s in (*fake.stride(), fake.storage_offset())]
        if any(not e.free_symbols <= known for e in layout):
            # refused before it is noted: the entry that runs the frame in eager instead
            # guards with what was noted, which must print
            raise Unsupported(
                f"{source} has dynamic sizes and a layout (strides, offset) that does not "
                "follow from them; mark its dimensions static (torchkiln.mark_static)"
            )
        self.inputs.append((source, fake))
        for expr, read in sizes:
            self.sizes.setdefault(expr, []).append(read)

    def size_args(self, symbols: list[sympy.Symbol]) -> str:
        """The input sizes ``symbols`` stand for, as the arguments of a call."""
        return ", ".join(self.sizes[s][0] for s in symbols)

    def expressions(self, strides: bool, lenient: bool = False) -> list[tuple[str, str]]:
        """``(expression, description)`` of every fact the graph assumes about the sizes.
        ``lenient``: facts that read a size no input gives are left out rather than refused
        (for an entry that runs the frame in eager, which any inputs may take)."""
        printer = _SourcePrinter({s: sources[0] for s, sources in self.sizes.items()})
        found: list[tuple[str, str]] = []

        def add(make_text, describe) -> None:
            try:
                text = make_text()
            except Unsupported:
                if not lenient:
                    raise
                return
            found.append((text, describe(text)))

        for symbol, sources in self.sizes.items():
            for other in sources[1:]:
                found.append((f"{other} == {sources[0]}", f"{other} == {sources[0]}"))
            bounds = self.shape_env.var_to_range[symbol]
            found.append(
                (f"{sources[0]} >= {int(bounds.lower)}", f"{sources[0]} >= {bounds.lower}")
            )
            if bounds.upper != int_oo:
                found.append(
                    (f"{sources[0]} <= {int(bounds.upper)}", f"{sources[0]} <= {bounds.upper}")
                )
        for guard in self.shape_env.guards:
            if free_unbacked_symbols(guard.expr):
                if lenient:
                    continue
                raise Unsupported(f"a shape guard on a data-dependent size: {guard.expr}")
            add(
                lambda g=guard: printer.doprint(g.expr),
                lambda text, g=guard: f"{text} (symbolic: {g.expr})",
            )
        if strides:
            for source, fake in self.inputs:

                def stride_guard(source=source, fake=fake) -> str:
                    stride = ", ".join(printer.doprint(_expr(s)) for s in fake.stride())
                    return f"{source}.stride() == ({stride}{',' if fake.dim() == 1 else ''})"

                add(stride_guard, lambda text: text)
        return found


def condition_text(exprs: list, names: dict[sympy.Symbol, str]) -> str:
    """Python text of ``exprs`` (sympy relations) all holding, each symbol printed as ``names``
    says; raises ``Unsupported`` where a symbol has no name."""
    printer = _SourcePrinter(names)
    return " and ".join(f"({printer.doprint(e)})" for e in exprs) or "True"


def source_text(value: Any, names: dict[sympy.Symbol, str]) -> str:
    """Python text of an int, SymInt or tuple of them, each symbol printed as ``names`` says."""
    if isinstance(value, (tuple, list)):
        items = [source_text(v, names) for v in value]
        return f"({', '.join(items)}{',' if len(items) == 1 else ''})"
    return _SourcePrinter(names).doprint(_expr(value))
