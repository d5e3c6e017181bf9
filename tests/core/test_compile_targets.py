"""Issue 17 item 8: whatever callable ``torchkiln.compile`` is given runs as in eager.

Builtins and C functions, partials, bound methods (of Python objects and of tensors),
callable objects, classes, ``lru_cache`` wrappers and modules whose class overrides
``__call__``: each is compiled, in one graph where capture can trace it, and never
fails inside torchkiln.
"""

import functools
import logging
import math

import pytest
import torch
from torch import nn

import torchkiln
from kiln_testing import RecordingBackend, check_compiled


@pytest.fixture(autouse=True)
def fresh_caches():
    torchkiln.reset()
    yield
    torchkiln.reset()


@pytest.fixture
def backend():
    return RecordingBackend()


def weighted(x, w, *, bias=0.0):
    return x * w + bias


class Runner:
    """Not a module: calling it runs ``__call__``, whatever its ``forward`` does."""

    def __init__(self, w):
        self.w = w

    def forward(self, x):
        return x * self.w

    def __call__(self, x):
        return self.forward(x) - 1

    @functools.lru_cache  # noqa: B019 (the instance lives as long as the test)
    def cached(self, n):
        return torch.full((n,), 2.0) * self.w


@pytest.mark.parametrize(
    "fn, make_args",
    [
        (torch.sin, lambda: (torch.randn(4),)),
        (torch.add, lambda: (torch.randn(4), torch.randn(4))),
        (torch.Tensor.relu, lambda: (torch.randn(4),)),
        (abs, lambda: (torch.randn(4),)),
        (functools.partial(weighted, w=2.0, bias=1.0), lambda: (torch.randn(4),)),
        (functools.partial(weighted, torch.ones(3)), lambda: (torch.randn(3),)),
        (Runner(torch.randn(4)), lambda: (torch.randn(4),)),
    ],
    ids=[
        "torch.sin",
        "torch.add",
        "Tensor.relu",
        "abs",
        "partial-kw",
        "partial-pos",
        "call-not-forward",
    ],
)
def test_callables_compile_in_one_graph(fn, make_args, backend):
    check_compiled(fn, make_args, backend=backend, graphs=1, fullgraph=True)


def test_a_method_of_a_tensor_compiles_in_one_graph(backend):
    x = torch.randn(4)
    check_compiled(x.mul, lambda: (torch.randn(4),), backend=backend, graphs=1, fullgraph=True)


def test_a_method_whose_function_is_not_python_runs_as_in_eager(backend):
    runner = Runner(torch.randn(3))
    compiled = torchkiln.compile(runner.cached, backend=backend)
    torch.testing.assert_close(compiled(3), runner.cached(3))


def test_a_math_function_on_constants_runs_as_in_eager(backend):
    compiled = torchkiln.compile(math.sqrt, backend=backend)
    assert compiled(16.0) == math.sqrt(16.0)


def test_a_class_builds_its_instance_as_in_eager(backend):
    compiled = torchkiln.compile(torch.Size, backend=backend)
    assert compiled([2, 3]) == torch.Size([2, 3])


def test_a_callable_capture_cannot_trace_runs_natively(backend, capsys):
    """``print`` breaks the graph: the call runs natively, as in eager."""
    compiled = torchkiln.compile(print, backend=backend)
    compiled("hello", 3)
    assert capsys.readouterr().out == "hello 3\n"
    assert sum(torchkiln.counters["graph_break"].values()) == 1


def test_each_callable_has_a_cache_of_its_own(backend, monkeypatch):
    """Callables compiled through the frame that calls them do not share a cache limit."""
    monkeypatch.setattr(torchkiln.config, "cache_size_limit", 1)
    fns = [torch.sin, torch.cos, torch.exp, functools.partial(torch.mul, other=2.0)]
    x = torch.randn(4)
    for fn in fns:
        torch.testing.assert_close(torchkiln.compile(fn, backend=backend, fullgraph=True)(x), fn(x))
    assert backend.graph_count == len(fns)
    assert not torchkiln.counters["eager_fallback"]


def test_a_compiled_builtin_called_in_compiled_code_is_traced(backend):
    compiled_sin = torchkiln.compile(torch.sin, backend="eager")

    def calls_compiled_sin(x):
        return compiled_sin(x) + 1

    check_compiled(
        calls_compiled_sin, lambda: (torch.randn(4),), backend=backend, graphs=1, fullgraph=True
    )


def test_a_compiled_partial_called_in_compiled_code_runs_compiled(backend):
    """The partial's state is not the wrapper's to guard: the call breaks the graph and
    runs the compiled partial, which dispatches itself."""
    inner_backend = RecordingBackend()
    compiled_partial = torchkiln.compile(functools.partial(weighted, w=3.0), backend=inner_backend)

    def calls_compiled_partial(x):
        return compiled_partial(x) + 1

    check_compiled(
        calls_compiled_partial, lambda: (torch.randn(4),), backend=backend, graphs=1, breaks=1
    )
    assert inner_backend.graph_count == 1


@functools.lru_cache(maxsize=4)
def causal_mask(n):
    return torch.ones(n, n).tril() * 2


def test_an_lru_cache_wrapper_compiles_its_function_behind_a_cache(backend, caplog):
    with caplog.at_level(logging.INFO, logger="torchkiln"):
        compiled = torchkiln.compile(causal_mask, backend=backend, fullgraph=True)
    assert "lru_cache" in caplog.text
    first = compiled(3)
    torch.testing.assert_close(first, causal_mask(3))
    assert compiled(3) is first  # a hit returns the cached object, as the eager cache does
    torch.testing.assert_close(compiled(5), causal_mask(5))
    assert compiled.cache_parameters() == causal_mask.cache_parameters()
    assert compiled.cache_info().hits == 1
    assert backend.graph_count == 2  # one per size


class CallOverride(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)

    def __call__(self, x):
        return self.forward(x).relu() + 100


class Parent(nn.Module):
    def __init__(self, child):
        super().__init__()
        self.child = child

    def forward(self, x):
        return self.child(x) * 2


@pytest.mark.parametrize(
    "make",
    [CallOverride, lambda: Parent(CallOverride())],
    ids=["module", "child"],
)
def test_a_class_level_call_override_runs_compiled(make, backend):
    check_compiled(make(), lambda: (torch.randn(2, 4),), backend=backend, graphs=1, fullgraph=True)


class PrintingCall(CallOverride):
    def __call__(self, x):
        print("calling")  # breaks the graph inside the override
        return self.forward(x) * 3


def test_a_call_override_that_breaks_the_graph_still_runs(backend, capsys):
    check_compiled(
        Parent(PrintingCall()),
        lambda: (torch.randn(2, 4),),
        backend=backend,
        graphs=2,
        breaks=2,  # at the call of the child, then inside its override, called through
        capsys=capsys,
    )


def test_replacing_the_class_call_override_recompiles(backend):
    model = CallOverride()
    compiled = torchkiln.compile(model, backend=backend, fullgraph=True)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), model(x))
    original = CallOverride.__call__
    try:
        CallOverride.__call__ = lambda self, x: self.forward(x) - 7
        torch.testing.assert_close(compiled(x), model(x))
    finally:
        CallOverride.__call__ = original
    assert backend.graph_count == 2
