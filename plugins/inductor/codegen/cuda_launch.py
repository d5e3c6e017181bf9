"""Launching compiled Triton kernels with the CUDA driver's ``cuLaunchKernel``, through ctypes.

Triton up to 3.6 builds a C launcher for each kernel signature with the host's C compiler
when a kernel is first loaded (0.15-0.26 s a signature on the CPU VM, about as long as
compiling the kernel; a cold compile's workers built one beside each kernel). torch's
inductor launches its kernels through a launcher built into torch instead. A kernel
torchkiln generates needs nothing of what Triton's launcher adds (tensor descriptors,
thread-block clusters, cooperative grids, scratch memory): its arguments are device
pointers and integers, so :class:`DirectLaunch` fills one parameter buffer and calls
``cuLaunchKernel`` itself, with nothing to build. Kernels it can't take
(:func:`launchable`), and every kernel where Triton's launchers need no build (Triton 3.7
and later launch all kernels through one prebuilt launcher), keep Triton's.

A kernel it launches is kept with its binary in torchkiln's binary index
(``triton_binaries``), from where a later process loads it as a :class:`StoredKernel`, with
the driver's own calls: a warm start never imports Triton (0.1 s of mlp's warm first step
on the H200, most of it Triton's ``@jit`` functions reading their sources as it imports).
"""

from __future__ import annotations

import ctypes
import functools
import threading
from types import SimpleNamespace
from typing import Any

from .triton_compile_worker import launchable

__all__ = ["DirectLaunch", "StoredKernel", "launchable", "triton_launcher"]

_MASK64 = (1 << 64) - 1
#: ``CUDA_ERROR_INVALID_CONTEXT``: no context is current on the calling thread
_INVALID_CONTEXT = 201
# the CUDA driver's attribute numbers (cuda.h) that loading a kernel reads and sets
_MAX_THREADS_PER_BLOCK, _SHARED_SIZE_BYTES, _LOCAL_SIZE_BYTES, _NUM_REGS = 0, 1, 3, 4
_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
_PREFER_SHARED = 1
#: shared memory a kernel may use without asking for more (``cuFuncSetAttribute``)
_DEFAULT_SHARED = 48 * 1024


class StoredKernel:
    """A compiled kernel that :class:`DirectLaunch` launches, as torchkiln's binary index
    keeps it (``triton_binaries``): its name, binary (a cubin), launch options and argument
    types: what ``CompiledKernel`` gives a launch, without Triton. :meth:`load` loads it
    as Triton's ``load_binary`` does."""

    def __init__(self, name: str, binary: bytes, num_warps: int, shared: int, signature: dict):
        self.name = name
        self.kernel = binary
        self.metadata = SimpleNamespace(num_warps=num_warps, shared=shared)
        self.src = SimpleNamespace(signature=signature)
        self.module: int | None = None
        self.function: int | None = None
        self.packed_metadata = None  # Triton's launcher's: this kernel launches directly

    def load(self, device: int) -> None:
        """Load the binary on ``device`` (its primary context made current on this thread
        where none is) and allow it the shared memory it uses; raises RuntimeError where
        the device can't run it."""
        cuda = _driver()
        current = ctypes.c_void_p()
        _check(cuda.cuCtxGetCurrent(ctypes.byref(current)), "finding the current context")
        if not current.value:
            _make_context_current(device)
        module, function = ctypes.c_void_p(), ctypes.c_void_p()
        _check(cuda.cuModuleLoadData(ctypes.byref(module), self.kernel), f"loading {self.name}")
        _check(
            cuda.cuModuleGetFunction(ctypes.byref(function), module, self.name.encode()),
            f"finding {self.name} in its binary",
        )
        threads = _function_attribute(function, _MAX_THREADS_PER_BLOCK)
        if self.metadata.num_warps * 32 > threads:
            raise RuntimeError(
                f"Triton kernel {self.name} needs {self.metadata.num_warps * 32} threads a "
                f"block, GPU {device} runs it with {threads} at most"
            )
        shared_optin = _device_attribute(device, _MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        if self.metadata.shared > shared_optin:
            raise RuntimeError(
                f"Triton kernel {self.name} needs {self.metadata.shared} bytes of shared "
                f"memory, GPU {device} has {shared_optin} a block"
            )
        if self.metadata.shared > _DEFAULT_SHARED and shared_optin > _DEFAULT_SHARED:
            _check(cuda.cuFuncSetCacheConfig(function, _PREFER_SHARED), "preferring shared memory")
            static = _function_attribute(function, _SHARED_SIZE_BYTES)
            _check(
                cuda.cuFuncSetAttribute(
                    function, _MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_optin - static
                ),
                f"allowing {self.name} its shared memory",
            )
        self.module, self.function = module.value, function.value


class DirectLaunch:
    """One loaded kernel, launched by ``(grid_x, grid_y, grid_z, stream, values)``: the
    values of its non-constexpr arguments in order (pointers as integers)."""

    def __init__(self, kernel: Any, device: int):
        load(kernel, device)
        self._name = kernel.name
        self._device = device
        self._function = ctypes.c_void_p(kernel.function)
        self._threads = kernel.metadata.num_warps * 32
        self._shared = kernel.metadata.shared
        count = sum(ty != "constexpr" for ty in kernel.src.signature.values())
        self._count = count
        # a slot per argument, then Triton's two scratch pointers (null: none is used)
        self._slots = (ctypes.c_uint64 * (count + 2))()
        size = ctypes.sizeof(ctypes.c_uint64)
        base = ctypes.addressof(self._slots)
        self._params = (ctypes.c_void_p * (count + 2))(*(base + i * size for i in range(count + 2)))
        self._launch = _driver().cuLaunchKernel
        self._stream_handle, self._stream = 0, ctypes.c_void_p(0)
        # the parameter buffer is shared by the calls: one fills it and launches at a time
        self._lock = threading.Lock()

    def __call__(self, grid_x: int, grid_y: int, grid_z: int, stream: int, values) -> None:
        if not (grid_x and grid_y and grid_z):
            return  # nothing to run, as Triton's launcher skips it
        with self._lock:
            try:
                self._slots[: self._count] = values
            except OverflowError:  # a negative integer argument: its two's complement
                self._slots[: self._count] = [v & _MASK64 for v in values]
            except ValueError:  # ctypes: "Can only assign sequence of same size"
                raise TypeError(
                    f"Triton kernel {self._name} takes {self._count} pointer and integer "
                    f"arguments, was given {len(values)}"
                ) from None
            if stream != self._stream_handle:  # kept as ctypes passes it: 0.1 us a call less
                self._stream_handle, self._stream = stream, ctypes.c_void_p(stream)
            stream = self._stream
            result = self._launch(
                self._function, grid_x, grid_y, grid_z, self._threads, 1, 1,
                self._shared, stream, self._params, None,
            )  # fmt: skip
            if result == _INVALID_CONTEXT:  # a thread that made no CUDA call yet
                _make_context_current(self._device)
                result = self._launch(
                    self._function, grid_x, grid_y, grid_z, self._threads, 1, 1,
                    self._shared, stream, self._params, None,
                )  # fmt: skip
        if result:
            raise RuntimeError(f"launching Triton kernel {self._name}: {_error_text(result)}")


def load(kernel: Any, device: int) -> None:
    """Load ``kernel``'s binary on ``device``, as ``CompiledKernel._init_handles`` does but
    without building Triton's launcher; raises Triton's ``OutOfResources`` as it does (a
    :class:`StoredKernel` loads itself)."""
    if kernel.module is not None:
        return
    if isinstance(kernel, StoredKernel):
        kernel.load(device)
        return
    from triton.runtime import driver
    from triton.runtime.errors import OutOfResources

    meta = kernel.metadata
    utils = driver.active.utils
    max_shared = utils.get_device_properties(device)["max_shared_mem"]
    if meta.shared > max_shared:
        raise OutOfResources(meta.shared, max_shared, "shared memory")
    from triton import knobs

    hooks = knobs.runtime
    if hooks.kernel_load_start_hook is not None:
        hooks.kernel_load_start_hook(
            kernel.module, kernel.function, kernel.name, kernel.metadata_group, kernel.hash
        )
    loaded = utils.load_binary(kernel.name, kernel.kernel, meta.shared, device)
    kernel.module, kernel.function, kernel.n_regs, kernel.n_spills, kernel.n_max_threads = loaded
    if meta.num_warps * 32 > kernel.n_max_threads:
        raise OutOfResources(meta.num_warps * 32, kernel.n_max_threads, "threads")
    if hooks.kernel_load_end_hook is not None:
        hooks.kernel_load_end_hook(
            kernel.module, kernel.function, kernel.name, kernel.metadata_group, kernel.hash
        )


def triton_launcher(kernel: Any) -> Any:
    """Triton's own launcher of a kernel :func:`load` loaded (``CompiledKernel.run`` is None
    then: its handles are set): for launches that a profiler's launch hooks watch."""
    if kernel._run is None:
        from triton.runtime import driver

        kernel._run = driver.active.launcher_cls(kernel.src, kernel.metadata)
    return kernel._run


@functools.cache
def _driver() -> ctypes.CDLL:
    """The CUDA driver. ``cuLaunchKernel`` has no declared argument types: converting
    eleven arguments by them took 2.0 us a call on the CPU VM, 0.9 us without. Its callers
    pass handles and pointers as ``c_void_p`` and the grid's sizes, block size and shared
    memory as Python integers, which ctypes passes as C ints (below 2**31: CUDA's limits)."""
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuLaunchKernel.restype = ctypes.c_int
    cuda.cuDevicePrimaryCtxRetain.argtypes = [ctypes.c_void_p, ctypes.c_int]
    cuda.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
    cuda.cuCtxGetCurrent.argtypes = [ctypes.c_void_p]
    cuda.cuModuleLoadData.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    cuda.cuModuleGetFunction.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p]
    cuda.cuFuncGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    cuda.cuFuncSetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    cuda.cuFuncSetCacheConfig.argtypes = [ctypes.c_void_p, ctypes.c_int]
    cuda.cuDeviceGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    cuda.cuGetErrorString.restype = ctypes.c_int
    cuda.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    return cuda


def _function_attribute(function: ctypes.c_void_p, attribute: int) -> int:
    value = ctypes.c_int()
    _check(
        _driver().cuFuncGetAttribute(ctypes.byref(value), attribute, function),
        "reading a kernel's attribute",
    )
    return value.value


def _device_attribute(device: int, attribute: int) -> int:
    value = ctypes.c_int()
    _check(
        _driver().cuDeviceGetAttribute(ctypes.byref(value), attribute, device),
        "reading the GPU's attribute",
    )
    return value.value


def _check(result: int, doing: str) -> None:
    if result:
        raise RuntimeError(f"{doing}: {_error_text(result)}")


def _make_context_current(device: int) -> None:
    """Make ``device``'s primary context current on this thread, as Triton's launcher does
    before each launch (and torch's first CUDA call on a thread)."""
    cuda = _driver()
    handle, context = ctypes.c_int(), ctypes.c_void_p()
    for call, *args in (
        (cuda.cuDeviceGet, ctypes.byref(handle), device),
        (cuda.cuDevicePrimaryCtxRetain, ctypes.byref(context), handle),
        (cuda.cuCtxSetCurrent, context),
    ):
        if result := call(*args):
            raise RuntimeError(f"making GPU {device}'s context current: {_error_text(result)}")


def _error_text(result: int) -> str:
    text = ctypes.c_char_p()
    if _driver().cuGetErrorString(result, ctypes.byref(text)) == 0 and text.value:
        return f"CUDA error {result}: {text.value.decode()}"
    return f"CUDA error {result}"
