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

The workers are forked from a zygote process that imported Triton and compiled a first
kernel (this process has a CUDA context: it can't fork); they connect back over a
Unix socket and live as long as this process. One that dies stops them all. :func:`warm_pool`
starts the zygote when the capture of a frame with CUDA tensors begins (the plugin's
``prepare``), or else when a CUDA graph's compile begins, so that its start-up overlaps the
capture, tracing and lowering before the first kernel is ready; until workers connect, this
process compiles the jobs itself, and it keeps taking jobs alongside them after.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import dataclasses
import os
import pickle
import queue
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

import torch

from torchkiln import counters, logs

from ..host import usable_cores
from . import triton_binaries
from .triton_compile_worker import read_frame, timed_compile, write_frame

#: most processes compiling at once, this one included, unless ``WORKERS_ENV`` says
MAX_WORKERS = 16
#: the environment variable that sets how many processes compile at once, this one
#: included (1: this process alone, no workers)
WORKERS_ENV = "TORCHKILN_COMPILE_WORKERS"
#: threads of this process that compile jobs too: Triton's front end holds the GIL, but
#: ptxas and the C launcher's gcc, about half of a compile on the H200 machine, run as
#: subprocesses that other threads' front ends overlap
LOCAL_THREADS = 3
#: how often a thread waiting for a worker to connect checks whether jobs are left
ACCEPT_POLL_S = 0.05


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


_pool: _Pool | None = None
_stopped = False
_pool_lock = threading.Lock()
#: the thread that sets Triton's driver up (:func:`warm_pool`), once a process
_driver_set_up: threading.Thread | None = None


def precompile(jobs: list[CompileJob]) -> None:
    """Compile ``jobs`` in worker processes for the current GPU's target, filling Triton's
    disk cache; returns when all are done or failed. Each worker takes the next job as it
    finishes one, and so do ``LOCAL_THREADS`` threads here, this one included: they compile
    from the start, while the workers may still be starting."""
    if len(jobs) < 2:
        return  # nothing to overlap: the caller's own compile is as quick
    pool = _started_pool()
    if pool is None:
        return
    todo = queue.SimpleQueue()
    for job in jobs:
        todo.put(job)
    cache_dir = os.environ.get("TRITON_CACHE_DIR")
    device = torch.cuda.current_device() if torch.cuda.is_initialized() else None
    with concurrent.futures.ThreadPoolExecutor(len(pool.workers) + LOCAL_THREADS - 1) as threads:
        remote = [threads.submit(worker.drain, todo, cache_dir) for worker in pool.workers]
        local = [threads.submit(_drain_here, todo, device) for _ in range(LOCAL_THREADS - 1)]
        here = [_drain_here(todo, device), *(f.result() for f in local)]
        results = here + [f.result() for f in remote]
    compiled, failed, seconds = map(sum, zip(*results))
    counters["triton_workers"]["compiled"] += compiled
    counters["triton_workers"]["compiled_here"] += sum(r[0] for r in here)
    counters["triton_workers"]["failed"] += failed
    counters["triton_workers"]["compile_ms"] += round(seconds * 1e3)
    if pool.broken():
        _stop("a worker process died")


def warm_pool(gpu: torch.device | None = None) -> None:
    """Start the workers now, compiling for ``gpu`` (default: the current GPU); milliseconds
    here: the zygote warms Triton on its own, then forks them. Triton's driver in this
    process is set up in the background meanwhile (:func:`_set_up_driver`)."""
    with torch.cuda.device(gpu) if gpu is not None else contextlib.nullcontext():
        _started_pool()
    global _driver_set_up
    with _pool_lock:
        if _driver_set_up is None:
            _driver_set_up = threading.Thread(
                target=_set_up_driver, name="torchkiln-triton-driver", daemon=True
            )
            _driver_set_up.start()


def _set_up_driver() -> None:
    """Import Triton and make its driver, as this process's first kernel compile or load
    would: Triton's CUDA driver builds its C utilities with gcc where its cache has none
    (0.25-0.37 s on the CPU VM, in every cold compile), a subprocess that runs beside the
    capture here instead of after it."""
    try:
        from triton.runtime import driver

        driver.active.get_current_target()
    except Exception as e:  # the first compile meets it again, and reports it there
        logs.log.debug("setting Triton's driver up in the background: %s", e)


def is_warm() -> bool:
    """Whether workers were started (:func:`warm_pool`) and none has failed."""
    return _pool is not None


def _started_pool() -> _Pool | None:
    """The pool, started on first use; none once stopped, with one core, or without
    ``fork``."""
    global _pool
    with _pool_lock:
        count = _compiling_processes() - 1  # this process compiles too
        if _pool is None and not _stopped and count > 0 and hasattr(os, "fork"):
            try:
                _pool = _Pool(triton_binaries.current_target(), count)
            except OSError as e:  # no Unix socket here (a temporary folder's path too long)
                logs.log.warning("Triton compile workers: not started (%s)", e)
        return _pool


def _compiling_processes() -> int:
    """How many processes compile at once, this one included: ``$TORCHKILN_COMPILE_WORKERS``,
    else one per usable core, at most :data:`MAX_WORKERS`."""
    text = os.environ.get(WORKERS_ENV, "").strip()
    if not text:
        return min(MAX_WORKERS, usable_cores())
    if not text.isdigit() or int(text) < 1:
        raise ValueError(
            f"${WORKERS_ENV} must be a whole number of processes, 1 or more (1: compile in "
            f"this process alone), got {text!r}"
        )
    return int(text)


def _stop(why: str) -> None:
    """Stop the workers: later compiles run in this process, as without them."""
    global _pool, _stopped
    logs.log.warning("Triton compile workers: %s; compiling in this process from now on", why)
    with _pool_lock:
        if _pool is not None:
            _pool.close()
        _pool, _stopped = None, True


def _drain_here(todo: queue.SimpleQueue, device: int | None) -> tuple[int, int, float]:
    """Compile jobs from ``todo`` in this thread until it is empty, for CUDA ``device``'s
    target (this process's driver asks the thread's current device); returns (compiled,
    failed, seconds spent compiling)."""
    compiled = failed = 0
    seconds = 0.0
    modules: dict[str, Any] = {}
    on_device = torch.cuda.device(device) if device is not None else contextlib.nullcontext()
    with on_device:
        arch = triton_binaries.current_arch()
        while True:
            try:
                job = todo.get_nowait()
            except queue.Empty:
                return compiled, failed, seconds
            error, took, record = timed_compile(dataclasses.astuple(job), None, modules)
            if error is None:
                compiled += 1
                triton_binaries.remember(triton_binaries.key_of_job(job, arch), record)
            else:
                failed += 1
                logs.artifact("output_code", "a Triton compile failed: %s", error)
            seconds += took


class _Pool:
    """The zygote (``triton_compile_worker.py``, run as a script): it imports Triton once
    (and never torch: ``TorchBlocker``), compiles a kernel to warm Triton's compiler, then
    forks ``count`` workers that connect back to a Unix socket of this process.

    A plain subprocess, not ``multiprocessing``: its spawned children run the user's main
    script again, which a script without an ``if __name__ == "__main__"`` guard can't bear.
    Forked from the zygote, which has no CUDA context, the workers share its imports and its
    warm compiler: 16 of them are ready in a third of a second, where 16 processes importing
    torch at once took 4-5 s on the H200 machine, and each one's first compile 0.6 s.
    """

    def __init__(self, target: tuple[str, int, int], count: int):
        self.arch = target[1]  # what the workers compile for
        self._folder = tempfile.mkdtemp(prefix="torchkiln-triton-workers-")
        atexit.register(shutil.rmtree, self._folder, ignore_errors=True)
        address = os.path.join(self._folder, "socket")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(address)
        self.listener.listen(count)
        self.listener.settimeout(ACCEPT_POLL_S)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        script = os.path.join(os.path.dirname(__file__), "triton_compile_worker.py")
        # run by path, not ``-m``: importing this package would import torch (seconds)
        run = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"
        self.zygote = subprocess.Popen(  # stdout is this process's output alone
            [sys.executable, "-c", run, script],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            env=env,
        )
        write_frame(self.zygote.stdin, pickle.dumps((target, address, count)))
        self.zygote.stdin.close()
        self.workers = [_Worker(self) for _ in range(count)]

    def failed_to_start(self) -> bool:
        """Whether the zygote exited with an error (it exits with 0 once it has forked)."""
        return self.zygote.poll() not in (None, 0)

    def broken(self) -> bool:
        return self.failed_to_start() or any(w.died for w in self.workers)

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
        self.listener.close()
        if self.zygote.poll() is None:
            self.zygote.kill()
        self.zygote.wait()
        shutil.rmtree(self._folder, ignore_errors=True)


class _Worker:
    """This process's end of one forked worker, fed pickled jobs through its connection,
    which it takes from the pool's socket when it first has a job to give."""

    def __init__(self, pool: _Pool):
        self._pool = pool
        self._stream: Any = None
        self._pid: int | None = None
        self._lock = threading.Lock()
        self.died = False

    def drain(self, todo: queue.SimpleQueue, cache_dir: str | None) -> tuple[int, int, float]:
        """Compile jobs from ``todo`` until it is empty; returns (compiled, failed, seconds
        spent compiling). Two threads compiling graphs at once share the worker, a job at a
        time."""
        compiled = failed = 0
        seconds = 0.0
        while True:
            with self._lock:
                if self.died or not self._connected(todo):
                    break
                try:
                    job = todo.get_nowait()
                except queue.Empty:
                    break
                try:
                    write_frame(self._stream, pickle.dumps((dataclasses.astuple(job), cache_dir)))
                    error, took, record = pickle.loads(read_frame(self._stream))
                except (OSError, EOFError, pickle.UnpicklingError):
                    self.died = True
                    todo.put(job)  # another worker, or this process, compiles it
                    break
            if error is None:
                compiled += 1
                triton_binaries.remember(triton_binaries.key_of_job(job, self._pool.arch), record)
            else:
                failed += 1
                logs.artifact("output_code", "a Triton compile failed in a worker: %s", error)
            seconds += took
        return compiled, failed, seconds

    def _connected(self, todo: queue.SimpleQueue) -> bool:
        """Whether this worker is connected, waiting for it while jobs are left."""
        while self._stream is None:
            if todo.empty() or self._pool.failed_to_start():
                return False
            try:
                connection, _ = self._pool.listener.accept()
            except TimeoutError:
                continue
            except OSError:  # the pool was closed
                return False
            connection.settimeout(None)
            self._stream = connection.makefile("rwb")
            try:
                (self._pid,) = struct.unpack("<Q", read_frame(self._stream))
            except (OSError, EOFError):  # it died as it started
                self.died = True
                return False
        return True

    def close(self) -> None:
        if self._pid is not None:
            with contextlib.suppress(OSError):
                os.kill(self._pid, signal.SIGKILL)
        if self._stream is not None:
            self._stream.close()
