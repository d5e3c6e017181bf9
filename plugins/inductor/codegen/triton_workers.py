"""Compiling Triton kernels in worker processes, into Triton's disk cache.

Triton's compiler is mostly Python (the front end that turns a kernel's AST into IR, the
pass pipelines' drivers), so compiles on a pool of threads run one at a time under the
GIL: on the H100 machine, the 528 candidate configs that max-autotune built for mlp's
training step took 110 s of its 127 s cold compile. Worker processes compile in parallel.

A worker compiles a job (a kernel of a generated module, its argument dtypes and launch
options) with ``JITFunction.warmup``, exactly as this process's launcher will, so both
compute the same cache key: the worker fills Triton's disk cache
(``TRITON_CACHE_DIR``), and this process's compile of the same job then only loads it.
Triton up to 3.6 also builds a C launcher per kernel signature with the host's C compiler
when a kernel is first loaded (0.1-1 s each, one at a time in this process); the worker
builds it too, into the same cache.
Workers never touch the GPU: they compile for the target this process reports, through a
compile-only Triton driver (no CUDA context, no device memory). A job that fails in a
worker costs nothing but the time: this process compiles it itself and reports the
failure where it always did.

Workers are plain subprocesses (not forked: this process has a CUDA context), kept for the
life of the process; one that dies stops them all. Each imports torch and Triton as it
starts (seconds): :func:`warm_pool` starts them when a CUDA graph's compile begins, so that
their start overlaps the tracing and lowering before the first kernel is ready.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from torchkiln import counters, logs

from .triton_launch import compile_options

#: most worker processes (each imports torch and Triton once)
MAX_WORKERS = 16


@dataclass(frozen=True)
class CompileJob:
    """One compile: kernel ``name`` of the module at ``path``, for pointer arguments of
    ``dtypes`` (aligned, as torch allocates), with its block sizes and launch options."""

    path: str
    name: str
    dtypes: tuple[str, ...]  # torch dtype names: ``float32``
    grid: tuple[int, ...]
    meta: tuple[tuple[str, int], ...]
    num_warps: int
    num_stages: int | None


def compile_job(
    fn: Any,
    dtypes: tuple,
    grid: tuple[int, ...],
    meta: dict[str, int],
    num_warps: int,
    num_stages: int | None,
) -> CompileJob:
    """The job that compiles JIT function ``fn`` (of a generated module) as a launcher
    with these settings compiles it for aligned tensors of ``dtypes``."""
    code = fn.fn.__code__
    names = tuple(str(d).removeprefix("torch.") for d in dtypes)
    return CompileJob(
        code.co_filename, code.co_name, names, grid, tuple(meta.items()), num_warps, num_stages
    )


_pool: list[_Worker] | None = None
_stopped = False
_pool_lock = threading.Lock()


def precompile(jobs: list[CompileJob]) -> None:
    """Compile ``jobs`` in worker processes for the current GPU's target, filling Triton's
    disk cache; returns when all are done or failed (each worker takes the next job as it
    finishes one)."""
    if len(jobs) < 2:
        return  # nothing to overlap: the caller's own compile is as quick
    workers = _workers()
    if not workers:
        return
    todo = queue.SimpleQueue()
    for job in jobs:
        todo.put(job)
    cache_dir = os.environ.get("TRITON_CACHE_DIR")
    with concurrent.futures.ThreadPoolExecutor(len(workers)) as feeders:
        results = feeders.map(lambda worker: worker.drain(todo, cache_dir), workers)
        compiled, failed, seconds = map(sum, zip(*results, strict=True))
    counters["triton_workers"]["compiled"] += compiled
    counters["triton_workers"]["failed"] += failed
    counters["triton_workers"]["compile_ms"] += round(seconds * 1e3)
    if any(not worker.alive for worker in workers):
        _stop("a worker process died")


def warm_pool() -> None:
    """Start the workers now (milliseconds: they import torch and Triton on their own)."""
    _workers()


def is_warm() -> bool:
    """Whether workers were started (:func:`warm_pool`) and none has failed."""
    return bool(_pool)


def _workers() -> list[_Worker]:
    """The workers, started on first use; none once stopped or where there is one core."""
    global _pool
    with _pool_lock:
        if _pool is None and not _stopped:
            from triton.runtime import driver

            count = min(MAX_WORKERS, os.cpu_count() or 1)
            target = pickle.dumps(driver.active.get_current_target())
            _pool = [_Worker(target) for _ in range(count)] if count > 1 else []
        return _pool or []


def _stop(why: str) -> None:
    """Stop the workers: later compiles run in this process, as without them."""
    global _pool, _stopped
    logs.log.warning("Triton compile workers: %s; compiling in this process from now on", why)
    with _pool_lock:
        for worker in _pool or []:
            worker.close()
        _pool, _stopped = None, True


class _Worker:
    """One worker process (``python -m`` this module), fed pickled jobs through a pipe.

    A plain subprocess, not ``multiprocessing``: its spawned children run the user's main
    script again, which a script without an ``if __name__ == "__main__"`` guard can't bear.
    """

    def __init__(self, target: bytes):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        self.alive = True
        self._send(target)

    def drain(self, todo: queue.SimpleQueue, cache_dir: str | None) -> tuple[int, int, float]:
        """Compile jobs from ``todo`` until it is empty; returns (compiled, failed, seconds
        spent compiling)."""
        compiled = failed = 0
        seconds = 0.0
        while self.alive:
            try:
                job = todo.get_nowait()
            except queue.Empty:
                break
            try:
                self._send(pickle.dumps((job, cache_dir)))
                error, took = pickle.loads(self._receive())
            except (OSError, EOFError, pickle.UnpicklingError):
                self.alive = False
                todo.put(job)  # another worker, or this process, compiles it
                break
            if error is None:
                compiled += 1
            else:
                failed += 1
                logs.artifact("output_code", "a Triton compile failed in a worker: %s", error)
            seconds += took
        return compiled, failed, seconds

    def close(self) -> None:
        self.alive = False
        self.process.kill()
        self.process.wait()

    def _send(self, data: bytes) -> None:
        self.process.stdin.write(struct.pack("<Q", len(data)) + data)
        self.process.stdin.flush()

    def _receive(self) -> bytes:
        return _read_frame(self.process.stdout)


def _read_frame(stream: Any) -> bytes:
    header = stream.read(8)
    if len(header) < 8:
        raise EOFError("the other end closed the pipe")
    (size,) = struct.unpack("<Q", header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the other end closed the pipe")
    return data


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


def _serve() -> None:
    """A worker's loop: the target, then jobs; each answered with None or the error's text,
    and the seconds it took."""
    # imported before the first job (torch alone takes seconds), while the parent traces
    import torch  # noqa: F401
    import triton.compiler  # noqa: F401
    from triton.runtime import driver

    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    driver.set_active(CompileOnlyDriver(pickle.loads(_read_frame(requests))))
    modules: dict[str, Any] = {}
    while True:
        try:
            job, cache_dir = pickle.loads(_read_frame(requests))
        except EOFError:
            return
        start = time.monotonic()
        try:
            _compile(job, cache_dir, modules)
            error = None
        except Exception as e:  # the parent compiles it itself and reports it there
            error = f"{type(e).__name__}: {e}"
        data = pickle.dumps((error, time.monotonic() - start))
        replies.write(struct.pack("<Q", len(data)) + data)
        replies.flush()


def _compile(job: CompileJob, cache_dir: str | None, modules: dict[str, Any]) -> None:
    """In a worker: compile ``job`` into Triton's disk cache."""
    import torch

    if cache_dir is not None:
        os.environ["TRITON_CACHE_DIR"] = cache_dir
    module = modules.get(job.path)
    if module is None:
        spec = importlib.util.spec_from_file_location(os.path.basename(job.path)[:-3], job.path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules[job.path] = module
    fn = getattr(module, job.name)
    options: dict[str, Any] = {"num_warps": job.num_warps, **compile_options(fn)}
    if job.num_stages is not None:
        options["num_stages"] = job.num_stages
    dtypes = [getattr(torch, d) for d in job.dtypes]
    kernel = fn.warmup(*dtypes, grid=job.grid, **options, **dict(job.meta))
    _build_launcher(kernel)


def _build_launcher(kernel: Any) -> None:
    """Build the C launcher that Triton up to 3.6 makes for a kernel's signature when the
    parent first loads it (Triton's cache keys it on its source). Later Triton launches
    every kernel through one prebuilt launcher: nothing to build."""
    from triton.backends.nvidia import driver as nvidia

    if hasattr(nvidia, "make_launcher"):
        nvidia.CudaLauncher(kernel.src, kernel.metadata)


if __name__ == "__main__":
    _serve()
