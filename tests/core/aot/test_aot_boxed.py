"""``run_boxed``: fx graphs run as they are, each input freed after its last use."""

from __future__ import annotations

import weakref

import torch
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import make_fx

import torchkiln
from torchkiln.aot import run_boxed


def _graph_that_probes_its_first_input(seen: list) -> tuple[fx.GraphModule, list]:
    """``(a + 1, b * 2)`` with a call between the two that records whether ``a`` is alive."""
    refs: list = []

    def probe() -> None:
        seen.append(refs[0]() is not None)

    graph = fx.Graph()
    a, b = graph.placeholder("a"), graph.placeholder("b")
    c = graph.call_function(torch.add, (a, 1))
    graph.call_function(probe)
    d = graph.call_function(torch.mul, (b, 2))
    graph.output((c, d))
    return fx.GraphModule(torch.nn.Module(), graph), refs


def test_a_boxed_call_frees_an_input_after_its_last_use() -> None:
    seen: list = []
    gm, refs = _graph_that_probes_its_first_input(seen)
    args = [torch.randn(4), torch.randn(4)]
    expected = (args[0] + 1, args[1] * 2)
    refs.append(weakref.ref(args[0]))
    out = run_boxed(gm, []).call_boxed(args)
    assert seen == [False] and args == []
    torch.testing.assert_close(out, expected)


def test_a_plain_call_keeps_the_inputs_of_its_caller() -> None:
    seen: list = []
    gm, refs = _graph_that_probes_its_first_input(seen)
    a, b = torch.randn(4), torch.randn(4)
    refs.append(weakref.ref(a))
    out = run_boxed(gm, [])(a, b)
    assert seen == [True]
    torch.testing.assert_close(out, (a + 1, b * 2))


def test_aot_eager_backward_is_boxed_and_matches_eager() -> None:
    compiled_backwards: list = []

    def record(gm: fx.GraphModule, example_inputs: list):
        fn = run_boxed(gm, example_inputs)
        compiled_backwards.append(fn)
        return fn

    from torchkiln.aot import aot_autograd, simple_partition

    def backend(gm, example_inputs):
        return aot_autograd(
            fw_compiler=run_boxed, bw_compiler=record, partition_fn=simple_partition
        )(gm, example_inputs)

    def f(x, w):
        return (x @ w).sin().cos().sum()

    x, w = torch.randn(8, 8), torch.randn(8, 8, requires_grad=True)
    compiled = torchkiln.compile(f, backend=backend)
    compiled(x, w).backward()
    expected = w.grad.clone()
    w.grad = None
    f(x, w).backward()
    torch.testing.assert_close(expected, w.grad)
    assert len(compiled_backwards) == 1 and hasattr(compiled_backwards[0], "call_boxed")


def test_aot_eager_trains_like_eager() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.GELU(), torch.nn.Linear(6, 2))
    x = torch.randn(5, 6)
    for backend in ("aot_eager", "aot_eager_decomp_partition"):
        compiled = torchkiln.compile(model, backend=backend)
        compiled(x).square().sum().backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        model(x).square().sum().backward()
        for g, p in zip(got, model.parameters()):
            torch.testing.assert_close(g, p.grad)
        model.zero_grad()


@torch.library.custom_op("kiln_test::scaled_sin", mutates_args=())
def _scaled_sin(x: torch.Tensor, scale: float) -> torch.Tensor:
    return x.sin() * scale


@_scaled_sin.register_fake
def _(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty_like(x)


def test_a_boxed_graph_calls_aten_overloads_through_their_c_ops() -> None:
    """No ``torch.ops.<ns>.<op>.<overload>(...)`` left in the code (four attribute lookups and
    a Python frame per op); the results as the overloads give them, keyword arguments and an
    op implemented in Python (a custom op) included."""

    def fn(x, y):
        z = torch.ops.aten.add.Tensor(x @ y, y, alpha=2).relu().view(-1)
        return z, torch.ops.kiln_test.scaled_sin(z, 3.0), x.sum(dim=0, keepdim=True)

    x, y = torch.randn(3, 3), torch.randn(3, 3)
    gm = make_fx(fn)(x, y)
    boxed = run_boxed(gm, [])
    code = boxed._module.code
    assert "torch.ops." not in code
    assert "_aten_add_Tensor(" in code and "_kiln_test_scaled_sin_default(" in code
    for got, want in zip(boxed(x, y), fn(x, y), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
