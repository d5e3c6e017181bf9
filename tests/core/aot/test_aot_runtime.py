"""The autograd.Function runtime: lazy backward, grad modes, retain_graph, double backward, RNG."""

from __future__ import annotations

import weakref

import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F
from aot_testing import RecordingCompiler

from torchkiln.aot import aot_autograd, simple_partition
from torchkiln.backends.aot import aot_eager, aot_eager_decomp_partition


def sin_times(x, y):
    return torch.sin(x) * y


def _compile(fn, inputs):
    fw, bw, inference = RecordingCompiler(), RecordingCompiler(), RecordingCompiler()
    compiled = aot_autograd(fw_compiler=fw, bw_compiler=bw, inference_compiler=inference)(
        fx.symbolic_trace(fn), inputs
    )
    return compiled, fw, bw, inference


def test_backward_is_compiled_on_first_backward_then_reused() -> None:
    x, y = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    compiled, _, bw, _ = _compile(sin_times, [x, y])
    out = compiled(x, y)
    assert len(bw.graphs) == 0
    out.sum().backward()
    compiled(x, y).sum().backward()
    assert len(bw.graphs) == 1


def test_gradients_match_eager() -> None:
    x, y = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    compiled, *_ = _compile(sin_times, [x, y])
    grads = torch.autograd.grad(compiled(x, y).sum(), [x, y])
    expected = torch.autograd.grad(sin_times(x, y).sum(), [x, y])
    torch.testing.assert_close(grads, expected)


def test_input_not_requiring_grad_gets_no_gradient() -> None:
    x, y = torch.randn(4, requires_grad=True), torch.randn(4)
    compiled, *_ = _compile(sin_times, [x, y])
    compiled(x, y).sum().backward()
    assert y.grad is None
    torch.testing.assert_close(x.grad, torch.cos(x.detach()) * y)


def cos_and_mask(x):
    return x.cos(), x > 0


def test_output_not_requiring_grad_is_returned_without_grad() -> None:
    x = torch.randn(6, requires_grad=True)
    compiled, *_ = _compile(cos_and_mask, [x])
    value, mask = compiled(x)
    assert value.requires_grad and not mask.requires_grad
    assert torch.equal(mask, x > 0)
    value.sum().backward()
    torch.testing.assert_close(x.grad, -torch.sin(x.detach()))


def test_no_grad_call_compiles_only_an_inference_graph() -> None:
    x, y = torch.randn(4, requires_grad=True), torch.randn(4)
    with torch.no_grad():
        compiled, fw, bw, inference = _compile(sin_times, [x, y])
        out = compiled(x, y)
    assert (len(inference.graphs), len(fw.graphs), len(bw.graphs)) == (1, 0, 0)
    assert not out.requires_grad


def test_call_with_grad_after_no_grad_compile_builds_training_graphs() -> None:
    x, y = torch.randn(4, requires_grad=True), torch.randn(4)
    with torch.no_grad():
        compiled, fw, _, _ = _compile(sin_times, [x, y])
    compiled(x, y).sum().backward()
    assert len(fw.graphs) == 1
    torch.testing.assert_close(x.grad, torch.cos(x.detach()) * y)


def test_retain_graph_allows_a_second_backward() -> None:
    x, y = torch.randn(4, requires_grad=True), torch.randn(4)
    compiled, *_ = _compile(sin_times, [x, y])
    loss = compiled(x, y).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    torch.testing.assert_close(x.grad, 2 * torch.cos(x.detach()) * y)


def test_second_backward_without_retain_graph_fails_as_in_eager() -> None:
    x, y = torch.randn(4, requires_grad=True), torch.randn(4)
    compiled, *_ = _compile(sin_times, [x, y])
    loss = compiled(x, y).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()


def test_double_backward_raises_a_clear_error() -> None:
    x, y = torch.randn(4, requires_grad=True), torch.randn(4)
    compiled, *_ = _compile(sin_times, [x, y])
    (gx,) = torch.autograd.grad(compiled(x, y).sum(), [x], create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        gx.sum().backward()


def dropout_scale(x):
    return F.dropout(x, 0.5, training=True) * 3


@pytest.mark.parametrize(
    "backend", [aot_eager, aot_eager_decomp_partition], ids=lambda b: b.__name__
)
def test_dropout_draws_the_same_mask_as_eager_under_a_fixed_seed(backend) -> None:
    x = torch.randn(64, requires_grad=True)
    compiled = backend(fx.symbolic_trace(dropout_scale), [x])
    torch.manual_seed(0)
    expected = dropout_scale(x)
    (expected_grad,) = torch.autograd.grad(expected.sum(), [x])
    torch.manual_seed(0)
    actual = compiled(x)
    (actual_grad,) = torch.autograd.grad(actual.sum(), [x])
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(actual_grad, expected_grad)


def test_symbolic_example_inputs_give_one_training_graph_for_every_size() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = FakeTensorMode(shape_env=ShapeEnv())
    x = mode.from_tensor(torch.randn(4, 4), static_shapes=False).requires_grad_()
    y = mode.from_tensor(torch.randn(4, 4), static_shapes=False)
    fw, bw = RecordingCompiler(), RecordingCompiler()
    compiled = aot_autograd(fw_compiler=fw, bw_compiler=bw)(fx.symbolic_trace(sin_times), [x, y])
    for n in (3, 6):
        a, b = torch.randn(n, 5, requires_grad=True), torch.randn(n, 5)
        out = compiled(a, b)
        torch.testing.assert_close(out, sin_times(a, b))
        grad = torch.autograd.grad(out.sum(), a)
        torch.testing.assert_close(grad, torch.autograd.grad(sin_times(a, b).sum(), a))
    assert len(fw.graphs) == len(bw.graphs) == 1


def times(x, n):
    return x * n


def test_a_new_value_of_a_non_tensor_input_gets_its_own_graph() -> None:
    x = torch.randn(3, requires_grad=True)
    compiled, fw, _, _ = _compile(times, [x, 3])
    torch.testing.assert_close(compiled(x, 3), x * 3)
    torch.testing.assert_close(compiled(x, 4), x * 4)
    assert len(fw.graphs) == 2


def test_backward_is_compiled_for_the_strides_the_forward_saved() -> None:
    """A forward compiler may keep saved values in its own layout (not the user outputs):
    the backward compiler then sees those strides, and gradients are unchanged."""

    def saved_channels_last(gm: fx.GraphModule, example_inputs: list):
        num_user = gm.meta["num_user_outputs"]

        def run(*args):
            outs = list(gm(*args))
            return [
                o.contiguous(memory_format=torch.channels_last) if k >= num_user else o
                for k, o in enumerate(outs)
            ]

        return run

    def fn(x, w):
        return (x * w).sin().sum(1)

    x, w = torch.randn(2, 3, 4, 5, requires_grad=True), torch.randn(1, 3, 1, 1, requires_grad=True)
    bw = RecordingCompiler()
    compiled = aot_autograd(fw_compiler=saved_channels_last, bw_compiler=bw)(
        fx.symbolic_trace(fn), [x, w]
    )
    grads = torch.autograd.grad(compiled(x, w).sum(), [x, w])
    torch.testing.assert_close(grads, torch.autograd.grad(fn(x, w).sum(), [x, w]))
    saved = [t for t in bw.example_inputs[0] if t.dim() == 4 and t.shape[1] == 3 and t.shape[2] > 1]
    assert saved and all(t.is_contiguous(memory_format=torch.channels_last) for t in saved)
    assert not any(t.is_contiguous() for t in saved)


class _BoxedBackward:
    """A backward compiler whose callable takes its arguments boxed, and records which
    of them were still alive elsewhere once it emptied the list."""

    def __init__(self) -> None:
        self.still_alive: list[bool] = []

    def __call__(self, gm: fx.GraphModule, example_inputs: list) -> _BoxedBackward:
        self.gm = gm
        return self

    def call_boxed(self, args: list) -> tuple:
        values = [a.clone() for a in args]
        refs = [weakref.ref(a) for a in args]
        args.clear()
        self.still_alive = [ref() is not None for ref in refs]
        return self.gm(*values)


def test_a_boxed_backward_holds_the_only_references_to_the_saved_values() -> None:
    x = torch.randn(8, requires_grad=True)

    def fn(x):
        return (x * 2).sin()  # saves x * 2, an intermediate nothing else holds

    bw = _BoxedBackward()
    compiled = aot_autograd(
        fw_compiler=lambda gm, _: gm, bw_compiler=bw, partition_fn=simple_partition
    )(fx.symbolic_trace(fn), [x])
    compiled(x).sum().backward()
    assert bw.still_alive[:-1] == [False] * (len(bw.still_alive) - 1)  # the saved values
    torch.testing.assert_close(x.grad, 2 * torch.cos(x.detach() * 2))


def test_retain_graph_keeps_the_saved_values_for_a_second_backward() -> None:
    x = torch.randn(8, requires_grad=True)
    bw = _BoxedBackward()
    compiled = aot_autograd(
        fw_compiler=lambda gm, _: gm, bw_compiler=bw, partition_fn=simple_partition
    )(fx.symbolic_trace(lambda x: (x * 2).sin()), [x])
    out = compiled(x).sum()
    out.backward(retain_graph=True)
    assert bw.still_alive[0]
    out.backward()
    torch.testing.assert_close(x.grad, 4 * torch.cos(x.detach() * 2))
