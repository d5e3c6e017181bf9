"""Callables: bound methods, builtins, user functions (inlined), functions the frame makes
(closures, lambdas), methods of tracked objects, ``functools.partial``, and closure cells."""

from __future__ import annotations

import functools
import types
from typing import TYPE_CHECKING, Any

from torchkiln.capture import builtins, variables
from torchkiln.capture.runtime import make_function
from torchkiln.capture.variables import constants, containers
from torchkiln.capture.variables.base import ValueVariable, VariableTracker
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator


class BoundMethodVariable(VariableTracker):
    """``obj.name`` looked up for a call: the call goes to ``obj.call_method``."""

    def __init__(self, obj: VariableTracker, name: str):
        self.obj = obj
        self.name = name

    def python_type(self) -> type:
        return types.MethodType

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        return self.obj.call_method(tx, self.name, args, kwargs)

    def describe(self) -> str:
        return f"method {self.name!r} of {self.obj.describe()}"

    def reconstruct(self, codegen: Any) -> str:
        return f"{codegen.reconstruct(self.obj)}.{self.name}"


class BuiltinVariable(ValueVariable):
    """A builtin, ``math``/``operator`` function or a method of a constant: see ``builtins.py``."""

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        return builtins.call_builtin(tx, self.value, args, kwargs)


class UserFunctionVariable(ValueVariable):
    """A user Python function: calls are inlined into the graph being built.

    A few standard-library functions are not inlined but modelled
    (``builtins.python_function``), ``inspect.signature`` for one.
    """

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        handler = builtins.python_function(self.value)
        if handler is not None:
            return handler(tx, *args, **kwargs)
        return tx.inline_call(self.value, args, kwargs)

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name in ("__name__", "__qualname__", "__module__", "__doc__"):
            return constants.ConstantVariable(getattr(self.value, name))
        if name == "__code__":  # read for its signature (co_varnames, co_argcount...)
            code = self.value.__code__
            if self.source:
                tx.output.guards.identity(f"{self.source}.__code__", code)
            return constants.ConstantVariable(code)
        if name in ("__annotations__", "__type_params__", "__dict__") and self.source:
            return tx.output.wrap(getattr(self.value, name), f"{self.source}.{name}")
        if name in self.value.__dict__ and self.source:  # ``__wrapped__``, user attributes
            return tx.output.wrap(self.value.__dict__[name], f"{self.source}.{name}")
        raise Unsupported(f"attribute {name!r} of function {self.value.__qualname__}")


class NestedFunctionVariable(VariableTracker):
    """A function created by ``MAKE_FUNCTION`` inside the frame (closures, lambdas, comprehensions)."""

    def __init__(
        self,
        code: types.CodeType,
        defaults: tuple | None,
        kwdefaults: dict | None,
        closure: tuple | None,
        globals_: dict,
    ):
        self.code = code
        self.defaults = defaults
        self.kwdefaults = kwdefaults
        self.closure = closure
        self.globals = globals_
        self.annotated = False  # ``MAKE_FUNCTION`` was given annotations (not modelled)
        self.attrs: dict[str, VariableTracker] = {}  # ``__name__``... the frame set
        self.namespace = containers.DictVariable({})  # its ``__dict__``

    def python_type(self) -> type:
        return types.FunctionType

    def describe(self) -> str:
        return f"nested function {self.code.co_name}"

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        """The attributes ``functools.update_wrapper`` reads and sets: the frame's own, else
        what a new function over ``code`` has."""
        if name in self.attrs:
            return self.attrs[name]
        if name == "__dict__":
            return self.namespace
        if name in self.namespace.items:
            return self.namespace.items[name]
        if name == "__annotations__" and not self.annotated:
            self.attrs[name] = containers.DictVariable({})  # made on first read, then kept
            return self.attrs[name]
        if name in ("__name__", "__qualname__", "__module__", "__doc__", "__type_params__"):
            cells = tuple(types.CellType() for _ in self.code.co_freevars)
            made = types.FunctionType(self.code, self.globals, closure=cells)
            return tx.output.wrap(getattr(made, name), None)
        raise Unsupported(f"attribute {name!r} of {self.describe()}")

    def set_attribute(self, name: str, value: VariableTracker) -> None:
        """``fn.name = value``: a slot ``update_wrapper`` sets, else its ``__dict__``."""
        if name in WRAPPER_SLOTS:
            self.attrs[name] = value
        elif hasattr(types.FunctionType, name):  # ``__defaults__``, ``__code__``...
            raise Unsupported(f"setting {name!r} of {self.describe()}")
        else:
            self.namespace.items[name] = value

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        return tx.inline_nested(self, args, kwargs)

    def reconstruct(self, codegen: Any) -> str:
        """A new function object over the same code. Not for a closure over the frame's own
        cells: the rebuilt cells would not be the ones the frame (or a resume function) uses."""
        if not codegen.rebuilds_functions:
            raise Unsupported(f"cannot pass {self.describe()} to a resume function")
        if self.attrs or self.namespace.items:
            raise Unsupported(f"cannot rebuild {self.describe()}: the frame set its attributes")
        cells = []
        for cell in self.closure or ():
            if not isinstance(cell, RealCellVariable):
                raise Unsupported(f"cannot rebuild {self.describe()}: it closes over frame locals")
            cells.append(cell.source.removesuffix(".cell_contents"))
        defaults = "".join(f"{codegen.reconstruct(d)}, " for d in self.defaults or ())
        kwdefaults = ", ".join(
            f"{k!r}: {codegen.reconstruct(v)}" for k, v in (self.kwdefaults or {}).items()
        )
        parts = [
            codegen.bind(self.code, "code"),
            codegen.bind(self.globals, "G"),
            f"({defaults})",
            f"{{{kwdefaults}}}",
            f"({''.join(f'{c}, ' for c in cells)})",
        ]
        return f"{codegen.bind(make_function, 'make_function')}({', '.join(parts)})"


class UserMethodVariable(VariableTracker):
    """A user function bound to a tracked ``self``."""

    def __init__(self, fn: Any, obj: VariableTracker):
        self.fn = fn
        self.obj = obj

    def python_type(self) -> type:
        return types.MethodType

    def describe(self) -> str:
        return f"method {getattr(self.fn, '__qualname__', self.fn)}"

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        if isinstance(self.fn, types.FunctionType):
            handler = builtins.python_function(self.fn)
            if handler is not None:  # modelled, not inlined (``unittest``'s assertions)
                return handler(tx, self.obj, *args, **kwargs)
            return tx.inline_call(self.fn, [self.obj, *args], kwargs)
        return tx.output.wrap(self.fn, None).call(tx, [self.obj, *args], kwargs)

    def reconstruct(self, codegen: Any) -> str:
        method_type, fn = codegen.bind(types.MethodType), codegen.bind(self.fn)
        return f"{method_type}({fn}, {codegen.reconstruct(self.obj)})"


class PartialVariable(VariableTracker):
    """``functools.partial(func, *args, **kwargs)``."""

    def __init__(self, func: VariableTracker, args: list, kwargs: dict, source: str | None = None):
        self.func = func
        self.args = args
        self.kwargs = kwargs
        self.source = source

    def python_type(self) -> type:
        return functools.partial

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        return self.func.call(tx, [*self.args, *args], {**self.kwargs, **kwargs})

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        """``func``, ``args`` and ``keywords`` (the partial's own dict: a change to it
        changes later calls, and is replayed on a real partial)."""
        if name == "func":
            return self.func
        if name == "args":
            return containers.TupleVariable(list(self.args))
        if name == "keywords":
            keywords = containers.DictVariable(
                {}, f"{self.source}.keywords" if self.source else None
            )
            keywords.items = self.kwargs
            return keywords
        raise Unsupported(f"attribute {name!r} of functools.partial")

    def reconstruct(self, codegen: Any) -> str:
        args = [codegen.reconstruct(a) for a in self.args]
        kwargs = [f"{k}={codegen.reconstruct(v)}" for k, v in self.kwargs.items()]
        parts = [codegen.reconstruct(self.func), *args, *kwargs]
        return f"{codegen.bind(functools.partial)}({', '.join(parts)})"


class CellVariable(VariableTracker):
    """A cell created by the frame (``MAKE_CELL``), shared with nested functions."""

    def __init__(self, contents: VariableTracker | None = None):
        self.contents = contents


class RealCellVariable(VariableTracker):
    """A closure cell that exists outside the frame; reads are guarded, writes refused."""

    def __init__(self, cell: types.CellType, source: str):
        self.cell = cell
        self.source = source
        self.override: VariableTracker | None = None


#: The function attributes ``update_wrapper`` may assign that are no ``__dict__`` entries.
WRAPPER_SLOTS = frozenset(
    {"__module__", "__name__", "__qualname__", "__doc__", "__annotations__", "__type_params__"}
)


def _update_wrapper(
    tx: Translator,
    wrapper: VariableTracker,
    wrapped: VariableTracker,
    assigned: VariableTracker | None = None,
    updated: VariableTracker | None = None,
) -> VariableTracker:
    """``functools.update_wrapper`` on a function the frame made: the same steps, on it."""
    if not isinstance(wrapper, NestedFunctionVariable) or not isinstance(
        wrapped, (NestedFunctionVariable, UserFunctionVariable)
    ):
        raise Unsupported(f"functools.update_wrapper({wrapper.describe()}, {wrapped.describe()})")
    assigned = functools.WRAPPER_ASSIGNMENTS if assigned is None else assigned.as_python_constant()
    updated = functools.WRAPPER_UPDATES if updated is None else updated.as_python_constant()
    for name in assigned:
        try:
            value = tx.getattr(wrapped, name)
        except variables.exceptions.Raised as e:
            if not issubclass(e.exc.python_type(), AttributeError):
                raise
            continue
        wrapper.set_attribute(name, value)
    for name in updated:
        if name != "__dict__":
            raise Unsupported(f"functools.update_wrapper updating {name!r}")
        items = tx.getattr(wrapped, "__dict__")
        tx.call_function(tx.getattr(wrapper.namespace, "update"), [items], {})
    wrapper.set_attribute("__wrapped__", wrapped)
    return wrapper


def _wraps(tx: Translator, wrapped: VariableTracker, *args: Any, **kwargs: Any) -> VariableTracker:
    """``functools.wraps``: ``update_wrapper`` with ``wrapped`` (and the rest) bound."""
    options = dict(zip(("assigned", "updated"), args), wrapped=wrapped, **kwargs)
    return PartialVariable(tx.output.wrap(functools.update_wrapper, None), [], options)


#: ``functools`` functions modelled instead of inlined (the standard library is not traced).
PYTHON_FUNCTIONS = {functools.update_wrapper: _update_wrapper, functools.wraps: _wraps}
