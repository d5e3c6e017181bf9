"""Exceptions raised and caught inside traced code.

An exception the frame raises (``raise``, ``assert``, a missing dict key, an
exhausted ``next()``...) is an ``ExceptionVariable`` carried by ``Raised``
up the translators' Python stack: each translator hands it to the handler
its exception table names for the raising instruction (``Translator.unwind``)
or lets it go on to its caller. ``Raised`` is an ``Unsupported``: one that
leaves the root frame breaks the graph there, and the instruction then raises
it natively, the same exception as eager.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

from torchkiln.capture.variables import constants, containers, objects
from torchkiln.capture.variables.base import VariableTracker, class_lookup
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator

#: What every exception has besides ``args``, and its value on a new one.
_SPECIAL = {
    "__cause__": None,
    "__context__": None,
    "__suppress_context__": False,
    "__traceback__": None,
}


class ExceptionVariable(objects.UserObjectVariable):
    """An exception object the frame created; ``args`` and the special attributes (cause,
    context) are among ``attrs``, so it is rebuilt as any object the frame created."""

    def __init__(self, cls: type, args: list[VariableTracker]):
        attrs = {"args": containers.TupleVariable(list(args))}
        attrs.update({k: constants.ConstantVariable(v) for k, v in _SPECIAL.items()})
        super().__init__(None, cls=cls, attrs=attrs)

    def describe(self) -> str:
        return f"{self.cls.__name__} exception"

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name == "__dict__":
            raise Unsupported(f"__dict__ of {self.describe()}")
        if name not in self.attrs and not isinstance(class_lookup(self.cls, name), _PYTHON_ATTRS):
            real = self.as_python_constant()  # a C attribute (``StopIteration.value``...)
            return tx.output.wrap(getattr(real, name), None)
        return super().var_getattr(tx, name)

    def native_method(self, tx: Translator, name: str, attr: Any) -> VariableTracker:
        if name == "__init__":  # ``super().__init__(msg)`` in a user exception's ``__init__``
            return ExceptionInitVariable(self)
        return super().native_method(tx, name, attr)

    def as_python_constant(self) -> BaseException:
        """The real exception (for ``str(e)``, ``repr(e)``, C attributes); only where its class
        runs no Python code to build or print it."""
        for name in ("__new__", "__init__", "__str__", "__repr__"):
            if _in_python(self.cls, name):
                raise Unsupported(f"{self.describe()}: its class defines {name} in Python")
        real = self.cls(*self.attrs["args"].as_python_constant())
        for name, value in self.attrs.items():
            if name != "args":
                setattr(real, name, value.as_python_constant())
        return real

    def set_cause(self, cause: VariableTracker) -> None:
        """``raise self from cause``."""
        self.attrs["__cause__"] = cause
        self.attrs["__suppress_context__"] = constants.ConstantVariable(True)

    def set_context(self, handling: VariableTracker | None) -> None:
        """Raised while ``handling`` was being handled: Python chains it as ``__context__``."""
        if handling is not None and handling is not self:
            self.attrs["__context__"] = handling


_PYTHON_ATTRS = (types.FunctionType, property, staticmethod, classmethod)


def _in_python(cls: type, name: str) -> bool:
    """Whether ``cls`` or a base defines ``name`` in Python (not the C exception's own)."""
    return isinstance(class_lookup(cls, name), (types.FunctionType, staticmethod))


class ExceptionInitVariable(VariableTracker):
    """``BaseException.__init__`` bound to an exception the frame builds: sets its ``args``."""

    def __init__(self, exc: ExceptionVariable):
        self.exc = exc

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        if kwargs:
            raise Unsupported(f"{self.exc.cls.__name__}.__init__ with keyword arguments")
        self.exc.attrs["args"] = containers.TupleVariable(list(args))
        return constants.ConstantVariable(None)


class Raised(Unsupported):
    """``exc`` raised in traced code, on its way to a handler (``reason`` if none takes it)."""

    def __init__(self, exc: ExceptionVariable, reason: str, chained: bool = False):
        self.exc = exc
        self.chained = chained  # its ``__context__`` is set (a re-raise keeps the one it had)
        super().__init__(f"{reason} (not caught in the compiled function)")


def construct(tx: Translator, cls: type, args: list, kwargs: dict) -> ExceptionVariable:
    """``cls(*args, **kwargs)`` for an exception class: a Python ``__init__`` is inlined; a C
    one is run now on constant arguments, so an exception Python would refuse is refused."""
    if _in_python(cls, "__new__"):
        raise Unsupported(f"constructing {cls.__name__} (its class defines __new__)")
    exc = ExceptionVariable(cls, args)
    init = class_lookup(cls, "__init__")
    if isinstance(init, types.FunctionType):
        tx.inline_call(init, [exc, *args], kwargs)
    elif kwargs:
        raise Unsupported(f"constructing {cls.__name__} with keyword arguments")
    else:
        exc.as_python_constant()
    return exc


def instance(tx: Translator, value: VariableTracker) -> ExceptionVariable:
    """What ``raise value`` raises: an exception, or a new one of an exception class."""
    if isinstance(value, ExceptionVariable):
        return value
    if isinstance(value, objects.ClassVariable) and issubclass(value.value, BaseException):
        return construct(tx, value.value, [], {})
    raise Unsupported(f"raising {value.describe()} (exceptions must derive from BaseException)")


def error(cls: type, *args: Any, reason: str) -> Raised:
    """Python's own ``cls(*args)`` where a traced operation fails (a missing key...), to raise."""
    return Raised(ExceptionVariable(cls, [constants.ConstantVariable(a) for a in args]), reason)


def stop_iteration_error(exc: ExceptionVariable) -> ExceptionVariable:
    """What leaves a generator for ``exc`` raised in it: a ``StopIteration`` becomes a
    ``RuntimeError`` (PEP 479), caused by it."""
    if not issubclass(exc.python_type(), StopIteration):
        return exc
    error = ExceptionVariable(
        RuntimeError, [constants.ConstantVariable("generator raised StopIteration")]
    )
    error.set_cause(exc)
    error.attrs["__context__"] = exc
    return error
