"""The one table that maps torch dtypes to ONNX element types and numpy dtypes.

numpy has no bfloat16: ``ml_dtypes`` (which onnx depends on) provides the numpy
type onnx reads and writes bfloat16 initializers with.

The ONNX element types are written as the numbers of ``onnx.TensorProto.DataType``, which
the ONNX IR fixes for good: the runtime binds tensors with them, and a process that loads
its compiled graphs from the plan cache need not import onnx.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from torchkiln.exc import NotImplementedYet

_TORCH_TO_ONNX = {
    torch.float32: 1,  # FLOAT
    torch.float16: 10,  # FLOAT16
    torch.bfloat16: 16,  # BFLOAT16
    torch.float64: 11,  # DOUBLE
    torch.int64: 7,  # INT64
    torch.int32: 6,  # INT32
    torch.int16: 5,  # INT16
    torch.int8: 3,  # INT8
    torch.uint8: 2,  # UINT8
    torch.bool: 9,  # BOOL
}

_TORCH_TO_NUMPY = {
    torch.float32: np.float32,
    torch.float16: np.float16,
    torch.bfloat16: ml_dtypes.bfloat16,
    torch.float64: np.float64,
    torch.int64: np.int64,
    torch.int32: np.int32,
    torch.int16: np.int16,
    torch.int8: np.int8,
    torch.uint8: np.uint8,
    torch.bool: np.bool_,
}

#: Floating-point dtypes narrower than float32: onnxruntime's CPU provider lacks most
#: of their kernels, so graphs run there compute them in float32 (``converter``).
LOW_PRECISION = (torch.bfloat16, torch.float16)


def onnx_dtype(dtype: torch.dtype) -> int:
    """The ``onnx.TensorProto`` element type of a torch dtype."""
    try:
        return _TORCH_TO_ONNX[dtype]
    except KeyError:
        raise NotImplementedYet(
            f"the onnxrt backend does not handle tensors of dtype {dtype} yet; "
            f"supported: {', '.join(str(d) for d in _TORCH_TO_ONNX)}"
        ) from None


def numpy_dtype(dtype: torch.dtype) -> type:
    """The numpy scalar type onnx builds initializers of ``dtype`` from."""
    onnx_dtype(dtype)
    return _TORCH_TO_NUMPY[dtype]


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A CPU copy of ``tensor`` as a numpy array of :func:`numpy_dtype` (bfloat16 too)."""
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(numpy_dtype(torch.bfloat16))
    numpy_dtype(tensor.dtype)
    return tensor.numpy()
