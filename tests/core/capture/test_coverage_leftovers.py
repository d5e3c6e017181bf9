"""Spec (issue 17 leftovers): ``torch.autocast`` inside the compiled function.

Entering and leaving an autocast region are switches in the graph, so the region's ops
give eager's dtypes (CPU bfloat16/float16, ``enabled=False`` nested, ``"cuda"`` built
without a GPU, the decorator form); a graph break inside resumes in the region and
leaves it on exit, as eager does.
"""

import contextlib

import pytest
import torch

import torchkiln
from kiln_testing import check_compiled


def mats():
    return torch.randn(4, 4), torch.randn(4, 4)


def assert_autocast_off():
    assert not torch.is_autocast_enabled("cpu")


@torch.autocast("cpu", dtype=torch.bfloat16)
def bf16_matmul(a, b):
    return a @ b


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_region_gives_eager_dtypes(backend, dtype):
    def fn(a, b):
        with torch.autocast("cpu", dtype=dtype) as ctx:
            y = a @ b
            on = torch.is_autocast_enabled("cpu")
        z = y + a @ b  # outside: float32 matmul, promoted add
        return y, z, y.dtype, z.dtype, on, type(ctx)

    check_compiled(fn, mats, backend=backend, graphs=1, fullgraph=True)
    assert_autocast_off()


def test_autocast_nested_disabled_and_a_cuda_region(backend):
    def fn(a, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = a @ b
            with torch.autocast("cpu", enabled=False):
                z = a @ b
            with torch.autocast("cuda"):  # no GPU: torch disables it (and warns)
                w = a @ b
            v = a @ b
        return y, z, w, v

    warns = (
        contextlib.nullcontext()
        if torch.cuda.is_available()
        else pytest.warns(UserWarning, match="CUDA is not available")
    )
    with warns:
        check_compiled(fn, mats, backend=backend, graphs=1, fullgraph=True)
    assert_autocast_off()


def test_autocast_decorator_inside_and_outside(backend):
    def fn(a, b):
        inner = torch.autocast("cpu", dtype=torch.bfloat16)(lambda p, q: p @ q)
        return inner(a, b), bf16_matmul(a, b), a @ b

    check_compiled(fn, mats, backend=backend, graphs=1, fullgraph=True)
    assert_autocast_off()


def test_autocast_graph_break_inside_resumes_in_the_region(backend, capsys):
    def fn(a, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = a @ b
            print("break")
            z = y @ b
            on = torch.is_autocast_enabled("cpu")
        return y, z, a @ b, on

    check_compiled(fn, mats, backend=backend, graphs=2, breaks=1, capsys=capsys)
    assert_autocast_off()


@pytest.mark.parametrize("outer", [None, torch.bfloat16])
def test_autocast_region_through_aot_layer(outer):
    """The AOT layer bakes the casts in: an outer region must not cast its ops again."""

    def fn(a, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = a @ b
            with torch.autocast("cpu", enabled=False):
                z = a @ b
        return y, z, y.relu() + a @ b

    compiled = torchkiln.compile(fn, backend="aot_eager", fullgraph=True)
    for _ in range(2):
        a, b = mats()
        with torch.autocast("cpu", dtype=outer, enabled=outer is not None):
            expected, actual = fn(a, b), compiled(a, b)
        for got, want in zip(actual, expected, strict=True):
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want)
    assert_autocast_off()


def test_autocast_region_under_an_outer_region_recompiles(backend):
    def fn(a, b):
        with torch.autocast("cpu", enabled=False):
            y = a @ b
        return y, a @ b

    compiled = torchkiln.compile(fn, backend=backend, fullgraph=True)
    for outer in (None, torch.float16, torch.bfloat16, None):
        a, b = mats()
        with torch.autocast("cpu", dtype=outer, enabled=outer is not None):
            expected, actual = fn(a, b), compiled(a, b)
        for got, want in zip(actual, expected, strict=True):
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want)
    assert backend.graph_count == 3
    assert_autocast_off()
