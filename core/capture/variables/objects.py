"""Python modules, classes, instances of user classes, and ``super()``: attributes read through
the real object (with sources) or the frame's own changes."""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

from torchkiln.capture import builtins, variables
from torchkiln.capture.runtime import make_object
from torchkiln.capture.variables import constants, containers, functions, lookups
from torchkiln.capture.variables.base import MISSING, ValueVariable, VariableTracker, class_lookup
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator


class PythonModuleVariable(ValueVariable):
    """A Python module (``torch``, ``math``, a user module): attributes are read through."""

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        try:
            value = getattr(self.value, name)
        except AttributeError as e:
            raise Unsupported(f"module {self.value.__name__} has no attribute {name!r}") from e
        if _is_torch_module(self.value) or self.value.__name__ in ("math", "operator", "builtins"):
            return tx.output.wrap(value, None)
        return tx.output.wrap(value, f"{self.source}.{name}" if self.source else None)


def _is_torch_module(module: types.ModuleType) -> bool:
    return module.__name__ == "torch" or module.__name__.startswith("torch.")


#: ``Py_TPFLAGS_IMMUTABLETYPE``: a C type (``dict``, ``itertools.chain``) whose attributes
#: cannot be set, so reading one needs no guard (a C classmethod is a new object each read).
_IMMUTABLE_TYPE = 1 << 8


class ClassVariable(ValueVariable):
    """A class: calling builds namedtuples, dataclasses and known torch objects."""

    def as_python_constant(self) -> Any:
        return self.value  # held by identity, so ``str(cls)`` and the like fold

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        return builtins.construct_class(tx, self.value, args, kwargs)

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        try:
            value = (
                self.value.__dict__[name]
                if name in self.value.__dict__
                else getattr(self.value, name)
            )
        except AttributeError as e:
            raise Unsupported(f"class {self.value.__name__} has no attribute {name!r}") from e
        if value is object.__setattr__:
            return PlainSetattrVariable()
        if isinstance(value, staticmethod):
            value = value.__func__
        elif isinstance(value, classmethod):
            return functions.UserMethodVariable(value.__func__, self)
        if self.value.__flags__ & _IMMUTABLE_TYPE:  # no guard: its attributes cannot change
            return tx.output.wrap(value, None)
        return tx.output.wrap(value, f"{self.source}.{name}" if self.source else None)


class UserObjectVariable(ValueVariable):
    """An instance of a user class. ``value`` is None for a dataclass built by the frame."""

    def __init__(
        self,
        value: Any,
        source: str | None = None,
        cls: type | None = None,
        attrs: dict | None = None,
    ):
        super().__init__(value, source)
        self.cls = cls if cls is not None else type(value)
        self.attrs: dict[str, VariableTracker] = dict(attrs or {})

    def python_type(self) -> type:
        return self.cls

    def describe(self) -> str:
        return f"{self.cls.__name__} object"

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name in self.attrs:
            return self.attrs[name]
        if name == "__dict__" and self.value is None:
            instance_dict = containers.DictVariable({})
            instance_dict.items = self.attrs  # the same dict: a write to either shows in both
            return instance_dict
        class_attr = class_lookup(self.cls, name)
        if isinstance(class_attr, property):
            return tx.output.wrap(class_attr.fget, None).call(tx, [self], {})
        if self.value is not None and name in getattr(self.value, "__dict__", {}):
            return tx.output.wrap(
                self.value.__dict__[name], f"{self.source}.{name}" if self.source else None
            )
        if self.value is not None and isinstance(
            class_attr, (types.FunctionType, staticmethod, classmethod)
        ):
            tx.output.guard_class_member(self, name)
        if lookups.binds_to_real_object(
            class_attr
        ):  # first: the ``Mapping`` mixins are functions too
            return self.native_method(tx, name, class_attr)
        if isinstance(class_attr, types.FunctionType):
            return functions.UserMethodVariable(class_attr, self)
        if isinstance(class_attr, staticmethod):
            return tx.output.wrap(class_attr.__func__, None)
        if isinstance(class_attr, classmethod):
            return functions.UserMethodVariable(class_attr.__func__, ClassVariable(self.cls))
        if class_attr is not MISSING:
            if hasattr(class_attr, "__get__"):  # slots, cached_property...: read natively
                raise Unsupported(f"{self.describe()}.{name} is a {type(class_attr).__name__}")
            # read through the instance: an instance attribute set later, or a class
            # attribute changed, is then seen by the guards
            source = f"{self.source}.{name}" if self.source and self.value is not None else None
            return tx.output.wrap(class_attr, source)
        if self.source:
            tx.output.guards.add(
                f"not hasattr({self.source}, {name!r})", 2, f"{self.source} has no {name!r}"
            )
        reason = f"{self.describe()} has no attribute {name!r}"
        if class_lookup(self.cls, "__getattr__") is not MISSING:
            raise Unsupported(reason)  # its own ``__getattr__`` would run (not traced here)
        message = f"{self.cls.__name__!r} object has no attribute {name!r}"
        raise variables.exceptions.error(AttributeError, message, reason=reason)

    def enter(self, tx: Translator) -> tuple[VariableTracker, VariableTracker]:
        """``with obj:`` for a class with ``__enter__`` and ``__exit__`` in Python: both inlined."""
        if not all(
            isinstance(class_lookup(self.cls, name), types.FunctionType)
            for name in ("__enter__", "__exit__")
        ):
            return super().enter(tx)
        exit_fn = self.var_getattr(tx, "__exit__")
        return exit_fn, tx.call_function(self.var_getattr(tx, "__enter__"), [], {})

    def truth(self, tx: Translator) -> bool:
        """``bool(obj)`` as Python computes it: ``__bool__``, else ``__len__``, else true."""
        for name in ("__bool__", "__len__"):
            if class_lookup(self.cls, name) is not MISSING:
                return tx.truth(tx.call_function(tx.getattr(self, name), [], {}))
        return True

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        call = class_lookup(self.cls, "__call__")
        if not isinstance(call, types.FunctionType):
            raise Unsupported(f"calling {self.describe()}")
        return tx.inline_call(call, [self, *args], kwargs)

    def native_method(self, tx: Translator, name: str, attr: Any) -> VariableTracker:
        """``attr``, a C method (or a lookup) of the class, bound to this object."""
        if attr is object.__setattr__:
            return PlainSetattrVariable(self)
        return lookups.method_of_real_object(tx, attr, self)

    def setattr(self, tx: Translator, name: str, value: VariableTracker) -> None:
        """``self.name = value``: through the class's own ``__setattr__`` for an object the
        frame built (one read from outside keeps its attributes' write-back)."""
        setattr_fn = class_lookup(self.cls, "__setattr__")
        if self.value is None and isinstance(setattr_fn, types.FunctionType):
            tx.inline_call(setattr_fn, [self, constants.ConstantVariable(name), value], {})
            return
        self.store_plain(tx, name, value)

    def store_plain(self, tx: Translator, name: str, value: VariableTracker) -> None:
        """``object.__setattr__(self, name, value)``."""
        if self.value is not None:
            tx.output.side_effects.store_attr(self, name, value)
        self.attrs[name] = value

    def reconstruct(self, codegen: Any) -> str:
        fields = ", ".join(f"{k!r}: {codegen.reconstruct(v)}" for k, v in self.attrs.items())
        make = codegen.bind(make_object, "make_object")
        return f"{make}({codegen.bind(self.cls, 'cls')}, {{{fields}}})"


class PlainSetattrVariable(VariableTracker):
    """``object.__setattr__``, unbound or bound to ``obj``: stores without the class's own
    ``__setattr__`` (what that one ends in, and how frozen dataclasses set their fields)."""

    def __init__(self, obj: VariableTracker | None = None):
        self.obj = obj

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        obj, (name, value) = (self.obj, args) if self.obj is not None else (args[0], args[1:])
        if not isinstance(obj, UserObjectVariable) or kwargs:
            raise Unsupported(f"object.__setattr__ on {obj.describe()}")
        if obj.value is not None and class_lookup(obj.cls, "__setattr__") is not object.__setattr__:
            # written back with ``setattr``, which would run the class's own ``__setattr__``
            raise Unsupported(f"object.__setattr__ on {obj.describe()} read from outside")
        obj.store_plain(tx, name.as_python_constant(), value)
        return constants.ConstantVariable(None)


class SuperVariable(VariableTracker):
    """``super()`` (or ``super(cls, obj)``): attribute lookup starts after ``cls`` in the MRO."""

    def __init__(self, cls: type, obj: VariableTracker):
        self.cls = cls
        self.obj = obj

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        mro = self.obj.python_type().__mro__
        for klass in mro[mro.index(self.cls) + 1 :]:
            if name in klass.__dict__:
                attr = klass.__dict__[name]
                if lookups.binds_to_real_object(attr) and isinstance(self.obj, UserObjectVariable):
                    return self.obj.native_method(tx, name, attr)
                if lookups.binds_to_real_object(attr):
                    return lookups.method_of_real_object(tx, attr, self.obj)
                if isinstance(attr, types.FunctionType):
                    return functions.UserMethodVariable(attr, self.obj)
                if isinstance(attr, staticmethod):
                    return tx.output.wrap(attr.__func__, None)
                if isinstance(attr, classmethod):
                    return functions.UserMethodVariable(
                        attr.__func__, ClassVariable(self.obj.python_type())
                    )
                if attr is object.__init__:
                    return functions.BuiltinVariable(builtins.object_init)
                if hasattr(attr, "__get__"):
                    raise Unsupported(f"super().{name} is a {type(attr).__name__}")
                return tx.output.wrap(attr, None)
        raise Unsupported(f"super() has no attribute {name!r}")
