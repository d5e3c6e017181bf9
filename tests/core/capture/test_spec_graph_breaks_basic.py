"""Spec (issue 4): graph breaks at top level, for each kind of unsupported code.

A break compiles the graph captured so far, runs the unsupported instruction
eagerly, and continues in a resume function that is captured and cached
like any other frame. Counting rule used throughout: each straight-line
stretch of tensor operations between breaks is one graph (a stretch with no
tensor operation compiles no graph), and ``counters["graph_break"]`` counts
one per break met while capturing. Every case calls the compiled function at
least twice: the later calls must compile nothing.

Cases where a Python value produced by the eager part (``.item()``,
``.tolist()``) flows into the resume function use inputs with the same
values on each call (``seeded``), so that whether such a value is guarded
on does not change the count.
"""

import logging
import math
import zlib

import pytest
import torch

import torchkiln
from kiln_testing import assert_graph_count, assert_same, check_compiled, graph_break_count

user_log = logging.getLogger("user_code")


def seeded(*shape: int, requires_grad: bool = False) -> torch.Tensor:
    """A fresh tensor with the same values on every call (see the module docstring)."""
    gen = torch.Generator().manual_seed(1234)
    return torch.randn(*shape, generator=gen).requires_grad_(requires_grad)


def seeds_example(inputs):
    x = inputs["x"]
    y = inputs["y"]
    x = x.cos().cos()
    if x.mean() > 0.5:
        x = x / 1.1
    return x * y


def seeds_example_threshold_08(inputs):
    x = inputs["x"]
    y = inputs["y"]
    x = x.cos().cos()
    if x.mean() > 0.8:
        x = x / 1.1
    return x * y


def seeds_inputs(n: int, near_half_pi: bool = False):
    x = torch.randn(n) * 0.1 + (math.pi / 2 if near_half_pi else 0.0)
    return ({"x": x.requires_grad_(), "y": torch.randn(n, requires_grad=True)},)


def test_seeds_example_two_graphs_one_break_with_gradients(backend):
    check_compiled(
        seeds_example,
        lambda: seeds_inputs(10),
        backend=backend,
        graphs=2,
        breaks=1,
        calls=3,
        grads=True,
    )


def test_seeds_example_shapes_10_and_8_as_in_the_seeds(backend):
    compiled = torchkiln.compile(seeds_example, backend=backend)
    for n in (10, 10, 8, 10, 8):
        (inputs,) = seeds_inputs(n)
        assert_same(compiled(inputs), seeds_example(inputs))
    assert_graph_count(backend, 4, "for shapes 10 and 8 (graph A and the resume graph each)")


@pytest.mark.parametrize("taken", [True, False], ids=["if_taken", "if_not_taken"])
def test_seeds_example_each_branch_with_gradients(backend, taken):
    check_compiled(
        seeds_example_threshold_08,
        lambda: seeds_inputs(10, near_half_pi=taken),
        backend=backend,
        graphs=2,
        breaks=1,
        grads=True,
    )


def test_seeds_example_both_branches_share_graph_a(backend):
    fn = seeds_example_threshold_08
    compiled = torchkiln.compile(fn, backend=backend)
    for taken in (True, False, True, False):
        (inputs,) = seeds_inputs(10, near_half_pi=taken)
        eager_inputs = {k: v.detach().clone().requires_grad_() for k, v in inputs.items()}
        actual, expected = compiled(inputs), fn(eager_inputs)
        assert_same(actual, expected)
        actual.sum().backward()
        expected.sum().backward()
        for k in inputs:
            torch.testing.assert_close(inputs[k].grad, eager_inputs[k].grad, msg=f"grad of {k}")
    assert_graph_count(backend, 3, "graph A plus one resume graph per taken branch")
    assert graph_break_count() == 1


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["positive", "negative"])
def test_data_dependent_if_on_tensor_sum(backend, sign):
    def fn(x):
        y = x * 2
        if y.sum() > 0:
            return y.sin()
        return y.cos() - 1

    check_compiled(
        fn,
        lambda: ((torch.rand(5) + 0.1) * sign,),
        backend=backend,
        graphs=2,
        breaks=1,
    )


def test_data_dependent_if_without_else_falls_through(backend):
    def fn(x):
        y = x.exp()
        if (y > 100).any():
            y = y.clamp(max=100)
        return y.log()

    check_compiled(fn, lambda: (torch.randn(6).clamp(-3, 3),), backend=backend, graphs=2, breaks=1)


def test_print_between_two_graphs(backend, capsys):
    def fn(x):
        y = x.sin()
        print("between the graphs")
        return y.cos()

    check_compiled(
        fn, lambda: (torch.randn(4),), backend=backend, graphs=2, breaks=1, capsys=capsys
    )


def test_print_shows_a_tensor_computed_by_the_first_graph(backend, capsys):
    def fn(x):
        y = x.abs().round()
        print("y =", y)
        return y + 1

    check_compiled(
        fn, lambda: (torch.randn(4) * 3,), backend=backend, graphs=2, breaks=1, capsys=capsys
    )


def test_print_of_python_values_built_before_the_break(backend, capsys):
    def fn(x):
        info = {"rows": x.shape[0], "name": f"t{x.dim()}"}
        y = x * 2
        print(info, [1, 2], ("a", None))
        return y.sum()

    check_compiled(
        fn, lambda: (torch.randn(3, 2),), backend=backend, graphs=2, breaks=1, capsys=capsys
    )


def test_item_result_is_used_after_the_break(backend):
    def fn(x):
        s = x.sum().item()
        y = x * 2
        return y.relu(), s * 3

    check_compiled(fn, lambda: (seeded(5),), backend=backend, graphs=2, breaks=1)


def test_item_in_a_python_comparison(backend):
    def fn(x):
        y = x.sin()
        if y.max().item() > -2.0:
            y = y * 2
        return y

    check_compiled(fn, lambda: (seeded(5),), backend=backend, graphs=2, breaks=1)


def test_tolist_result_is_returned(backend):
    def fn(x):
        y = x.round()
        values = y.tolist()
        return y.cos(), values

    check_compiled(fn, lambda: (seeded(4) * 4,), backend=backend, graphs=2, breaks=1)


def test_numpy_result_is_appended_to_a_list(backend):
    def fn(x, sink):
        y = x.sin()
        sink.append(y.numpy())  # captured: the array is rebuilt after the graph
        return y.cos()

    check_compiled(fn, lambda: (torch.randn(4), []), backend=backend, graphs=1)


def test_logging_call_between_graphs(backend, caplog):
    def fn(x):
        y = x.tanh()
        user_log.warning("computed tanh of %d values", x.numel())
        return y * 3

    compiled = torchkiln.compile(fn, backend=backend)
    for _ in range(2):
        x = torch.randn(4)
        caplog.clear()
        expected = fn(x)
        eager_records = [r.getMessage() for r in caplog.records if r.name == "user_code"]
        caplog.clear()
        assert_same(compiled(x), expected)
        compiled_records = [r.getMessage() for r in caplog.records if r.name == "user_code"]
        assert compiled_records == eager_records == ["computed tanh of 4 values"]
    assert_graph_count(backend, 2)
    assert graph_break_count() == 1


def test_call_into_an_unknown_c_function(backend):
    def fn(x):
        y = x * 2
        code = zlib.crc32(b"torchkiln")
        return y + code % 7

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=2, breaks=1)


def test_two_prints_give_three_graphs(backend, capsys):
    def fn(x):
        a = x.sin()
        print("first")
        b = a.cos()
        print("second")
        return b.exp()

    check_compiled(
        fn, lambda: (torch.randn(3),), backend=backend, graphs=3, breaks=2, capsys=capsys
    )


def test_print_item_and_data_dependent_if_in_one_function(backend, capsys):
    def fn(x):
        a = x.sin()
        print("one")
        b = a.cos()
        n = b.sum().item()
        c = b * 2
        if c.mean() > -100:
            c = c + 1
        return c, n

    check_compiled(fn, lambda: (seeded(4),), backend=backend, graphs=4, breaks=3, capsys=capsys)


def test_break_before_any_tensor_op_compiles_only_the_rest(backend, capsys):
    def fn(x):
        print("start")
        return x.sin() + 1

    check_compiled(
        fn, lambda: (torch.randn(3),), backend=backend, graphs=1, breaks=1, capsys=capsys
    )


def test_break_after_the_last_tensor_op_compiles_only_the_prefix(backend, capsys):
    def fn(x):
        y = x.sin() + 1
        print("done")
        return y

    check_compiled(
        fn, lambda: (torch.randn(3),), backend=backend, graphs=1, breaks=1, capsys=capsys
    )


def test_gradients_flow_across_a_break(backend, capsys):
    def fn(x, w):
        h = (x @ w).tanh()
        print("hidden computed")
        return (h * x.sum()).sum(), h

    check_compiled(
        fn,
        lambda: (torch.randn(2, 3, requires_grad=True), torch.randn(3, 4, requires_grad=True)),
        backend=backend,
        graphs=2,
        breaks=1,
        grads=True,
        capsys=capsys,
    )


def test_resume_function_is_cached_across_many_calls(backend, capsys):
    def fn(x):
        y = x + 1
        print("tick")
        return y * y

    check_compiled(
        fn, lambda: (torch.randn(3),), backend=backend, graphs=2, breaks=1, calls=5, capsys=capsys
    )


def test_shape_change_recompiles_both_sides_of_a_break(backend, capsys):
    def fn(x):
        y = x.sin()
        print("mid")
        return y.cos()

    compiled = torchkiln.compile(fn, backend=backend)
    for n in (3, 5, 3, 5):
        x = torch.randn(n)
        assert_same(compiled(x), fn(x))
    assert_graph_count(backend, 4, "two shapes, each with a prefix and a resume graph")
    assert capsys.readouterr().out == "mid\n" * 8


def test_graph_break_counter_is_keyed_by_reason(backend, capsys):
    def fn(x):
        y = x.sin()
        print("one")
        n = y.sum().item()
        return y * 2, n

    check_compiled(fn, lambda: (seeded(3),), backend=backend, graphs=3, breaks=2, capsys=capsys)
    reasons = dict(torchkiln.counters["graph_break"])
    assert len(reasons) == 2, reasons
    assert any("print" in r for r in reasons), reasons
    assert any("item" in r for r in reasons), reasons
    assert all(count == 1 for count in reasons.values()), reasons


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).relu() * 2


class _BlockWithCall(_Block):
    """A class that overrides ``__call__`` and calls ``nn.Module``'s (transformers'
    ``GradientCheckpointingLayer`` does)."""

    def __call__(self, *args, **kwargs):
        return super().__call__(*args, **kwargs)


def _hooked(block: torch.nn.Module, calls: list) -> torch.nn.Module:
    """``block`` with a forward pre-hook the capture can't trace (FSDP2's are
    ``torch._dynamo.disable``-d): calling the block breaks the graph at the hook."""

    @torch._dynamo.disable
    def pre_hook(module, args):
        calls.append(args[0].shape)

    block.register_forward_pre_hook(pre_hook)
    return block


@pytest.mark.parametrize("block_type, breaks", [(_Block, 1), (_BlockWithCall, 2)])
def test_a_module_whose_hook_breaks_the_graph_still_runs_its_forward_compiled(
    backend, block_type, breaks
):
    """The break runs the hooks as they are, then the module's ``forward`` through dispatch
    (compiled: its own graph), not the whole module eagerly. A ``__call__`` override breaks
    once more: in its own frame, at ``super().__call__``."""
    torch.manual_seed(0)
    calls = []
    block = _hooked(block_type(), calls)

    def fn(x):
        return block(x.sin()) + 1

    check_compiled(fn, lambda: (torch.randn(2, 4),), backend=backend, graphs=3, breaks=breaks)
    assert len(calls) == 2 * 2  # two compiled calls, two eager ones: the hook ran once each
    assert any("relu" in gm.code for gm in backend.graphs)  # the block's forward, compiled
