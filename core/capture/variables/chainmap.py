"""``collections.ChainMap``: a list of mappings (``maps``) searched in order.

The standard library is not traced, so its methods are modelled here as ``collections``
writes them: a lookup tries ``mapping[key]`` on each map in turn (a ``KeyError`` passes on to
the next, then ``__missing__`` raises it), writes and deletions go to the first map, ``len``
and iteration see each key once, in the order of ``dict.fromkeys`` over the maps reversed.
The maps are trackers of their own (a map read through ``maps[i]`` of an argument is
guarded and written back as any dict is); the object is rebuilt around its ``maps`` list.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

from torchkiln.capture.variables import constants, containers, exceptions, functions, mappings, sets
from torchkiln.capture.variables.base import IteratorVariable, VariableTracker
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator

#: Methods that act on the first map only.
FIRST_MAP_METHODS = ("__setitem__", "__delitem__", "pop", "popitem", "clear")

#: Methods modelled here (besides ``FIRST_MAP_METHODS``).
METHODS = (
    "__getitem__", "__contains__", "__len__", "__iter__", "get", "keys", "items", "values",
    "new_child", "copy", "update", "setdefault",
)  # fmt: skip


def make_chainmap(maps: list) -> collections.ChainMap:
    """A ``ChainMap`` over the list ``maps`` itself (not a copy: the frame may hold it)."""
    chain = collections.ChainMap()
    chain.maps = maps
    return chain


class ChainMapVariable(VariableTracker):
    """A ``collections.ChainMap``; ``maps`` is the tracker of its ``maps`` list."""

    def __init__(self, maps: VariableTracker, source: str | None = None):
        self.maps = maps
        self.source = source

    def python_type(self) -> type:
        return collections.ChainMap

    def describe(self) -> str:
        return "a ChainMap"

    def map_list(self, tx: Translator) -> list[VariableTracker]:
        return tx.unpack_iterable(self.maps)

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name == "maps":
            return self.maps
        if name == "parents":
            return new(self.map_list(tx)[1:])
        if name in METHODS or name in FIRST_MAP_METHODS:
            return functions.BoundMethodVariable(self, name)
        raise Unsupported(f"ChainMap.{name}")

    def getitem(self, tx: Translator, key: VariableTracker) -> VariableTracker:
        for mapping in self.map_list(tx):
            try:
                return tx.subscript(mapping, key)
            except exceptions.Raised as e:
                if not issubclass(e.exc.python_type(), KeyError):
                    raise
        if not key.is_constant():
            raise Unsupported(f"KeyError for a missing {key.describe()} key of a ChainMap")
        value = key.as_python_constant()
        raise exceptions.error(KeyError, value, reason=f"ChainMap key {value!r} not found")

    def contains(self, tx: Translator, key: VariableTracker) -> bool:
        return any(_has_key(tx, mapping, key) for mapping in self.map_list(tx))

    def keys(self, tx: Translator) -> list[VariableTracker]:
        """Each key once, in ``dict.fromkeys`` order over the maps reversed."""
        seen: dict = {}
        for mapping in reversed(self.map_list(tx)):
            for key in tx.unpack_iterable(mapping):
                seen.setdefault(sets.key_of(key, tx), key)
        return list(seen.values())

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        return self.keys(tx)

    def make_iterator(self, tx: Translator) -> IteratorVariable:
        return IteratorVariable(self.keys(tx))

    def truth(self, tx: Translator) -> bool:
        return any(tx.truth(mapping) for mapping in self.map_list(tx))

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        maps = self.map_list(tx)
        if name in FIRST_MAP_METHODS:
            if (
                name in ("__delitem__", "pop")
                and len(args) == 1
                and not _has_key(tx, maps[0], args[0])
            ):
                raise _not_in_first_map(args[0])
            return tx.call_function(tx.getattr(maps[0], name), args, kwargs)
        if name == "__getitem__" and len(args) == 1:
            return self.getitem(tx, args[0])
        if name == "__contains__" and len(args) == 1:
            return constants.ConstantVariable(self.contains(tx, args[0]))
        if name == "__len__" and not args:
            return constants.ConstantVariable(len(self.keys(tx)))
        if name == "__iter__" and not args:
            return self.make_iterator(tx)
        if name == "get" and 1 <= len(args) <= 2 and not kwargs:
            if self.contains(tx, args[0]):
                return self.getitem(tx, args[0])
            return args[1] if len(args) > 1 else constants.ConstantVariable(None)
        if name in ("keys", "items", "values") and not args:
            return mappings.MappingViewVariable(self, name)
        if name == "new_child" and len(args) <= 1:
            return self.new_child(tx, args[0] if args else None, kwargs)
        if name == "copy" and not args:
            return new([tx.call_function(tx.getattr(maps[0], "copy"), [], {}), *maps[1:]])
        if name == "update":  # ``MutableMapping.update``: each item set through ``self[key]``
            items: dict = {}
            containers.update_items(tx, items, args[0] if args else None, kwargs)
            for key, value in items.items():
                tx.call_function(
                    tx.getattr(maps[0], "__setitem__"), [sets.tracker_of(key), value], {}
                )
            return constants.ConstantVariable(None)
        if name == "setdefault" and 1 <= len(args) <= 2:
            if not self.contains(tx, args[0]):
                value = args[1] if len(args) > 1 else constants.ConstantVariable(None)
                tx.call_function(tx.getattr(maps[0], "__setitem__"), [args[0], value], {})
            return self.getitem(tx, args[0])
        raise Unsupported(f"ChainMap.{name} with these arguments")

    def new_child(
        self, tx: Translator, m: VariableTracker | None, kwargs: dict
    ) -> ChainMapVariable:
        """``new_child(m=None, **kwargs)``: ``m`` (or a new dict of ``kwargs``) in front."""
        if m is None or (m.is_constant() and m.as_python_constant() is None):
            m = containers.DictVariable(kwargs)
        elif kwargs:
            tx.call_function(tx.getattr(m, "update"), [], kwargs)
        return new([m, *self.map_list(tx)])

    def reconstruct(self, codegen: Any) -> str:
        make = codegen.bind(make_chainmap, "make_chainmap")
        return f"{make}({codegen.reconstruct(self.maps)})"


def _has_key(tx: Translator, mapping: VariableTracker, key: VariableTracker) -> bool:
    """``key in mapping``."""
    if isinstance(mapping, containers.DictVariable):
        return sets.key_of(key, tx) in mapping.items
    return tx.truth(tx.call_function(tx.getattr(mapping, "__contains__"), [key], {}))


def _not_in_first_map(key: VariableTracker) -> exceptions.Raised:
    """The ``KeyError`` ``ChainMap`` raises for a key its first map lacks."""
    if not key.is_constant():
        raise Unsupported(f"KeyError for a missing {key.describe()} key of a ChainMap")
    message = f"Key not found in the first mapping: {key.as_python_constant()!r}"
    return exceptions.error(KeyError, message, reason=message)


def new(maps: list[VariableTracker]) -> ChainMapVariable:
    """``ChainMap(*maps)``: a new list of the maps, or of one new dict where there are none."""
    return ChainMapVariable(containers.ListVariable(maps or [containers.DictVariable({})]))


def _construct(tx: Translator, *maps: VariableTracker) -> VariableTracker:
    return new(list(maps))


#: ``collections.ChainMap`` built by the frame.
CONSTRUCTORS = {collections.ChainMap: _construct}


def from_real(out: Any, value: collections.ChainMap, source: str | None) -> ChainMapVariable:
    """A ``ChainMap`` read through ``source`` (its type guarded by the caller): its ``maps``
    list is read, and guarded, as any list."""
    return ChainMapVariable(out.wrap(value.maps, f"{source}.maps" if source else None), source)
