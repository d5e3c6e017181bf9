"""Compiling a graph's Triton kernels all at once, on threads (no GPU: a stand-in kernel)."""

import inspect
import threading
import time

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed")

from torchkiln_inductor.codegen.triton_launch import LeanLauncher, compile_at_once


class SlowKernel:
    """A stand-in ``JITFunction``: ``warmup`` takes 0.2 s, in a worker when Triton's
    ``AsyncCompileMode`` is active, as a real one does (it records where it ran)."""

    def __init__(self):
        self.compiled_on: list[str] = []
        self.fn = self.warmup  # what a compile job names the kernel by (its code object)

    def warmup(self, *tensors, grid, num_warps, **meta):
        from triton.runtime._async_compile import active_mode

        def compile_now():
            time.sleep(0.2)
            self.compiled_on.append(threading.current_thread().name)
            return "compiled kernel"

        mode = active_mode.get()
        if mode is None:
            return compile_now()
        # Triton 3.6 takes a finalizer, 3.9 a finalizer and a cleanup: no-ops here, as many
        # as this Triton's ``submit`` takes
        hooks = len(inspect.signature(mode.submit).parameters) - 2
        return mode.submit(id(self), compile_now, *[lambda _: None] * hooks)


def test_kernels_of_a_graph_compile_together_on_worker_threads():
    kernels = [SlowKernel() for _ in range(4)]
    launchers = [LeanLauncher(k, (1,), {"XBLOCK": 64}, num_warps=4) for k in kernels]
    start = time.perf_counter()
    compile_at_once([(launcher, (torch.float32, torch.int64), "cpu") for launcher in launchers])
    elapsed = time.perf_counter() - start
    assert elapsed < 0.6  # four compiles of 0.2 s overlapped
    assert all(k.compiled_on and k.compiled_on[0] != "MainThread" for k in kernels)
    for launcher in launchers:  # the first call with aligned pointers uses that compile
        aligned = (True, True)
        assert launcher._started[aligned].result() == "compiled kernel"


def test_started_compile_workers_compile_a_fresh_graphs_kernels_first(monkeypatch):
    """Once ``triton_workers.warm_pool`` started them, the workers get every kernel of a graph
    generated just now (Triton's front end runs one kernel at a time on threads, under the
    GIL); the threads then load. A graph from the plan cache loads without them."""
    from torchkiln_inductor.codegen import triton_workers

    sent = []
    monkeypatch.setattr(triton_workers, "is_warm", lambda: True)
    monkeypatch.setattr(triton_workers, "precompile", sent.extend)
    kernels = [SlowKernel() for _ in range(3)]
    launchers = [
        LeanLauncher(k, (2,), {"XBLOCK": 64}, num_warps=w) for k, w in zip(kernels, (2, 4, 8))
    ]
    kernels_of_graph = [(launcher, (torch.float32, torch.int64), "cpu") for launcher in launchers]
    compile_at_once(kernels_of_graph)  # loaded from the plan cache
    assert sent == []
    compile_at_once(kernels_of_graph, in_workers=True)
    assert [(job.num_warps, job.grid, job.meta, job.dtypes) for job in sent] == [
        (w, (2,), (("XBLOCK", 64),), ("float32", "int64")) for w in (2, 4, 8)
    ]
    assert all(k.compiled_on for k in kernels)  # and each is still compiled (loaded) here
