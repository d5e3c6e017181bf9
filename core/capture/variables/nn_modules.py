"""``nn.Module`` instances: attribute reads, calls and member iterators go to the output graph,
which lifts parameters and buffers and inlines ``forward``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from torchkiln.capture.variables.base import MISSING, ValueVariable, VariableTracker, class_lookup

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
