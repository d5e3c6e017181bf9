"""Calls to torch callables: graph nodes, capture-time constants, or Unsupported.

Anything under ``torch`` called with tensors becomes a ``call_function``
node. A few functions read or change global state and are handled here:
grad mode is tracked (and written into the graph), default dtype is read
at capture time (and guarded), seeds and global settings are refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from torchkiln.capture import builtins, sdpa_mask
from torchkiln.capture import variables as V
from torchkiln.distributed import capture_rules as distributed_rules
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


#: torch functions that read global state: evaluated at capture time, and guarded.
STATE_QUERIES = {
    torch.is_inference_mode_enabled,
    torch.are_deterministic_algorithms_enabled,
    torch.is_deterministic_algorithms_warn_only_enabled,
    torch.is_autocast_enabled,
    torch.get_autocast_dtype,
    torch.is_autocast_cache_enabled,
    torch.get_autocast_gpu_dtype,
    torch.get_autocast_cpu_dtype,
    torch.is_autocast_cpu_enabled,
    torch._C._is_any_autocast_enabled,
    torch.autograd._profiler_enabled,
    torch.is_anomaly_enabled,
    torch.is_anomaly_check_nan_enabled,
    torch.get_num_threads,
}

#: The ``STATE_QUERIES`` that read autocast.
AUTOCAST_QUERIES = {q for q in STATE_QUERIES if "autocast" in q.__name__}


def call_torch_function(tx: Translator, fn: Any, args: list, kwargs: dict) -> V.VariableTracker:
    if isinstance(fn, type):
        return builtins.construct_class(tx, fn, args, kwargs)
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
    if fn in STATE_QUERIES:
        consts = [a.as_python_constant() for a in args]
        kw = {k: v.as_python_constant() for k, v in kwargs.items()}
        value = fn(*consts, **kw)
        if tx.output.autocast == tx.output.initial_autocast or fn not in AUTOCAST_QUERIES:
            tx.output.guards.state_query(fn, tuple(consts), kw, value)
        # else: inside the frame's own autocast switches, whose starting state is guarded whole
        return V.ConstantVariable(value)
    if (
        fn in (torch.from_numpy, torch.as_tensor)
        and len(args) == 1
        and not kwargs
        and isinstance(args[0], V.numpy_arrays.NumpyArrayVariable)
    ):  # the tensor that shares the array's memory
        return V.numpy_arrays.to_tensor(args[0])
    if fn is torch.is_tensor:
        return V.ConstantVariable(isinstance(args[0], V.TensorVariable))
    if distributed_rules.is_distributed(fn):
        if distributed_rules.is_state_query(fn, args, kwargs):
            value = fn()
            tx.output.guards.state_query(fn, (), {}, value)
            return V.ConstantVariable(value)
        reason = distributed_rules.refusal(fn)
        if reason is not None:
            raise Unsupported(reason)
        args, kwargs = distributed_rules.group_names(tx, args, kwargs)
    module = getattr(fn, "__module__", "") or ""
    if module.startswith(("torch._dynamo", "torch.compiler", "torch.utils.data")):
        raise Unsupported(f"{module}.{getattr(fn, '__name__', fn)}")
    if sdpa_mask.is_sdpa(fn):
        args, kwargs = sdpa_mask.with_dense_mask(tx, args, kwargs)
    if args and isinstance(args[0], V.TensorVariable):  # ``torch.is_inference(x)``...
        V.guard_tensor_state(tx, args[0], getattr(fn, "__name__", ""))
    return tx.output.call_op("call_function", fn, args, kwargs)
