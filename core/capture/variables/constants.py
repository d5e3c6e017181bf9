"""Immutable Python values the translator computes with at capture time (numbers, strings,
dtypes, sizes, ranges, enums...), and slices whose bounds are not all constants."""

from __future__ import annotations

import enum
import inspect
import types
from typing import TYPE_CHECKING, Any

import torch

from torchkiln.capture.variables import containers, functions, sets
from torchkiln.capture.variables.base import VariableTracker
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator


CONSTANT_TYPES = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    type(Ellipsis),
    type(NotImplemented),
    torch.dtype,
    torch.device,
    torch.Size,
    torch.layout,
    torch.memory_format,
    range,
    slice,
    frozenset,
)

#: Immutable by design (slots, no setters): ``inspect.signature`` results and their parts,
#: and the numeric limits of a dtype (``torch.finfo(dtype).min`` masks attention scores).
IMMUTABLE_TYPES = (inspect.Signature, inspect.Parameter, torch.finfo, torch.iinfo)


def is_constant_value(value: Any) -> bool:
    """Immutable Python values the translator can compute with at capture time."""
    if isinstance(value, (enum.Enum, *IMMUTABLE_TYPES)):
        return True
    if type(value) in CONSTANT_TYPES:
        if isinstance(value, (slice, frozenset)):
            parts = (value.start, value.stop, value.step) if isinstance(value, slice) else value
            return all(is_constant_value(p) for p in parts)
        return True
    if type(value) is tuple:
        return all(is_constant_value(v) for v in value)
    return False


def has_real_value(vt: VariableTracker) -> bool:
    """Whether ``real_value`` can rebuild ``vt``: a constant, or a plain list, tuple, dict or
    set of such (a set whose table is the real one: its order is then too)."""
    if vt.is_constant():
        return True
    if type(vt) is sets.SetVariable:
        return vt.exact and all(map(is_constant_value, vt.mirror))
    if type(vt) in (containers.ListVariable, containers.TupleVariable):
        return vt.python_type() in (list, tuple) and all(has_real_value(i) for i in vt.items)
    if type(vt) is containers.DictVariable:
        return all(has_real_value(v) for v in vt.items.values())
    return False


def real_value(vt: VariableTracker) -> Any:
    """A new real copy of ``vt`` (see ``has_real_value``), for a pure function that only reads it."""
    if vt.is_constant():
        return vt.as_python_constant()
    if isinstance(vt, sets.SetVariable):
        return vt.mirror  # not a copy: a copy's table, and order, may differ
    if isinstance(vt, containers.DictVariable):
        return {k: real_value(v) for k, v in vt.items.items()}
    return vt.python_type()(real_value(i) for i in vt.items)


class ConstantVariable(VariableTracker):
    """An immutable Python value (numbers, strings, None, dtypes, sizes, ranges...)."""

    def __init__(self, value: Any, source: str | None = None):
        self.value = value
        self.source = source

    def python_type(self) -> type:
        return type(self.value)

    def is_constant(self) -> bool:
        return True

    def as_python_constant(self) -> Any:
        return self.value

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        try:
            attr = getattr(self.value, name)
        except AttributeError as e:
            raise Unsupported(f"{type(self.value).__name__} has no attribute {name!r}") from e
        if is_constant_value(attr):
            return ConstantVariable(attr)
        if isinstance(attr, types.MappingProxyType) and isinstance(self.value, IMMUTABLE_TYPES):
            # ``Signature.parameters``: a read-only view that the immutable owner never changes
            source = f"{tx.output.guards.bind(self.value, 'const')}.{name}"
            return containers.ReadOnlyDictVariable(
                {k: ConstantVariable(v) for k, v in attr.items()}, source
            )
        if callable(attr):
            return functions.BuiltinVariable(attr)
        raise Unsupported(f"attribute {name!r} of {type(self.value).__name__}")

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        try:
            values = list(self.value)
        except TypeError as e:
            raise Unsupported(f"iterating over {type(self.value).__name__}") from e
        if isinstance(self.value, frozenset) and len(values) > 1:
            sets.guard_hashes(tx, values)  # its order follows hashes
        return [ConstantVariable(v) for v in values]

    def truth(self, tx: Translator) -> bool:
        return bool(self.value)

    def binary(
        self, tx: Translator, symbol: str, other: VariableTracker, reflected: bool
    ) -> VariableTracker | None:
        """``"%(name)s" % {...}``: formatting only reads a dict or list of constants."""
        if symbol != "%" or reflected or not isinstance(self.value, (str, bytes)):
            return None
        if not has_real_value(other):
            return None
        try:
            return ConstantVariable(self.value % real_value(other))
        except Exception as e:
            raise Unsupported(f"% formatting raised {type(e).__name__}: {e} while tracing") from e

    def __repr__(self) -> str:
        return f"Constant({self.value!r})"


class SliceVariable(VariableTracker):
    """A slice whose bounds are not all constants (e.g. computed from tensors)."""

    def __init__(self, parts: list[VariableTracker]):
        self.parts = parts

    def python_type(self) -> type:
        return slice
