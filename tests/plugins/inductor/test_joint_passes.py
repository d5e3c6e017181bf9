"""Joint-graph rewrites: max pools save int8 window offsets for their backward, not int64
indices, and train like eager."""

import copy

import pytest
import torch
import torch.nn.functional as F

import torchkiln
from torchkiln.aot import aot_autograd
from torchkiln_inductor.backend import compile_graph, decompositions
from torchkiln_inductor.joint_passes import partition


def saved_dtypes(run):
    """``run()``'s result and the dtypes of the tensors autograd saved for its backward
    (compile first: tracing saves tensors too)."""
    saved = []

    def pack(t):
        saved.append(t.dtype)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        return run(), saved


def check_training(fn, x):
    """A training step of ``fn`` (a tuple of tensors out) compiled against eager: outputs and
    the input's gradient. Returns the compiled callable and the dtypes it saved."""
    compiled = compile_graph(torch.fx.symbolic_trace(fn), [x])
    outs, saved = saved_dtypes(lambda: compiled(x))
    expected = fn(x)
    for a, e in zip(outs, expected):
        torch.testing.assert_close(a, e)
    floats = [(a, e) for a, e in zip(outs, expected) if e.is_floating_point()]
    grads = [torch.randn_like(e) for _, e in floats]
    (actual,) = torch.autograd.grad([a for a, _ in floats], x, grads)
    (eager,) = torch.autograd.grad([e for _, e in floats], x, grads)
    torch.testing.assert_close(actual, eager)
    return compiled, saved


def forward_artifact(compiled):
    """The compiled forward graph's code (a :class:`GraphArtifact`)."""
    ((_, plan, _),) = compiled.plans.values()
    return plan.forward.artifact


def test_conv_bn_relu_maxpool_model_trains_like_eager_saving_int8_offsets():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(3, 2, 1),
        torch.nn.Conv2d(8, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
    )
    twin = copy.deepcopy(model)
    x, x_twin = (torch.randn(2, 3, 32, 32).requires_grad_() for _ in range(2))
    with torch.no_grad():
        x_twin.copy_(x)
    compiled = torchkiln.compile(model, backend="inductor")
    compiled(x)  # compiles
    out, saved = saved_dtypes(lambda: compiled(x))
    expected = twin(x_twin)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    out.square().mean().backward()
    expected.square().mean().backward()
    torch.testing.assert_close(x.grad, x_twin.grad, rtol=1e-4, atol=1e-4)
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4)
    assert torch.int8 in saved and torch.int64 not in saved, saved


@pytest.mark.parametrize(
    "kernel, stride, padding, dilation, ceil_mode, shape",
    [
        (3, 2, 1, 1, False, (2, 3, 13, 14)),
        (3, 2, 1, 1, True, (2, 3, 13, 14)),
        ((2, 3), (1, 2), (1, 0), (2, 1), True, (2, 3, 13, 14)),
        (3, 1, 1, (1, 3), False, (1, 2, 9, 40)),
        (2, None, 0, 1, True, (3, 9, 9)),  # unbatched, stride = kernel
    ],
)
def test_max_pool_saves_int8_offsets_and_matches_eager(
    kernel, stride, padding, dilation, ceil_mode, shape
):
    def fn(x):
        return (F.max_pool2d(x * 2, kernel, stride, padding, dilation, ceil_mode),)

    # integer values: ties, where the first of the window's maxima is the one eager picks
    x = torch.randint(-4, 5, shape).float().requires_grad_()
    compiled, saved = check_training(fn, x)
    assert torch.int8 in saved and torch.int64 not in saved, saved
    assert "int64_t* out_" not in forward_artifact(compiled).cpp_source  # no int64 index buffer


def test_forward_graph_returns_int8_offsets():
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def fn(x):
        return (F.max_pool2d(x.relu(), 3, 2, 1),)

    x = torch.randn(2, 3, 16, 16).requires_grad_()
    aot_autograd(fw_compiler=record, decompositions=decompositions(), partition_fn=partition)(
        torch.fx.symbolic_trace(fn), [x]
    )
    fw_gm = graphs[0]
    output = next(n for n in fw_gm.graph.nodes if n.op == "output")
    dtypes = [n.meta["val"].dtype for n in output.args[0][1:]]  # past the pooled values
    assert torch.int8 in dtypes and torch.int64 not in dtypes, dtypes


def test_indices_used_elsewhere_keep_int64_and_stay_correct():
    """Returned indices, indices that max_unpool reads, windows over 127 elements and inputs
    too narrow for the offsets' modulus keep the int64 path; the plain pool beside them
    saves offsets."""

    def fn(x):
        pooled, returned = F.max_pool2d(x, 2, return_indices=True)
        values, unpool_index = F.max_pool2d(pooled * 3, 2, return_indices=True)
        unpooled = F.max_unpool2d(values, unpool_index, 2, output_size=pooled.shape[-2:])
        big = F.max_pool2d(x, (12, 12), (1, 4))  # 144 taps
        narrow = F.max_pool2d(x[..., :5], 3, 2, 1)
        plain = F.max_pool2d(x.relu(), 3, 2, 1)
        return pooled, returned, unpooled, big, narrow, plain

    _, saved = check_training(fn, torch.randn(2, 2, 16, 48).requires_grad_())
    assert saved.count(torch.int8) == 1 and saved.count(torch.int64) >= 3, saved


def test_triton_generator_trains_a_max_pool_from_offsets():
    pytest.importorskip("triton", reason="triton is not installed")

    def fn(x):
        return (F.max_pool2d(x.relu(), 3, 2, 1, ceil_mode=True),)

    x = torch.randn(1, 2, 9, 12).requires_grad_()
    compiled = compile_graph(torch.fx.symbolic_trace(fn), [x], cpu_backend="triton")
    (out,), saved = saved_dtypes(lambda: compiled(x))
    (expected,) = fn(x)
    torch.testing.assert_close(out, expected)
    grad = torch.randn_like(out)
    actual = torch.autograd.grad(out, x, grad)[0]
    torch.testing.assert_close(actual, torch.autograd.grad(expected, x, grad)[0])
    assert torch.int8 in saved and torch.int64 not in saved, saved
    assert forward_artifact(compiled).triton is not None
