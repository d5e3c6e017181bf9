"""Objects torchkiln passes around but does not trace into (C functions, numpy arrays, loggers,
TorchScript): calling them breaks the graph and runs the call natively."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchkiln.capture.variables import lookups
from torchkiln.capture.variables.base import ValueVariable, VariableTracker, class_lookup
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator


class OpaqueVariable(ValueVariable):
    """An object torchkiln passes around but cannot look into (C functions, numpy arrays, loggers).

    Calling it, or a method of it, is ``Unsupported`` (a graph break that
    runs the call natively); only its type is guarded.
    """

    def describe(self) -> str:
        name = getattr(self.value, "__qualname__", None) or type(self.value).__name__
        module = getattr(self.value, "__module__", None) or type(self.value).__module__
        return f"{module}.{name}"

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        raise Unsupported(f"calling {self.describe()} (C function or untraceable callable)")

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        class_attr = class_lookup(type(self.value), name)
        if lookups.is_pure_lookup(
            class_attr
        ):  # ``os.environ.get(key)``: a guard re-runs the lookup
            return lookups.LookupVariable(class_attr, self)
        return OpaqueAttributeVariable(self, name)


class TorchScriptVariable(OpaqueVariable):
    """A ``torch.jit`` module, method or function kept without its Python source."""

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        raise Unsupported(
            f"calling TorchScript {type(self.value).__name__}: it runs in the TorchScript "
            "runtime, not in Python, so it is called natively; compile the original Python "
            "module or function to trace it"
        )


class OpaqueAttributeVariable(VariableTracker):
    """``opaque.name``: rebuilt as that expression when a graph break needs it."""

    def __init__(self, obj: OpaqueVariable, name: str):
        self.obj = obj
        self.name = name

    def describe(self) -> str:
        return f"{type(self.obj.value).__qualname__}.{self.name}"

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        raise Unsupported(
            f"calling {self.describe()} of a {type(self.obj.value).__module__} object (not traced)"
        )

    def reconstruct(self, codegen: Any) -> str:
        return f"{codegen.reconstruct(self.obj)}.{self.name}"
