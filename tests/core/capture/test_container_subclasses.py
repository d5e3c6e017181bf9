"""Spec (issue 17 leftovers): ``functools.wraps``/``update_wrapper`` applied in the compiled
function, and ``functools.cached_property`` on user classes, traced in one graph."""

import functools

import torch

from kiln_testing import check_compiled


def one_graph(fn, backend, make_args):
    check_compiled(fn, make_args, backend=backend, graphs=1, fullgraph=True)


def test_wraps_applied_in_the_frame_copies_attributes_and_calls_through(backend):
    def fn(x):
        def inner(y, k=2.0):
            """Adds k."""
            return y + k

        inner.tag = "kept"

        @functools.wraps(inner)
        def wrapper(*args, **kwargs):
            return inner(*args, **kwargs) * 2

        plain = functools.update_wrapper(lambda y: inner(y) - 1, inner, assigned=("__name__",))
        names = (wrapper.__name__, wrapper.__qualname__, wrapper.__doc__, wrapper.__module__)
        return wrapper(x, k=3.0) + plain(x), names, wrapper.tag, plain.__name__, plain.__doc__

    one_graph(fn, backend, lambda: (torch.randn(3),))


def halved(y):
    """Halves."""
    return y / 2


def test_wraps_of_a_function_passed_in(backend):
    def fn(x, f):
        @functools.wraps(f)
        def wrapper(y):
            return f(y) + 1

        return wrapper(x), wrapper.__name__, wrapper.__doc__, wrapper.__wrapped__ is f

    one_graph(fn, backend, lambda: (torch.randn(3), halved))


class Scaled:
    def __init__(self, t):
        self.t = t
        self.calls = 0

    @functools.cached_property
    def doubled(self):
        self.calls += 1
        return self.t * 2


def test_cached_property_computed_once_and_stored(backend):
    def fn(x, s):
        made = Scaled(x)
        y = made.doubled + made.doubled + s.doubled + s.doubled
        return y, made.calls, made.__dict__["doubled"] is made.doubled

    one_graph(fn, backend, lambda: (torch.randn(3), Scaled(torch.randn(3))))


def test_cached_property_already_computed_is_read_not_recomputed(backend):
    def fn(x, s):
        return x * s.doubled, s.calls

    def args():
        s = Scaled(torch.randn(3))
        s.doubled  # noqa: B018 -- computed before the call
        return torch.randn(3), s

    one_graph(fn, backend, args)
