"""Graph breaks give eager's answers: findings of the guard fuzz's "graph breaks" targets.

An object's ``__dict__`` reached a resume function as a dict of its own (a local, or the value
``vars(obj)`` left on the stack by the break) while the object was read through its global:
two trackers of one dict. The frame's writes to the dict are applied only when the graph ends,
so ``obj.scale`` read the real, unwritten attribute (and was guarded on it), and ``del obj.x``
checked the real dict. Now the object's attributes are the tracked dict's items
(``UserObjectVariable.adopt_tracked_dict``).

The AOT layer (``torchkiln.aot``) raised where the resumed part writes in place a tensor the
first graph computed, while inputs require grad (a break makes that common: the resumed part's
``relu_()`` of an activation): a view of it, made inside the autograd Function, which autograd
forbids writing (now made again outside it, ``runtime._share_storage``); the tensor itself, an
input of the resume function that requires grad and is no leaf (now the joint graph writes a
clone, ``trace.trace_joint``, and the analysis runs it on a non-leaf copy).
"""

from __future__ import annotations

import zlib

import pytest
import torch

import torchkiln


class Options:
    def __init__(self):
        self.scale = 1.0


OPTIONS = Options()


def update_through_vars(x, overrides):
    y = x * 2
    vars(OPTIONS).update(overrides)  # breaks: vars() of a user object
    return y * OPTIONS.scale


def update_through_local_dict(x, overrides):
    namespace = OPTIONS.__dict__
    zlib.crc32(b"kiln")  # breaks: namespace is a local of the resume function
    namespace.update(overrides)
    return x * OPTIONS.scale


def setattr_then_read_dict(x, overrides):
    namespace = OPTIONS.__dict__
    zlib.crc32(b"kiln")
    OPTIONS.scale = overrides.get("scale", 2.0)
    return x * namespace["scale"]


def pop_then_delattr(x, overrides):
    namespace = OPTIONS.__dict__
    zlib.crc32(b"kiln")
    namespace.pop("scale")
    try:
        del OPTIONS.scale
    except AttributeError:
        return x * 2
    return x


@pytest.mark.parametrize(
    "fn",
    [update_through_vars, update_through_local_dict, setattr_then_read_dict, pop_then_delattr],
)
def test_an_objects_dict_in_a_resume_function_is_its_attributes(fn):
    """A capture bug: the eager backend shows it."""
    torchkiln.reset()
    compiled = torchkiln.compile(fn, backend="eager")
    for overrides in ({}, {"scale": 3.0}, {}, {"scale": -0.5}):
        results = []
        for side in (compiled, fn):
            OPTIONS.scale = 1.0
            out = side(torch.ones(2), dict(overrides))
            results.append((out, dict(vars(OPTIONS))))
        (got, got_state), (want, want_state) = results
        torch.testing.assert_close(got, want, msg=f"{fn.__name__} with {overrides}")
        assert got_state == want_state


def write_a_view_of_an_intermediate(x):
    h = x * 2
    head = h[:2]
    zlib.crc32(b"kiln")  # breaks: head and h are outputs of the first graph
    head.mul_(3)
    return h


def write_an_intermediate(x):
    h = x * 2
    zlib.crc32(b"kiln")  # breaks: h is an input of the resume function, not a leaf
    h.mul_(3)
    return h.tanh()


def relu_in_place_after_the_break(x):
    h = x * 2
    zlib.crc32(b"kiln")
    y = h.exp()  # the backward needs h as it was before the write
    h.relu_()
    return y * h


def scale_in_place(h):
    h.mul_(2)
    return h.exp()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_view_of_an_intermediate_written_after_the_break(backend):
    """The first graph's outputs ``h`` and ``h[:2]`` are views made inside the autograd
    Function; they come out as views made outside it, which autograd lets one write."""
    check_gradients(write_a_view_of_an_intermediate, backend)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("fn", [write_an_intermediate, relu_in_place_after_the_break])
def test_an_intermediate_that_requires_grad_written_after_the_break(fn, backend):
    """The resume function's input requires grad and is written in place: the graph writes
    a clone, and the gradient reaches the input through it."""
    check_gradients(fn, backend)


def test_an_input_that_requires_grad_written_in_place_without_a_break():
    compiled = torchkiln.compile(scale_in_place, backend="aot_eager")
    check_gradients(lambda x: scale_in_place(x * 1.5), compiled=lambda x: compiled(x * 1.5))


def test_a_leaf_that_requires_grad_written_in_place_raises_as_in_eager():
    compiled = torchkiln.compile(scale_in_place, backend="aot_eager")
    for side in (scale_in_place, compiled):
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            side(torch.ones(3, requires_grad=True))


def check_gradients(fn, backend="aot_eager", compiled=None):
    """``fn`` compiled with ``backend`` (or ``compiled``) against eager's ``fn``, three calls:
    outputs and the input's gradient."""
    torchkiln.reset()
    compiled = compiled or torchkiln.compile(fn, backend=backend)
    for _ in range(3):
        results = []
        for side in (compiled, fn):
            x = torch.linspace(-1.0, 1.0, 4).requires_grad_()
            out = side(x)
            out.backward(torch.arange(4.0))
            results.append((out, x.grad))
        torch.testing.assert_close(results[0], results[1])


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_an_input_that_requires_grad_written_in_place_under_inference_mode(backend):
    """Under inference mode eager writes it; the analysis's non-leaf copy of it must be a
    normal tensor too (an inference tensor cannot be written outside inference mode)."""
    torchkiln.reset()
    compiled = torchkiln.compile(scale_in_place, backend=backend)
    compiled(torch.ones(3))
    with torch.inference_mode():
        x, y = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
        torch.testing.assert_close(compiled(x), scale_in_place(y))
        torch.testing.assert_close(x, y)
