"""Spec (issue 17, item 5): context managers beyond grad mode.

``with`` blocks over ``@contextmanager`` functions, user classes with
``__enter__``/``__exit__`` (an exit returning true swallows the exception),
``contextlib``'s ``nullcontext``/``suppress``/``ExitStack`` and nested grad
modes are traced in one graph; a graph break inside a block resumes with the
context still entered and leaves it on exit, as eager does.
"""

import contextlib

import torch

from kiln_testing import check_compiled


def vec():
    return (torch.randn(3, requires_grad=True),)


def one_graph(fn, backend):
    check_compiled(fn, vec, backend=backend, graphs=1, fullgraph=True)
    assert torch.is_grad_enabled()


@contextlib.contextmanager
def scaled(log, factor):
    log.append("enter")
    try:
        yield factor
    except KeyError:
        log.append("caught")
    finally:
        log.append("exit")


class Recorder:
    def __init__(self, log, swallow=False):
        self.log = log
        self.swallow = swallow

    def __enter__(self):
        self.log.append("in")
        return self

    def __exit__(self, typ, value, tb):
        self.log.append(("out", typ.__name__ if typ else None))
        return self.swallow


def test_contextmanager_function(backend):
    def fn(x):
        log = []
        with scaled(log, 2) as s:
            y = x * s
        return y, log

    one_graph(fn, backend)


def test_contextmanager_function_catches_the_block_exception(backend):
    def fn(x):
        log = []
        with scaled(log, 3):
            y = x + 1
            {}["missing"]
        return y, log

    one_graph(fn, backend)


def test_user_class_enter_and_exit(backend):
    def fn(x):
        log = []
        with Recorder(log) as r:
            y = x + len(r.log)
        return y, log

    one_graph(fn, backend)


def test_user_exit_returning_true_swallows_the_exception(backend):
    def fn(x):
        log = []
        y = x
        with Recorder(log, swallow=True):
            y = x + 1
            raise ValueError("swallowed")
        return y * 2, log

    one_graph(fn, backend)


def test_user_exit_sees_the_exception_that_propagates(backend):
    def fn(x):
        log = []
        try:
            with Recorder(log):
                raise KeyError("k")
        except KeyError:
            y = x - 1
        return y, log

    one_graph(fn, backend)


def test_nullcontext_and_suppress(backend):
    def fn(x, d=None):
        d = {}
        with contextlib.nullcontext(3) as n:
            y = x * n
        with contextlib.suppress(IndexError, KeyError):
            y = y + d["k"]
        return y + 1

    one_graph(fn, backend)


def test_exit_stack_runs_exits_last_in_first_out(backend):
    def fn(x):
        log = []
        with contextlib.ExitStack() as stack:
            stack.enter_context(Recorder(log))
            stack.callback(log.append, "callback")
            stack.enter_context(Recorder(log, swallow=True))
            y = x + 1
            raise ValueError
        return y, log

    one_graph(fn, backend)


def test_graph_break_inside_blocks_resumes_in_them(backend, capsys):
    def fn(x):
        log = []
        with torch.no_grad(), Recorder(log):
            y = x * 2
            print("break")
            z = y + x
        return z, torch.is_grad_enabled(), log

    check_compiled(fn, vec, backend=backend, graphs=2, breaks=1, capsys=capsys)
    assert torch.is_grad_enabled()
