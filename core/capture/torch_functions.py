"""Calls to torch callables: graph nodes, capture-time constants, or Unsupported.

Anything under ``torch`` called with tensors becomes a ``call_function``
node. A few functions read or change global state and are handled here:
grad mode is tracked (and written into the graph), default dtype is read
at capture time (and guarded), seeds and global settings are refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from torchkiln.capture import variables as V
from torchkiln.capture.builtins import construct_class
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator

#: torch functions that change process-wide state: never traced.
REFUSED = {
    torch.manual_seed,
    torch.seed,
    torch.set_default_dtype,
    torch.set_default_device,
    torch.use_deterministic_algorithms,
    torch.set_printoptions,
    torch.set_num_threads,
    torch.save,
    torch.load,
}


def call_torch_function(tx: Translator, fn: Any, args: list, kwargs: dict) -> V.VariableTracker:
    if isinstance(fn, type):
        return construct_class(tx, fn, args, kwargs)
    if fn in REFUSED:
        raise Unsupported(f"torch.{fn.__name__}() changes global state")
    if fn is torch.is_grad_enabled:
        return V.ConstantVariable(tx.output.grad_enabled)
    if fn is torch.get_default_dtype:
        return V.ConstantVariable(torch.get_default_dtype())
    if fn is torch._C._set_grad_enabled:
        tx.output.set_grad_enabled(bool(args[0].as_python_constant()))
        return V.ConstantVariable(None)
    if fn is torch.compiler.is_compiling:
        # Captured code is being compiled: libraries take the path they take under torch.compile.
        return V.ConstantVariable(True)
    if fn is torch.compiler.is_exporting:
        return V.ConstantVariable(False)
    if fn is torch.is_tensor:
        return V.ConstantVariable(isinstance(args[0], V.TensorVariable))
    module = getattr(fn, "__module__", "") or ""
    if module.startswith(("torch._dynamo", "torch.compiler", "torch.utils.data")):
        raise Unsupported(f"{module}.{getattr(fn, '__name__', fn)}")
    return tx.output.call_op("call_function", fn, args, kwargs)
