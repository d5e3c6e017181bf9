"""Lists, tuples (and namedtuples, structseqs), dicts, read-only mappings and dict views.

A container with a source that the frame mutates is logged in ``side_effects`` and
written back after the graph ran.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

from torchkiln.capture.variables import (
    constants,
    exceptions,
    functions,
    iterators,
    mappings,
    objects,
    sets,
)
from torchkiln.capture.variables.base import (
    MISSING,
    IteratorVariable,
    VariableTracker,
    class_lookup,
)
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator


class ContainerVariable(VariableTracker):
    """Shared behaviour of lists and tuples."""

    def __init__(self, items: list[VariableTracker], source: str | None = None):
        self.items = list(items)
        self.source = source

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        return list(self.items)

    def make_iterator(self, tx: Translator) -> IteratorVariable:
        return iterators.SequenceIteratorVariable(self)

    def truth(self, tx: Translator) -> bool:
        return bool(self.items)

    def is_constant(self) -> bool:
        return all(i.is_constant() for i in self.items)

    def as_python_constant(self) -> Any:
        return self.python_type()(i.as_python_constant() for i in self.items)

    def getitem(self, tx: Translator, index: Any) -> VariableTracker:
        if isinstance(index, slice):
            return (
                type(self)(self.items[index])
                if type(self) is not TupleVariable
                else TupleVariable(self.items[index])
            )
        if isinstance(index, int):
            try:
                return self.items[index]
            except IndexError as e:
                raise exceptions.error(
                    IndexError,
                    f"{self.python_type().__name__} index out of range",
                    reason=f"index {index} out of range of a {self.describe()}",
                ) from e
        raise Unsupported(f"indexing a {self.describe()} with {type(index).__name__}")

    def binary(
        self, tx: Translator, symbol: str, other: VariableTracker, reflected: bool
    ) -> VariableTracker | None:
        """``+`` of two lists or two tuples and ``*`` by an int make a new sequence;
        ``+=`` (any iterable) and ``*=`` change a list in place."""
        op = symbol.removesuffix("=")
        in_place = op != symbol and not reflected and isinstance(self, ListVariable)
        if op == "*":
            count = other.as_python_constant() if other.is_constant() else None
            if not isinstance(count, int):
                return None  # Python's TypeError, or a symbolic count: the caller breaks
            if not in_place:
                return self.rebuilt(self.items * count)
            tx.output.side_effects.mutate(self)
            self.items *= count
            return self
        if op != "+":
            return None
        if in_place:
            self.call_method(tx, "extend", [other], {})
            return self
        kind = list if isinstance(self, ListVariable) else tuple
        others = sequence_items(other, kind)
        if others is None:
            return None
        return self.rebuilt([*others, *self.items] if reflected else [*self.items, *others])

    def rebuilt(self, items: list[VariableTracker]) -> ContainerVariable:
        """A new plain list or tuple (what ``+`` and ``*`` give, for subclasses too)."""
        return ListVariable(items) if isinstance(self, ListVariable) else TupleVariable(items)


def sequence_items(vt: VariableTracker, kind: type) -> list[VariableTracker] | None:
    """The items of ``vt`` if it is a ``kind`` (list or tuple, subclasses included), else None."""
    if isinstance(vt, ContainerVariable) and issubclass(vt.python_type(), kind):
        return vt.items
    if vt.is_constant() and isinstance(vt.as_python_constant(), kind):
        return [constants.ConstantVariable(v) for v in vt.as_python_constant()]
    return None


def method_of(obj: VariableTracker, name: str) -> VariableTracker:
    """``obj.name`` for a container tracker: a method of its type, run by ``call_method``."""
    if not callable(getattr(obj.python_type(), name, None)):
        raise Unsupported(f"{obj.python_type().__name__} has no attribute {name!r}")
    return functions.BoundMethodVariable(obj, name)


class ListVariable(ContainerVariable):
    """A Python list; mutations of a list with a source are replayed after the graph."""

    def python_type(self) -> type:
        return list

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        return method_of(self, name)

    def write_back(self, codegen: Any, new: str) -> list[str]:
        """Statements that give the real list behind ``source`` the items of ``new``."""
        return [f"{self.source}[:] = {new}"]

    def is_constant(self) -> bool:
        return False

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        items = self.items
        if name in (
            "append",
            "extend",
            "insert",
            "pop",
            "clear",
            "reverse",
            "remove",
            "sort",
            "__setitem__",
        ):
            tx.output.side_effects.mutate(self)
        if name == "append":
            items.append(args[0])
        elif name == "extend":
            self.extend(tx, args[0])
        elif name == "insert":
            items.insert(args[0].as_python_constant(), args[1])
        elif name == "pop":
            index = args[0].as_python_constant() if args else -1
            return items.pop(index)
        elif name == "clear":
            items.clear()
        elif name == "reverse":
            items.reverse()
        elif name == "remove":
            value = args[0].as_python_constant()
            for i, item in enumerate(items):
                if item.is_constant() and item.as_python_constant() == value:
                    del items[i]
                    break
            else:
                raise Unsupported("list.remove of a value not found")
        elif name == "sort" and not kwargs:
            values = sorted(i.as_python_constant() for i in items)
            items[:] = [constants.ConstantVariable(v) for v in values]
        elif name in ("index", "count", "copy", "__len__"):
            if name == "copy":
                return ListVariable(items)
            if name == "__len__":
                return constants.ConstantVariable(len(items))
            values = [i.as_python_constant() for i in items]
            return constants.ConstantVariable(getattr(values, name)(args[0].as_python_constant()))
        else:
            raise Unsupported(f"list.{name}")
        return constants.ConstantVariable(None)

    def extend(self, tx: Translator, iterable: VariableTracker) -> None:
        """``list.extend``: a list or tuple is copied first; any other iterable is appended item
        by item, so an iterable that reads this list sees the items appended so far."""
        if isinstance(iterable, ContainerVariable):
            self.items.extend(iterable.items)
            return
        iterator = iterable.make_iterator(tx)
        while (item := iterator.next(tx)) is not None:
            self.items.append(item)


class TupleVariable(ContainerVariable):
    """A tuple, a namedtuple (``cls``) or a torch structseq such as ``torch.return_types.max``."""

    def __init__(
        self,
        items: list[VariableTracker],
        source: str | None = None,
        cls: type = tuple,
        fields: tuple[str, ...] | None = None,
    ):
        super().__init__(items, source)
        self.cls = cls
        self.fields = fields

    def python_type(self) -> type:
        return self.cls

    def as_python_constant(self) -> Any:
        if self.cls is not tuple:
            raise Unsupported(f"{self.cls.__name__} is not a Python constant")
        return super().as_python_constant()

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        if self.fields and name in self.fields:
            return self.items[self.fields.index(name)]
        if self.fields and name == "_fields":
            return constants.ConstantVariable(tuple(self.fields))
        if name in ("index", "count", "_asdict", "_replace"):
            return functions.BoundMethodVariable(self, name)
        attr = class_lookup(self.cls, name) if self.cls is not tuple else MISSING
        if isinstance(attr, types.FunctionType):  # a method of a namedtuple subclass
            return functions.UserMethodVariable(attr, self)
        if isinstance(attr, staticmethod):
            return tx.output.wrap(attr.__func__, None)
        if isinstance(attr, classmethod):
            return functions.UserMethodVariable(attr.__func__, tx.output.wrap(self.cls, None))
        raise Unsupported(f"attribute {name!r} of {self.cls.__name__}")

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        if name in ("index", "count"):
            values = [i.as_python_constant() for i in self.items]
            return constants.ConstantVariable(getattr(values, name)(args[0].as_python_constant()))
        if name == "_asdict" and self.fields:
            return DictVariable(dict(zip(self.fields, self.items)))
        if name == "_replace" and self.fields:
            items = list(self.items)
            for key, value in kwargs.items():
                items[self.fields.index(key)] = value
            return TupleVariable(items, cls=self.cls, fields=self.fields)
        return super().call_method(tx, name, args, kwargs)


DICT_MUTATORS = ("__setitem__", "update", "pop", "setdefault", "clear", "popitem", "__delitem__")
#: The dict methods whose first argument is a key.
KEYED_METHODS = ("__setitem__", "__getitem__", "__delitem__", "get", "pop", "setdefault",
                 "__contains__")  # fmt: skip


class DictVariable(VariableTracker):
    """A dict; mutations of a dict with a source are replayed. Its keys are ``sets.key_of``
    keys: constants as themselves, tensors and objects by identity (``sets.Element``)."""

    def __init__(self, items: dict, source: str | None = None):
        self.items = dict(items)
        self.source = source

    def python_type(self) -> type:
        return dict

    def truth(self, tx: Translator) -> bool:
        return bool(self.items)

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        return [sets.tracker_of(k) for k in self.items]

    def make_iterator(self, tx: Translator) -> IteratorVariable:
        return iterators.DictIteratorVariable(self, "keys")

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        return method_of(self, name)

    def getitem(self, tx: Translator, key: Any) -> VariableTracker:
        try:
            return self.items[key]
        except KeyError:
            return self.missing(tx, key)
        except TypeError as e:
            raise Unsupported(f"unhashable dict key {key!r}") from e

    def missing(self, tx: Translator, key: Any) -> VariableTracker:
        """``self[key]`` for a key not in the dict (``__missing__`` of the subclasses)."""
        self.missing_key(key)

    @staticmethod
    def missing_key(key: Any) -> None:
        """Python's ``KeyError`` for ``key`` (raised in the frame: it may catch it)."""
        if isinstance(key, (sets.Element, sets.HashedKey)):
            raise Unsupported(f"KeyError for a missing {key.vt.describe()} key")
        raise exceptions.error(KeyError, key, reason=f"dict key {key!r} not found")

    def reconstruct_literal(self, codegen: Any) -> str:
        """A new dict of this kind with the current items (``codegen.literal``)."""
        entries = (
            f"{codegen.reconstruct(sets.tracker_of(k))}: {codegen.reconstruct(v)}"
            for k, v in self.items.items()
        )
        return "{" + ", ".join(entries) + "}"

    def write_back(self, codegen: Any, new: str) -> list[str]:
        """Statements that give the real object behind ``source`` the items of ``new``."""
        return [f"{self.source}.clear()", f"{self.source}.update({new})"]

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        items = self.items
        consts = [sets.key_of(args[0], tx)] if name in KEYED_METHODS and args else []
        if name in DICT_MUTATORS:
            tx.output.side_effects.mutate(self)
        if name == "__setitem__":
            items[consts[0]] = args[1]
        elif name == "__getitem__":
            return self.getitem(tx, consts[0])
        elif name == "__iter__":
            return self.make_iterator(tx)
        elif name == "popitem" and not args:
            if not items:
                raise Unsupported("popitem() of an empty dict (KeyError)")
            key, value = items.popitem()
            return TupleVariable([sets.tracker_of(key), value])
        elif name == "__delitem__":
            if consts[0] not in items:
                self.missing_key(consts[0])
            del items[consts[0]]
        elif name == "get":
            return items.get(
                consts[0], args[1] if len(args) > 1 else constants.ConstantVariable(None)
            )
        elif name in ("keys", "values", "items"):
            return DictViewVariable(self, name)
        elif name == "update":
            if len(args) > 1:
                raise Unsupported(f"dict.update with {len(args)} positional arguments (TypeError)")
            update_items(tx, items, args[0] if args else None, kwargs)
        elif name == "pop":
            if consts[0] in items:
                return items.pop(consts[0])
            if len(args) > 1:
                return args[1]
            raise Unsupported(f"dict.pop of missing key {consts[0]!r}")
        elif name == "setdefault":
            return items.setdefault(
                consts[0], args[1] if len(args) > 1 else constants.ConstantVariable(None)
            )
        elif name == "clear":
            items.clear()
        elif name == "copy":
            return self.copy()
        elif name == "__contains__":
            return constants.ConstantVariable(consts[0] in items)
        elif name == "__len__":
            return constants.ConstantVariable(len(items))
        else:
            raise Unsupported(f"{self.python_type().__name__}.{name}")
        return constants.ConstantVariable(None)

    def copy(self) -> DictVariable:
        return DictVariable(self.items)


def update_items(
    tx: Translator, items: dict, arg: VariableTracker | None, kwargs: dict[str, VariableTracker]
) -> None:
    """What ``dict(arg, **kwargs)`` and ``d.update(arg, **kwargs)`` put into ``items``: a
    mapping (anything with ``keys()``) read by its keys, else an iterable of (key, value)
    pairs, each of exactly two items; then the keyword arguments."""
    if arg is not None and _is_mapping(tx, arg):
        items.update(mappings.merged_items(tx, arg))
    elif arg is not None:
        for n, pair in enumerate(tx.unpack_iterable(arg)):
            parts = tx.unpack_iterable(pair)
            if len(parts) != 2:
                message = f"dictionary update sequence element #{n} has length {len(parts)}; 2 is required"
                raise exceptions.error(ValueError, message, reason=message)
            items[sets.key_of(parts[0], tx)] = parts[1]
    items.update(kwargs)


def _is_mapping(tx: Translator, arg: VariableTracker) -> bool:
    """Whether ``dict(arg)`` reads ``arg`` as a mapping: it has a ``keys`` attribute (an
    object's own attributes count; builtin values have only their type's)."""
    if isinstance(arg, DictVariable):
        return True
    if isinstance(arg, objects.UserObjectVariable):
        return arg.has_attribute(tx, "keys")
    return hasattr(arg.python_type(), "keys")


class ReadOnlyDictVariable(DictVariable):
    """A ``types.MappingProxyType`` of constants: read like a dict, writes refused as Python does.

    ``source`` reads the real proxy, so a rebuilt value is the proxy itself.
    """

    def python_type(self) -> type:
        return types.MappingProxyType

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        if name in DICT_MUTATORS:
            raise Unsupported(f"mappingproxy.{name} (a read-only mapping)")
        return super().call_method(tx, name, args, kwargs)


def _dict_entries(mapping: DictVariable, kind: str) -> list[VariableTracker]:
    """What iterating ``mapping.<kind>()`` gives now."""
    if kind == "keys":
        return [sets.tracker_of(k) for k in mapping.items]
    if kind == "values":
        return list(mapping.items.values())
    return [TupleVariable([sets.tracker_of(k), v]) for k, v in mapping.items.items()]


class DictViewVariable(VariableTracker):
    """``d.keys()`` / ``d.values()`` / ``d.items()``: a live view, read when it is used."""

    def __init__(self, mapping: DictVariable, kind: str):
        self.mapping = mapping
        self.kind = kind

    def python_type(self) -> type:
        return type(getattr({}, self.kind)())

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        return _dict_entries(self.mapping, self.kind)

    def make_iterator(self, tx: Translator) -> IteratorVariable:
        return iterators.DictIteratorVariable(self.mapping, self.kind)

    def truth(self, tx: Translator) -> bool:
        return bool(self.mapping.items)

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        if name == "__len__" and not args:
            return constants.ConstantVariable(len(self.mapping.items))
        raise Unsupported(f"{self.python_type().__name__}.{name}")

    def binary(
        self, tx: Translator, symbol: str, other: VariableTracker, reflected: bool
    ) -> VariableTracker | None:
        """``keys()`` and ``items()`` are sets: their operators are ``sets.view_binary``."""
        return sets.view_binary(tx, self, symbol, other, reflected)

    def reconstruct(self, codegen: Any) -> str:
        return f"{codegen.reconstruct(self.mapping)}.{self.kind}()"
