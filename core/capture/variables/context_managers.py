"""``contextlib.nullcontext``: a ``with`` block that does nothing on entry or exit (libraries
pick it where a real context is not needed, as transformers' ``maybe_autocast`` does)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from torchkiln.capture.variables import constants
from torchkiln.capture.variables.base import VariableTracker

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator

#: What a ``nullcontext``'s ``__exit__`` is, rebuilt where a graph break leaves the block open.
_NULL_EXIT = contextlib.nullcontext().__exit__


class NullContextVariable(VariableTracker):
    """``nullcontext(enter_result)``: ``with`` gives ``enter_result`` and exits doing nothing."""

    def __init__(self, enter_result: VariableTracker):
        self.enter_result = enter_result

    def python_type(self) -> type:
        return contextlib.nullcontext

    def enter(self, tx: Translator) -> tuple[VariableTracker, VariableTracker]:
        return NullExitVariable(), self.enter_result

    def reconstruct(self, codegen: Any) -> str:
        cls = codegen.bind(contextlib.nullcontext, "nullcontext")
        return f"{cls}({codegen.reconstruct(self.enter_result)})"


class NullExitVariable(VariableTracker):
    """The ``__exit__`` of a ``nullcontext``: returns None, so exceptions propagate."""

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        return constants.ConstantVariable(None)

    def reconstruct(self, codegen: Any) -> str:
        return codegen.bind(_NULL_EXIT, "null_exit")


def _nullcontext(tx: Translator, enter_result: VariableTracker | None = None) -> VariableTracker:
    return NullContextVariable(enter_result or constants.ConstantVariable(None))


#: Context-manager classes built by the frame.
CONSTRUCTORS = {contextlib.nullcontext: _nullcontext}
