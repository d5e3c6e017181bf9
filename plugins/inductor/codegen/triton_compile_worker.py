"""The compiling side of Triton's compile workers (``triton_workers`` is this process's side).

It runs as a script in the zygote and the workers it forks, and imports only Triton and the
standard library: torch took 3.5-5 s to import on the H200 machine (Triton a fraction of a
second), and the generated kernel modules need only Triton (``triton_libdevice``). This
process compiles jobs with the same functions, so that both compute the same cache key.

A job is a tuple ``(path, name, dtypes, grid, meta, num_warps, num_stages)``: kernel
``name`` of the module at ``path``, for aligned pointers to ``dtypes`` (torch's names:
``float32``), with its block sizes (``meta``: name, value pairs) and launch options.
"""

from __future__ import annotations

import base64
import functools
import importlib.abc
import importlib.util
import json
import os
import pickle
import shutil
import socket
import struct
import sys
import tempfile
import time
from typing import Any

Job = tuple  # (path, name, dtypes, grid, meta, num_warps, num_stages)


def compile_options(fn: Any) -> dict[str, bool]:
    """Triton options beyond warps and stages. A kernel that checks run-time indices
    (``@triton.jit(debug=True)``, which keeps ``tl.device_assert``) is compiled without
    Triton's integer-overflow checks, which ``debug`` would also add: they would flag the
    wrap-around of int32 arithmetic that eager allows, and slow the kernel."""
    return {"sanitize_overflow": False} if getattr(fn, "debug", False) else {}


class dtype:  # the name Triton recognizes
    """Stands for ``torch.<name>`` where Triton's ``warmup`` takes a pointer argument's
    dtype: Triton knows a dtype by its class's name and module (``MockTensor.wrap_dtype``)
    and reads the pointer's type off ``str(dtype)``, so a worker compiles without torch.
    Make them with :func:`dtype_named` only: Triton remembers each dtype's type by the
    object's address, as torch's dtypes never die, so one freed and another made at its
    address would be given the first's type."""

    __module__ = "torch"

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    __str__ = __repr__


_DTYPES: dict[str, dtype] = {}


def dtype_named(name: str) -> dtype:
    """The one :class:`dtype` of ``name``, kept for the life of the process."""
    if name not in _DTYPES:
        _DTYPES[name] = dtype(name)
    return _DTYPES[name]


class CompileOnlyDriver:
    """The Triton driver of a worker: the parent's target, device 0 and the null stream,
    which is all ``warmup`` asks of a driver; nothing that needs a CUDA context."""

    def __init__(self, target: Any):
        self.target = target

    def get_current_target(self) -> Any:
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0


def timed_compile(job: Job, cache_dir: str | None, modules: dict[str, Any]) -> tuple:
    """Compile ``job`` into Triton's disk cache (``cache_dir``, else the environment's);
    returns the error's text (None: compiled), the seconds it took and the kernel's
    :func:`record_of` (None where it failed). ``modules``: the kernel modules loaded so
    far, by path."""
    start = time.monotonic()
    record = None
    try:
        record = record_of(_compile(job, cache_dir, modules))
        error = None
    except Exception as e:  # the launcher compiles it again and reports it there
        error = f"{type(e).__name__}: {e}"
    return error, time.monotonic() - start, record


def record_of(kernel: Any) -> dict | None:
    """What ``triton_binaries.load`` needs to load a compiled kernel without Triton's JIT:
    Triton's hash and name of it, and its source's constants, signature and argument names
    (what its launcher reads); for a kernel ``cuda_launch.DirectLaunch`` launches, its
    binary and launch options too, which load it without Triton. None where those are not
    plain values."""
    src = kernel.src
    record = {
        "hash": kernel.hash,
        "name": kernel.name,
        # as pairs: a key may be a tuple (an argument's index path), which JSON keeps as a list
        "constants": [[k, v] for k, v in getattr(src, "constants", {}).items()],
        "signature": [[k, v] for k, v in src.signature.items()],
        "arg_names": list(src.fn.arg_names),
    }
    if launchable(kernel):
        record["direct"] = {
            "binary": base64.b64encode(kernel.kernel).decode(),
            "num_warps": kernel.metadata.num_warps,
            "shared": kernel.metadata.shared,
        }
    try:
        json.dumps(record)
    except (TypeError, ValueError):
        return None
    return record


def _compile(job: Job, cache_dir: str | None, modules: dict[str, Any]) -> Any:
    path, name, dtypes, grid, meta, num_warps, num_stages = job
    if cache_dir is not None:
        os.environ["TRITON_CACHE_DIR"] = cache_dir
    module = modules.get(path)
    if module is None:
        spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules[path] = module
    fn = getattr(module, name)
    options: dict[str, Any] = {"num_warps": num_warps, **compile_options(fn)}
    if num_stages is not None:
        options["num_stages"] = num_stages
    kernel = fn.warmup(*map(dtype_named, dtypes), grid=grid, **options, **dict(meta))
    _build_launcher(kernel)
    return kernel


#: Triton's argument types that fit one 8-byte parameter slot as an integer
_INTEGER_TYPES = frozenset(("i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64"))


def launchable(kernel: Any) -> bool:
    """Whether ``cuda_launch.DirectLaunch`` launches ``kernel`` (a ``CompiledKernel``, or what a
    compile worker returns) where Triton would build a launcher for it: a CUDA kernel of
    pointer and integer arguments, one CTA a program, no scratch memory, no special
    launch."""
    meta = kernel.metadata
    if not _triton_builds_launchers() or getattr(meta.target, "backend", None) != "cuda":
        return False
    if getattr(meta, "num_ctas", 1) != 1 or getattr(meta, "launch_pdl", False):
        return False
    if getattr(meta, "launch_cooperative_grid", False) or getattr(meta, "tensordesc_meta", None):
        return False
    if getattr(meta, "global_scratch_size", 0) or getattr(meta, "profile_scratch_size", 0):
        return False
    return all(
        isinstance(ty, str) and (ty == "constexpr" or ty[0] == "*" or ty in _INTEGER_TYPES)
        for ty in kernel.src.signature.values()
    )


@functools.cache
def _triton_builds_launchers() -> bool:
    """Triton up to 3.6 compiles a C launcher per signature (``make_launcher``)."""
    from triton.backends.nvidia import driver as nvidia

    return hasattr(nvidia, "make_launcher")


def _build_launcher(kernel: Any) -> None:
    """Build the C launcher that Triton up to 3.6 makes for a kernel's signature when the
    parent first loads it (Triton's cache keys it on its source), for a kernel the parent
    can't launch itself (``cuda_launch``). Later Triton launches every kernel through one
    prebuilt launcher: nothing to build."""
    from triton.backends.nvidia import driver as nvidia

    if hasattr(nvidia, "make_launcher") and not launchable(kernel):
        nvidia.CudaLauncher(kernel.src, kernel.metadata)


def write_frame(stream: Any, data: bytes) -> None:
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def read_frame(stream: Any) -> bytes:
    header = stream.read(8)
    if len(header) < 8:
        raise EOFError("the other end closed the connection")
    (size,) = struct.unpack("<Q", header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the other end closed the connection")
    return data


class TorchBlocker(importlib.abc.MetaPathFinder):
    """Makes ``import torch`` fail in the zygote and its workers. Triton 3.6's argument
    specializer imports torch when it first runs, to recognize torch's tensors quickly, and
    goes on without it where the import fails; the workers only ever pass it stand-ins
    (:func:`dtype_named`), which it handles alike either way. Blocked, the zygote is ready
    in about half a second on the H200 machine instead of five."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"{name}: not imported in a Triton compile worker")
        return None


def _zygote() -> None:
    """The zygote's life: warm Triton's compiler, fork the workers, exit."""
    sys.meta_path.insert(0, TorchBlocker())
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver

    target, address, count = pickle.loads(read_frame(sys.stdin.buffer))
    driver.set_active(CompileOnlyDriver(GPUTarget(*target)))
    _warm_up()
    for _ in range(count):
        if os.fork() == 0:
            try:
                _serve(address)
            finally:
                os._exit(0)


def _serve(address: str) -> None:
    """A worker's life: connect, say its pid, then answer each job with ``timed_compile``'s
    result until the parent closes the connection."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(address)
    stream = connection.makefile("rwb")
    write_frame(stream, struct.pack("<Q", os.getpid()))
    modules: dict[str, Any] = {}
    while True:
        try:
            job, cache_dir = pickle.loads(read_frame(stream))
        except (EOFError, OSError):
            return
        write_frame(stream, pickle.dumps(timed_compile(job, cache_dir, modules)))


#: what the zygote compiles before it forks: Triton's imports and its backend's first-use
#: setup are then done for every worker
WARM_UP_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def warm_up(x_ptr, y_ptr, XBLOCK: tl.constexpr):
    offsets = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    x = tl.load(x_ptr + offsets).to(tl.float32)
    tl.store(y_ptr + offsets, tl.exp(x) - tl.sum(x, 0))
"""


def _warm_up() -> None:
    folder = tempfile.mkdtemp(prefix="torchkiln-triton-warm-up-")
    path = os.path.join(folder, "kiln_warm_up.py")
    with open(path, "w") as f:
        f.write(WARM_UP_KERNEL)
    cache_dir = os.environ.get("TRITON_CACHE_DIR")
    try:
        timed_compile(
            (path, "warm_up", ("bfloat16",) * 2, (1,), (("XBLOCK", 128),), 4, None), folder, {}
        )
    finally:
        if cache_dir is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = cache_dir
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    _zygote()
