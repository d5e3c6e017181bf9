"""What generated code calls at run time: the wrapper's helpers and the C++ kernels' bindings.

Apart from the code generators, so that a process that loads compiled graphs from the plan
cache (their wrappers' namespaces name these functions) never imports the generators, the
IR or sympy.
"""

from __future__ import annotations

import ctypes

import torch

from torchkiln.exc import IndexOutOfBounds


def _restride(t: torch.Tensor, stride: tuple[int, ...]) -> torch.Tensor:
    out = torch.empty_strided(t.shape, stride, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


def _view(t: torch.Tensor, size, stride, offset: int) -> torch.Tensor:
    return torch.as_strided(t, size, stride, t.storage_offset() + offset)


def _fix_layout(t: torch.Tensor, stride: tuple[int, ...]) -> torch.Tensor:
    return t if t.stride() == stride else _restride(t, stride)


def bind_kernel(
    lib: ctypes.CDLL, name: str, num_params: int, checks_indices: bool, num_sizes: int = 0
):
    """Kernel ``name`` of ``lib`` as a ctypes function of ``num_params`` pointers and
    ``num_sizes`` int64 sizes."""
    fn = getattr(lib, name)
    fn.argtypes = [ctypes.c_void_p] * num_params + [ctypes.c_int64] * num_sizes
    fn.restype = ctypes.c_int64 if checks_indices else None
    return fn


def raise_index_error(check: int, sizes: tuple[int, ...]) -> None:
    """What a kernel's failed bounds check ``check`` (numbered from 1) means."""
    raise IndexOutOfBounds(
        "index out of bounds: an index tensor holds a value outside the dimension it "
        f"indexes, of size {sizes[check - 1]}"
    )
