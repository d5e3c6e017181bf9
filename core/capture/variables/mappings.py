"""User mappings that are no dict (``collections.abc.Mapping`` subclasses): the mixins'
``keys``/``values``/``items`` views, and the items ``dict(obj)`` and ``**obj`` read.

The standard library is not traced, so the mixins are modelled as ``collections.abc`` writes
them: a view iterates the mapping (its class's ``__iter__``) and reads each value with its
``__getitem__``, lazily, item by item; ``dict()`` and ``**`` call ``keys()`` and then
``obj[key]`` for each key, as C's ``PyDict_Merge`` does.
"""

from __future__ import annotations

import collections.abc
from typing import TYPE_CHECKING, Any

from torchkiln.capture.variables import containers, functions, records
from torchkiln.capture.variables.base import IteratorVariable, VariableTracker, class_lookup
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator

_VIEWS = {
    "keys": collections.abc.KeysView,
    "values": collections.abc.ValuesView,
    "items": collections.abc.ItemsView,
}


def merged_items(tx: Translator, obj: VariableTracker) -> dict[Any, VariableTracker]:
    """What ``dict(obj)`` and ``f(**obj)`` read from ``obj``: a dict's items, a dict
    subclass's own storage (where it keeps dict's ``__iter__``), else ``list(obj.keys())``
    and ``obj[key]`` for each key, in that order."""
    if isinstance(obj, containers.DictVariable):
        return dict(obj.items)
    if isinstance(obj, records.DictObjectVariable) and class_lookup(
        obj.cls, "__iter__"
    ) is class_lookup(records.native_dict(obj.cls), "__iter__"):
        return dict(obj.storage.items)
    if not obj.has_attribute(tx, "keys"):
        raise Unsupported(f"{obj.describe()} is not a mapping (it has no keys(); TypeError)")
    keys = tx.unpack_iterable(tx.call_function(tx.getattr(obj, "keys"), [], {}))
    return {key.as_python_constant(): tx.subscript(obj, key) for key in keys}


def _view(kind: str) -> Any:
    def handler(tx: Translator, mapping: VariableTracker) -> VariableTracker:
        return MappingViewVariable(mapping, kind)

    return handler


#: The ``Mapping`` mixins modelled instead of inlined.
PYTHON_FUNCTIONS = {getattr(collections.abc.Mapping, kind): _view(kind) for kind in _VIEWS}


class MappingViewVariable(VariableTracker):
    """``mapping.keys()``/``values()``/``items()`` of a ``Mapping`` subclass: a live view,
    which reads the mapping when it is iterated."""

    def __init__(self, mapping: VariableTracker, kind: str):
        self.mapping = mapping
        self.kind = kind

    def python_type(self) -> type:
        return _VIEWS[self.kind]

    def make_iterator(self, tx: Translator) -> IteratorVariable:
        return MappingViewIteratorVariable(self, self.mapping.make_iterator(tx))

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        return self.make_iterator(tx).unpack(tx)

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name != "__len__":
            raise Unsupported(f"{self.python_type().__name__}.{name} of {self.mapping.describe()}")
        return functions.BoundMethodVariable(self, name)

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        """``len(view)`` is ``len(mapping)``; the rest is refused by ``var_getattr``."""
        if name == "__len__" and not args and not kwargs:
            return tx.call_function(tx.getattr(self.mapping, "__len__"), [], {})
        return super().call_method(tx, name, args, kwargs)

    def truth(self, tx: Translator) -> bool:
        return tx.truth(self.call_method(tx, "__len__", [], {}))

    def describe(self) -> str:
        return f"{self.kind}() of {self.mapping.describe()}"

    def reconstruct(self, codegen: Any) -> str:
        view = codegen.bind(_VIEWS[self.kind], "view")
        return f"{view}({codegen.reconstruct(self.mapping)})"


class MappingViewIteratorVariable(IteratorVariable):
    """An iterator over a ``MappingViewVariable``: the next key, then its value read."""

    def __init__(self, view: MappingViewVariable, keys: IteratorVariable):
        self.view = view
        self.keys = keys

    def python_type(self) -> type:
        return type(iter(self.view.python_type()({})))

    def next(self, tx: Translator) -> VariableTracker | None:
        key = self.keys.next(tx)
        if key is None or self.view.kind == "keys":
            return key
        value = tx.subscript(self.view.mapping, key)
        return value if self.view.kind == "values" else containers.TupleVariable([key, value])

    def remaining(self) -> list[VariableTracker]:
        raise Unsupported(f"iterating {self.view.describe()} across a graph break")

    def reconstruct(self, codegen: Any) -> str:
        raise Unsupported(f"cannot rebuild an iterator over {self.view.describe()} mid-way")
