"""Python modules, classes, instances of user classes, and ``super()``: attributes read through
the real object (with sources) or the frame's own changes."""

from __future__ import annotations

import functools
import types
from typing import TYPE_CHECKING, Any

from torchkiln.capture import builtins, variables
from torchkiln.capture.runtime import make_object
from torchkiln.capture.variables import (
    constants,
    containers,
    descriptors,
    functions,
    iterators,
    lookups,
)
from torchkiln.capture.variables.base import (
    MISSING,
    IteratorVariable,
    ValueVariable,
    VariableTracker,
    class_lookup,
)
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
        if name == "__dict__":  # the class's namespace, not the instances' ``__dict__`` slot
            return self.class_dict(tx)
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
        if value is object.__new__:
            return functions.BuiltinVariable(object.__new__)
        if value is object.__getattribute__:
            return PlainGetattributeVariable()
        if isinstance(value, staticmethod):
            value = value.__func__
        elif isinstance(value, classmethod):
            return functions.UserMethodVariable(value.__func__, self)
        if self.value.__flags__ & _IMMUTABLE_TYPE:  # no guard: its attributes cannot change
            return tx.output.wrap(value, None)
        return tx.output.wrap(value, f"{self.source}.{name}" if self.source else None)

    def class_dict(self, tx: Translator) -> VariableTracker:
        """``cls.__dict__``: a read-only mapping whose keys are guarded in order (a class
        attribute added or removed recompiles); each value is read through it."""
        source = f"{self.source or tx.output.guards.bind(self.value, 'cls')}.__dict__"
        namespace = self.value.__dict__
        keys = list(namespace)
        tx.output.guards.add(f"list({source}) == {keys!r}", 2, f"keys of {source} are {keys!r}")
        items = {k: tx.output.wrap(v, f"{source}[{k!r}]") for k, v in namespace.items()}
        return containers.ReadOnlyDictVariable(items, source)


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
        self.deleted: set[str] = set()  # attributes of the real object the frame deleted
        self.read_dict: VariableTracker | None = None  # the real object's ``__dict__``, once read

    def python_type(self) -> type:
        return self.cls

    def describe(self) -> str:
        return f"{self.cls.__name__} object"

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        """``obj.name``: the class's ``__getattribute__`` (``object``'s, or one in Python,
        inlined), then its ``__getattr__`` if that raised ``AttributeError``."""
        getattribute = class_lookup(self.cls, "__getattribute__")
        key = constants.ConstantVariable(name)
        try:
            if isinstance(getattribute, types.FunctionType):
                return tx.inline_call(getattribute, [self, key], {})
            return self.generic_getattr(tx, name)
        except variables.exceptions.Raised as e:
            getattr_fn = class_lookup(self.cls, "__getattr__")
            if getattr_fn is MISSING or not issubclass(e.exc.python_type(), AttributeError):
                raise
            if not isinstance(getattr_fn, types.FunctionType):
                raise Unsupported(f"{self.describe()}.{name}: its __getattr__ is not traced") from e
            return tx.inline_call(getattr_fn, [self, key], {})

    def generic_getattr(self, tx: Translator, name: str) -> VariableTracker:
        """``object.__getattribute__``: data descriptors, then the instance's attributes, then
        the class's (methods bound, descriptors run); else ``AttributeError``."""
        class_attr = class_lookup(self.cls, name)
        if descriptors.is_data_descriptor(class_attr):
            return descriptors.access(tx, "get", self, name, self.class_member(tx, name), [])
        self.adopt_tracked_dict(tx)
        if name in self.attrs:
            return self.attrs[name]
        if name == "__dict__":
            return self.instance_dict(tx)
        if self.read_dict is not None:  # ``attrs`` holds the whole instance dict now
            return (
                self.missing(tx, name)
                if class_attr is MISSING
                else self.class_attribute(tx, name, class_attr)
            )
        if self.value is not None and name not in self.deleted and name in _instance_dict(self):
            return tx.output.wrap(
                self.value.__dict__[name], f"{self.source}.{name}" if self.source else None
            )
        if class_attr is MISSING:
            return self.missing(tx, name)
        return self.class_attribute(tx, name, class_attr)

    def class_attribute(self, tx: Translator, name: str, class_attr: Any) -> VariableTracker:
        """``obj.name`` found on the class only: a method bound, a descriptor run, or the
        value."""
        if isinstance(class_attr, (types.FunctionType, staticmethod, classmethod)):
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
        if descriptors.python_hook(class_attr, "__get__") is not None:
            return descriptors.access(tx, "get", self, name, self.class_member(tx, name), [])
        if isinstance(class_attr, functools.cached_property):
            return self.cached_property(tx, name, class_attr)
        if hasattr(class_attr, "__get__"):  # C descriptors: not traced
            raise Unsupported(f"{self.describe()}.{name} is a {type(class_attr).__name__}")
        # read through the instance: an instance attribute set later, or a class
        # attribute changed, is then seen by the guards
        if self.source and self.value is not None:
            return tx.output.wrap(class_attr, f"{self.source}.{name}")
        tx.output.guard_class_member(self, name)  # an object the frame made: through its class
        return tx.output.wrap(class_attr, None)

    def cached_property(
        self, tx: Translator, name: str, prop: functools.cached_property
    ) -> VariableTracker:
        """A ``functools.cached_property`` not yet computed: its function is inlined and the
        value stored in the instance ``__dict__`` (written back to an object passed in with
        ``setattr``, which lands there too where the class has no ``__setattr__``)."""
        if prop.attrname != name or not self.cls.__dictoffset__:  # no instance ``__dict__``
            raise Unsupported(f"{self.describe()}.{name}: a cached_property it cannot store")
        if self.value is not None:
            if class_lookup(self.cls, "__setattr__") is not object.__setattr__:
                raise Unsupported(f"{self.describe()}.{name}: a cached_property and __setattr__")
            tx.output.guard_class_member(self, name)  # not computed yet, the same property
        value = tx.inline_call(prop.func, [self], {})
        self.store_plain(tx, name, value)
        return value

    def class_member(self, tx: Translator, name: str) -> VariableTracker:
        """The class attribute ``name`` (a descriptor), guarded to stay the same one."""
        tx.output.guard_class_member(self, name)
        if self.value is None or not self.source:
            return tx.output.wrap(class_lookup(self.cls, name), None)
        index = next(i for i, k in enumerate(self.cls.__mro__) if name in k.__dict__)
        source = f"type({self.source}).__mro__[{index}].__dict__[{name!r}]"
        return tx.output.wrap(self.cls.__mro__[index].__dict__[name], source)

    def instance_dict(self, tx: Translator) -> VariableTracker:
        """``obj.__dict__``: one dict with ``attrs`` (a write to either shows in both). A real
        object's is read through its source (its keys guarded), before the frame changes it."""
        if self.value is None:
            instance_dict = containers.DictVariable({})
            instance_dict.items = self.attrs
            return instance_dict
        if self.read_dict is None:
            if self.attrs or self.deleted or not self.source:
                raise Unsupported(f"__dict__ of {self.describe()} the frame changed")
            self.read_dict = tx.output.wrap(self.value.__dict__, f"{self.source}.__dict__")
            self.attrs = self.read_dict.items
        return self.read_dict

    def adopt_tracked_dict(self, tx: Translator) -> None:
        """Read the real ``__dict__`` as the attributes where the frame tracks it already as a
        dict (a resume function's local or stack value that is ``vars(obj)``): the frame's
        writes to that dict are not applied yet, and an attribute read must see them."""
        real = getattr(self.value, "__dict__", None)
        if self.read_dict is None and real is not None and id(real) in tx.output.by_id:
            self.instance_dict(tx)

    def missing(self, tx: Translator, name: str) -> VariableTracker:
        """``name`` is neither the object's nor its class's: Python's ``AttributeError`` (on
        which ``var_getattr`` runs the class's ``__getattr__``), guarded to stay missing."""
        reason = f"{self.describe()} has no attribute {name!r}"
        if self.read_dict is not None:  # the frame may have removed it from the real dict
            raise Unsupported(reason)
        if self.source and self.value is not None and name not in self.deleted:
            if class_lookup(self.cls, "__getattr__") is MISSING:
                tx.output.guards.add(
                    f"not hasattr({self.source}, {name!r})", 2, f"{self.source} has no {name!r}"
                )
            else:  # ``hasattr`` would run ``__getattr__``: where the name is not, instead
                tx.output.guard_class_member(self, name)
        elif self.value is None:  # an object the frame made: its class still lacks it
            tx.output.guard_class_member(self, name)
        message = f"{self.cls.__name__!r} object has no attribute {name!r}"
        raise variables.exceptions.error(AttributeError, message, reason=reason)

    def slot(self, tx: Translator, kind: str, name: str, args: list) -> VariableTracker:
        """A ``__slots__`` attribute: read, set or deleted in the object's own storage."""
        if kind == "set":
            self.store_plain(tx, name, args[0])
        elif kind == "delete":
            self.delete_plain(tx, name)
        elif name in self.attrs:
            return self.attrs[name]
        elif self.value is None or name in self.deleted or not hasattr(self.value, name):
            return self.missing(tx, name)
        else:
            return tx.output.wrap(
                getattr(self.value, name), f"{self.source}.{name}" if self.source else None
            )
        return constants.ConstantVariable(None)

    def defines(self, name: str) -> bool:
        """Whether the class defines ``name`` in Python (a method the protocols inline)."""
        return isinstance(class_lookup(self.cls, name), types.FunctionType)

    def make_iterator(self, tx: Translator) -> VariableTracker:
        """``iter(obj)``: the class's ``__iter__``, which must give an iterator traced here
        (a generator, ``iter()`` of a container...)."""
        if not self.defines("__iter__"):
            return super().make_iterator(tx)
        iterator = tx.call_function(self.var_getattr(tx, "__iter__"), [], {})
        if isinstance(iterator, UserObjectVariable) and iterator.defines("__next__"):
            return iterators.UserIteratorVariable(iterator)
        if not isinstance(iterator, IteratorVariable):
            raise Unsupported(f"iter() of {self.describe()} gave {iterator.describe()}")
        return iterator

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        if not self.defines("__iter__"):
            return super().unpack(tx)
        return self.make_iterator(tx).unpack(tx)

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
        if attr is object.__getattribute__:
            return PlainGetattributeVariable(self)
        return lookups.method_of_real_object(tx, attr, self)

    def setattr(self, tx: Translator, name: str, value: VariableTracker) -> None:
        """``self.name = value``: through the class's own ``__setattr__`` for an object the
        frame built (on one read from outside, the write-back would run it a second time),
        a data descriptor's setter, else stored."""
        setattr_fn = class_lookup(self.cls, "__setattr__")
        if isinstance(setattr_fn, types.FunctionType):
            if self.value is not None:
                raise Unsupported(f"setting {name!r} on {self.describe()}: it has __setattr__")
            tx.inline_call(setattr_fn, [self, constants.ConstantVariable(name), value], {})
        elif descriptors.is_data_descriptor(class_lookup(self.cls, name)):
            descriptors.access(tx, "set", self, name, self.class_member(tx, name), [value])
        else:
            self.store_plain(tx, name, value)

    def delattr(self, tx: Translator, name: str) -> None:
        """``del self.name``: a data descriptor's deleter, else the attribute is removed."""
        if isinstance(class_lookup(self.cls, "__delattr__"), types.FunctionType):
            raise Unsupported(f"deleting {name!r} of {self.describe()}: it has __delattr__")
        if descriptors.is_data_descriptor(class_lookup(self.cls, name)):
            descriptors.access(tx, "delete", self, name, self.class_member(tx, name), [])
        else:
            self.delete_plain(tx, name)

    def store_plain(self, tx: Translator, name: str, value: VariableTracker) -> None:
        """``object.__setattr__(self, name, value)``."""
        self.adopt_tracked_dict(tx)
        if self.value is not None:
            tx.output.side_effects.store_attr(self, name, value)
        self.attrs[name] = value
        self.deleted.discard(name)

    def delete_plain(self, tx: Translator, name: str) -> None:
        """``object.__delattr__(self, name)``: the frame's own value, or the real object's
        (that it has one is guarded); Python's ``AttributeError`` where there is none."""
        self.adopt_tracked_dict(tx)
        exists = name in self.attrs
        if (
            not exists
            and self.read_dict is None
            and self.value is not None
            and name not in self.deleted
        ):
            if isinstance(class_lookup(self.cls, name), types.MemberDescriptorType):
                exists, check = hasattr(self.value, name), f"hasattr({self.source}, {name!r})"
            else:
                exists, check = name in _instance_dict(self), f"{name!r} in {self.source}.__dict__"
            if self.source:
                tx.output.guards.add(f"({check}) is {exists!r}", 2, f"{check} is {exists!r}")
        if not exists:
            message = f"{self.cls.__name__!r} object has no attribute {name!r}"
            raise variables.exceptions.error(AttributeError, message, reason=message)
        self.attrs.pop(name, None)
        if self.value is not None:
            tx.output.side_effects.delete_attr(self, name)
            self.deleted.add(name)

    def reconstruct(self, codegen: Any) -> str:
        fields = ", ".join(f"{k!r}: {codegen.reconstruct(v)}" for k, v in self.attrs.items())
        make = codegen.bind(make_object, "make_object")
        return f"{make}({codegen.bind(self.cls, 'cls')}, {{{fields}}})"


def _instance_dict(obj: UserObjectVariable) -> dict:
    return getattr(obj.value, "__dict__", {})


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


class PlainGetattributeVariable(VariableTracker):
    """``object.__getattribute__``, unbound or bound to ``obj`` (``super().__getattribute__``
    in a class's own ``__getattribute__``): the generic lookup, without ``__getattr__``."""

    def __init__(self, obj: VariableTracker | None = None):
        self.obj = obj

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        obj, (name,) = (self.obj, args) if self.obj is not None else (args[0], args[1:])
        if not isinstance(obj, UserObjectVariable) or kwargs:
            raise Unsupported(f"object.__getattribute__ on {obj.describe()}")
        return obj.generic_getattr(tx, name.as_python_constant())


class SuperVariable(VariableTracker):
    """``super()`` (or ``super(cls, obj)``): attribute lookup starts after ``cls`` in the MRO."""

    def __init__(self, cls: type, obj: VariableTracker):
        self.cls = cls
        self.obj = obj

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        of_class = isinstance(self.obj, ClassVariable)  # in a classmethod or ``__new__``
        mro = (self.obj.value if of_class else self.obj.python_type()).__mro__
        if self.cls not in mro:
            raise Unsupported(f"super({self.cls.__name__}, obj): obj is not of that class")
        for klass in mro[mro.index(self.cls) + 1 :]:
            if name in klass.__dict__:
                attr = klass.__dict__[name]
                if attr is object.__new__:
                    return functions.BuiltinVariable(object.__new__)
                if of_class:
                    return self.class_attribute(tx, name, attr)
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

    def class_attribute(self, tx: Translator, name: str, attr: Any) -> VariableTracker:
        """``super().name`` where the object is a class: a classmethod is bound to it, a
        function or static method is returned as it is."""
        if isinstance(attr, classmethod):
            return functions.UserMethodVariable(attr.__func__, self.obj)
        if isinstance(attr, staticmethod):
            attr = attr.__func__
        if isinstance(attr, types.FunctionType) or not hasattr(attr, "__get__"):
            return tx.output.wrap(attr, None)
        raise Unsupported(f"super().{name} of a class is a {type(attr).__name__}")
