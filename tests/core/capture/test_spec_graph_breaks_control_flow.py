"""Spec (issue 4): graph breaks inside loops, branches, ``with`` blocks, try/finally and calls.

The counting rule is the one in ``test_spec_graph_breaks_basic``: one graph
per stretch of tensor operations between breaks, one break counted each time
capture meets one. A break inside a loop body is met once per iteration (each
resume function continues the loop, with the loop state as its input), so a
loop of ``n`` iterations with one break in its body gives ``n`` breaks and
``n + 1`` graphs on the first call, and nothing new on the next call.
"""

import zlib

import pytest
import torch

import torchkiln
from kiln_testing import assert_graph_count, check_compiled


def test_print_inside_a_for_loop_over_range(backend, capsys):
    def fn(x):
        for i in range(3):
            x = x * 2
            print("iteration", i)
            x = x + 1
        return x

    check_compiled(
        fn, lambda: (torch.randn(3),), backend=backend, graphs=4, breaks=3, capsys=capsys
    )


def test_print_inside_a_for_loop_over_a_list_of_tensors(backend, capsys):
    def fn(xs):
        acc = xs[0] * 0
        for t in xs:
            acc = acc + t.sin()
            print("seen", t.shape)
        return acc.cos()

    check_compiled(
        fn,
        lambda: ([torch.randn(2) for _ in range(3)],),
        backend=backend,
        graphs=4,
        breaks=3,
        capsys=capsys,
    )


def test_print_inside_a_while_loop_with_a_python_counter(backend, capsys):
    def fn(x):
        i = 0
        while i < 3:
            x = x.sin()
            print("step", i)
            i += 1
        return x.cos()

    check_compiled(
        fn, lambda: (torch.randn(3),), backend=backend, graphs=4, breaks=3, capsys=capsys
    )


def test_data_dependent_if_inside_a_for_loop(backend):
    def fn(x):
        for _ in range(2):
            x = x * 1.5
            if x.abs().sum() >= 0:
                x = x - 1
        return x

    check_compiled(fn, lambda: (torch.randn(4),), backend=backend, graphs=3, breaks=2)


def test_break_in_zip_loop_keeps_the_iterator_alive(backend, capsys):
    def fn(xs, ws):
        out = torch.zeros(2)
        for x, w in zip(xs, ws):
            out = out + x * w
            print("pair", w)
        return out * 2

    check_compiled(
        fn,
        lambda: ([torch.randn(2), torch.randn(2)], [0.5, -1.0]),
        backend=backend,
        graphs=3,
        breaks=2,
        capsys=capsys,
    )


def test_break_in_enumerate_loop_over_a_dict(backend, capsys):
    def fn(d):
        total = 0
        for i, (name, t) in enumerate(d.items()):
            total = total + t * i
            print(i, name)
        return total + 1

    check_compiled(
        fn,
        lambda: ({"a": torch.randn(2), "b": torch.randn(2)},),
        backend=backend,
        graphs=3,
        breaks=2,
        capsys=capsys,
    )


@pytest.mark.parametrize("flag", [True, False], ids=["if_branch", "else_branch"])
def test_break_inside_one_branch_of_a_python_if(backend, capsys, flag):
    def fn(x, verbose):
        if verbose:
            x = x.sin()
            print("verbose")
            x = x + 1
        else:
            x = x.cos()
        return x * 2

    check_compiled(
        fn,
        lambda: (torch.randn(3), flag),
        backend=backend,
        graphs=2 if flag else 1,
        breaks=1 if flag else 0,
        capsys=capsys,
    )


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["then", "else"])
def test_break_inside_a_data_dependent_branch(backend, capsys, sign):
    def fn(x):
        y = x * 3
        if y.mean() > 0:
            y = y.exp()
            print("positive")
            y = y - 1
        else:
            y = y.abs()
        return y.sum()

    check_compiled(
        fn,
        lambda: ((torch.rand(4) + 0.1) * sign,),
        backend=backend,
        graphs=3 if sign > 0 else 2,
        breaks=2 if sign > 0 else 1,
        capsys=capsys,
    )


def test_break_inside_no_grad_block_keeps_the_block_no_grad(backend, capsys):
    def fn(x):
        with torch.no_grad():
            y = x * 2
            print("inside no_grad")
            z = y + x
        return z, x.sin()

    check_compiled(
        fn,
        lambda: (torch.randn(3, requires_grad=True),),
        backend=backend,
        graphs=2,
        breaks=1,
        capsys=capsys,
    )


def test_eager_part_inside_no_grad_block_sees_grad_disabled(backend, capsys):
    def fn(x):
        with torch.no_grad():
            y = x.cos()
            print("grad enabled:", torch.is_grad_enabled())
            y = y * x
        print("after block:", torch.is_grad_enabled())
        return y, x * 2

    check_compiled(
        fn,
        lambda: (torch.randn(3, requires_grad=True),),
        backend=backend,
        graphs=3,
        breaks=2,
        capsys=capsys,
    )


def test_gradients_after_a_no_grad_block_with_a_break(backend, capsys):
    def fn(x, w):
        with torch.no_grad():
            scale = x.abs().mean()
            print("scale computed")
        return (x @ w * scale).sum()

    check_compiled(
        fn,
        lambda: (torch.randn(2, 3, requires_grad=True), torch.randn(3, 2, requires_grad=True)),
        backend=backend,
        graphs=2,
        breaks=1,
        grads=True,
        capsys=capsys,
    )


def test_break_inside_enable_grad_inside_no_grad(backend, capsys):
    def fn(x):
        with torch.no_grad():
            a = x + 1
            with torch.enable_grad():
                b = x * 2
                print("enable_grad:", torch.is_grad_enabled())
                c = b * x
            d = c + a
        return a, b, c, d

    check_compiled(
        fn,
        lambda: (torch.randn(3, requires_grad=True),),
        backend=backend,
        graphs=2,
        breaks=1,
        capsys=capsys,
    )


def test_break_inside_try_finally(backend, capsys):
    def fn(x, log):
        try:
            y = x.sin()
            print("in try")
            y = y + 1
        finally:
            log.append("finally")
        return y * 2

    check_compiled(
        fn, lambda: (torch.randn(3), []), backend=backend, graphs=2, breaks=1, capsys=capsys
    )


def test_finally_runs_when_the_eager_part_raises(backend):
    def fn(x, log):
        try:
            y = x.sin()
            log.append(zlib.crc32("not bytes"))
        finally:
            log.append("finally")
        return y

    compiled = torchkiln.compile(fn, backend=backend)
    eager_log, compiled_log = [], []
    with pytest.raises(TypeError):
        fn(torch.randn(3), eager_log)
    with pytest.raises(TypeError):
        compiled(torch.randn(3), compiled_log)
    assert compiled_log == eager_log == ["finally"]
    assert_graph_count(backend, 1, "(the prefix graph; the raising call breaks)")


def test_list_of_tensors_live_across_a_break(backend, capsys):
    def fn(x):
        parts = [x.sin(), x.cos()]
        print("parts ready")
        return parts[0] * parts[1], parts

    check_compiled(
        fn, lambda: (torch.randn(3),), backend=backend, graphs=2, breaks=1, capsys=capsys
    )


def test_dict_and_tuple_live_across_a_break(backend, capsys):
    def fn(x):
        d = {"a": x + 1, "n": x.shape[0]}
        t = (x * 2, None, "tag")
        print("built")
        return d["a"] * t[0] + d["n"], t[2]

    check_compiled(
        fn, lambda: (torch.randn(3),), backend=backend, graphs=2, breaks=1, capsys=capsys
    )


def test_partially_built_list_on_the_stack_at_a_break(backend, capsys):
    def noisy(t):
        print("noisy called")
        return t

    def fn(x):
        return torch.cat([x.sin(), noisy(x.cos()), x.tanh()])

    check_compiled(
        fn,
        lambda: (torch.randn(3),),
        backend=backend,
        graphs=2,
        breaks=(1, 2),
        capsys=capsys,
    )


def test_break_in_the_middle_of_a_call_argument_list(backend):
    def fn(x):
        return torch.stack((x * 2, x.sum().item() * torch.ones(3), x + 1))

    check_compiled(
        fn,
        lambda: (torch.linspace(-1.0, 1.0, 3),),
        backend=backend,
        graphs=2,
        breaks=1,
    )


def test_break_inside_an_inlined_function(backend, capsys):
    def helper(t):
        u = t.sin()
        print("inside helper")
        return u.cos()

    def fn(x):
        a = x + 1
        b = helper(a)
        return b * 2

    # Either the caller breaks at the call site and helper runs as its own
    # compiled frame (4 graphs, 2 breaks), or the break is resumed inside the
    # inlined call (2 graphs, 1 break); both are allowed by the spec.
    check_compiled(
        fn,
        lambda: (torch.randn(3),),
        backend=backend,
        graphs=(2, 4),
        breaks=(1, 2),
        capsys=capsys,
    )


def test_break_inside_a_function_inlined_two_levels_deep(backend, capsys):
    def inner(t):
        print("inner")
        return t * 3

    def middle(t):
        return inner(t.exp()) + 1

    def fn(x):
        return middle(x.sin()).cos()

    # Call-site breaks: fn, middle and inner each compiled on their own (5
    # graphs, 3 breaks); nested resume: one break (2 graphs).
    check_compiled(
        fn, lambda: (torch.randn(3),), backend=backend, graphs=(2, 5), breaks=(1, 3), capsys=capsys
    )


def test_data_dependent_branch_inside_an_inlined_method(backend):
    class Gate:
        def apply(self, t):
            if t.sum() > 0:
                return t * 2
            return t * -2

    gate = Gate()

    def fn(x):
        return gate.apply(x.abs() + 0.1) + 1

    check_compiled(fn, lambda: (torch.randn(4),), backend=backend, graphs=(2, 4), breaks=(1, 2))
