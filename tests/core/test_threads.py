"""Threads: first calls that race, compiles in parallel, forward and backward from many threads.

Each test releases its threads together with a barrier so that their first
calls really overlap, and every thread compares its results with eager.
Capture and backend compilation run one thread at a time (torch.fx's tracer
patches process-wide state); the warm path takes no lock.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
import torch.fx as fx

import torchkiln
from kiln_testing import RecordingBackend
from torchkiln.aot import aot_autograd

THREADS = 8
BACKENDS = ["eager", "aot_eager", "inductor"]


@pytest.fixture(autouse=True)
def fresh_caches():
    torchkiln.reset()
    yield
    torchkiln.reset()


def in_threads(body, n: int = THREADS) -> list:
    """``body(i)`` for i in range(n), each in its own thread, all started at once."""
    barrier = threading.Barrier(n, timeout=60)

    def run(i):
        barrier.wait()
        return body(i)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(run, range(n)))


class OverlapBackend(RecordingBackend):
    """Records graphs, and how many compiles ran at once (each lasts long enough to overlap)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._active = 0
        self.most_at_once = 0

    def __call__(self, gm: fx.GraphModule, example_inputs: list):
        with self._lock:
            self._active += 1
            self.most_at_once = max(self.most_at_once, self._active)
        time.sleep(0.05)
        with self._lock:
            self._active -= 1
        return super().__call__(gm, example_inputs)


def sin_mul(x, y):
    return torch.sin(x) * y + 1


def own_function(i: int):
    """A function with a code object of its own (functions sharing one share its cache)."""
    ns = {"torch": torch}
    exec(f"def cos_mul_{i}(x, y):\n    return torch.cos(x) * y - 1\n", ns)
    return ns[f"cos_mul_{i}"]


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_first_calls_of_one_function_race(backend):
    compiled = torchkiln.compile(sin_mul, backend=backend)

    def call(i):
        x, y = torch.randn(4, 5), torch.randn(4, 5)
        torch.testing.assert_close(compiled(x, y), sin_mul(x, y))

    in_threads(call)
    assert torchkiln.counters["frames"]["total"] == 1


def test_a_frame_is_captured_once_by_one_thread_at_a_time():
    backend = OverlapBackend()
    compiled = torchkiln.compile(sin_mul, backend=backend)
    in_threads(lambda i: compiled(torch.randn(3), torch.randn(3)))
    assert (backend.graph_count, backend.most_at_once) == (1, 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_threads_compiling_their_own_functions(backend):
    def compile_and_call(i):
        fn = own_function(i)
        x, y = torch.randn(3, 7), torch.randn(3, 7)
        torch.testing.assert_close(torchkiln.compile(fn, backend=backend)(x, y), fn(x, y))

    in_threads(compile_and_call)
    assert torchkiln.counters["frames"]["total"] == THREADS


def test_backends_compile_one_graph_at_a_time():
    backend = OverlapBackend()
    in_threads(
        lambda i: torchkiln.compile(own_function(i), backend=backend)(torch.ones(2), torch.ones(2))
    )
    assert (backend.graph_count, backend.most_at_once) == (THREADS, 1)


def grads_of(module: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    out = module(x)
    return (out, *torch.autograd.grad(out.square().sum(), [x, *module.parameters()]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_and_backward_of_one_module_from_threads(backend):
    model = mlp()
    compiled = torchkiln.compile(model, backend=backend)

    def train_step(i):
        x = torch.randn(5, 6, requires_grad=True)
        expected = grads_of(model, x)
        torch.testing.assert_close(grads_of(compiled, x), expected)

    in_threads(train_step)


def test_aot_backward_is_compiled_once_on_the_first_backwards_at_once():
    forward, backward = RecordingBackend(), OverlapBackend()
    model = mlp()
    compiled = torchkiln.compile(model, backend=aot_autograd(forward, bw_compiler=backward))
    compiled(torch.randn(5, 6, requires_grad=True))  # compiles the forward, not the backward
    assert backward.graph_count == 0

    def train_step(i):
        x = torch.randn(5, 6, requires_grad=True)
        torch.testing.assert_close(grads_of(compiled, x), grads_of(model, x))

    in_threads(train_step)
    assert (backward.graph_count, backward.most_at_once) == (1, 1)


def test_aot_plan_built_at_call_time_is_built_once():
    """A graph compiled for inference builds its training plan on the first call that needs it."""
    forward = OverlapBackend()
    args = [torch.randn(4, 5), torch.randn(4, 5)]
    compiled = aot_autograd(forward)(fx.symbolic_trace(sin_mul), args)
    assert forward.graph_count == 1

    def call(i):
        x, y = torch.randn(4, 5, requires_grad=True), torch.randn(4, 5)
        out = compiled(x, y)
        expected = sin_mul(x, y)
        torch.testing.assert_close(out, expected)
        got, want = (torch.autograd.grad(o.sum(), x) for o in (out, expected))
        torch.testing.assert_close(got, want)

    in_threads(call)
    # the inference graph, then the training forward and backward graphs
    assert (forward.graph_count, forward.most_at_once) == (3, 1)


def test_thread_local_grad_mode_and_autocast_are_kept_per_thread():
    """Threads in different grad and autocast modes capture at once; each gets its own answer
    and keeps its own modes."""
    compiled = torchkiln.compile(lambda x, w: (x @ w).relu(), backend="aot_eager")

    def call(i):
        grad, autocast = i % 2 == 0, i % 4 < 2
        x, w = torch.randn(4, 4), torch.randn(4, 4, requires_grad=True)
        with torch.set_grad_enabled(grad), torch.autocast("cpu", torch.bfloat16, enabled=autocast):
            out = compiled(x, w)
            expected = (x @ w).relu()
            assert torch.is_grad_enabled() == grad
            assert torch.is_autocast_enabled("cpu") == autocast
        assert (out.dtype, out.requires_grad) == (expected.dtype, expected.requires_grad)
        torch.testing.assert_close(out, expected)

    in_threads(call)
    assert torchkiln.counters["frames"]["total"] == 4


def test_a_warm_call_does_not_wait_for_a_compile_in_progress():
    compiled = torchkiln.compile(sin_mul, backend="eager")
    compiled(torch.ones(2), torch.ones(2))
    started, release = threading.Event(), threading.Event()

    def blocking_backend(gm, example_inputs):
        started.set()
        release.wait(timeout=60)
        return gm.forward

    other = threading.Thread(
        target=torchkiln.compile(own_function(0), backend=blocking_backend),
        args=(torch.ones(2), torch.ones(2)),
    )
    other.start()
    try:
        assert started.wait(timeout=60)
        with ThreadPoolExecutor(1) as pool:
            x, y = torch.randn(2), torch.randn(2)
            torch.testing.assert_close(
                pool.submit(compiled, x, y).result(timeout=10), sin_mul(x, y)
            )
    finally:
        release.set()
        other.join()
