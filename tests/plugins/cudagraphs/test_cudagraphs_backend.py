"""The cudagraphs backend: AOT forward and backward graphs recorded, results as eager's.

Graphs are compiled the way ``torchkiln.compile`` compiles them (``resolve_backend``):
the recording is the core's ``cudagraphs`` runtime wrapper, which the backend's
``record`` option turns on.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
from cudagraphs_checks import requires_cuda

import torchkiln
from kiln_testing import flat_graph
from torchkiln.api import resolve_backend
from torchkiln.exc import BackendUnavailable
from torchkiln.registry import lookup_backend


def test_cudagraphs_is_registered_as_gpu_only():
    backend = lookup_backend("cudagraphs")
    assert backend.tags == ("gpu-only",)
    assert backend.device == "cuda"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_selecting_cudagraphs_without_cuda_is_unavailable():
    with pytest.raises(BackendUnavailable, match="CUDA"):
        resolve_backend("cudagraphs", None, None)


@requires_cuda
def test_graph_with_cpu_inputs_runs_eagerly_with_a_warning(caplog):
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    gm, state = flat_graph(model)
    x = torch.randn(2, 4)
    with caplog.at_level("WARNING", logger="torchkiln.cudagraphs"), torch.no_grad():
        compiled = resolve_backend("cudagraphs", None, None)(gm, [*state, x])
        for _ in range(3):
            torch.testing.assert_close(compiled(*state, x), model(x))
    assert caplog.text.count("not on a CUDA device") == 1


def mlp():
    return nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 4)), lambda: torch.randn(6, 8)


def cnn():
    model = nn.Sequential(
        # no bias: before a batch norm its gradient is zero up to rounding, noise to compare
        nn.Conv2d(3, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(8 * 4 * 4, 3),
    )
    return model, lambda: torch.randn(2, 3, 8, 8)


MODELS = {"mlp": mlp, "cnn": cnn}


def _on_cuda(name: str):
    model, make_input = MODELS[name]()
    return model.cuda(), lambda: make_input().cuda()


def _compiled(model: nn.Module, example: torch.Tensor):
    gm, state = flat_graph(model)
    compiled = resolve_backend("cudagraphs", None, None)(gm, [*state, example])
    return lambda x: compiled(*state, x)


@requires_cuda
@pytest.mark.parametrize("name", MODELS)
def test_training_steps_match_eager(name: str):
    model, make_input = _on_cuda(name)
    reference = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    compiled = _compiled(model, make_input())
    for _ in range(4):
        x = make_input()
        actual, expected = compiled(x), reference(x)
        torch.testing.assert_close(actual, expected)
        cotangent = torch.randn_like(expected)
        actual.backward(cotangent)
        expected.backward(cotangent)
        for (pname, p), ref in zip(model.named_parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(
                p.grad, ref.grad, msg=lambda m, n=pname: f"gradient of {n}: {m}"
            )
        for (bname, buf), ref in zip(model.named_buffers(), reference.buffers(), strict=True):
            torch.testing.assert_close(buf, ref, msg=lambda m, n=bname: f"buffer {n}: {m}")
        optimizer.step()
        reference_optimizer.step()
        optimizer.zero_grad()
        reference_optimizer.zero_grad()


@requires_cuda
@pytest.mark.parametrize("name", MODELS)
def test_inference_matches_eager(name: str):
    model, make_input = _on_cuda(name)
    model.eval()
    compiled = _compiled(model, make_input())
    with torch.no_grad():
        for _ in range(4):
            x = make_input()
            torch.testing.assert_close(compiled(x), model(x))


@requires_cuda
def test_input_mutation_matches_eager():
    class AddInPlace(nn.Module):
        def forward(self, x, y):
            x.add_(y)
            return x * 2

    gm = torch.fx.symbolic_trace(AddInPlace())
    example = [torch.randn(5, device="cuda"), torch.randn(5, device="cuda")]
    compiled = resolve_backend("cudagraphs", None, None)(gm, example)
    for _ in range(4):
        x, y = torch.randn(5, device="cuda"), torch.randn(5, device="cuda")
        expected_x = x.clone()
        expected = AddInPlace()(expected_x, y)
        torch.testing.assert_close(compiled(x, y), expected)
        torch.testing.assert_close(x, expected_x)


def _capture_works() -> bool:
    try:
        torchkiln.compile(lambda x: x + 1, backend="eager")(torch.ones(1))
    except Exception:
        return False
    return True


@requires_cuda
@pytest.mark.skipif(not _capture_works(), reason="torchkiln.compile's capture does not run yet")
def test_compiled_module_trains_like_eager():
    model, make_input = _on_cuda("mlp")
    reference = copy.deepcopy(model)
    compiled = torchkiln.compile(model, backend="cudagraphs")
    for _ in range(3):
        x = make_input()
        actual, expected = compiled(x), reference(x)
        torch.testing.assert_close(actual, expected)
        actual.sum().backward()
        expected.sum().backward()
        for p, ref in zip(model.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p.grad, ref.grad)
