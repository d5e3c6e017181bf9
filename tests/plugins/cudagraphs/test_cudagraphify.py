"""``cudagraphify``: record on the second call, replay after, results as eager's."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from cudagraphs_checks import requires_cuda

from torchkiln.exc import KilnError
from torchkiln_cudagraphs import cudagraphify


def linear_relu(x, w):
    return ((x @ w).relu() + 1,)


def _fresh_inputs(count: int) -> list[torch.Tensor]:
    """Inputs kept alive together, so that none reuses another's freed address."""
    return [torch.randn(5, 8, device="cuda") for _ in range(count)]


def test_cpu_inputs_cannot_be_recorded():
    with pytest.raises(KilnError, match="not on a CUDA device"):
        cudagraphify(linear_relu, [torch.randn(2, 3), torch.randn(3, 4)])


def test_non_tensor_inputs_cannot_be_recorded():
    with pytest.raises(KilnError, match="dynamic shapes"):
        cudagraphify(lambda n: (n,), [3])


@requires_cuda
def test_replays_match_eager_as_input_values_change():
    w = torch.randn(8, 4, device="cuda")
    xs = _fresh_inputs(5)
    runner = cudagraphify(linear_relu, [xs[0], w])
    for x in xs:
        torch.testing.assert_close(runner(x, w), list(linear_relu(x, w)))
    assert runner.recordings == 1


@requires_cuda
def test_results_stay_valid_after_the_next_replay():
    w = torch.randn(8, 4, device="cuda")
    runner = cudagraphify(linear_relu, [torch.randn(5, 8, device="cuda"), w])
    xs = _fresh_inputs(4)
    results = [runner(x, w)[0] for x in xs]
    for x, result in zip(xs, results):
        torch.testing.assert_close(result, linear_relu(x, w)[0])


@requires_cuda
def test_inputs_at_stable_addresses_are_read_in_place():
    w = torch.randn(8, 4, device="cuda")
    xs = _fresh_inputs(4)
    runner = cudagraphify(linear_relu, [xs[0], w])
    for x in xs[:3]:
        runner(x, w)
    assert runner.copied_inputs == {0}
    with torch.no_grad():
        w.add_(1.0)  # as an optimizer step does
    torch.testing.assert_close(runner(xs[3], w), list(linear_relu(xs[3], w)))
    assert runner.recordings == 1


@requires_cuda
def test_static_input_at_a_new_address_is_copied_and_recorded_again():
    w, other_w = torch.randn(8, 4, device="cuda"), torch.randn(8, 4, device="cuda")
    xs = _fresh_inputs(4)
    runner = cudagraphify(linear_relu, [xs[0], w])
    for x in xs[:3]:
        runner(x, w)
    torch.testing.assert_close(runner(xs[3], other_w), list(linear_relu(xs[3], other_w)))
    assert runner.copied_inputs == {0, 1}
    assert runner.recordings == 2


@requires_cuda
def test_mutated_input_is_written_back_when_copied():
    def scale_in_place(x, y):
        x.mul_(2)
        return (x + y,)

    y = torch.randn(6, device="cuda")
    runner = cudagraphify(scale_in_place, [torch.randn(6, device="cuda"), y])
    for _ in range(4):
        x = torch.randn(6, device="cuda")
        expected_x = x.clone()
        expected = scale_in_place(expected_x, y)
        torch.testing.assert_close(runner(x, y), list(expected))
        torch.testing.assert_close(x, expected_x)


@requires_cuda
def test_mutated_static_input_is_updated_in_place_once_per_call():
    def count(buffer, x):
        buffer.add_(1)
        return (buffer * x,)

    buffer = torch.zeros(3, device="cuda")
    runner = cudagraphify(count, [buffer, torch.randn(3, device="cuda")])
    for step in range(1, 5):
        x = torch.randn(3, device="cuda")
        torch.testing.assert_close(runner(buffer, x), [step * x])
    torch.testing.assert_close(buffer, torch.full((3,), 4.0, device="cuda"))


@requires_cuda
def test_non_contiguous_inputs_are_copied_correctly():
    w = torch.randn(8, 4, device="cuda")
    runner = cudagraphify(linear_relu, [torch.randn(8, 5, device="cuda").t(), w])
    for _ in range(3):
        x = torch.randn(8, 5, device="cuda").t()
        torch.testing.assert_close(runner(x, w), list(linear_relu(x, w)))


@requires_cuda
def test_output_that_is_an_input_is_returned_by_value():
    runner = cudagraphify(lambda x: (x, x * 2), [torch.randn(4, device="cuda")])
    for _ in range(3):
        x = torch.randn(4, device="cuda")
        torch.testing.assert_close(runner(x), [x, x * 2])


@requires_cuda
def test_size_change_raises():
    w = torch.randn(8, 4, device="cuda")
    runner = cudagraphify(linear_relu, [torch.randn(5, 8, device="cuda"), w])
    runner(torch.randn(5, 8, device="cuda"), w)
    with pytest.raises(KilnError, match="changed"):
        runner(torch.randn(6, 8, device="cuda"), w)


_UNRECORDABLE = """
import logging, torch
from torchkiln_cudagraphs import cudagraphify

def synchronizes(x):
    scale = x.abs().max().item()  # a device-to-host copy, not allowed while recording
    return (x / scale,)

records = []
logging.getLogger("torchkiln.cudagraphs").addHandler(logging.Handler())
logging.getLogger("torchkiln.cudagraphs").handlers[0].emit = records.append
runner = cudagraphify(synchronizes, [torch.randn(4, device="cuda")])
for _ in range(3):
    x = torch.randn(4, device="cuda")
    torch.testing.assert_close(runner(x), list(synchronizes(x)))
assert runner.graph is None
assert any("recording failed" in r.getMessage() for r in records)
"""


@requires_cuda
def test_unrecordable_function_runs_eagerly():
    # A failed capture may leave CUDA state behind: keep it out of this process.
    subprocess.run([sys.executable, "-c", _UNRECORDABLE], check=True)
