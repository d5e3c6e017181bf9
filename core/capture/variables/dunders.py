"""Python's operator protocol where an operand is a user object.

``a + b`` tries ``type(a).__add__(a, b)``, then ``type(b).__radd__(b, a)`` (the reflected one
first where ``b``'s class is a subclass of ``a``'s with its own), and ``a += b`` tries
``__iadd__`` before both; a ``NotImplemented`` result passes on to the next; ``==`` and
``!=`` end in identity, the rest in Python's ``TypeError`` (raised natively: a graph break).
Methods written in Python are inlined. A tensor or a builtin value on the other side
gives way (its own method returns ``NotImplemented`` for a user object), unless the user
class takes part in ``__torch_function__``.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

from torchkiln.capture.variables import constants, functions, objects, tensors
from torchkiln.capture.variables.base import MISSING, VariableTracker, class_lookup
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator

#: The reflected method of each operator (comparisons swap sides).
_REFLECTED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


def binary(
    tx: Translator, op: str, inplace: bool, a: VariableTracker, b: VariableTracker
) -> VariableTracker:
    """``a <op> b`` (``a <op>= b`` if ``inplace``), ``op`` the method's stem (``add``)."""
    forward = (a, f"__{op}__", b)
    reflected = (b, f"__{_REFLECTED.get(op, 'r' + op)}__", a)
    attempts = [(a, f"__i{op}__", b)] if inplace else []
    attempts += (
        [reflected, forward] if _reflected_first(a, b, reflected[1]) else [forward, reflected]
    )
    for obj, name, other in attempts:
        result = _call(tx, obj, name, other)
        if result is not None:
            return result
    if op in ("eq", "ne"):
        same = tx.is_same(a, b)
        if same is None:
            raise Unsupported(f"'==' between {a.describe()} and {b.describe()}")
        return constants.ConstantVariable(same == (op == "eq"))
    raise Unsupported(f"operator __{op}__ between {a.describe()} and {b.describe()} (TypeError)")


def unary(tx: Translator, obj: objects.UserObjectVariable, name: str) -> VariableTracker:
    """``-obj``, ``+obj``, ``~obj``, ``abs(obj)``: the class's method, else ``TypeError``."""
    result = _call(tx, obj, name)
    if result is None:
        raise Unsupported(f"{name} of {obj.describe()} (TypeError)")
    return result


def hash_of(tx: Translator, obj: objects.UserObjectVariable) -> VariableTracker:
    """``hash(obj)``: the class's ``__hash__``, reduced as Python reduces its result."""
    method = class_lookup(obj.cls, "__hash__")
    if not isinstance(method, types.FunctionType):
        raise Unsupported(f"hash() of {obj.describe()} (its identity, or unhashable)")
    value = _call(tx, obj, "__hash__").as_python_constant()
    if type(value) is not int:
        raise Unsupported(f"__hash__ of {obj.describe()} returned {type(value).__name__}")
    in_range = -(2**63) <= value < 2**63 and value != -1
    return constants.ConstantVariable(value if in_range else hash(value))


def text(tx: Translator, obj: objects.UserObjectVariable, name: str) -> VariableTracker:
    """``str(obj)`` (``name`` "__str__") or ``repr(obj)`` ("__repr__"): the class's method
    inlined, its result a string (``object.__str__`` is ``repr``); ``object.__repr__``'s text
    names the object's address, known only when the frame runs."""
    if name == "__str__" and class_lookup(obj.cls, name) is object.__str__:
        name = "__repr__"
    if class_lookup(obj.cls, name) is object.__repr__:
        return RuntimeReprVariable(obj)
    result = _call(tx, obj, name)
    if result is None or not (result.is_constant() and type(result.as_python_constant()) is str):
        raise Unsupported(f"{name} of {obj.describe()} did not return a string (TypeError)")
    return result


def format_of(tx: Translator, obj: objects.UserObjectVariable, spec: str) -> VariableTracker:
    """``format(obj, spec)``: the class's ``__format__`` inlined; ``object.__format__`` is
    ``str(obj)`` for an empty spec and Python's ``TypeError`` for any other."""
    if class_lookup(obj.cls, "__format__") is not object.__format__:
        result = _call(tx, obj, "__format__", constants.ConstantVariable(spec))
        if result is None or not result.is_constant():
            raise Unsupported(f"__format__ of {obj.describe()} did not return a string")
        return result
    if spec:
        raise Unsupported(f"format spec {spec!r} for {obj.describe()} (TypeError)")
    return text(tx, obj, "__str__")


class RuntimeReprVariable(VariableTracker):
    """``object.__repr__(obj)``: ``<module.Class object at 0x...>``, whose address is the
    object's when the frame runs, so the string is built then, never folded."""

    def __init__(self, obj: objects.UserObjectVariable):
        self.obj = obj

    def python_type(self) -> type:
        return str

    def truth(self, tx: Translator) -> bool:
        return True  # never empty

    def as_python_constant(self):
        raise Unsupported(
            f"the repr of {self.obj.describe()} names its address, known only at run time "
            "(define __repr__ or __str__ on the class to use the text in the frame)"
        )

    def describe(self) -> str:
        return f"repr() of {self.obj.describe()}"

    def reconstruct(self, codegen: Any) -> str:
        return f"{codegen.bind(object.__repr__, 'object_repr')}({codegen.reconstruct(self.obj)})"


def _reflected_first(a: VariableTracker, b: VariableTracker, name: str) -> bool:
    """``b``'s class is a proper subclass of ``a``'s and overrides the reflected method."""
    if not (
        isinstance(a, objects.UserObjectVariable) and isinstance(b, objects.UserObjectVariable)
    ):
        return False
    return (
        b.cls is not a.cls
        and issubclass(b.cls, a.cls)
        and class_lookup(b.cls, name) is not class_lookup(a.cls, name)
    )


def _call(tx: Translator, obj: VariableTracker, name: str, *args: VariableTracker):
    """``type(obj).name(obj, *args)``, or None where it is missing or returns NotImplemented."""
    if not isinstance(obj, objects.UserObjectVariable):
        _check_gives_way(obj, args)
        return None
    method = class_lookup(obj.cls, name)
    if name == "__ne__" and method is object.__ne__:  # object's: the inverse of ``__eq__``
        equal = _call(tx, obj, "__eq__", *args)
        return None if equal is None else constants.ConstantVariable(not tx.truth(equal))
    if method is MISSING or method is getattr(object, name, None):
        return None  # object's comparisons return NotImplemented (``==`` ends in identity)
    if not isinstance(method, types.FunctionType):
        raise Unsupported(f"{obj.describe()}.{name} is a {type(method).__name__}, not traced")
    tx.output.guard_class_member(obj, name)
    result = functions.UserMethodVariable(method, obj).call(tx, list(args), {})
    if result.is_constant() and result.as_python_constant() is NotImplemented:
        return None
    return result


def _check_gives_way(value: VariableTracker, others: tuple) -> None:
    """``value``'s own method returns NotImplemented for a user object: a tensor's (unless
    the object's class has ``__torch_function__``) and a builtin value's."""
    if isinstance(value, (tensors.TensorVariable, tensors.SymNodeVariable)):
        user = [o for o in others if isinstance(o, objects.UserObjectVariable)]
        if any(class_lookup(o.cls, "__torch_function__") is not MISSING for o in user):
            raise Unsupported("operator between a tensor and an object with __torch_function__")
        return
    try:
        builtin = value.python_type().__module__ == "builtins"
    except Unsupported:
        builtin = False
    if not builtin:
        raise Unsupported(f"operator between {value.describe()} and a user object")
