"""Symbolic sizes in the runtime's metadata, read back from each call's inputs.

Analysis runs on fake inputs; with symbolic sizes (``compile(dynamic=...)``) the layout
of an output that views an input (or another output) is a sympy expression over those
sizes. ``concrete`` turns such a value into a ``SizeExpr``: a function of the call's
arguments, generated as Python (``args[0].shape[1] * 4``), that the runtime calls where it
rebuilds the view. Values without symbols stay as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


class SizeExpr:
    """A size, stride, offset or tuple of them, computed from the call's arguments."""

    def __init__(self, text: str):
        self.text = text
        self._fn = eval(compile(f"lambda args: {text}", f"<size {text}>", "eval"))

    def __call__(self, args: Sequence) -> Any:
        return self._fn(args)

    def __repr__(self) -> str:
        return f"SizeExpr({self.text})"


def resolve(value: Any, args: Sequence) -> Any:
    """``value`` for this call: a ``SizeExpr`` evaluated, anything else as it is."""
    return value(args) if isinstance(value, SizeExpr) else value


def _symbolic(value: Any) -> bool:
    if isinstance(value, torch.SymInt):
        return not value.node.expr.is_number
    return isinstance(value, (tuple, list)) and any(map(_symbolic, value))


class SizeReader:
    """Which argument size each symbol of the fake inputs is."""

    def __init__(self, fake_inputs: Sequence):
        self.names: dict[Any, str] = {}
        for i, t in enumerate(fake_inputs):
            if isinstance(t, torch.Tensor):
                for dim, size in enumerate(t.shape):
                    if isinstance(size, torch.SymInt) and size.node.expr.is_symbol:
                        self.names.setdefault(size.node.expr, f"args[{i}].shape[{dim}]")

    def condition(self, exprs: list) -> SizeExpr | None:
        """A call's check that every sympy relation of ``exprs`` holds for its sizes; None
        where one reads a symbol that is not an argument's size."""
        from torchkiln.capture.symbolic import condition_text
        from torchkiln.exc import Unsupported

        try:
            return SizeExpr(condition_text(exprs, self.names))
        except Unsupported:
            return None

    def concrete(self, value: Any) -> Any:
        """``value`` (an int, a SymInt or a tuple of them) as the runtime reads it."""
        if not _symbolic(value):
            return _ints(value)
        from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

        from torchkiln.capture.symbolic import source_text
        from torchkiln.exc import KilnError

        if free_unbacked_symbols(value):  # ``x[mask]``'s size: no argument's size gives it
            raise KilnError(
                f"an output is a view (of an input or of another output) whose layout {value} "
                "depends on the data; the AOT-autograd layer rebuilds such views from the "
                "inputs' sizes only: return a copy (.clone()) instead, or use a backend "
                "without AOT autograd (backend='eager')"
            )
        return SizeExpr(source_text(value, self.names))


def _ints(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return tuple(_ints(v) for v in value)
    return int(value)
