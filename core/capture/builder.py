"""Real value → variable tracker, with the guards that make the tracker valid.

``build`` is called by ``OutputGraph.wrap`` for every value the frame reads
from outside (arguments, globals, closure cells, attributes). Each branch
says what it guards: identity for objects whose behaviour is fixed by
identity (functions, classes), type and length for containers (whose items
are wrapped with their own sources), type for user objects and modules
(whose attributes are guarded when read; ``training`` too), full metadata
for tensors.
"""

from __future__ import annotations

import builtins
import cmath
import collections
import dataclasses
import functools
import math
import operator
import sys
import types
from typing import TYPE_CHECKING, Any

import torch
from torch._library.custom_ops import CustomOpDef

from torchkiln.capture import polyfills
from torchkiln.capture import variables as V
from torchkiln.capture.inference_mode import InferenceModeRestore
from torchkiln.capture.runtime import AutocastRestore, GradModeRestore
from torchkiln.capture.targets import is_stdlib
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.output_graph import OutputGraph

#: Modules whose functions are evaluated at capture time when given constants.
PURE_MODULES = {"math", "cmath", "operator", "builtins", "_operator"}

#: Dict types read item by item (a ``defaultdict`` also reads its factory).
DICT_TYPES = (dict, collections.OrderedDict, collections.defaultdict, collections.Counter)

#: torch objects that are context managers for grad mode.
GRAD_MODE_CLASSES = (torch.no_grad, torch.enable_grad, torch.set_grad_enabled)


#: Callables that run in the TorchScript runtime (``torch.jit.script``/``trace`` results).
TORCHSCRIPT_TYPES = (torch._C.ScriptFunction, torch._C.ScriptMethod, torch.jit.ScriptModule)


def _items_with_object_keys(out: OutputGraph, value: dict, source: str | None) -> dict:
    """The mirror items of a dict from outside keyed by objects as well as constants: each
    object key is read through its position (``list(d)[i]``) and guarded by identity, so a
    lookup hashes and compares it as eager does; constant keys are guarded by value."""
    if source is None:
        raise Unsupported("a dict keyed by objects, with no source to guard its keys")
    out.guards.length(source, len(value))
    items = {}
    for i, (key, item) in enumerate(value.items()):
        key_source = f"list({source})[{i}]"
        if V.is_constant_value(key):
            out.guards.constant(key_source, key)
            items[key] = out.wrap(item, f"{source}[{key!r}]")
            continue
        if isinstance(key, torch.Tensor):
            raise Unsupported("a dict read from outside keyed by tensors")
        key_vt = out.wrap(key, key_source)
        out.guards.identity(key_source, key)
        items[V.sets.Element(key_vt, key, real=True)] = out.wrap(item, f"{source}[{key_source}]")
    return items


def build(out: OutputGraph, value: Any, source: str | None) -> V.VariableTracker:
    guards = out.guards
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided:  # sparse, mkldnn: no storage fake tensors can alias
            raise Unsupported(f"a {str(value.layout).removeprefix('torch.')} tensor")
        if isinstance(value, torch.nn.Parameter) or type(value) is torch.Tensor:
            return out.add_input(value, source)
        raise Unsupported(f"tensor subclass {type(value).__name__}")
    if isinstance(value, torch.nn.Module) and not isinstance(value, torch.jit.ScriptModule):
        if source:
            guards.module(source, value)
        return V.NNModuleVariable(value, source)
    if type(value) in (list, tuple) or _is_namedtuple(value):
        if source:
            guards.type_is(source, type(value))
            guards.length(source, len(value))
        items = [out.wrap(v, f"{source}[{i}]" if source else None) for i, v in enumerate(value)]
        if type(value) is list:
            return V.ListVariable(items, source)
        return V.TupleVariable(
            items, source, cls=type(value), fields=getattr(type(value), "_fields", None)
        )
    if type(value) in DICT_TYPES:
        keys = list(value)
        if source:
            guards.type_is(source, type(value))
        if all(V.is_constant_value(k) for k in keys):
            if source:
                guards.dict_keys(source, keys)
            items = {
                k: out.wrap(v, f"{source}[{k!r}]" if source else None) for k, v in value.items()
            }
        else:
            items = _items_with_object_keys(out, value, source)
        if type(value) is collections.defaultdict:
            factory = out.wrap(
                value.default_factory, f"{source}.default_factory" if source else None
            )
            return V.DefaultDictVariable(factory, items, source)
        if type(value) is collections.OrderedDict:
            return V.OrderedDictVariable(items, source)
        if type(value) is collections.Counter:
            return V.CounterVariable(items, source)
        return V.DictVariable(items, source)
    if type(value) is collections.deque:
        if source:
            guards.type_is(source, collections.deque)
            guards.length(source, len(value))
            guards.add(
                f"{source}.maxlen == {value.maxlen!r}", 2, f"{source}.maxlen == {value.maxlen!r}"
            )
        items = [out.wrap(v, f"{source}[{i}]" if source else None) for i, v in enumerate(value)]
        return V.DequeVariable(items, value.maxlen, source)
    if dataclasses.is_dataclass(type(value)) and isinstance(value, dict):
        if source:
            guards.type_is(source, type(value))
        return V.DictObjectVariable.from_real(out, value, source)
    if type(value) in (set, frozenset):  # a frozenset of constants is a constant
        return V.sets.from_real(out, value, source)
    if type(value) is collections.ChainMap:
        if source:
            guards.type_is(source, collections.ChainMap)
        return V.chainmap.from_real(out, value, source)
    if V.builtin_subclasses.native_type(type(value)) is not None:
        if source:
            guards.type_is(source, type(value))
        subclass_object = V.builtin_subclasses.from_real(out, value, source)
        if subclass_object is not None:
            return subclass_object
    if isinstance(value, GradModeRestore):
        if source:
            guards.type_is(source, GradModeRestore)
            guards.add(f"{source}.prev is {value.prev!r}", 2, f"{source}.prev is {value.prev!r}")
        return V.GradModeExitVariable(value.prev)
    if isinstance(value, InferenceModeRestore):
        if source:
            guards.type_is(source, InferenceModeRestore)
        return V.context_managers.InferenceModeExitVariable()
    if isinstance(value, AutocastRestore):
        if source:
            guards.type_is(source, AutocastRestore)
            guards.add(f"{source}.prev == {value.prev!r}", 2, f"{source}.prev is {value.prev!r}")
        return V.context_managers.AutocastExitVariable(value.prev)
    if type(value) is torch.autocast:
        if source:  # what entering it does: its device, dtype and flags
            guards.type_is(source, torch.autocast)
            for attr in ("device", "fast_dtype", "_enabled", "_cache_enabled"):
                read = f"{source}.{attr}"
                lit = guards.literal(getattr(value, attr))
                guards.add(f"{read} == {lit}", 2, f"{read} == {getattr(value, attr)!r}")
        return V.context_managers.AutocastVariable(value)
    if isinstance(value, torch.autograd.grad_mode._DecoratorContextManager):
        if isinstance(value, torch.no_grad):
            return V.GradModeVariable(False)
        if isinstance(value, torch.enable_grad):
            return V.GradModeVariable(True)
        if isinstance(value, torch.inference_mode):
            if source:
                guards.type_is(source, torch.inference_mode)
                guards.add(f"{source}.mode is {value.mode!r}", 2, f"{source}.mode is {value.mode}")
            return V.context_managers.InferenceModeVariable(value.mode)
        raise Unsupported(f"context manager {type(value).__name__}")
    if isinstance(value, functools.partial):
        if source:  # ``args`` and ``keywords`` can be reassigned: what is read of them, guarded
            guards.type_is(source, functools.partial)
            guards.length(f"{source}.args", len(value.args))
            guards.dict_keys(f"{source}.keywords", list(value.keywords))
        return V.PartialVariable(
            out.wrap(value.func, f"{source}.func" if source else None),
            [
                out.wrap(a, f"{source}.args[{i}]" if source else None)
                for i, a in enumerate(value.args)
            ],
            {
                k: out.wrap(v, f"{source}.keywords[{k!r}]" if source else None)
                for k, v in value.keywords.items()
            },
            source,
        )
    if isinstance(value, functools._lru_cache_wrapper) and isinstance(
        value.__wrapped__, types.FunctionType
    ):
        # the cache is bypassed and the function traced, as torch.compile does: a cached
        # result is the function's result for a pure function, the only kind worth caching
        if source:
            guards.identity(source, value)
            guards.identity(f"{source}.__wrapped__", value.__wrapped__)
        return V.UserFunctionVariable(value.__wrapped__, source)
    if V.numpy_arrays.is_numpy_callable(value):
        if source:
            guards.identity(source, value)
        return V.numpy_arrays.NumpyFunctionVariable(value, source)
    decorated = grad_mode_decorated(value)
    if decorated is not None:
        mode, func = decorated
        if source:
            guards.identity(source, value)
        return V.GradModeDecoratedVariable(mode, out.wrap(func, None))
    if isinstance(value, CustomOpDef):  # ``@torch.library.custom_op``: its operator goes in
        if source:
            guards.identity(source, value)
        return V.TorchFunctionVariable(value._opoverload, None)
    if isinstance(value, types.BuiltinMethodType) and (
        type(value.__self__) in (list, dict, set, collections.OrderedDict)
        or isinstance(value.__self__, torch.Tensor)
    ):
        if source:
            guards.type_is(source, types.BuiltinMethodType)
        owner = out.wrap(value.__self__, f"{source}.__self__" if source else None)
        return V.BoundMethodVariable(owner, value.__name__)
    if isinstance(value, types.MethodType):
        if source:
            guards.type_is(source, types.MethodType)
        fn = getattr(value.__func__, "_torchkiln_original", value.__func__)
        out.wrap(fn, f"{source}.__func__" if source else None)
        return V.UserMethodVariable(
            fn, out.wrap(value.__self__, f"{source}.__self__" if source else None)
        )
    if source:
        if _guard_by_type(value):
            guards.type_is(source, type(value))
        else:
            guards.identity(source, value)
    return _build_object(value, source)


def _build_compiled(original: Any, source: str | None) -> V.VariableTracker:
    """What ``torchkiln.compile`` wrapped, read inside a traced frame (``source`` is the wrapper).

    A function or a torch or builtin callable is traced as itself. Any other callable
    (a partial, a bound method, an object) has state that ``source`` cannot guard: calling
    it breaks the graph and runs the compiled wrapper.
    """
    if isinstance(original, types.FunctionType) or _is_torch(original) or _is_builtin(original):
        return _build_object(original, source)
    return V.OpaqueVariable(original, source)


def _build_torchscript(value: Any, source: str | None) -> V.VariableTracker:
    """A script function is inlined as the Python function it was made from, which
    ``torch.jit.script`` and ``torch.jit.trace`` keep as ``_torchdynamo_inline`` (torch.compile
    inlines it too; reading it runs no TorchScript). Script modules and methods keep no
    Python source: calling one breaks the graph and runs it natively."""
    if isinstance(value, torch._C.ScriptFunction):
        python_fn = getattr(value, "_torchdynamo_inline", None)
        if isinstance(python_fn, types.FunctionType):
            return V.UserFunctionVariable(python_fn, source)
    return V.TorchScriptVariable(value, source)


def _guard_by_type(value: Any) -> bool:
    return _is_user_object(value) or _is_opaque(value)


def _is_opaque(value: Any) -> bool:
    """Objects torchkiln only passes around (never looks into): their type is all that is guarded."""
    if isinstance(value, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)):
        return False
    if callable(value) and (_is_torch(value) or _is_builtin(value)):
        return False
    return not _is_user_object(value)


def _build_object(value: Any, source: str | None) -> V.VariableTracker:
    if isinstance(value, TORCHSCRIPT_TYPES):
        return _build_torchscript(value, source)
    if isinstance(value, types.ModuleType):
        return V.PythonModuleVariable(value, source)
    if isinstance(value, type):
        if value in GRAD_MODE_CLASSES or _is_torch(value):
            return V.TorchFunctionVariable(value, source)
        return V.ClassVariable(value, source)
    if isinstance(value, types.FunctionType):
        original = getattr(value, "_torchkiln_original", value)
        if original is not value:
            return _build_compiled(original, source)
        if _is_torch(value) and _named_in_its_module(value):
            return V.TorchFunctionVariable(value, source)
        return V.UserFunctionVariable(value, source)
    if callable(value) and _is_builtin(value):
        return V.BuiltinVariable(value, source)
    if callable(value) and _is_torch(value):
        return V.TorchFunctionVariable(value, source)
    if _is_user_object(value):
        return V.UserObjectVariable(value, source)
    return V.OpaqueVariable(value, source)


def grad_mode_decorated(value: Any) -> tuple[bool, Any] | None:
    """``(mode, func)`` for a function wrapped by ``@torch.no_grad()`` / ``@torch.enable_grad()``."""
    code = value.__code__ if isinstance(value, types.FunctionType) else None  # not getattr: an
    # object's __getattr__ (``torch.ops.<namespace>``) may answer anything
    if code is None or code.co_name != "decorate_context" or "_contextlib" not in code.co_filename:
        return None
    cells = dict(zip(code.co_freevars, (c.cell_contents for c in value.__closure__ or ())))
    factory, func = cells.get("ctx_factory"), cells.get("func")
    ctx = getattr(factory, "__self__", None)  # ``ctx.clone``; calling it could change grad mode
    if isinstance(ctx, torch.no_grad):
        return False, func
    if isinstance(ctx, torch.enable_grad):
        return True, func
    if isinstance(ctx, torch.set_grad_enabled):
        return ctx.mode, func
    return None


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def _is_torch(value: Any) -> bool:
    """Defined by torch: its functions, classes and the methods of ``torch._C.TensorBase``."""
    module = getattr(value, "__module__", None) or ""
    if module.partition(".")[0] == "torch":
        return True
    owner = getattr(value, "__objclass__", None)
    return owner is not None and _is_torch(owner)


def _named_in_its_module(fn: types.FunctionType) -> bool:
    """Whether ``fn`` is its module's attribute of its name, the name a graph node calls it
    by (FX's code names ``module.__name__``). A lambda or a nested function of torch's, such
    as an OpInfo's ``op``, is traced through instead."""
    module = sys.modules.get(fn.__module__)
    return getattr(module, fn.__name__, None) is fn


def _is_builtin(value: Any) -> bool:
    if getattr(value, "__module__", None) in PURE_MODULES or polyfills.stand_in(value):
        return True
    if any(value is native.__new__ for native in V.builtin_subclasses.NATIVE_TYPES[1:]):
        return True  # ``tuple.__new__(cls, items)``: ``builtins`` models it
    return isinstance(value, types.BuiltinFunctionType) and getattr(value, "__self__", None) in (
        builtins,
        math,
        cmath,
        operator,
    )


def is_pure_builtin(value: Any) -> bool:
    """Safe to evaluate at capture time on constants (no I/O, no global state)."""
    if value in (
        print,
        input,
        open,
        exec,
        eval,
        breakpoint,
        compile,
        id,
        globals,
        locals,
        vars,
        delattr,
    ):
        return False
    return _is_builtin(value) or isinstance(
        getattr(value, "__self__", None), (*V.CONSTANT_TYPES, tuple)
    )


def _is_user_object(value: Any) -> bool:
    cls = type(value)
    if dataclasses.is_dataclass(cls):
        return True
    if is_stdlib(cls.__module__) or _is_torch(cls):
        return False
    return hasattr(value, "__dict__") or _has_only_slots(cls)


def _has_only_slots(cls: type) -> bool:
    """A class whose instances keep their attributes in ``__slots__``: every class of its MRO
    but ``object`` declares them."""
    return all("__slots__" in k.__dict__ for k in cls.__mro__[:-1])
