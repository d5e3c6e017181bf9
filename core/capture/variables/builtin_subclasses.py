"""Instances of user subclasses of ``list``, ``tuple``, ``set``, ``frozenset``, ``dict`` and
``OrderedDict`` (dataclasses that are dicts, such as ``ModelOutput``, are ``records``').

Such an object is a user object (its attributes, its Python methods inlined) whose items live
in a tracker of its native type, ``storage``: the C methods the class inherits act on the
storage, as CPython's act on the object's own items (``super().__getitem__`` included), and a
dict subclass's ``__missing__`` is inlined where ``dict.__getitem__`` would call it. An object
read from outside has its items read and guarded with the native C methods (never the class's
own ``__len__`` or ``__getitem__``), and the frame's changes to them are written back with the
native methods too; an object the frame built is rebuilt after the graph as an instance of
the class (``make_instance``).
"""

from __future__ import annotations

import collections
import dataclasses
import types
from typing import TYPE_CHECKING, Any

from torchkiln.capture.targets import is_stdlib
from torchkiln.capture.variables import (
    collection_types,
    constants,
    containers,
    exceptions,
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

#: The native types a user class can build on, most derived first.
NATIVE_TYPES = (collections.OrderedDict, dict, list, tuple, frozenset, set)

#: The dunder methods that are binary operators (``list.__add__``...), as the translator spells them.
OPERATORS = {
    "__add__": "+", "__mul__": "*", "__iadd__": "+=", "__imul__": "*=", "__rmul__": "*",
    "__or__": "|", "__and__": "&", "__sub__": "-", "__xor__": "^", "__ior__": "|=",
    "__iand__": "&=", "__isub__": "-=", "__ixor__": "^=", "__eq__": "==", "__ne__": "!=",
    "__lt__": "<", "__le__": "<=", "__gt__": ">", "__ge__": ">=",
}  # fmt: skip


def native_type(cls: type) -> type | None:
    """The native type whose storage a user class ``cls`` builds on, or None for a class this
    module does not model (no such base, a namedtuple, a dataclass, a class of the standard
    library or torch, a metaclass of its own, a ``__new__`` of another C type)."""
    native = next((base for base in NATIVE_TYPES if issubclass(cls, base)), None)
    if native is None or cls is native or type(cls) is not type or hasattr(cls, "_fields"):
        return None
    if is_stdlib(cls.__module__) or cls.__module__.partition(".")[0] == "torch":
        return None
    if dataclasses.is_dataclass(cls):
        return None
    allocators = [k for k in cls.__mro__[:-1] if "__new__" in k.__dict__ and k not in NATIVE_TYPES]
    if any(not isinstance(k.__dict__["__new__"], staticmethod) for k in allocators):
        return None
    return native


def _natives(cls: type) -> tuple[type, ...]:
    """The native classes of ``cls``'s MRO: their C methods act on the storage."""
    return tuple(k for k in cls.__mro__ if k in NATIVE_TYPES)


# -- storages: the items, written back to an object read from outside with native methods


class ListStorage(containers.ListVariable):
    """A list subclass's items; written back with ``list.__setitem__`` (not the class's)."""

    def write_back(self, codegen: Any, new: str) -> list[str]:
        setitem = codegen.bind(list.__setitem__, "list_setitem")
        return [f"{setitem}({self.source}, slice(None), {new})"]


class SetStorage(sets.SetVariable):
    """A set subclass's items; the frame's changes replayed with ``set``'s own methods."""

    def method_expr(self, codegen: Any, name: str) -> str:
        return f"{codegen.bind(getattr(set, name), f'set_{name}')}.__get__({self.source})"


class DictStorageMixin:
    """A dict subclass's items: a missing key runs the class's ``__missing__``; the frame's
    changes are written back with the native ``clear`` and ``__setitem__``."""

    owner: BuiltinSubclassVariable | None = None

    def missing(self, tx: Translator, key: Any) -> VariableTracker:
        hook = class_lookup(self.owner.cls, "__missing__") if self.owner else None
        if self.owner:
            self.owner.guard_member(tx, "__missing__")
        if not isinstance(hook, types.FunctionType):
            return super().missing(tx, key)
        return tx.inline_call(hook, [self.owner, sets.tracker_of(key)], {})

    def write_back(self, codegen: Any, new: str) -> list[str]:
        fill = codegen.bind(fill_dict, "fill_dict")
        return [f"{fill}({codegen.bind(_natives(self.owner.cls)[0], 'T')}, {self.source}, {new})"]


class DictStorage(DictStorageMixin, containers.DictVariable):
    """The items of a ``dict`` subclass."""


class OrderedDictStorage(DictStorageMixin, collection_types.OrderedDictVariable):
    """The items of an ``OrderedDict`` subclass."""


def fill_dict(native: type, obj: dict, items: dict) -> None:
    """Give dict-subclass instance ``obj`` the items ``items`` with ``native``'s C methods."""
    native.clear(obj)
    for key, value in items.items():
        native.__setitem__(obj, key, value)


def make_instance(cls: type, attrs: dict, items: Any) -> Any:
    """An instance of ``cls`` the compiled frame built: allocated and filled natively (its
    class's ``__new__`` and ``__init__`` already ran in the frame), attributes set."""
    native = _natives(cls)[0]
    obj = native.__new__(cls, items) if native in (tuple, frozenset) else native.__new__(cls)
    if native is list:
        list.extend(obj, items)
    elif native is set:
        set.update(obj, items)
    elif native is not tuple and native is not frozenset:
        fill_dict(native, obj, items)
    for name, value in attrs.items():
        object.__setattr__(obj, name, value)
    return obj


# -- the object


class BuiltinSubclassVariable(objects.UserObjectVariable):
    """An instance of a user subclass of a native container: see the module docstring."""

    def __init__(
        self, cls: type, storage: VariableTracker, value: Any = None, source: str | None = None
    ):
        super().__init__(value, source, cls=cls)
        self.storage = storage
        if isinstance(storage, DictStorageMixin):
            storage.owner = self

    def guard_member(self, tx: Translator, name: str) -> None:
        """The class still resolves ``name`` as now."""
        tx.output.guard_class_member(self, name)

    def native_method(self, tx: Translator, name: str, attr: Any) -> VariableTracker:
        if getattr(attr, "__objclass__", None) in _natives(self.cls):
            self.guard_member(tx, name)
            return StorageMethodVariable(self, name, attr)
        return super().native_method(tx, name, attr)

    def inherits(self, tx: Translator, name: str) -> bool:
        """Whether the class takes ``name`` from its native type, or has none (guarded to stay
        so): then the C code acts on the items, as it does on the storage."""
        self.guard_member(tx, name)
        attr = class_lookup(self.cls, name)
        return attr is MISSING or getattr(attr, "__objclass__", None) in _natives(self.cls)

    def make_iterator(self, tx: Translator) -> IteratorVariable:
        if self.inherits(tx, "__iter__"):
            return self.storage.make_iterator(tx)
        return super().make_iterator(tx)

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        return self.make_iterator(tx).unpack(tx)

    def operand(self, tx: Translator, names: tuple[str, ...]) -> VariableTracker:
        """What an operator sees of this object: its storage where every method of the
        operator (``names``: forward, reflected, in place) is the native type's."""
        return self.storage if all(self.inherits(tx, n) for n in names) else self

    def reconstruct(self, codegen: Any) -> str:
        attrs = ", ".join(f"{k!r}: {codegen.reconstruct(v)}" for k, v in self.attrs.items())
        make = codegen.bind(make_instance, "make_instance")
        items = codegen.literal(self.storage)
        return f"{make}({codegen.bind(self.cls, 'cls')}, {{{attrs}}}, {items})"


class StorageMethodVariable(VariableTracker):
    """A native C method (``attr``, named ``name``) bound to a ``BuiltinSubclassVariable``:
    runs on its storage; a method that returns the storage itself (``__iadd__``) returns the
    object."""

    def __init__(self, obj: BuiltinSubclassVariable, name: str, attr: Any):
        self.obj = obj
        self.name = name
        self.attr = attr

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        result = call_native(tx, self.obj, self.name, args, kwargs)
        return self.obj if result is self.obj.storage else result

    def describe(self) -> str:
        return f"method {self.name!r} of {self.obj.describe()}"

    def reconstruct(self, codegen: Any) -> str:
        return f"{codegen.bind(self.attr, 'method')}.__get__({codegen.reconstruct(self.obj)})"


def call_native(
    tx: Translator, obj: BuiltinSubclassVariable, name: str, args: list, kwargs: dict
) -> VariableTracker:
    """``native.name(obj, *args, **kwargs)`` on ``obj``'s storage."""
    storage = obj.storage
    if name == "__init__":
        return _init(tx, obj, args, kwargs)
    if kwargs and name not in ("update", "sort", "move_to_end", "popitem"):
        raise Unsupported(f"{obj.describe()}.{name} with keyword arguments")
    if name in OPERATORS and len(args) == 1:
        return tx.binary_op(OPERATORS[name], storage, args[0])
    if name == "__getitem__" and len(args) == 1:
        return tx.subscript(storage, args[0])
    if name == "__len__" and not args:
        return tx.call_function(tx.output.wrap(len, None), [storage], {})
    if name == "__iter__" and not args:
        return storage.make_iterator(tx)
    if name == "__contains__" and len(args) == 1 and not isinstance(storage, sets.SetVariable):
        if isinstance(storage, containers.DictVariable):
            return constants.ConstantVariable(sets.key_of(args[0], tx) in storage.items)
        return constants.ConstantVariable(tx.contains(storage, args[0]))
    if name == "__setitem__" and isinstance(storage, ListStorage) and len(args) == 2:
        return _list_setitem(tx, storage, args[0], args[1])
    if name == "__delitem__" and isinstance(storage, ListStorage) and len(args) == 1:
        if not isinstance(args[0].as_python_constant(), int):
            raise Unsupported(f"del of a slice of {obj.describe()}")
        storage.call_method(tx, "pop", args, {})
        return constants.ConstantVariable(None)
    if name == "copy" and isinstance(storage, collection_types.OrderedDictVariable):
        raise Unsupported(f"copy() of {obj.describe()} (an instance of its own class)")
    return storage.call_method(tx, name, args, kwargs)


#: Comparisons are reflected to their mirror image (``a < b`` tries ``b > a``).
_SWAPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}


def binary(
    tx: Translator, symbol: str, stem: str, a: VariableTracker, b: VariableTracker
) -> VariableTracker | None:
    """``a <symbol> b`` where an operand's class takes every method of the operator from its
    native type: the native operator on its storage (an in-place one gives the object
    back); None where neither operand does (``dunders`` runs the class's methods)."""
    names = (f"__{stem}__", f"__{_SWAPPED.get(stem, 'r' + stem)}__", f"__i{stem}__")
    left, right = (
        v.operand(tx, names) if isinstance(v, BuiltinSubclassVariable) else v for v in (a, b)
    )
    if left is a and right is b:
        return None
    result = tx.binary_op(symbol, left, right)
    return a if result is left and left is not a else result


def _list_setitem(
    tx: Translator, storage: ListStorage, key: VariableTracker, value: VariableTracker
) -> VariableTracker:
    index = key.as_python_constant()
    if isinstance(index, slice):
        value_items = tx.unpack_iterable(value)
    elif not isinstance(index, int):
        raise Unsupported(f"list indices must be integers, not {type(index).__name__}")
    elif not -len(storage.items) <= index < len(storage.items):
        raise exceptions.error(IndexError, "list assignment index out of range", reason="index")
    tx.output.side_effects.mutate(storage)
    storage.items[index] = value_items if isinstance(index, slice) else value
    return constants.ConstantVariable(None)


def _init(
    tx: Translator, obj: BuiltinSubclassVariable, args: list, kwargs: dict
) -> VariableTracker:
    """``list.__init__``/``set.__init__`` (emptied, then filled), ``dict.__init__`` (updated);
    ``tuple`` and ``frozenset`` are filled by ``__new__``."""
    storage = obj.storage
    if isinstance(storage, containers.DictVariable):
        return storage.call_method(tx, "update", args, kwargs)
    if kwargs or len(args) > 1:
        raise Unsupported(f"{obj.describe()}.__init__ with these arguments (TypeError)")
    storage.call_method(tx, "clear", [], {})
    if args:
        storage.call_method(
            tx, "extend" if isinstance(storage, ListStorage) else "update", args, {}
        )
    return constants.ConstantVariable(None)


def allocate(
    tx: Translator, cls: type, args: list, kwargs: dict | None = None
) -> BuiltinSubclassVariable:
    """``native.__new__(cls, *args)``: an empty object, or for a tuple or frozenset one holding
    the items of ``args[0]`` (``__new__`` ignores the arguments of the mutable kinds)."""
    native = _natives(cls)[0]
    if native in (tuple, frozenset):
        if kwargs or len(args) > 1:
            raise Unsupported(f"{native.__name__}.__new__({cls.__name__}) with these arguments")
        if native is tuple:
            storage = containers.TupleVariable(tx.unpack_iterable(args[0]) if args else [])
        else:
            items = sets.operand(tx, args[0]) if args else None
            storage = sets.SetVariable(
                frozenset(items.real if items else ()), exact=items is None or items.exact
            )
    elif native is list:
        storage = ListStorage([])
    elif native is set:
        storage = SetStorage(set())
    else:
        storage = (DictStorage if native is dict else OrderedDictStorage)({})
    return BuiltinSubclassVariable(cls, storage)


def construct(tx: Translator, cls: type, args: list, kwargs: dict) -> VariableTracker:
    """``cls(*args, **kwargs)`` as ``type.__call__`` runs it: the class's ``__new__`` (a Python
    one inlined, else the native one), then ``__init__`` on an instance of ``cls``."""
    new = next(k.__dict__["__new__"] for k in cls.__mro__ if "__new__" in k.__dict__)
    if not isinstance(new, staticmethod):  # the native type's
        obj = allocate(tx, cls, args, kwargs)
    else:
        obj = tx.inline_call(new.__func__, [objects.ClassVariable(cls), *args], kwargs)
        if not (isinstance(obj, BuiltinSubclassVariable) and issubclass(obj.cls, cls)):
            return obj
    init = class_lookup(obj.cls, "__init__")
    if isinstance(init, types.FunctionType):
        tx.inline_call(init, [obj, *args], kwargs)
    elif init is not object.__init__:
        _init(tx, obj, args, kwargs)
    return obj


def new_instance(
    tx: Translator, native: type, cls: type, args: list, kwargs: dict
) -> BuiltinSubclassVariable:
    """``native.__new__(cls, *args)`` called in the frame (``super().__new__(cls)``)."""
    if native_type(cls) is None or native not in _natives(cls):
        raise Unsupported(f"{native.__name__}.__new__({cls.__qualname__})")
    return allocate(tx, cls, args, kwargs)


def from_real(out: Any, value: Any, source: str | None) -> BuiltinSubclassVariable | None:
    """The tracker of an instance read through ``source`` (its type guarded by the caller),
    or None where its items cannot be tracked (a dict with keys that are not constants)."""
    cls = type(value)
    native = _natives(cls)[0]
    guards = out.guards
    if native in (list, tuple):
        if source:
            size, n = f"{guards.bind(native.__len__, 'len')}({source})", native.__len__(value)
            guards.add(f"{size} == {n}", 2, f"{size} == {n}")
        read = guards.bind(native.__getitem__, "getitem")
        items = [
            out.wrap(native.__getitem__(value, i), f"{read}({source}, {i})" if source else None)
            for i in range(native.__len__(value))
        ]
        storage = ListStorage(items, source) if native is list else containers.TupleVariable(items)
    elif native in (set, frozenset):
        storage = sets.from_real(out, value, source, SetStorage)
        if native is frozenset:  # never changed: stands for a plain copy of the items
            storage.source = None
    else:
        keys = list(native.keys(value))
        if not all(constants.is_constant_value(k) for k in keys):
            return None
        if source:
            listed = f"list({guards.bind(native.keys, 'keys')}({source}))"
            guards.add(f"{listed} == {keys!r}", 2, f"keys of {source} are {keys!r}")
        read = guards.bind(dict.__getitem__, "getitem")
        items = {
            k: out.wrap(dict.__getitem__(value, k), f"{read}({source}, {k!r})" if source else None)
            for k in keys
        }
        storage = (DictStorage if native is dict else OrderedDictStorage)(items, source)
    return BuiltinSubclassVariable(cls, storage, value, source)
