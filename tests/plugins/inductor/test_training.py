"""Forward and backward graphs through the AOT layer match eager, gradients included."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import torchkiln
from torchkiln_inductor.backend import compile_graph
from torchkiln_inductor.graph import _channels_last_backward_is_safe


def mlp(x, w1, b1, lw, lb, w2, b2):
    h = F.gelu(F.layer_norm(F.linear(x, w1, b1), (w1.shape[0],), lw, lb))
    h = F.dropout(h, 0.0, training=True)
    return (torch.log_softmax(F.linear(h, w2, b2), -1).sum(-1).mean(),)


def params():
    torch.manual_seed(0)
    shapes = [(48, 32), (48,), (48,), (48,), (10, 48), (10,)]
    return [(torch.randn(s) * 0.2).requires_grad_() for s in shapes]


def test_training_step_matches_eager_forward_and_gradients():
    ps, x = params(), torch.randn(16, 32)
    compiled = compile_graph(torch.fx.symbolic_trace(mlp), [x, *ps])
    (loss,) = compiled(x, *ps)
    (expected,) = mlp(x, *ps)
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-4)
    grads = torch.autograd.grad(loss, ps)
    expected_grads = torch.autograd.grad(expected, ps)
    for g, e in zip(grads, expected_grads):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)


def test_inference_under_no_grad_matches_eager():
    ps, x = params(), torch.randn(16, 32)
    with torch.no_grad():
        compiled = compile_graph(torch.fx.symbolic_trace(mlp), [x, *ps])
        torch.testing.assert_close(compiled(x, *ps)[0], mlp(x, *ps)[0], rtol=1e-4, atol=1e-4)


def check_gradients(fn, *inputs, rtol=1e-4, atol=1e-4):
    """A training step of ``fn`` under the inductor backend against eager: output and input
    gradients."""
    (out,) = compile_graph(torch.fx.symbolic_trace(fn), list(inputs))(*inputs)
    (expected,) = fn(*inputs)
    torch.testing.assert_close(out, expected, rtol=rtol, atol=atol)
    grad = torch.randn_like(out)
    actual = torch.autograd.grad(out, inputs, grad)
    for a, e in zip(actual, torch.autograd.grad(expected, inputs, grad)):
        torch.testing.assert_close(a, e, rtol=rtol, atol=atol)


def test_strided_slices_backward_matches_eager():
    """Their backward is a slice_scatter whose start is not a multiple of the step (Swin)."""

    def fn(x):
        merged = torch.cat([x[:, 0::2, 1::2], x[:, 1::2, 0::2]], -1) * 2
        return (merged + x[:, 1:-1:3, -5::3].sum() + x[1:, -3::2, ::4].sum(),)

    check_gradients(fn, torch.randn(3, 10, 12, requires_grad=True))


def test_diagonal_scatter_and_the_backward_of_diagonal_write_the_diagonal():
    """``diagonal_scatter``'s decomposition mutates a clone below the joint trace's
    functionalization: decomposed, the inductor dropped the write (``KEEP_WHOLE``)."""

    def scatter(x, s):
        return (torch.diagonal_scatter(x, s.exp(), 1) * 2,)

    def diag(x):
        return (torch.diagonal(x, -1) * 3.0,)

    x, s = torch.randn(5, 5, requires_grad=True), torch.randn(4, requires_grad=True)
    check_gradients(scatter, x, s)
    check_gradients(diag, x)


def test_one_by_one_convolutions_that_stride_or_pad_have_eager_gradients():
    """oneDNN's backward of such a convolution (RepVGG, ResNet downsampling) on channels-last
    tensors gives wrong weight gradients and writes past its buffers: run it in a child
    process, which that can crash."""
    script = textwrap.dedent(
        """
        import torch, torch.nn.functional as F
        from test_training import check_gradients

        torch.manual_seed(0)
        for c_in, c_out, size, stride, padding, groups in [
            (3, 4, 32, 2, 0, 1), (3, 48, 64, 2, 0, 1), (4, 8, 16, 1, 1, 2), (6, 6, 15, 3, 0, 3)
        ]:
            check_gradients(
                lambda x, w: (F.conv2d(x, w, None, stride, padding, 1, groups),),
                torch.randn(2, c_in, size, size, requires_grad=True),
                torch.randn(c_out, c_in // groups, 1, 1, requires_grad=True),
            )
        """
    )
    child = subprocess.run(
        [sys.executable, "-c", script], cwd=Path(__file__).parent, capture_output=True, text=True
    )
    assert child.returncode == 0, child.stderr[-4000:]


def test_only_the_cpu_backward_of_strided_one_by_one_convolutions_runs_contiguous():
    """The oneDNN bug above is the CPU's: on a GPU, contiguous operands would cost cuDNN a
    layout conversion on each side of every downsampling convolution's backward."""
    args = ((64, 32, 1, 1), [2, 2], [0, 0])
    assert not _channels_last_backward_is_safe(*args, torch.device("cpu"))
    assert _channels_last_backward_is_safe(*args, torch.device("cuda"))
    assert _channels_last_backward_is_safe((64, 32, 3, 3), [2, 2], [1, 1], torch.device("cpu"))


def test_convolution_weights_are_converted_once_and_saved_converted(caplog):
    """The forward converts each weight to channels-last for its convolution and saves that
    copy: the backward reads it as it is (no second conversion), and a weight shared by two
    convolutions is converted once."""
    from torchkiln import logs

    def fn(x, w1, w2, b):
        y = F.relu(F.conv2d(x, w1, b, padding=1))
        return (F.conv2d(F.conv2d(y, w2, padding=1), w2, padding=1),)

    torch.manual_seed(0)
    x = torch.randn(2, 4, 6, 6, requires_grad=True)
    w1, w2 = torch.randn(8, 4, 3, 3), torch.randn(8, 8, 3, 3)
    b = torch.randn(8)
    logs.set_logs("output_code")
    try:
        with caplog.at_level("INFO", logger="torchkiln"):
            check_gradients(fn, x, w1.requires_grad_(), w2.requires_grad_(), b.requires_grad_())
    finally:
        logs.set_logs("")
    forward, backward = caplog.text.split("def call(args):")[1:3]
    assert forward.count("aten_convolution_default(") == 3
    for weight in (w1, w2):
        strides = tuple(weight.contiguous(memory_format=torch.channels_last).stride())
        converted = f"_empty({tuple(weight.shape)}, {strides}"
        assert forward.count(converted) == 1  # once, however many convolutions use it
        assert converted not in backward  # the saved copy comes in channels-last
        assert f".stride() != {strides}" in backward


@pytest.mark.parametrize("activation", [torch.relu, torch.sigmoid, torch.exp])
def test_an_output_saved_for_backward_keeps_eager_strides(activation):
    """``activation(x + y)`` of a transposed and a contiguous input takes the first's layout
    in eager; saved for the backward too, its buffer had been made row-major before the
    output took eager's layout (found by the guard fuzz's layout mutations)."""
    torchkiln.reset()

    def fn(x, y):
        return activation(x + y)

    compiled = torchkiln.compile(fn, backend="inductor")
    x = torch.randn(3, 2).t().requires_grad_()
    y = torch.randn(2, 3, requires_grad=True)
    out, expected = compiled(x, y), fn(x, y)
    torch.testing.assert_close(out, expected)
    assert out.stride() == expected.stride() == (1, 2)
    out.sum().backward()
    grads = [x.grad, y.grad]
    x.grad = y.grad = None
    expected.sum().backward()
    torch.testing.assert_close(grads, [x.grad, y.grad])
