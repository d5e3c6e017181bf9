"""Soundness under symbolic sizes: ``dynamic=True``, automatic dynamic and ``mark_dynamic`` bounds.

Where a size is symbolic, guards over sizes (bounds, ``s0 > 4``, ``Eq(s0, s1)``, 0/1
specialization) alone decide which entry serves a call; a missing or wrong one returns a
stale answer. Every call here is compared with eager. The guard fuzz runs the same
(``TORCHKILN_FUZZ_DYNAMIC=true``, its "symbolic sizes" targets); these are its deterministic
cases.
"""

from __future__ import annotations

import pytest
import torch

import torchkiln


@pytest.fixture(autouse=True)
def fresh_caches():
    torchkiln.reset()
    yield
    torchkiln.reset()


def frames() -> int:
    return torchkiln.counters["frames"]["total"]


def above_four(x):
    """Within bounds ``[5, 8]`` the ShapeEnv proves ``n > 4`` without a guard: only the bounds
    guards keep a smaller input from this entry."""
    if x.shape[0] > 4:
        return x * 2
    return x * 3


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("dynamic", [None, True, False])
def test_sizes_outside_mark_dynamic_bounds_recompile(backend, dynamic):
    """As torch.compile: a size outside the bounds of the entry a marked input compiled fails
    its guards (torchkiln documents a recompile); a size inside reuses it."""
    compiled = torchkiln.compile(above_four, backend=backend, dynamic=dynamic)
    x = torch.randn(6, 3)
    torchkiln.mark_dynamic(x, 0, min=5, max=8)
    torch.testing.assert_close(compiled(x), above_four(x))
    for n in (8, 5):  # in bounds: the bounded entry
        y = torch.randn(n, 3)
        torch.testing.assert_close(compiled(y), above_four(y))
    assert frames() == 1
    for n in (3, 9, 2, 1, 0, 4, 7):  # out of bounds, then back in
        y = torch.randn(n, 3)
        torch.testing.assert_close(compiled(y), above_four(y))
    assert frames() > 1


def test_mark_static_input_then_marked_dynamic():
    """An input marked static, then the same dimension marked dynamic on later inputs: the
    static entry serves its size only."""
    compiled = torchkiln.compile(above_four, backend="eager", dynamic=False)
    for n, mark in [(3, "static"), (6, "dynamic"), (3, None), (7, None), (4, "dynamic")]:
        y = torch.randn(n, 2)
        if mark == "static":
            torchkiln.mark_static(y, 0)
        elif mark == "dynamic":
            torchkiln.mark_dynamic(y, 0, min=2, max=8)
        torch.testing.assert_close(compiled(y), above_four(y))


def split_rows(x):
    """A view whose size is a quotient of a symbolic size (``x.view(b, t, h, d)`` with
    ``h = c // d``, the heads of attention), computed on."""
    return x.reshape(x.shape[0] // 4, 4) * 2


def conv(x, w):
    """Its output's size ``h - k + 3`` (``k`` the filter's symbolic size) divides indices."""
    return torch.nn.functional.conv2d(x, w, padding=1)


@pytest.mark.parametrize(
    "fn, sizes",
    [
        (split_rows, [(8,), (12,), (4,)]),
        (conv, [((2, 3, 5, 5), (4, 3, 3, 3)), ((3, 3, 6, 4), (4, 3, 3, 3))]),
    ],
    ids=["view_by_a_quotient", "conv2d"],
)
def test_inductor_divides_indices_by_a_symbolic_size(fn, sizes, tmp_path, monkeypatch):
    """A divisor the ranges of sizes don't prove positive: the ShapeEnv's facts do
    (``s0 // 4`` of an ``s0`` divisible by 4), or the graph compiles per size (the guard
    fuzz found the inductor raising 'index divisor must be positive')."""
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    compiled = torchkiln.compile(fn, backend="inductor", dynamic=True)
    for shapes in sizes:
        args = [torch.randn(s) for s in (shapes if isinstance(shapes[0], tuple) else [shapes])]
        torch.testing.assert_close(compiled(*args), fn(*args))


def unsqueezes_then_sums(x):
    x.unsqueeze_(0)  # in place: the marked dimension moves (a graph break)
    return x.sum(-1)


def squeezes_then_doubles(x):
    x.squeeze_(1)  # in place: the marked dimension goes
    return x * 2


@pytest.mark.parametrize("fn", [unsqueezes_then_sums, squeezes_then_doubles])
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_marks_of_an_input_reshaped_in_place(fn, backend):
    """Marks name dimensions of the tensor as it was marked; after the frame moved or dropped
    them in place, the code after the graph break sees another shape: a mark that no longer
    fits (a size outside its bounds, a dimension gone) is not applied (it raised)."""
    compiled = torchkiln.compile(fn, backend=backend)
    for n in (3, 5):
        x = torch.randn(2, n) if fn is unsqueezes_then_sums else torch.randn(2, 1, n)
        torchkiln.mark_dynamic(x, -1, min=3)
        expected_input = x.clone()
        expected = fn(expected_input)
        torch.testing.assert_close(compiled(x), expected)
        assert x.shape == expected_input.shape


def conv_relu(x, w):
    return torch.nn.functional.conv2d(x, w, padding=1).relu()


def test_a_shape_fact_that_is_an_or_does_not_cut_the_guard_short():
    """The ShapeEnv's facts about a padded convolution's output size include an ``or``
    (``3 + W - k > 0 or 3 + H - k > 0``); anded into the guard function unparenthesized, it
    made the guard pass on the facts before it alone: an entry captured under autocast then
    served a call without it, and a contiguous entry a channels_last input."""
    compiled = torchkiln.compile(conv_relu, backend="aot_eager", dynamic=True)
    w = torch.randn(4, 3, 3, 3)
    x = torch.randn(2, 3, 5, 5)
    torch.testing.assert_close(compiled(x, w), conv_relu(x, w))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(compiled(x, w), conv_relu(x, w))
    for y in (x.to(memory_format=torch.channels_last), torch.randn(3, 3, 6, 7)):
        got, expected = compiled(y, w), conv_relu(y, w)
        torch.testing.assert_close(got, expected)
        assert got.stride() == expected.stride()
