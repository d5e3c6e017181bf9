"""Graph breaks give eager's answers: findings of the guard fuzz's "graph breaks" targets.

An object's ``__dict__`` reached a resume function as a dict of its own (a local, or the value
``vars(obj)`` left on the stack by the break) while the object was read through its global:
two trackers of one dict. The frame's writes to the dict are applied only when the graph ends,
so ``obj.scale`` read the real, unwritten attribute (and was guarded on it), and ``del obj.x``
checked the real dict. Now the object's attributes are the tracked dict's items
(``UserObjectVariable.adopt_tracked_dict``).

Left open (AOT layer, ``torchkiln.aot``): a tensor the first graph computed and the resumed part
writes in place, while inputs require grad. Eager allows both writes below; the AOT backends
raise. A break makes these common: the resumed part's ``relu_()`` of an activation is one.
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


@pytest.mark.xfail(
    strict=True,
    raises=RuntimeError,
    reason="aot.runtime.CompiledFunction returns views of an intermediate made inside the "
    "autograd Function (the backend returned views, so _share_storage leaves them): autograd "
    "forbids writing them in place",
)
def test_a_view_of_an_intermediate_written_after_the_break():
    check_gradients(write_a_view_of_an_intermediate)


@pytest.mark.xfail(
    strict=True,
    raises=torchkiln.exc.BackendCompilerFailed,
    reason="aot.analysis.analyze runs the graph on leaf copies of its inputs: an input that "
    "requires grad and is written in place raises there, though the caller's is no leaf",
)
def test_an_intermediate_that_requires_grad_written_after_the_break():
    check_gradients(write_an_intermediate)


def check_gradients(fn):
    torchkiln.reset()
    compiled = torchkiln.compile(fn, backend="aot_eager")
    results = []
    for side in (compiled, fn):
        x = torch.linspace(-1.0, 1.0, 4).requires_grad_()
        out = side(x)
        out.backward(torch.arange(4.0))
        results.append((out, x.grad))
    torch.testing.assert_close(results[0], results[1])
