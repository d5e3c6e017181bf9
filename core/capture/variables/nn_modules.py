"""``nn.Module`` instances: attribute reads, calls and member iterators go to the output graph,
which lifts parameters and buffers and inlines ``forward``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from torchkiln.capture.variables.base import MISSING, ValueVariable, VariableTracker, class_lookup
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator


#: ``nn.Module`` methods answered from the real module's structure (its member names guarded).
MODULE_MEMBER_METHODS = {
    "parameters", "named_parameters", "buffers", "named_buffers",
    "children", "named_children", "modules", "named_modules",
}  # fmt: skip

#: containers whose length is their number of children (a module's children are guarded)
_CHILD_CONTAINERS = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)


class NNModuleVariable(ValueVariable):
    """An ``nn.Module`` guarded by type and ``training`` (``GuardSet.module``); calls inline
    ``forward``."""

    def __init__(self, value: torch.nn.Module, source: str | None = None):
        super().__init__(value, source)
        self.attrs: dict[str, VariableTracker] = {}

    def describe(self) -> str:
        return f"module {type(self.value).__name__}"

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        return tx.output.module_getattr(self, name, tx)

    def setattr(self, tx: Translator, name: str, value: VariableTracker) -> None:
        tx.output.side_effects.store_attr(self, name, value)
        self.attrs[name] = value

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        return tx.output.call_module(tx, self, args, kwargs)

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        if name in MODULE_MEMBER_METHODS and name not in self.value.__dict__:
            return tx.output.module_members(self, name, kwargs)
        return super().call_method(tx, name, args, kwargs)

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        return tx.output.module_children(self)

    def truth(self, tx: Translator) -> bool:
        cls = type(self.value)
        len_fn = class_lookup(cls, "__len__")
        if class_lookup(cls, "__bool__") is MISSING and any(
            len_fn is c.__len__ for c in _CHILD_CONTAINERS
        ):
            return bool(self.unpack(tx))
        return super().truth(tx)


class FrameModuleVariable(NNModuleVariable):
    """A parameter-free ``nn.Module`` the frame makes (``torch.nn.Softmax(dim=-1)(x)``, common
    in Hugging Face models). Built while tracing from constant arguments (:func:`construct`),
    it is the one each call would build; after the graph, a new one is built from the same
    arguments, since each call of the frame makes its own."""

    def __init__(self, value: torch.nn.Module, args: tuple, kwargs: dict):
        super().__init__(value, None)
        self.args, self.kwargs = args, kwargs

    def setattr(self, tx: Translator, name: str, value: VariableTracker) -> None:
        raise Unsupported(f"setting {name!r} on a {self.describe()} made in the frame")

    def reconstruct(self, codegen: Any) -> str:
        cls = codegen.bind(type(self.value), "cls")
        return f"{cls}(*{codegen.constant(self.args)}, **{codegen.constant(self.kwargs)})"


def construct(tx: Translator, cls: type, args: list, kwargs: dict) -> FrameModuleVariable:
    """``cls(*args, **kwargs)`` for a module class whose ``__init__`` is torch's own, with
    constant arguments, that makes no parameters or buffers: such a module is the same every
    call (nothing random, no state a call could change), so it is built here, once."""
    name = cls.__name__
    if not all(a.is_constant() for a in (*args, *kwargs.values())):
        raise Unsupported(f"creating a {name} module inside the compiled function from values")
    init = class_lookup(cls, "__init__")
    if (
        type(cls) is not type
        or cls.__new__ is not object.__new__
        or not getattr(init, "__module__", "").startswith("torch.")
    ):
        raise Unsupported(
            f"creating a {name} module inside the compiled function (its own __init__)"
        )
    consts = tuple(a.as_python_constant() for a in args)
    kwconsts = {k: v.as_python_constant() for k, v in kwargs.items()}
    with torch.device("meta"):  # a first build that touches no random state, to look at
        probe = cls(*consts, **kwconsts)
    tensors = [v for m in probe.modules() for v in vars(m).values() if isinstance(v, torch.Tensor)]
    if tensors or any(True for _ in probe.parameters()) or any(True for _ in probe.buffers()):
        raise Unsupported(f"creating a {name} module with parameters inside the compiled function")
    return FrameModuleVariable(cls(*consts, **kwconsts), consts, kwconsts)
