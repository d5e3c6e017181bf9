"""NumPy in traced code: ndarrays are tensors in the graph, NumPy functions are ``torch._numpy``.

``t.numpy()``, ``np.asarray(t)`` and every ``np.*`` call give a ``NumpyArrayVariable``: a
graph tensor that NumPy code reads, indexes and computes with. Its operations become graph
nodes calling ``numpy_call``, which runs the ``torch._numpy`` equivalent (NumPy's semantics,
float64 defaults included, on torch tensors) on plain tensors in and out, so the graph stays
FX code and the disk cache can pickle it. ``torch.from_numpy(a)`` gives the tensor back; an
array that escapes the frame is made a real ``np.ndarray`` after the graph ran.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch._numpy as tnp
from torch._numpy import _dtypes_impl
from torch._numpy import _util as _numpy_util
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from torchkiln.capture.variables import constants, containers, functions, tensors
from torchkiln.capture.variables.base import ValueVariable, VariableTracker
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator
    from torchkiln.capture.variables.tensors import TensorVariable

#: NumPy callables answered at capture time when given constants (their results are constants).
CONSTANT_CLASSES = (np.iinfo, np.finfo, np.dtype)

#: Calls whose 0-d result NumPy gives as a 0-d array; every other 0-d result is a NumPy scalar.
ARRAY_RESULTS = {
    "array", "asarray", "asanyarray", "ascontiguousarray", "copy", "zeros", "ones", "empty",
    "full", "zeros_like", "ones_like", "empty_like", "full_like", "atleast_1d", "atleast_2d",
    "atleast_3d", "ndarray.copy", "ndarray.reshape", "ndarray.astype", "ndarray.view",
    "ndarray.transpose", "ndarray.T", "ndarray.real", "ndarray.imag", "ndarray.squeeze",
    "ndarray.ravel", "ndarray.flatten", "reshape", "transpose", "squeeze", "ravel",
}  # fmt: skip

#: Array attributes that are plain values, read from the tensor's metadata.
METADATA_ATTRS = {"shape", "ndim", "size", "itemsize", "nbytes", "strides"}


def numpy_call(path: str, *args: Any, **kwargs: Any) -> Any:
    """Run ``torch._numpy.<path>`` (``"mean"``, ``"linalg.norm"``, ``"ndarray.T"``) with the
    tensors among the arguments as ndarrays; ndarrays in the result come back as tensors.
    A graph node's target: module level, so FX code and pickles name it."""
    _use_numpy_defaults()
    target: Any = tnp
    for part in path.split("."):
        target = getattr(target, part)
    args, kwargs = _to_ndarrays(args), _to_ndarrays(kwargs)
    with NumpyDefaultFloat():
        if path == "ndarray.__setitem__":
            target(*args, **kwargs)
            return args[0].tensor
        result = target.fget(*args) if isinstance(target, property) else target(*args, **kwargs)
    if result is None:
        raise TypeError(f"numpy.{path} returned None: in-place NumPy calls are not traced")
    return _to_tensors(result)


class NumpyDefaultFloat(TorchFunctionMode):
    """NumPy's float64 (complex128) where torch would take its default dtype (``int_array / 2``,
    ``np.arctan2`` of integers, ``np.logspace``, ``np.asarray(1.5)``): a call that made a
    default-dtype result from no floating operand runs again with its integers (and Python
    floats) as float64, or, with no tensor operand, with ``dtype=float64``. A function mode is
    this thread's alone, where ``torch.set_default_dtype`` would change every thread's tensors
    while the call runs."""

    def __enter__(self):
        _coercing.depth = getattr(_coercing, "depth", 0) + 1
        return super().__enter__()

    def __exit__(self, *exc):
        _coercing.depth -= 1
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        made = _default_dtype_made(func, result, args, kwargs)
        if made is None:
            return result
        if func in _DEFAULT_DTYPE_FACTORIES or not any(
            isinstance(v, torch.Tensor) for v in pytree.tree_leaves((args, kwargs))
        ):
            wide = torch.complex128 if made.is_complex else torch.float64
            return func(*args, **{**kwargs, "dtype": wide})
        condition, operands = (args[:1], args[1:]) if func in _WHERE else ((), args)
        return func(*condition, *_as_float64(operands), **_as_float64(kwargs))


_WHERE = {torch.where, torch.Tensor.where}
#: Factories whose result takes the default dtype whatever their (tensor) operands' dtypes.
_DEFAULT_DTYPE_FACTORIES = {torch.linspace, torch.logspace}
_COMPLEX_OF = {torch.float16: torch.complex32, torch.float32: torch.complex64}


def _default_dtype_made(func: Any, result: Any, args: tuple, kwargs: dict) -> torch.dtype | None:
    """The default dtype (or its complex counterpart) an out-of-place call's result took where
    NumPy would give float64: from a default-dtype factory without ``dtype``, or from no
    operand that is a floating tensor or names a dtype. None where it took none."""
    default = torch.get_default_dtype()
    defaults = {default, _COMPLEX_OF.get(default)}
    if default == torch.float64 or "out" in kwargs or getattr(func, "__name__", "").endswith("_"):
        return None
    made = next(
        (
            r.dtype
            for r in pytree.tree_leaves(result)
            if isinstance(r, torch.Tensor) and r.dtype in defaults
        ),
        None,
    )
    if made is None or func in _DEFAULT_DTYPE_FACTORIES:
        return None if kwargs.get("dtype") is not None else made
    operands = pytree.tree_leaves((args, kwargs))
    if any(
        isinstance(v, torch.dtype) or (isinstance(v, torch.Tensor) and _inexact(v))
        for v in operands
    ):
        return None
    return made


def _inexact(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def _as_float64(value: Any) -> Any:
    """Integer and boolean tensors, and Python floats, as float64 (other values unchanged)."""

    def convert(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and not _inexact(v):
            return v.to(torch.float64)
        if type(v) is float:
            return torch.tensor(v, dtype=torch.float64)
        return v

    return pytree.tree_map(convert, value)


#: How deep this thread is in ``NumpyDefaultFloat`` blocks (0: not in one).
_coercing = threading.local()
_numpy_coerce_to_tensor = _numpy_util._coerce_to_tensor


def _coerce_to_tensor(obj: Any, dtype=None, copy=False, ndmin=0) -> torch.Tensor:
    """``torch._numpy``'s ``np.array(obj)``, which makes a Python ``obj`` a tensor with the
    process-wide default dtype set to float64 around it: inside ``NumpyDefaultFloat`` the object
    becomes a tensor first, the mode giving its floats float64 without that global write."""
    if getattr(_coercing, "depth", 0) and not isinstance(obj, torch.Tensor):
        obj = _numpy_util._try_convert_to_tensor(obj)
    return _numpy_coerce_to_tensor(obj, dtype, copy, ndmin)


_numpy_util._coerce_to_tensor = _coerce_to_tensor


def _use_numpy_defaults() -> None:
    """NumPy's default dtypes (float64, complex128, int64) for ``torch._numpy``, set before its
    first use: left unset, it reads them from ``torch._dynamo``'s config, which is not imported."""
    if _dtypes_impl._default_dtypes is None:
        _dtypes_impl._default_dtypes = _dtypes_impl.DefaultDTypes(
            float_dtype=torch.float64, complex_dtype=torch.complex128, int_dtype=torch.int64
        )


def _to_ndarrays(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return tnp.ndarray(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_ndarrays(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_ndarrays(v) for k, v in value.items()}
    return value


def _to_tensors(value: Any) -> Any:
    if isinstance(value, tnp.ndarray):
        return value.tensor
    if isinstance(value, (list, tuple)):
        return type(value)(_to_tensors(v) for v in value)
    if isinstance(value, (bool, int, float, complex, torch.SymInt, torch.SymFloat)):
        return value
    raise TypeError(f"a NumPy call returned a {type(value).__name__}, which is not traced")


class NumpyArrayVariable(VariableTracker):
    """An ``np.ndarray`` computed in the frame: ``tensor`` holds its data in the graph.
    ``scalar``: a 0-d result that NumPy gives as a scalar (``np.float64``), not an array."""

    def __init__(self, tensor: TensorVariable, scalar: bool = False):
        self.tensor = tensor
        self.scalar = scalar

    def python_type(self) -> type:
        return self.dtype.type if self.scalar else np.ndarray

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(str(self.tensor.example.dtype).removeprefix("torch."))

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name == "dtype":
            return constants.ConstantVariable(self.dtype)
        if name == "strides":
            tensors.guard_tensor_state(tx, self.tensor, "stride")
        if name in METADATA_ATTRS or isinstance(getattr(tnp.ndarray, name, None), property):
            return call(tx, f"ndarray.{name}", [self], {})
        if callable(getattr(tnp.ndarray, name, None)):
            return functions.BoundMethodVariable(self, name)
        raise Unsupported(f"ndarray attribute {name!r} (torch._numpy has no equivalent)")

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        if name == "__setitem__":
            call(tx, "ndarray.__setitem__", [self, *args], {})
            return constants.ConstantVariable(None)
        if not callable(getattr(tnp.ndarray, name, None)):
            raise Unsupported(f"ndarray method {name!r} (torch._numpy has no equivalent)")
        return call(tx, f"ndarray.{name}", [self, *args], kwargs)

    def binary(
        self, tx: Translator, symbol: str, other: VariableTracker, reflected: bool
    ) -> VariableTracker | None:
        from torchkiln.capture.translator import _DUNDER

        inplace = symbol.endswith("=") and symbol not in ("==", "!=", "<=", ">=")
        name = _DUNDER.get(symbol[:-1] if inplace else symbol)
        if name is None or isinstance(other, tensors.TensorVariable):
            return None  # ``ndarray + tensor`` defers to the tensor: not NumPy's rules
        prefix = "i" if inplace else "r" if reflected else ""
        result = call(tx, f"ndarray.__{prefix}{name}__", [self, other], {})
        if not inplace:
            return result
        if getattr(result, "tensor", None) is not self.tensor:
            raise Unsupported(f"ndarray {symbol} did not write into the array")
        return self

    def getitem(self, tx: Translator, index: VariableTracker) -> VariableTracker:
        result = call(tx, "ndarray.__getitem__", [self, index], {})
        key = index.as_python_constant() if index.is_constant() else None
        if isinstance(result, NumpyArrayVariable) and key is not None:
            parts = key if isinstance(key, tuple) else (key,)
            result.scalar &= Ellipsis not in parts  # ``a[...]`` of a 0-d array is an array
        return result

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        if self.tensor.example.dim() == 0:
            raise Unsupported("iterating over a 0-d array")
        return [
            self.getitem(tx, constants.ConstantVariable(i))
            for i in range(self.tensor.example.shape[0])
        ]

    def truth(self, tx: Translator) -> bool:
        raise Unsupported("data-dependent branch on an ndarray value (bool(array))")

    def reconstruct(self, codegen: Any) -> str:
        array = f"{codegen.reconstruct(self.tensor)}.numpy()"
        return f"{array}[()]" if self.scalar else array

    def describe(self) -> str:
        return "a NumPy scalar" if self.scalar else "an ndarray"

    def __repr__(self) -> str:
        return f"NumpyArray({self.tensor!r}, scalar={self.scalar})"


class NumpyFunctionVariable(ValueVariable):
    """A NumPy function or ufunc: called, it is its ``torch._numpy`` equivalent in the graph;
    ``np.iinfo``/``np.finfo``/``np.dtype`` of constants are answered now."""

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        fn = self.value
        if fn in CONSTANT_CLASSES:
            consts = [a.as_python_constant() for a in args]
            kw = {k: v.as_python_constant() for k, v in kwargs.items()}
            return constants.ConstantVariable(fn(*consts, **kw))
        return call(tx, torch_numpy_path(fn), args, kwargs)


def torch_numpy_path(fn: Any) -> str:
    """``fn``'s name under ``torch._numpy`` (``"linalg.norm"``), or Unsupported naming it."""
    module = (getattr(fn, "__module__", None) or "numpy").removeprefix("numpy")
    name = getattr(fn, "__name__", repr(fn))
    path = f"{module.lstrip('.')}.{name}".lstrip(".")
    if path.startswith("random"):
        raise Unsupported(f"numpy.{path}: NumPy's random state is not traced")
    target: Any = tnp
    for part in path.split("."):
        target = getattr(target, part, None)
    if target is None or path.startswith("_"):
        raise Unsupported(f"numpy.{path} (torch._numpy has no equivalent to trace it as)")
    return path


def is_numpy_callable(value: Any) -> bool:
    """Functions and ufuncs of NumPy's public modules, and the classes answered now."""
    if isinstance(value, type):
        return value in CONSTANT_CLASSES
    if not callable(value):  # functions, ufuncs, array-function dispatchers, cython functions
        return False
    module = getattr(value, "__module__", None) or ""
    return module == "numpy" or module.startswith(("numpy.linalg", "numpy.fft", "numpy.random"))


def from_tensor(tx: Translator, vt: TensorVariable) -> NumpyArrayVariable:
    """``t.numpy()``: the array shares the tensor's memory, so it is the same graph value."""
    check_convertible(tx, vt)
    return NumpyArrayVariable(vt)


def check_convertible(tx: Translator, vt: TensorVariable) -> None:
    """Eager NumPy refuses these tensors (it raises): the graph breaks and eager raises it."""
    tensors.guard_tensor_state(tx, vt, "is_conj")
    tensors.guard_tensor_state(tx, vt, "is_neg")
    fake = vt.example
    if fake.requires_grad or fake.device.type != "cpu" or fake.is_conj() or fake.is_neg():
        raise Unsupported(
            "converting a tensor that requires grad, is not on the CPU or has a conj/neg bit "
            "to NumPy (eager NumPy raises: call .detach().cpu().resolve_conj() first)"
        )


def call(tx: Translator, path: str, args: list, kwargs: dict) -> VariableTracker:
    """A graph node running ``numpy_call(path, ...)``; tensors in the result are arrays."""
    args = [_graph_arg(tx, a) for a in args]
    kwargs = {k: _graph_arg(tx, v) for k, v in kwargs.items()}
    result = tx.output.call_op(
        "call_function", numpy_call, [constants.ConstantVariable(path), *args], kwargs
    )
    return _as_arrays(result, path not in ARRAY_RESULTS)


def _graph_arg(tx: Translator, vt: VariableTracker) -> VariableTracker:
    """An argument as the graph takes it: arrays and tensors as tensors, dtypes as names."""
    if isinstance(vt, NumpyArrayVariable):
        return vt.tensor
    if isinstance(vt, tensors.TensorVariable):  # ``np.mean(t)`` reads it as eager NumPy does
        check_convertible(tx, vt)
        return vt
    if isinstance(vt, containers.ListVariable):
        return containers.ListVariable([_graph_arg(tx, i) for i in vt.items])
    if type(vt) is containers.TupleVariable:
        return containers.TupleVariable([_graph_arg(tx, i) for i in vt.items])
    value = vt.value if isinstance(vt, (constants.ConstantVariable, ValueVariable)) else None
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return constants.ConstantVariable(np.dtype(value).name)
    if isinstance(value, np.generic):
        raise Unsupported("a NumPy scalar constant passed to a NumPy function")
    return vt


def _as_arrays(vt: VariableTracker, scalar: bool) -> VariableTracker:
    if isinstance(vt, tensors.TensorVariable):
        return NumpyArrayVariable(vt, scalar and vt.example.dim() == 0)
    if type(vt) in (containers.ListVariable, containers.TupleVariable):
        return type(vt)([_as_arrays(i, scalar) for i in vt.items])
    return vt


def to_tensor(vt: NumpyArrayVariable) -> TensorVariable:
    """``torch.from_numpy(a)``: a new tensor object sharing the array's memory."""
    if vt.scalar:  # eager: from_numpy refuses it, as_tensor copies it
        raise Unsupported("torch.from_numpy/as_tensor of a NumPy scalar")
    return tensors.TensorVariable(vt.tensor.node, vt.tensor.example, vt.tensor.source)
