"""The suite's gradient comparison passes cancellation noise and still catches real errors."""

from __future__ import annotations

import copy

import pytest
import torch
from model_testing import assert_close_to_largest, grads

from benchmarks.models import random_inputs


def batchnorm_into_batchnorm() -> tuple[torch.nn.Module, torch.Tensor]:
    """The first BatchNorm's bias has a true gradient of zero: the second one removes any
    per-channel shift. In float32 its gradient is rounding noise of the size of the others."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.BatchNorm2d(8),
        torch.nn.Conv2d(8, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 3),
    )  # fmt: skip
    return model, random_inputs((4, 3, 8, 8))[0]


def gradients(model: torch.nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor | None]:
    model.zero_grad()
    model(x).square().mean().backward()
    return {name: g.clone() for name, g in grads(model).items()}


def test_zero_gradient_noise_passes() -> None:
    model, x = batchnorm_into_batchnorm()
    float32 = gradients(model, x)
    float64 = gradients(copy.deepcopy(model).double(), x.double())
    noise = float32["1.bias"]
    assert noise.abs().max() > 0, "float32 should show cancellation noise here"
    with pytest.raises(AssertionError):  # on its own scale the noise is a 100% error
        torch.testing.assert_close(noise, float64["1.bias"].float(), rtol=1e-2, atol=0)
    assert_close_to_largest(float32, {n: g.float() for n, g in float64.items()})


def test_a_one_percent_error_in_a_smaller_gradient_fails() -> None:
    model, x = batchnorm_into_batchnorm()
    expected = gradients(model, x)
    largest = max(g.abs().max() for g in expected.values())
    assert expected["2.bias"].abs().max() < largest / 4
    with pytest.raises(AssertionError, match=r"2\.bias"):
        assert_close_to_largest({**expected, "2.bias": expected["2.bias"] * 1.01}, expected)


def test_a_missing_gradient_fails() -> None:
    model, x = batchnorm_into_batchnorm()
    expected = gradients(model, x)
    with pytest.raises(AssertionError, match="None on one side only"):
        assert_close_to_largest({**expected, "0.weight": None}, expected)
