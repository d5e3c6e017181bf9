"""Spec (issue 17, item 9): the steps that Python 3.11, 3.12 and 3.13 spell differently.

3.13 moves a call's NULL above the callable, passes keyword names on the stack
(``CALL_KW``), splits f-string formatting in three (``CONVERT_VALUE``,
``FORMAT_SIMPLE``, ``FORMAT_WITH_SPEC``), converts to ``bool`` before a jump
(``TO_BOOL``, ``COMPARE_OP`` with its bool bit) and sets a new function's
defaults and closure one by one (``SET_FUNCTION_ATTRIBUTE``). Each case is
traced, or broken at, the same way on every version: same graphs, same breaks,
same results as eager.
"""

import sys

import pytest
import torch

from kiln_testing import check_compiled


def keyword_call_at_a_break(x):
    y = x.sin()
    print("y:", y.shape[0], sep="|", end="!\n")
    return y.cos()


def star_call_at_a_break(x):
    y = x.sin()
    print(*["y", y.shape[0]], **{"sep": "|"})
    return y.cos()


def method_star_call_at_a_break(x):
    y = x.sin()
    sys.stdout.write(*[f"{y.shape[0]}\n"])
    return y.cos()


@pytest.mark.parametrize(
    "fn", [keyword_call_at_a_break, star_call_at_a_break, method_star_call_at_a_break]
)
def test_a_call_at_a_break_runs_with_its_arguments_and_the_rest_is_compiled(backend, capsys, fn):
    check_compiled(
        fn, lambda: (torch.randn(5),), backend=backend, graphs=2, breaks=1, capsys=capsys
    )


def repr_with_spec(x):
    y = x.sin()
    text = f"{y!r:>90}"
    return y.cos(), text


def tensor_with_spec(x):
    y = x.sin().sum()
    text = f"{y:.3f}"
    return y.cos(), text


def tensor_plain(x):
    y = x.sin()
    text = f"[{y}]"
    return y.cos(), text


@pytest.mark.parametrize("fn", [repr_with_spec, tensor_with_spec, tensor_plain])
def test_formatting_a_tensor_breaks_once_and_gives_eager_text(backend, fn):
    """The text is a constant of the resume function: the same values each call."""
    check_compiled(fn, lambda: (torch.linspace(-1, 1, 5),), backend=backend, graphs=2, breaks=1)


def branch_on_a_numpy_comparison(x):
    total = x.sum().numpy()
    if total > 0:  # numpy's bool_, not bool: 3.13's jump at the break needs a real bool
        return x * 2
    return x * 3


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["positive", "negative"])
def test_if_on_a_comparison_run_at_a_break_takes_the_eager_branch(backend, sign):
    check_compiled(
        branch_on_a_numpy_comparison,
        lambda: (torch.rand(4) * sign,),
        backend=backend,
        graphs=(1, 2),  # 3.13 breaks at the compare (its bool conversion), then runs the rest
        breaks=1,
    )


def nested_function_with_defaults_and_closure(x):
    scale = 2.0

    def inner(y, shift=1.0, *, power=2):
        return (y * scale + shift) ** power

    a, b = inner(x), inner(x, 0.5, power=3)
    a, b = b, a
    return a - b if a is not b else a


def test_nested_function_with_defaults_keyword_defaults_and_a_closure_in_one_graph(backend):
    check_compiled(
        nested_function_with_defaults_and_closure,
        lambda: (torch.randn(3, requires_grad=True),),
        backend=backend,
        graphs=1,
        fullgraph=True,
        grads=True,
    )
