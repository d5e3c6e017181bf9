"""Comparing a compiled model with its eager twin: outputs, gradients, buffers.

Import as ``from model_testing import ...`` (pytest puts each test folder on ``sys.path``).
"""

from __future__ import annotations

import torch

# Measured on the suite (tiny): inductor's largest difference from eager, over every output,
# gradient and buffer of a model, is 4.2e-6 of the model's largest value (ResNet, EfficientNet
# and MobileNetV3 training); eager float32 itself is up to 2e-6 off float64 there.
RTOL = 1e-4
ATOL_SCALE = 1e-5
# Low precision: PyTorch's model benchmarks allow an RMS error of 3x eager's own plus tol/10 with
# tol = 1e-2 for bfloat16; here that slack is scaled to the model's largest value.
LOW_PRECISION_ATOL_SCALE = 1e-3


def assert_close_to_largest(
    actual: dict[str, torch.Tensor | None],
    expected: dict[str, torch.Tensor | None],
    *,
    rtol: float = RTOL,
    atol_scale: float = ATOL_SCALE,
) -> None:
    """Each tensor of ``actual`` is close to ``expected``'s, within ``rtol`` plus an absolute
    tolerance of ``atol_scale`` times the largest magnitude in all of ``expected``.

    Why scaled to the largest, not to each tensor: float32 sums cancel. A parameter whose
    true gradient is zero (the bias of a BatchNorm feeding another BatchNorm, a LayerNorm
    bias before a softmax) gets rounding noise of the size of the terms that cancel, which
    eager and every compiler produce alike, each in its own summation order: on the
    tensor's own scale that is a 100% error. The terms that cancel are of the size of the
    model's gradients, so the noise stays far below ``atol_scale`` times the largest,
    while a real error (a wrong, missing or stale term) is of that size and still fails.
    A ``None`` (no gradient) must be ``None`` on both sides.
    """
    assert actual.keys() == expected.keys(), f"names differ: {actual.keys() ^ expected.keys()}"
    missing = {n for n in expected if (actual[n] is None) != (expected[n] is None)}
    assert not missing, f"None on one side only: {sorted(missing)}"
    present = [t for t in expected.values() if t is not None and t.numel()]
    largest = max((t.detach().abs().max().item() for t in present), default=0.0)
    for name, want in expected.items():
        if want is not None:
            torch.testing.assert_close(
                actual[name],
                want,
                rtol=rtol,
                atol=atol_scale * largest,
                msg=lambda text, name=name: f"{name} (largest |expected| {largest:.3g}): {text}",
            )


def assert_no_worse_than_eager(
    actual: dict[str, torch.Tensor | None],
    eager: dict[str, torch.Tensor | None],
    reference: dict[str, torch.Tensor | None],
    *,
    multiplier: float = 3.0,
    atol_scale: float = LOW_PRECISION_ATOL_SCALE,
) -> None:
    """In low precision (bfloat16, float16), each tensor of ``actual`` is at most
    ``multiplier`` times as far from the float32 ``reference`` as eager's own result in that
    precision is (root-mean-square error), plus ``atol_scale`` times the largest reference
    magnitude: the criterion of PyTorch's model benchmarks, since two correct bfloat16
    programs differ from each other by as much as each differs from the truth.
    """
    assert actual.keys() == eager.keys() == reference.keys(), "names differ"
    present = [t for t in reference.values() if t is not None and t.numel()]
    largest = max((t.detach().abs().max().item() for t in present), default=0.0)
    for name, want in reference.items():
        assert (actual[name] is None) == (want is None), f"{name}: None on one side only"
        if want is None or not want.numel():
            continue
        want = want.detach().double()
        err = (actual[name].detach().double() - want).square().mean().sqrt().item()
        eager_err = (eager[name].detach().double() - want).square().mean().sqrt().item()
        limit = multiplier * eager_err + atol_scale * largest
        assert err <= limit, (
            f"{name}: RMS error {err:.3g} against float32, eager's own {eager_err:.3g} "
            f"(limit {limit:.3g}, largest |reference| {largest:.3g})"
        )


def grads(module: torch.nn.Module) -> dict[str, torch.Tensor | None]:
    """Every parameter's gradient, by name (``None`` where it got none)."""
    return {name: p.grad for name, p in module.named_parameters()}


def buffers(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Floating-point buffers (BatchNorm's running statistics, rotary tables), by name."""
    return {n: b for n, b in module.named_buffers() if b.is_floating_point()}


def loss_of(output: torch.Tensor) -> torch.Tensor:
    """A scalar that depends on every output element."""
    return output.float().square().mean()
