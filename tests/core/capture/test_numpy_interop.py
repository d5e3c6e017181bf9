"""Spec (issue 17, capture coverage): NumPy code on traced tensors is captured in one graph,
with NumPy's semantics (dtype rules, scalars, views), as ``torch._numpy`` operations."""

import pickle

import numpy as np
import pytest
import torch

import torchkiln
from kiln_testing import check_compiled
from torchkiln.capture.variables.numpy_arrays import numpy_call
from torchkiln.exc import Unsupported


def mat():
    return (torch.randn(3, 4),)


def one_graph(fn, backend, make_args=mat):
    return check_compiled(fn, make_args, backend=backend, graphs=1, fullgraph=True)


def test_functions_reductions_and_back_to_torch(backend):
    def fn(x):
        m = np.mean(x.numpy(), 1)
        s = np.sum(np.abs(m) + np.linalg.norm(x.numpy(), axis=0)[:3])
        return torch.from_numpy(np.asarray(s)), torch.as_tensor(np.fft.fftshift(x.numpy()))

    one_graph(fn, backend)


def test_numpy_dtype_rules(backend):
    """NumPy's rules, not torch's: int / int is float64, new arrays default to float64."""

    def fn(x):
        a = x.numpy()
        return torch.from_numpy(a / 2), torch.from_numpy(np.zeros(4) + a)

    one_graph(fn, backend, lambda: (torch.randint(0, 9, (3, 4)),))
    out = torchkiln.compile(fn, backend=backend, fullgraph=True)(
        torch.ones(3, 4, dtype=torch.int32)
    )
    assert [t.dtype for t in out] == [torch.float64, torch.float64]


def test_attributes_methods_operators_return_arrays(backend):
    def fn(x):
        a = x.numpy()
        b = (a * 2 - 1).T
        return a.shape, a.ndim, a.size, a.dtype, b.copy(), a.reshape([1, a.size]), a.max(axis=0)

    one_graph(fn, backend)


def test_scalar_results_escape_as_numpy_scalars(backend):
    def fn(x):
        a = x.numpy()
        return np.sum(a), a.max(), np.asarray(a.min()), np.sum(a)[...]

    ints = lambda: (torch.randint(-9, 9, (3, 4)),)  # noqa: E731 (float sums round differently)
    out = one_graph(fn, backend, ints)(*ints())
    assert [type(o) for o in out] == [np.int64, np.int64, np.ndarray, np.ndarray]


def test_item_assignment_writes_through_to_the_tensor(backend):
    def fn(x):
        a = x.numpy()
        a[0] = 5.0
        a[1:, :2] += 1
        return x * 2

    one_graph(fn, backend)


def test_dtype_objects_are_constants(backend):
    def fn(x):
        dt = np.dtype("float")
        full = np.full_like(x.numpy(), 2.4, dtype=dt)
        return x + np.iinfo(np.int16).max, torch.from_numpy(np.ones_like(full, dtype=np.float32))

    one_graph(fn, backend)


def test_numpy_random_breaks_with_a_reason(backend):
    def fn(x):
        return x + torch.from_numpy(np.random.randn(3, 4))

    with pytest.raises(Unsupported, match="random state is not traced"):
        torchkiln.compile(fn, backend=backend, fullgraph=True)(torch.randn(3, 4))


def test_tensor_requiring_grad_breaks_as_eager_raises(backend):
    def fn(x):
        return x.numpy()

    x = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="requires grad"):
        fn(x)
    with pytest.raises(Unsupported, match="requires grad"):
        torchkiln.compile(fn, backend=backend, fullgraph=True)(x)


def test_graph_node_target_pickles_for_the_disk_cache():
    assert pickle.loads(pickle.dumps(numpy_call)) is numpy_call


@pytest.mark.parametrize(
    "path, args",
    [
        ("divide", (torch.arange(1, 5), 2)),
        ("arctan2", (torch.arange(1, 5), torch.arange(1, 5))),
        ("cov", (torch.arange(1, 5),)),
        ("geomspace", (1, 2, 3)),
        ("logspace", (0, 1, 3)),
        ("where", (torch.tensor([True, False]), 1.5, 2)),
        ("ndarray.__rtruediv__", (torch.arange(1, 5), 3)),
        ("asarray", ([0.1, 2],)),
        ("asarray", (1e12 + 1,)),
        ("asarray", (1 + 2j,)),
    ],
)
def test_float64_where_torch_takes_its_default_dtype(path, args):
    """NumPy's float64 (complex128) results and values where torch's ops take its float32 default."""
    target = np
    for part in path.split("."):
        target = getattr(target, part)
    want = np.asarray(target(*[a.numpy() if isinstance(a, torch.Tensor) else a for a in args]))
    got = numpy_call(path, *args)
    assert got.dtype == (torch.complex128 if want.dtype.kind == "c" else torch.float64)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


def test_numpy_calls_leave_other_threads_default_dtype():
    """A traced NumPy call running in one thread never changes the dtype another thread's
    ``torch.tensor(1.0)`` gets (``torch.set_default_dtype`` is process-wide)."""
    import threading

    @torchkiln.compile(backend="eager", fullgraph=True)
    def fn(x):
        return torch.from_numpy(x.numpy() / 2 + np.linspace(0, 1, x.shape[0]))

    fn(torch.arange(64))
    stop, seen = threading.Event(), set()

    def make_floats():
        while not stop.is_set():
            seen.add(torch.tensor([1.0]).dtype)

    thread = threading.Thread(target=make_floats)
    thread.start()
    try:
        for _ in range(3000):
            assert fn(torch.arange(64)).dtype == torch.float64
    finally:
        stop.set()
        thread.join()
    assert seen == {torch.float32}
