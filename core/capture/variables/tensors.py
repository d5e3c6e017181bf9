"""Tensors: an FX node plus a fake tensor; reading state the input guards leave open guards it."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING

import torch

from torchkiln import config
from torchkiln.capture.guards import COST_TENSOR
from torchkiln.capture.variables import constants, numpy_arrays
from torchkiln.capture.variables.base import MISSING, VariableTracker, class_lookup
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator


class TensorVariable(VariableTracker):
    """A tensor: an FX node plus a fake tensor carrying its metadata; ``cls`` is the real
    tensor's class (``nn.Parameter`` for a parameter passed in: guarded with the input)."""

    def __init__(
        self,
        node: torch.fx.Node,
        example: torch.Tensor,
        source: str | None = None,
        cls: type = torch.Tensor,
    ):
        self.node = node
        self.example = example
        self.source = source
        self.cls = cls

    def python_type(self) -> type:
        return self.cls

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name == "__class__":
            return tx.output.wrap(self.cls, None)
        guard_tensor_state(tx, self, name)
        return tx.output.tensor_getattr(self, name)

    def has_attribute(self, tx: Translator, name: str) -> bool:
        """An attribute of the tensor class (``grad``, ``shape``, methods) is read on the fake
        tensor, whose metadata the guards fix: no value is needed to know it is there."""
        if class_lookup(self.cls, name) is MISSING:
            return super().has_attribute(tx, name)
        try:
            return hasattr(self.example, name)
        except Exception as e:  # ``t.mT`` of a 1-d tensor raises RuntimeError, as eagerly
            raise Unsupported(f"hasattr(tensor, {name!r}) raised {type(e).__name__}") from e

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        if name == "numpy" and not args and not kwargs:
            return numpy_arrays.from_tensor(tx, self)
        guard_tensor_state(tx, self, name)
        return tx.output.tensor_method(self, name, args, kwargs)

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        if self.example.dim() == 0:
            raise Unsupported("iterating over a 0-d tensor")
        return [
            tx.output.call_op(
                "call_function", operator.getitem, [self, constants.ConstantVariable(i)], {}
            )
            for i in range(self.example.shape[0])
        ]

    def truth(self, tx: Translator) -> bool:
        raise Unsupported("data-dependent branch on a tensor value (bool(tensor))")

    def __repr__(self) -> str:
        return f"Tensor({self.node.name}, {tuple(self.example.shape)}, {self.example.dtype})"


#: Tensor facts that an input's guards (type, dtype, device, sizes, requires_grad) leave open,
#: by the attribute or method that reads them, and how to read them on the input.
TENSOR_STATE = {
    "is_inference": "is_inference()",
    "is_leaf": "is_leaf",
    "is_conj": "is_conj()",
    "is_neg": "is_neg()",
    "is_nested": "is_nested",
    "layout": "layout",
    "is_sparse": "layout",
    "is_sparse_csr": "layout",
    "is_mkldnn": "layout",
    "storage_offset": "storage_offset()",
}
#: The facts that strides decide, guarded on every input unless ``config.guard_strides`` is off.
TENSOR_STRIDE_STATE = {"stride", "is_contiguous", "is_non_overlapping_and_dense"}


def guard_tensor_state(tx: Translator, vt: TensorVariable, name: str) -> None:
    """Reading ``name`` on ``vt`` (e.g. ``is_inference()``) gives what the fake tensor says, which
    follows from the graph inputs ``vt`` was computed from: guard that fact on each of them."""
    read = TENSOR_STATE.get(name)
    if read is None and name in TENSOR_STRIDE_STATE and not config.guard_strides:
        read = "stride()"
    if read is None:
        return
    guards = tx.output.guards
    by_node = {node: (source, value) for source, value, node in tx.output.inputs}
    seen, stack = set(), [vt.node]
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(node.all_input_nodes)
    for node in seen & by_node.keys():
        source, value = by_node[node]
        fact = getattr(value, read.removesuffix("()"))
        fact = fact() if read.endswith("()") else fact
        guards.add(
            f"{source}.{read} == {guards.literal(fact)}", COST_TENSOR, f"{source}.{read} == {fact}"
        )


#: Python operators a symbolic size keeps symbolic (the rest specialize it).
SYMBOLIC_OPERATORS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow,
    "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
    ">": operator.gt, ">=": operator.ge,
}  # fmt: skip

SYM_PYTHON_TYPES = {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}


class SymNodeVariable(VariableTracker):
    """A symbolic size (a SymInt, or a SymFloat/SymBool computed from one): an FX node that
    computes it when the graph runs, and its value in the capture's ShapeEnv.

    Arithmetic and comparisons stay symbolic, and so does passing it to a torch operation
    (``x.view(b, t, h, d)``). Where Python needs the value (``bool``, an index, ``range``,
    a builtin), ``as_python_constant`` specializes it: the ShapeEnv records the guard
    (``Eq(s0, 8)``, ``s0 > 4``) that the entry's guard function then checks."""

    def __init__(self, node: torch.fx.Node, value: torch.SymInt | torch.SymFloat | torch.SymBool):
        self.node = node
        self.value = value

    def python_type(self) -> type:
        return SYM_PYTHON_TYPES[type(self.value)]

    def as_python_constant(self) -> int | float | bool:
        return _specialize(self.python_type(), self.value)

    def truth(self, tx: Translator) -> bool:
        return _specialize(bool, self.value)

    def binary(
        self, tx: Translator, symbol: str, other: VariableTracker, reflected: bool
    ) -> VariableTracker | None:
        fn = SYMBOLIC_OPERATORS.get(symbol)
        symbolic = isinstance(other, SymNodeVariable)
        number = other.is_constant() and type(other.as_python_constant()) in (int, float, bool)
        if fn is None or not (symbolic or number):
            return None
        args = [other, self] if reflected else [self, other]
        return tx.output.call_op("call_function", fn, args, {})

    def reconstruct(self, codegen: object) -> str:
        """Specialized: the transformed code rebuilds it as the constant it is now."""
        return repr(self.as_python_constant())

    def __repr__(self) -> str:
        return f"SymNode({self.node.name}, {self.value})"


def _specialize(kind: type, value: torch.SymInt | torch.SymFloat | torch.SymBool) -> object:
    """``kind(value)``, guarded by the ShapeEnv; a size that depends on the data (``nonzero``'s
    count) has no value to guard on, so Python needing it ends the graph."""
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    try:
        return kind(value)
    except GuardOnDataDependentSymNode as e:
        raise Unsupported(
            f"Python needs the value of {value}, a size that depends on the data "
            "(unbacked): branch on it or convert it outside the compiled function, or keep it "
            "symbolic (pass it to torch operations)"
        ) from e


def holds_size(vt: VariableTracker) -> bool:
    """Whether ``vt`` is a symbolic size or a tuple of constants and symbolic sizes (a shape):
    ``as_python_constant`` specializes it."""
    if isinstance(vt, SymNodeVariable):
        return True
    items = getattr(vt, "items", None)
    return (
        type(items) is list
        and any(isinstance(i, SymNodeVariable) for i in items)
        and all(i.is_constant() or holds_size(i) for i in items)
    )
