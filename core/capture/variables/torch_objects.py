"""torch callables (graph nodes) and grad-mode context managers and decorators."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from torchkiln.capture import torch_functions
from torchkiln.capture.runtime import GradModeRestore
from torchkiln.capture.variables import constants, functions
from torchkiln.capture.variables.base import ValueVariable, VariableTracker
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator


class TorchFunctionVariable(ValueVariable):
    """A torch callable: calling it on tensors adds a node to the graph."""

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        return torch_functions.call_torch_function(tx, self.value, args, kwargs)

    def as_python_constant(self) -> Any:
        if not isinstance(self.value, type):
            return super().as_python_constant()
        return self.value  # a class held by identity (``str(type(x))``), as ``ClassVariable``

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        return tx.output.wrap(getattr(self.value, name), None)


class GradModeVariable(VariableTracker):
    """``torch.no_grad()`` / ``enable_grad()`` / ``set_grad_enabled(b)`` as a context manager."""

    def __init__(self, mode: bool, prev: bool | None = None):
        self.mode = mode
        self.prev = prev  # set when the mode is already applied (set_grad_enabled)

    def python_type(self) -> type:
        if self.prev is not None:
            return torch.set_grad_enabled
        return torch.enable_grad if self.mode else torch.no_grad

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        """``__class__`` and ``mode``: what ``clone()`` reads when ``@torch.no_grad()`` runs."""
        if name == "__class__":
            return tx.output.wrap(self.python_type(), None)
        if name == "mode" and self.prev is not None:
            return constants.ConstantVariable(self.mode)
        return super().var_getattr(tx, name)

    def enter(self, tx: Translator) -> tuple[VariableTracker, VariableTracker]:
        prev = self.prev if self.prev is not None else tx.output.grad_enabled
        tx.output.set_grad_enabled(self.mode)
        return GradModeExitVariable(prev), constants.ConstantVariable(None)

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        if len(args) == 1 and isinstance(
            args[0], (functions.UserFunctionVariable, functions.NestedFunctionVariable)
        ):
            return GradModeDecoratedVariable(self.mode, args[0])
        raise Unsupported("calling a grad-mode context object")


class GradModeDecoratedVariable(VariableTracker):
    """A function decorated with ``@torch.no_grad()`` and friends."""

    def __init__(self, mode: bool, fn: VariableTracker):
        self.mode = mode
        self.fn = fn

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        prev = tx.output.grad_enabled
        tx.output.set_grad_enabled(self.mode)
        result = self.fn.call(tx, args, kwargs)
        tx.output.set_grad_enabled(prev)
        return result


class GradModeExitVariable(VariableTracker):
    """The ``__exit__`` a grad-mode ``with`` block leaves on the stack: restores ``prev``."""

    def __init__(self, prev: bool):
        self.prev = prev

    def python_type(self) -> type:
        return GradModeRestore

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        tx.output.set_grad_enabled(self.prev)
        return constants.ConstantVariable(None)

    def reconstruct(self, codegen: Any) -> str:
        return f"{codegen.bind(GradModeRestore, 'GradModeRestore')}({self.prev!r})"
