"""Calling compiled Triton kernels: one launcher per kernel, chosen once at load.

``JITFunction.__call__`` binds the arguments, recomputes their specialization and looks
the compiled kernel up on every call: tens of microseconds, more than many of the
kernels it launches. The kernels torchkiln generates have a fixed signature (tensor
pointers, then block sizes as constexprs) and a grid fixed at compile time, so the only
thing that can differ between two calls is whether each pointer is 16-byte aligned,
which Triton specializes on. :class:`LeanLauncher` compiles once per alignment pattern
(``JITFunction.warmup``) and then launches the compiled kernel directly, on the current
CUDA stream: with ``cuLaunchKernel`` where Triton would build a C launcher for it
(``cuda_launch``), else through Triton's launcher. :class:`InterpretedLauncher` keeps the
plain call for Triton's interpreter (CPU tensors, ``TRITON_INTERPRET=1``), where nothing
is compiled.

A kernel of a graph with symbolic sizes also takes the sizes, after the tensors, and is
called as ``(xnumel, *tensors, *sizes)``: :class:`SizedLeanLauncher` and
:class:`SizedInterpretedLauncher` compute its grid at each call. Its size arguments are
``int64`` and unspecialized (``TritonKernel.header``), so one compile per alignment pattern
still serves every call; static kernels keep their fixed grid and launch path.

A graph's kernels compile all at once when it loads (:func:`compile_at_once`), on a pool
of threads, rather than one after the other at their first calls.

Written against Triton 3.6 (the GPU machine's) and 3.9 (pip's): their launchers take every
bound argument, constexprs too, and differ only in how launch hooks are kept.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor

import torch

from torchkiln import counters

from . import cuda_launch, triton_binaries
from .triton_compile_worker import compile_options, record_of

#: Triton specializes a pointer on this divisibility (its ``tt.divisibility`` attribute)
POINTER_ALIGNMENT = 16
#: most kernels compiled at the same time
COMPILE_THREADS = 32


def use_triton_cache(cache_root) -> None:
    """Keep Triton's compiled kernels beside torchkiln's other caches, unless the user
    placed them (``TRITON_CACHE_DIR``), so that a second process loads them from disk."""
    if "TRITON_CACHE_DIR" not in os.environ:
        os.environ["TRITON_CACHE_DIR"] = str(cache_root / "triton")


class InterpretedLauncher:
    """``fn[grid](*tensors, **block_sizes)``: Triton's interpreter runs the kernel in Python."""

    def __init__(self, fn, grid: tuple[int, ...], meta: dict[str, int]):
        self._call = fn[grid]
        self._meta = meta

    def __call__(self, *tensors: torch.Tensor) -> None:
        self._call(*tensors, **self._meta)

    def compile_for(self, tensors: tuple[torch.Tensor, ...]) -> None:
        """Nothing to compile: the interpreter runs the kernel's Python source."""


class SizedInterpretedLauncher(InterpretedLauncher):
    """``fn[grid](*tensors, *sizes, **block_sizes)``, the grid from this call's ``xnumel``."""

    def __init__(self, fn, meta: dict[str, int]):
        self._fn = fn
        self._meta = meta
        self._xblock = meta["XBLOCK"]

    def __call__(self, xnumel: int, *args) -> None:
        self._fn[(-(-xnumel // self._xblock),)](*args, **self._meta)


class LeanLauncher:
    """A compiled kernel called through its launcher, with the grid and block sizes fixed."""

    def __init__(
        self,
        fn,
        grid: tuple[int, ...],
        meta: dict[str, int],
        num_warps: int,
        num_stages: int | None = None,
        sizes: tuple[str, ...] = (),
    ):
        self._fn = fn
        self._grid = grid
        self._meta = meta
        # the size arguments, by name, for compiles: any value compiles the same kernel
        self._sizes = dict.fromkeys(sizes, 2)
        # Triton's default num_stages unless a tuned config names one
        self._options = {"num_warps": num_warps, **compile_options(fn)}
        if num_stages is not None:
            self._options["num_stages"] = num_stages
        self._grid3 = (*grid, 1, 1)[:3]
        self._constexprs = tuple(meta.values())
        self._compiled: dict[tuple[bool, ...], tuple] = {}
        self._started: dict[tuple[bool, ...], object] = {}  # compiles under way
        # Triton's launch hooks (``knobs.runtime``); None until Triton is imported: none can
        # be set before, and a warm start loads its kernels without it (``StoredKernel``)
        self._hooks = _launch_hooks()

    def __call__(self, *tensors: torch.Tensor) -> None:
        pointers = [t.data_ptr() for t in tensors]
        aligned = _alignment(pointers)
        entry = self._compiled.get(aligned)
        if entry is None:
            entry = self._compile(aligned, tensors)
        kernel, direct, run, function, packed, device = entry
        stream = torch._C._cuda_getCurrentRawStream(device)
        hooks = self._hooks if self._hooks is not None else _launch_hooks()
        if direct is not None:
            if hooks is None:
                direct(*self._grid3, stream, pointers)
                return
            enter, leave = hooks.launch_enter_hook, hooks.launch_exit_hook
            # no launch hook set (``_any``, inlined: a call costs every launch)
            if not getattr(enter, "calls", enter) and not getattr(leave, "calls", leave):
                direct(*self._grid3, stream, pointers)
                return
            # a profiler's hooks watch launches: through Triton's launcher
            kernel, run, function, packed = self._through_triton(aligned, tensors)
        self._hooks = hooks
        enter, leave = hooks.launch_enter_hook, hooks.launch_exit_hook
        args = (*tensors, *self._constexprs)
        # a profiler's hooks want the launch's metadata (Triton 3.9 keeps hooks in a chain)
        metadata = kernel.launch_metadata(self._grid, stream, *args) if _any(enter) else None
        run(*self._grid3, stream, function, packed, metadata, enter, leave, *args)

    def start_stored(self, tensors: tuple[torch.Tensor, ...]) -> bool:
        """Find the binary a compile of this kernel for the alignment of ``tensors`` stored
        (``triton_binaries``); whether there is one. The first call with it loads it."""
        aligned = _alignment([t.data_ptr() for t in tensors])
        stored = self._stored(aligned, tensors)
        if stored is not None:
            self._started[aligned] = stored
        return stored is not None

    def start(self, tensors: tuple[torch.Tensor, ...]) -> None:
        """Begin compiling for the alignment of ``tensors`` (in a worker of Triton's
        ``AsyncCompileMode`` when one is active); the first call with it finishes."""
        aligned = _alignment([t.data_ptr() for t in tensors])
        self._started[aligned] = self._warmup(tensors)

    def compile_for(self, tensors: tuple[torch.Tensor, ...]) -> None:
        """Compile and load the kernel for ``tensors`` now (the autotuner does, on a worker
        thread, so that a config that fails to compile or load fails there)."""
        aligned = _alignment([t.data_ptr() for t in tensors])
        if aligned not in self._compiled:
            self._compile(aligned, tensors)

    def job(self, dtypes: tuple[torch.dtype, ...]):
        """The worker job (``triton_workers``) that compiles this kernel for aligned
        pointers of ``dtypes`` into Triton's disk cache."""
        from .triton_workers import compile_job

        return compile_job(
            self._fn,
            dtypes,
            self._grid,
            {**self._meta, **self._sizes},
            self._options["num_warps"],
            self._options.get("num_stages"),
        )

    def _key(self, aligned: tuple[bool, ...], tensors: tuple[torch.Tensor, ...]):
        code = self._fn.fn.__code__
        return triton_binaries.key_of(
            code.co_filename,
            code.co_name,
            tuple(t.dtype for t in tensors),
            aligned,
            {**self._meta, **self._sizes},
            self._options["num_warps"],
            self._options.get("num_stages"),
        )

    def _stored(
        self, aligned: tuple[bool, ...], tensors: tuple[torch.Tensor, ...], through_triton=False
    ):
        return triton_binaries.load(self._key(aligned, tensors), through_triton)

    def _warmup(self, tensors: tuple[torch.Tensor, ...]):
        return self._fn.warmup(
            *tensors, grid=self._grid, **self._options, **self._meta, **self._sizes
        )

    def _compile(self, aligned: tuple[bool, ...], tensors: tuple[torch.Tensor, ...]) -> tuple:
        """Compile for this alignment pattern, or load what a compile of it stored (Triton's
        disk cache makes a repeat cheap either way; the stored binary skips Triton's JIT)."""
        kernel = self._started.pop(aligned, None)
        if kernel is None:
            kernel = self._stored(aligned, tensors) or self._warmup(tensors)
        if hasattr(kernel, "result"):  # an asynchronous compile
            kernel = kernel.result()
        device = tensors[0].device.index
        if isinstance(kernel, cuda_launch.StoredKernel) or cuda_launch.launchable(kernel):
            direct, run = cuda_launch.DirectLaunch(kernel, device), None  # loads the binary
            counters["triton_launch"]["direct"] += 1
        else:
            direct, run = None, kernel.run  # loads the binary and makes Triton's launcher
            counters["triton_launch"]["through_triton"] += 1
            self._hooks = _launch_hooks()  # Triton is imported: its hooks are read as set
        if not triton_binaries.was_loaded(kernel):
            counters["triton_binaries"]["through_jit"] += 1
            triton_binaries.remember(self._key(aligned, tensors), record_of(kernel))
        entry = (kernel, direct, run, kernel.function, kernel.packed_metadata, device)
        self._compiled[aligned] = entry
        return entry

    def _through_triton(self, aligned: tuple[bool, ...], tensors: tuple) -> tuple:
        """``(kernel, run, function, packed)`` that launch the kernel for this alignment
        through Triton's launcher, for launch hooks to watch: a :class:`StoredKernel` is
        exchanged for Triton's ``CompiledKernel`` of it, for good."""
        kernel, direct, _, _, _, device = self._compiled[aligned]
        if isinstance(kernel, cuda_launch.StoredKernel):
            kernel = self._stored(aligned, tensors, through_triton=True) or self._warmup(tensors)
            cuda_launch.load(kernel, device)
            self._compiled[aligned] = (
                kernel, direct, None, kernel.function, kernel.packed_metadata, device
            )  # fmt: skip
        return kernel, cuda_launch.triton_launcher(kernel), kernel.function, kernel.packed_metadata


class SizedLeanLauncher(LeanLauncher):
    """A :class:`LeanLauncher` of a kernel that takes sizes: the grid from each call's
    ``xnumel``, the sizes passed on after the tensors."""

    def __init__(
        self,
        fn,
        grid: tuple[int, ...],
        meta: dict[str, int],
        num_warps: int,
        num_stages: int | None,
        sizes: tuple[str, ...],
    ):
        super().__init__(fn, grid, meta, num_warps, num_stages, sizes)
        self._xblock = meta["XBLOCK"]
        self._tensors = slice(0, -len(sizes))
        self._sizes_at = -len(sizes)

    def __call__(self, xnumel: int, *args) -> None:
        # LeanLauncher.__call__'s steps, inlined with a grid per call: a shared helper would
        # cost every static kernel's launch a Python call more
        tensors = args[self._tensors]
        pointers = [t.data_ptr() for t in tensors]
        aligned = _alignment(pointers)
        entry = self._compiled.get(aligned)
        if entry is None:
            entry = self._compile(aligned, tensors)
        kernel, direct, run, function, packed, device = entry
        stream = torch._C._cuda_getCurrentRawStream(device)
        grid = (-(-xnumel // self._xblock), 1, 1)
        hooks = self._hooks if self._hooks is not None else _launch_hooks()
        if direct is not None:
            if hooks is None:
                pointers += args[self._sizes_at :]
                direct(*grid, stream, pointers)
                return
            enter, leave = hooks.launch_enter_hook, hooks.launch_exit_hook
            if not getattr(enter, "calls", enter) and not getattr(leave, "calls", leave):
                pointers += args[self._sizes_at :]
                direct(*grid, stream, pointers)
                return
            kernel, run, function, packed = self._through_triton(aligned, tensors)
        self._hooks = hooks
        enter, leave = hooks.launch_enter_hook, hooks.launch_exit_hook
        args = (*args, *self._constexprs)
        metadata = kernel.launch_metadata(grid, stream, *args) if _any(enter) else None
        run(*grid, stream, function, packed, metadata, enter, leave, *args)


def _alignment(pointers: list[int]) -> tuple[bool, ...]:
    return tuple(p % POINTER_ALIGNMENT == 0 for p in pointers)


def compile_at_once(
    kernels: list[tuple[object, tuple[torch.dtype, ...], str]],
    in_workers: bool = False,
    jobs: list | None = None,
) -> None:
    """Compile ``(launcher, param dtypes, device)`` kernels together, for aligned pointers
    (what torch allocates). With ``in_workers``, where Triton's compile workers were started
    (``triton_workers``, when a graph's trace began) they compile the kernels in parallel
    into Triton's disk cache first, with the worker ``jobs`` given (the configs of kernels
    tuned at their first call): Triton's front end is Python, and on a pool of threads
    it runs one kernel at a time under the GIL. Kernels of a graph from the plan cache are
    in Triton's cache already: the workers, maybe still starting, would only delay them.
    Then a pool of threads under Triton's ``AsyncCompileMode`` loads them (or compiles them,
    without workers). Interpreted kernels compile nothing; a call with unaligned pointers
    compiles its own."""
    lean = [
        (launcher, dtypes, device)
        for launcher, dtypes, device in kernels
        if isinstance(launcher, LeanLauncher)
    ]
    from .triton_workers import is_warm, precompile

    if in_workers and is_warm():  # workers compile for the GPU current when they started
        precompile([*(launcher.job(dtypes) for launcher, dtypes, _ in lean), *(jobs or ())])
    if len(lean) < 2:
        return  # nothing to overlap: the first call compiles
    unstored = []
    for launcher, dtypes, device in lean:
        tensors = tuple(torch.empty(1, dtype=d, device=device) for d in dtypes)
        if not launcher.start_stored(tensors):
            unstored.append((launcher, tensors))
    if len(unstored) < 2:
        return  # nothing to overlap: the first call compiles
    from triton import AsyncCompileMode

    workers = min(len(unstored), os.cpu_count() or 1, COMPILE_THREADS)
    with ThreadPoolExecutor(workers) as pool, AsyncCompileMode(pool):
        for launcher, tensors in unstored:
            launcher.start(tensors)


def _launch_hooks():
    """Triton's ``knobs.runtime``, where its launch hooks are set; None while Triton is not
    imported (no hook can be set then)."""
    knobs = sys.modules.get("triton.knobs")
    return None if knobs is None else knobs.runtime


def _any(hook) -> bool:
    """Whether a launch hook is set: ``None`` or a callable before Triton 3.9, a chain after."""
    return bool(getattr(hook, "calls", hook))


def is_interpreted(fn) -> bool:
    """Whether ``fn`` runs in Triton's interpreter (``TRITON_INTERPRET=1``), asked without
    importing Triton: a kernel of a module not imported yet (``UnimportedKernel``) is none."""
    interpreter = sys.modules.get("triton.runtime.interpreter")  # imported where one runs
    return interpreter is not None and isinstance(fn, interpreter.InterpretedFunction)


def launcher_for(
    fn,
    grid: tuple[int, ...],
    meta: dict[str, int],
    num_warps: int,
    num_stages: int | None = None,
    sizes: tuple[str, ...] = (),
):
    """The launcher that fits ``fn``: interpreted under ``TRITON_INTERPRET=1`` (which has no
    warps or stages), lean otherwise; one computing its grid per call where ``fn`` takes
    ``sizes`` (the names of its size arguments)."""
    if is_interpreted(fn):
        return SizedInterpretedLauncher(fn, meta) if sizes else InterpretedLauncher(fn, grid, meta)
    if sizes:
        return SizedLeanLauncher(fn, grid, meta, num_warps, num_stages, sizes)
    return LeanLauncher(fn, grid, meta, num_warps, num_stages)
