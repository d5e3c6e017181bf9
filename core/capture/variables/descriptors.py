"""Descriptors on a user object's class: reading, setting and deleting an attribute runs them
as ``object.__getattribute__``, ``__setattr__`` and ``__delattr__`` do.

A property's functions and a descriptor's own ``__get__``/``__set__``/``__delete__`` are
inlined; a slot (``__slots__``' member descriptor) is the object's own storage. Descriptors
written in C or in the standard library (``functools.cached_property``) are not traced: the
graph breaks there.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

from torchkiln.capture.targets import is_stdlib
from torchkiln.capture.variables import objects
from torchkiln.capture.variables.base import MISSING, VariableTracker, class_lookup
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator

#: What a hook of each kind of access is called on a descriptor, and on a property.
_HOOKS = {"get": ("__get__", "fget"), "set": ("__set__", "fset"), "delete": ("__delete__", "fdel")}


def is_data_descriptor(attr: Any) -> bool:
    """A class attribute that takes precedence over the instance's ``__dict__``, and that
    runs here: not a C getset descriptor (an exception's ``args``, ``__dict__``), whose
    value the tracker keeps as an attribute of its own."""
    kind = type(attr)
    if kind is types.GetSetDescriptorType:
        return False
    return class_lookup(kind, "__set__") is not MISSING or (
        class_lookup(kind, "__delete__") is not MISSING
    )


def python_hook(attr: Any, hook: str) -> types.FunctionType | None:
    """The descriptor's ``hook`` when it is user Python code to inline, else None."""
    fn = class_lookup(type(attr), hook)
    if isinstance(fn, types.FunctionType) and not is_stdlib(fn.__module__):
        return fn
    return None


def access(
    tx: Translator,
    kind: str,
    obj: objects.UserObjectVariable,
    name: str,
    descriptor: VariableTracker,
    args: list[VariableTracker],
) -> VariableTracker:
    """``obj.name`` (``kind`` "get"), ``obj.name = *args`` ("set") or ``del obj.name``
    ("delete") through ``descriptor``, the tracker of the class attribute ``attr``."""
    attr = descriptor.value
    hook, accessor = _HOOKS[kind]
    if isinstance(attr, property):
        fn = getattr(attr, accessor)
        if fn is None:  # Python's AttributeError, with its own message, natively
            raise Unsupported(f"property {name!r} of {obj.describe()} has no {accessor}")
        return tx.call_function(tx.output.wrap(fn, None), [obj, *args], {})
    if isinstance(attr, types.MemberDescriptorType):
        return obj.slot(tx, kind, name, args)
    fn = python_hook(attr, hook)
    if fn is None:
        raise Unsupported(
            f"{obj.describe()}.{name} is a {type(attr).__name__} (its {hook} is not traced)"
        )
    owner = [objects.ClassVariable(obj.cls)] if kind == "get" else []
    return tx.inline_call(fn, [descriptor, obj, *args, *owner], {})
