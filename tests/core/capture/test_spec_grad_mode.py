"""Spec (issue 3): grad-mode blocks inside the function are honoured in the graph.

Outputs must carry the same ``requires_grad`` as eager (``assert_same``
checks it) and gradients must match; the grad mode at call time is guarded
on (a call under ``no_grad`` after a call with grad recompiles once).
"""

import pytest
import torch

import torchkiln
from kiln_testing import assert_graph_count, assert_same, check_compiled


def leaf(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, requires_grad=True)


def test_no_grad_block_inside_the_function(backend):
    def fn(x):
        with torch.no_grad():
            y = x * 2
        return y, x * 3

    check_compiled(fn, lambda: (leaf(3),), backend=backend, graphs=1)


def test_no_grad_part_is_a_constant_for_backward(backend):
    def fn(x):
        with torch.no_grad():
            scale = x.abs().max()
        return (x * scale).sin()

    check_compiled(fn, lambda: (leaf(4),), backend=backend, graphs=1, grads=True)


def test_enable_grad_inside_no_grad_block(backend):
    def fn(x):
        with torch.no_grad():
            a = x + 1
            with torch.enable_grad():
                b = x * 2
            c = x - 1
        return a, b, c

    check_compiled(fn, lambda: (leaf(3),), backend=backend, graphs=1)


@pytest.mark.parametrize("enabled", [True, False])
def test_set_grad_enabled_with_a_python_flag(backend, enabled):
    def fn(x, flag):
        with torch.set_grad_enabled(flag):
            y = x.exp()
        return y, x.cos()

    check_compiled(fn, lambda: (leaf(3), enabled), backend=backend, graphs=1)


def test_set_grad_enabled_false_as_a_call(backend):
    def fn(x):
        prev = torch.is_grad_enabled()
        torch.set_grad_enabled(False)
        y = x * 2
        torch.set_grad_enabled(prev)
        return y, x * 4

    check_compiled(fn, lambda: (leaf(3),), backend=backend, graphs=1)


def test_is_grad_enabled_read_inside_the_function(backend):
    def fn(x):
        with torch.no_grad():
            inside = torch.is_grad_enabled()
        return x * (2 if inside else 3), torch.is_grad_enabled()

    check_compiled(fn, lambda: (leaf(3),), backend=backend, graphs=1)


def test_no_grad_decorated_helper_is_inlined(backend):
    @torch.no_grad()
    def stats(t):
        return t.mean(), t.std()

    def fn(x):
        mean, std = stats(x)
        return (x - mean) / std

    check_compiled(fn, lambda: (leaf(6),), backend=backend, graphs=1, grads=True)


def test_grad_mode_restored_after_the_function(backend):
    def fn(x):
        with torch.no_grad():
            y = x + 1
        return y

    check_compiled(fn, lambda: (leaf(3),), backend=backend, graphs=1)
    assert torch.is_grad_enabled(), "grad mode was left disabled after the compiled call"


def test_detach_and_requires_grad_of_mixed_outputs(backend):
    def fn(x, w):
        h = x @ w
        return h.detach() * 2, h.relu(), x.sum()

    check_compiled(
        fn, lambda: (torch.randn(2, 3), leaf(3, 4)), backend=backend, graphs=1, grads=True
    )


def test_gradients_through_several_inputs(backend):
    def fn(x, y, z):
        return (x * y).sigmoid() + (y / (z.abs() + 1)).tanh()

    check_compiled(fn, lambda: (leaf(4), leaf(4), leaf(4)), backend=backend, graphs=1, grads=True)


def test_call_under_no_grad_recompiles_once(backend):
    def fn(x):
        return x.sin() * 2

    compiled = torchkiln.compile(fn, backend=backend)
    x = leaf(3)
    assert_same(compiled(x), fn(x))
    with torch.no_grad():
        assert_same(compiled(x), fn(x))
    assert_graph_count(backend, 2, "after a call with grad and a call under no_grad")
    assert_same(compiled(x), fn(x))
    with torch.no_grad():
        assert_same(compiled(x), fn(x))
    assert_graph_count(backend, 2, "after calling again in both grad modes")


def test_enable_grad_inside_a_function_called_under_no_grad(backend):
    def fn(x):
        with torch.enable_grad():
            y = x * x
        return y, x + 1

    compiled = torchkiln.compile(fn, backend=backend)
    for _ in range(2):
        x = leaf(3)
        with torch.no_grad():
            actual, expected = compiled(x), fn(x)
        assert_same(actual, expected)
    assert_graph_count(backend, 1)


def test_backward_through_a_no_grad_mask(backend):
    def fn(x):
        with torch.no_grad():
            mask = (x > 0).float()
        return (x * mask).pow(2).sum()

    check_compiled(fn, lambda: (leaf(6),), backend=backend, graphs=1, grads=True)


class Rotary(torch.nn.Module):
    """As in transformers' Llama: a forward decorated with ``@torch.no_grad()``."""

    @torch.no_grad()
    def forward(self, x):
        return x.cos() * 2


def test_module_forward_decorated_with_no_grad_is_captured(backend):
    model = Rotary()
    x = torch.randn(4, requires_grad=True)
    compiled = torchkiln.compile(model, backend=backend)
    out = compiled(x)
    torch.testing.assert_close(out, model(x))
    assert not out.requires_grad
    assert torchkiln.counters["eager_fallback"] == {}
