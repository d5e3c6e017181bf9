"""Methods of real objects: C methods bound to the real value, and lookups on real mappings
(``registry.get(key)``) answered at capture time and guarded by running them again."""

from __future__ import annotations

import collections.abc
import types
from typing import TYPE_CHECKING, Any

from torchkiln.capture.targets import is_stdlib
from torchkiln.capture.variables import constants
from torchkiln.capture.variables.base import ValueVariable, VariableTracker, class_lookup
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator


#: Methods that only read a mapping: on a real object they are answered at capture time.
PURE_LOOKUPS = (
    dict.get,
    dict.__getitem__,
    dict.__contains__,
    collections.abc.Mapping.get,
    collections.abc.Mapping.__contains__,
)
#: The ``collections.abc`` mixins among them: they read the mapping through its ``__getitem__``.
_MAPPING_MIXINS = (collections.abc.Mapping.get, collections.abc.Mapping.__contains__)
_C_METHODS = (types.MethodDescriptorType, types.WrapperDescriptorType)


def is_pure_lookup(attr: Any) -> bool:
    return any(attr is lookup for lookup in PURE_LOOKUPS)  # identity: attr may define __eq__


def binds_to_real_object(attr: Any) -> bool:
    """A class attribute that ``method_of_real_object`` handles: a C method or a pure lookup."""
    return is_pure_lookup(attr) or isinstance(attr, _C_METHODS)


def literal_repr(vt: VariableTracker) -> str | None:
    """The source text of a constant whose ``repr`` reads back as itself, else None."""
    if not vt.is_constant():
        return None
    value = vt.as_python_constant()
    return repr(value) if type(value) in (str, int, bool, type(None)) else None


def method_of_real_object(tx: Translator, attr: Any, obj: VariableTracker) -> VariableTracker:
    """``attr`` (a C method, or a lookup of ``PURE_LOOKUPS``) bound to the real object behind
    ``obj``, as ``obj.name`` or ``super().name`` gives it."""
    if is_pure_lookup(attr):
        return LookupVariable(attr, obj)
    if not isinstance(obj, ValueVariable) or obj.value is None:
        raise Unsupported(f"{type(attr).__name__} {attr!r} of {obj.describe()}")
    return tx.output.wrap(attr.__get__(obj.value, type(obj.value)), None)


def _runs_user_code(cls: type, method: Any) -> Any:
    """The user function a lookup ``method`` on a ``cls`` instance would run, or None.

    The mixins call ``__getitem__`` and ``dict.__getitem__`` calls ``__missing__``;
    C code and standard-library code read only the mapping's own storage.
    """
    if method in _MAPPING_MIXINS:
        hook = "__getitem__"
    elif method is dict.__getitem__:
        hook = "__missing__"
    else:
        return None
    fn = class_lookup(cls, hook)
    if isinstance(fn, types.FunctionType) and not is_stdlib(fn.__module__):
        return fn
    return None


class LookupVariable(VariableTracker):
    """``mapping.get(key)`` and the like on a real mapping (a registry): looked up now.

    The result's source is the call itself, ``___lookup(L_self, 'key')``, so
    the guards that protect the result run the lookup again on every call,
    with keys that are literals or objects read through a source.

    The real object is in its state before the frame ran; the frame's pending
    changes (``side_effects``) are not applied yet. C and standard-library
    lookups read only the mapping's own storage, which the frame cannot change
    (a dict subclass's storage is only written natively), so they are exact at
    any point. A mixin over a user ``__getitem__`` could read anything: once
    the frame has changed something, that ``__getitem__`` is inlined instead
    (a missing key ends in a graph break).
    """

    def __init__(self, method: Any, obj: VariableTracker):
        self.method = method
        self.obj = obj

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        obj = self.obj
        if kwargs or not isinstance(obj, ValueVariable) or not args:
            raise Unsupported(f"calling {self.describe()} here")
        user_code = _runs_user_code(obj.python_type(), self.method)
        if user_code is not None and tx.output.side_effects.events:
            if self.method not in _MAPPING_MIXINS:  # ``__missing__`` runs only for a missing key
                raise Unsupported(f"calling {self.describe()} after the frame changed state")
            value = tx.inline_call(user_code, [obj, args[0]], {})
            return constants.ConstantVariable(True) if self.method is _MAPPING_MIXINS[1] else value
        texts = [
            literal_repr(a) or (a.source if isinstance(a, ValueVariable) else None) for a in args
        ]
        if obj.value is None or obj.source is None or None in texts:
            raise Unsupported(f"calling {self.describe()} on values without a source")
        values = [a.as_python_constant() if a.is_constant() else a.value for a in args]
        try:
            result = self.method(obj.value, *values)
        except Exception as e:
            raise Unsupported(f"{self.describe()} raised {type(e).__name__}") from e
        method = tx.output.guards.bind(self.method, "lookup")
        return tx.output.wrap(result, f"{method}({', '.join([obj.source, *texts])})")

    def describe(self) -> str:
        return f"{getattr(self.method, '__qualname__', self.method)} of {self.obj.describe()}"
