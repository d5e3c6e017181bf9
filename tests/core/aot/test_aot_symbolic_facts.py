"""Size facts that tracing a symbolic graph adds to the capture's ShapeEnv.

The plan traced at compile time adds its facts before the capture turns them into
guards. Partitioner costs read sizes as hints, so they add none. A plan traced later
(another requires_grad pattern of a graph compiled by ``aot_autograd`` directly) checks
its own facts on every call and runs a plan traced for the call's sizes where one fails.
"""

import pytest
import torch

import torchkiln
from torchkiln.aot import aot_autograd

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def fresh_caches():
    torchkiln.reset()
    yield
    torchkiln.reset()


def neighbours(x):
    return (x[1:] * x[:-1]).sum()


def test_partition_costs_add_no_size_guards():
    """Min-cut capacities and the small-reduction rule read hints: a training graph traced at
    6 rows still serves 2000 (before, ``s0*(s1 - 1) <= 4096`` was guarded and recompiled)."""
    compiled = torchkiln.compile(neighbours, backend="aot_eager_decomp_partition", dynamic=True)
    for rows in (6, 2000, 9):
        x = torch.randn(rows, 5, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_()
        compiled(x).backward()
        neighbours(x_ref).backward()
        torch.testing.assert_close(x.grad, x_ref.grad)
    assert torchkiln.counters["frames"]["total"] == 1


def captured(fn, *example):
    """The symbolic graph capture makes of ``fn`` (dynamic=True) and its example inputs."""
    graphs = []

    def keep(gm, example_inputs):
        graphs.append((gm, example_inputs))
        return gm.forward

    torchkiln.compile(fn, backend=keep, dynamic=True)(*example)
    return graphs[0]


def relu_sum(x):
    return torch.relu(x).sum()


def size_asking_threshold_backward(grad, out, threshold):
    """A correct decomposition whose trace asks a size question (adds ``s0 > 4``)."""
    if out.shape[0] > 4:
        return torch.where(out <= threshold, 0.0, grad)
    return grad * (out > threshold)


def test_a_plan_traced_after_compile_time_checks_its_new_size_facts():
    gm, example = captured(relu_sum, torch.randn(6, 3))
    compiled = aot_autograd(
        lambda g, _: g.forward,
        decompositions={aten.threshold_backward.default: size_asking_threshold_backward},
    )(gm, example)
    specializations = torchkiln.counters["static_shapes"]["specializations"]
    for rows, specialized in ((6, 0), (8, 0), (3, 1), (2, 2), (3, 2)):
        x = torch.randn(rows, 3, requires_grad=True)  # the training plan: traced on first use
        x_ref = x.detach().clone().requires_grad_()
        (out,) = compiled(x)
        out.backward()
        relu_sum(x_ref).backward()
        torch.testing.assert_close(out, relu_sum(x_ref))
        torch.testing.assert_close(x.grad, x_ref.grad)
        got = torchkiln.counters["static_shapes"]["specializations"] - specializations
        assert got == specialized, f"{rows} rows: {got} plans for concrete sizes"
