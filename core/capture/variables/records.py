"""Dataclass instances and dict-backed user objects built by the frame, and the ``dataclasses``
functions that read them (``fields``, ``replace``, ``is_dataclass``).

A dataclass is built as its generated ``__init__`` builds it: each field set in order through
the class's ``__setattr__`` (a frozen class: ``object.__setattr__``), default factories called,
then ``__post_init__``. A dict subclass keeps its items in a ``DictVariable`` (``storage``) next
to its attributes: Hugging Face's ``ModelOutput`` (a dataclass and an ``OrderedDict``, with its
own ``__setattr__``/``__post_init__``) fills both, and its methods reach the dict's C methods
through ``super()``.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import TYPE_CHECKING, Any

from torchkiln.capture.runtime import make_dict_object
from torchkiln.capture.targets import is_stdlib
from torchkiln.capture.variables import collection_types, constants, containers, objects
from torchkiln.capture.variables.base import MISSING, ValueVariable, VariableTracker, class_lookup
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator

#: The C dict types a user class can build on, most derived first.
NATIVE_DICTS = (collections.OrderedDict, dict)

#: What a ``dataclasses.Field`` answers: fixed when its class was decorated.
FIELD_ATTRS = ("name", "type", "default", "init", "repr", "hash", "compare", "kw_only")


def native_dict(cls: type) -> type | None:
    """The C dict type ``cls`` stores its items in, or None for a class that is no dict."""
    return next((base for base in NATIVE_DICTS if issubclass(cls, base)), None)


def _generated_init(cls: type) -> bool:
    """Whether ``cls()`` runs the ``__init__`` that ``@dataclass`` wrote (not the user's own)."""
    init = class_lookup(cls, "__init__")
    code = getattr(init, "__code__", None)
    return (
        dataclasses.is_dataclass(cls)
        and code is not None
        and code.co_filename == "<string>"
        and init.__qualname__.endswith(".__init__")
    )


def builds_natively(cls: type) -> bool:
    """Classes ``construct`` builds: user dataclasses with the generated ``__init__``, and user
    dict subclasses, whose instances are allocated by ``object`` or the C dict."""
    if is_stdlib(cls.__module__) or cls.__module__.startswith("torch"):
        return False
    if class_lookup(type(cls), "__call__") is not type.__dict__["__call__"]:
        return False  # a metaclass that builds instances its own way
    allocators = [k for k in cls.__mro__[:-1] if "__new__" in k.__dict__]
    if any(k not in NATIVE_DICTS for k in allocators):
        return False
    return _generated_init(cls) or native_dict(cls) is not None


def construct(tx: Translator, cls: type, args: list, kwargs: dict) -> VariableTracker:
    """``cls(*args, **kwargs)`` for a class ``builds_natively`` accepts."""
    native = native_dict(cls)
    obj = (
        DictObjectVariable(cls, collection_types.storage_for(native)({}))
        if native is not None
        else objects.UserObjectVariable(None, cls=cls)
    )
    if _generated_init(cls):
        _dataclass_init(tx, obj, cls, args, kwargs)
    else:
        tx.call_function(tx.getattr(obj, "__init__"), args, kwargs)
    return obj


def _dataclass_init(
    tx: Translator, obj: VariableTracker, cls: type, args: list, kwargs: dict
) -> None:
    """What the generated ``__init__`` does: bind, set every field in order, ``__post_init__``."""
    if any(f._field_type is dataclasses._FIELD_INITVAR for f in cls.__dataclass_fields__.values()):
        raise Unsupported(f"{cls.__name__}() has InitVar fields")
    all_fields = dataclasses.fields(cls)
    init_fields = [f for f in all_fields if f.init]
    positional = [f.name for f in init_fields if not f.kw_only]
    if len(args) > len(positional):
        raise Unsupported(f"{cls.__name__}() takes {len(positional)} positional arguments")
    values = dict(zip(positional, args))
    for name, value in kwargs.items():
        if name in values or name not in {f.name for f in init_fields}:
            raise Unsupported(f"{cls.__name__}() got an unexpected or repeated argument {name!r}")
        values[name] = value
    frozen = cls.__dataclass_params__.frozen
    for f in all_fields:
        if f.name in values:
            value = values[f.name]
        elif f.default_factory is not dataclasses.MISSING:
            value = tx.call_function(tx.output.wrap(f.default_factory, None), [], {})
        elif f.init and f.default is not dataclasses.MISSING:
            value = tx.output.wrap(f.default, None)
        elif f.init:
            raise Unsupported(f"{cls.__name__}() missing argument {f.name!r}")
        else:
            continue  # init=False with a plain default: read from the class
        if frozen:
            obj.store_plain(tx, f.name, value)
        else:
            tx.store_attr(obj, f.name, value)
    if class_lookup(cls, "__post_init__") is not MISSING:
        tx.call_function(tx.getattr(obj, "__post_init__"), [], {})


class FieldVariable(ValueVariable):
    """A ``dataclasses.Field`` of a class fixed by the guards: its attributes are constants."""

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name not in FIELD_ATTRS:
            raise Unsupported(f"Field.{name}")
        return tx.output.wrap(getattr(self.value, name), None)


def _dataclass_of(vt: VariableTracker) -> type:
    cls = vt.value if isinstance(vt, objects.ClassVariable) else vt.python_type()
    if not dataclasses.is_dataclass(cls):
        raise Unsupported(f"dataclasses function on {vt.describe()}, which is no dataclass")
    return cls


def _fields(tx: Translator, obj: VariableTracker) -> VariableTracker:
    return containers.TupleVariable(
        [FieldVariable(f) for f in dataclasses.fields(_dataclass_of(obj))]
    )


def _is_dataclass(tx: Translator, obj: VariableTracker) -> VariableTracker:
    cls = obj.value if isinstance(obj, objects.ClassVariable) else obj.python_type()
    return constants.ConstantVariable(dataclasses.is_dataclass(cls))


def _replace(tx: Translator, obj: VariableTracker, **changes: VariableTracker) -> VariableTracker:
    """A new instance with ``changes``, the other init fields read from ``obj``."""
    cls = _dataclass_of(obj)
    for f in dataclasses.fields(cls):
        if not f.init:
            if f.name in changes:
                raise Unsupported(f"replace() of {f.name!r}, an init=False field")
        elif f.name not in changes:
            changes[f.name] = tx.getattr(obj, f.name)
    return tx.call_function(tx.output.wrap(cls, None), [], changes)


#: ``dataclasses`` functions modelled instead of inlined (the standard library is not traced).
PYTHON_FUNCTIONS = {
    dataclasses.fields: _fields,
    dataclasses.is_dataclass: _is_dataclass,
    dataclasses.replace: _replace,
}


class DictObjectVariable(objects.UserObjectVariable):
    """An instance of a user dict subclass: attributes in ``attrs``, items in ``storage``.

    The dict's own C methods (``keys``, ``__setitem__``, ``move_to_end``...) act on
    ``storage``; methods the class defines are inlined. Read through a source, the items
    are read with the C ``__getitem__`` and the keys guarded in order; only an object the
    frame built may have its items changed (the change could not be written back through
    the class's own methods, which may refuse it, as ``ModelOutput.update`` does).
    """

    def __init__(
        self,
        cls: type,
        storage: containers.DictVariable,
        value: Any = None,
        source: str | None = None,
    ):
        super().__init__(value, source, cls=cls)
        self.storage = storage

    @classmethod
    def from_real(cls, out: Any, value: dict, source: str | None) -> DictObjectVariable:
        native = native_dict(type(value))
        keys = list(native.keys(value))
        if not all(constants.is_constant_value(k) for k in keys):
            raise Unsupported(f"a {type(value).__name__} with non-constant keys")
        read = out.guards.bind(dict.__getitem__, "getitem")  # not the class's own __getitem__
        if source:
            list_keys = f"list({out.guards.bind(native.keys, 'keys')}({source}))"
            out.guards.add(f"{list_keys} == {keys!r}", 2, f"keys of {source} are {keys!r}")
        items = {
            k: out.wrap(dict.__getitem__(value, k), f"{read}({source}, {k!r})" if source else None)
            for k in keys
        }
        return cls(type(value), collection_types.storage_for(native)(items), value, source)

    def native_method(self, tx: Translator, name: str, attr: Any) -> VariableTracker:
        if getattr(attr, "__objclass__", None) in NATIVE_DICTS:
            if self.source is not None and name in containers.DICT_MUTATORS:
                raise Unsupported(f"changing the items of {self.describe()} read from outside")
            return StorageMethodVariable(self, name, attr)
        return super().native_method(tx, name, attr)

    def setattr(self, tx: Translator, name: str, value: VariableTracker) -> None:
        if self.value is not None:  # the class's ``__setattr__`` may change the items too
            raise Unsupported(f"setting attribute {name!r} of {self.describe()} read from outside")
        super().setattr(tx, name, value)

    def make_iterator(self, tx: Translator) -> Any:
        return tx.call_function(tx.getattr(self, "__iter__"), [], {})

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        return self.make_iterator(tx).unpack(tx)

    def reconstruct(self, codegen: Any) -> str:
        attrs = ", ".join(f"{k!r}: {codegen.reconstruct(v)}" for k, v in self.attrs.items())
        items = codegen.literal(self.storage)
        setitem = codegen.bind(native_dict(self.cls).__setitem__, "setitem")
        make = codegen.bind(make_dict_object, "make_dict_object")
        return f"{make}({codegen.bind(self.cls, 'cls')}, {{{attrs}}}, {setitem}, {items})"


class StorageMethodVariable(VariableTracker):
    """A C dict method (``attr``) bound to a ``DictObjectVariable``: acts on its ``storage``."""

    def __init__(self, obj: DictObjectVariable, name: str, attr: Any):
        self.obj = obj
        self.name = name
        self.attr = attr

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        if self.name == "__init__":
            return self.obj.storage.call_method(tx, "update", args, kwargs)
        return self.obj.storage.call_method(tx, self.name, args, kwargs)

    def describe(self) -> str:
        return f"method {self.name!r} of {self.obj.describe()}"

    def reconstruct(self, codegen: Any) -> str:
        return f"{codegen.bind(self.attr, 'method')}.__get__({codegen.reconstruct(self.obj)})"
