"""CudaGraphRunner on the GPU: warm-up, recording, replay, static inputs, overwritten outputs."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
import torch
from cudagraphs_checks import requires_cuda
from torch.multiprocessing.reductions import StorageWeakRef

from torchkiln_cudagraphs import capture
from torchkiln_cudagraphs.capture import CudaGraphRunner, Recording
from torchkiln_cudagraphs.wrapper import CudaGraphs

pytestmark = requires_cuda


def linear_relu(x, w):
    return ((x @ w).relu() + 1,)


def runner_of(fn) -> CudaGraphRunner:
    return CudaGraphRunner(fn, CudaGraphs(), "inference")


def only_recording(runner: CudaGraphRunner) -> Recording:
    (recording,) = runner.recordings.values()
    assert isinstance(recording, Recording)
    return recording


def _fresh_inputs(count: int) -> list[torch.Tensor]:
    """Inputs kept alive together, so that none reuses another's freed address."""
    return [torch.randn(5, 8, device="cuda") for _ in range(count)]


def test_replays_match_eager_as_input_values_change():
    w = torch.randn(8, 4, device="cuda")
    runner = runner_of(linear_relu)
    for x in _fresh_inputs(5):
        torch.testing.assert_close(runner(x, w), linear_relu(x, w))
    assert only_recording(runner).graph is not None


def test_inputs_at_stable_addresses_are_read_in_place():
    w = torch.randn(8, 4, device="cuda")
    xs = _fresh_inputs(4)
    runner = runner_of(linear_relu)
    for x in xs[:3]:
        runner(x, w)
    recording = only_recording(runner)
    assert recording.copied == {0}
    with torch.no_grad():
        w.add_(1.0)  # as an optimizer step does
    torch.testing.assert_close(runner(xs[3], w), linear_relu(xs[3], w))
    assert only_recording(runner).order == recording.order  # not recorded again


def test_an_input_that_settles_at_one_address_after_the_first_call_is_read_in_place():
    """As the backward's input of a training loop does: made anew by eager ops each step,
    in the same block of the allocator from the second step on."""
    w = torch.randn(8, 4, device="cuda")
    first, settled = _fresh_inputs(2)
    runner = runner_of(linear_relu)
    runner(first, w)  # warm-up
    runner(settled, w)  # moved since: warm-up again
    torch.testing.assert_close(runner(settled, w), linear_relu(settled, w))  # recorded
    recording = only_recording(runner)
    assert recording.graph is not None and recording.copied == set()
    assert recording.warm_ups == capture.WARM_UPS
    settled.copy_(torch.randn(5, 8, device="cuda"))  # new values at the same address
    torch.testing.assert_close(runner(settled, w), linear_relu(settled, w))
    assert only_recording(runner).order == recording.order  # replayed, not recorded again


def test_a_recording_keeps_only_the_layout_of_an_input_an_output_is_a_view_of():
    """That input is the caller's, here another graph's output, which that graph's next
    replay poisons: the recording neither keeps it alive nor reads it again."""
    model = CudaGraphs()
    first = CudaGraphRunner(lambda x: (x * 2,), model, "forward")
    second = CudaGraphRunner(lambda h: (h[1:], h.sin()), model, "forward")
    x = torch.randn(4, 8, device="cuda")
    for _ in range(capture.WARM_UPS):
        second(*first(x))  # warm-ups (a training step's graphs warm up WARM_UPS times)
    (h,) = first(x)  # recorded
    view, _ = second(h)  # recorded: its input is first's output, read in place
    assert 0 in only_recording(second).input_views
    torch.testing.assert_close(view, h[1:])
    held = StorageWeakRef(h.untyped_storage())
    del h, view
    assert held.expired()
    (h,) = first(x)  # replayed
    view, sine = second(h)
    torch.testing.assert_close(view, (x * 2)[1:])
    torch.testing.assert_close(sine, (x * 2).sin())


def test_a_backward_replay_that_would_overwrite_live_gradients_runs_eagerly(caplog):
    """A backward recorded by a pass that kept its graph may run twice in one step: the
    first pass's gradients, which autograd keeps as .grad, must not be overwritten."""
    x, w = torch.randn(5, 8, device="cuda"), torch.randn(8, 4, device="cuda")
    expected = linear_relu(x, w)[0]
    runner = CudaGraphRunner(linear_relu, CudaGraphs(), "backward")
    for _ in range(capture.WARM_UPS):
        runner(x, w)  # warm-ups (a training step's graphs warm up WARM_UPS times)
    (first,) = runner(x, w)  # recorded, replayed
    with caplog.at_level("WARNING", logger="torchkiln.cudagraphs"):
        (second,) = runner(x, w)
    torch.testing.assert_close(first, expected)  # readable: not poisoned
    torch.testing.assert_close(second, expected)
    assert "gradients its last replay handed out are still in use" in caplog.text
    del first, second
    (third,) = runner(x, w)
    torch.testing.assert_close(third, expected)
    assert only_recording(runner).graph is not None


@pytest.mark.parametrize("native", [True, False], ids=["tensors_check", "python"])
def test_a_static_input_seen_at_its_address_in_another_layout_is_not_replayed_as_recorded(
    native, monkeypatch
):
    """The transpose of a square weight starts at its address: the fast check compares
    layouts too, not only addresses (in C++, and in Python where that is not built)."""
    if not native:
        monkeypatch.setattr(capture, "tensors_check", lambda expected: None)
    w = torch.randn(8, 8, device="cuda")
    xs = _fresh_inputs(4)
    runner = runner_of(linear_relu)
    for x in xs[:3]:
        runner(x, w)
    assert (only_recording(runner).expected.native is not None) == native
    torch.testing.assert_close(runner(xs[3], w.t()), linear_relu(xs[3], w.t()))
    torch.testing.assert_close(runner(xs[3], w), linear_relu(xs[3], w))
    half = w.half()
    torch.testing.assert_close(runner(xs[3].half(), half), linear_relu(xs[3].half(), half))


def test_static_input_at_a_new_address_is_copied_and_recorded_again():
    w, other_w = torch.randn(8, 4, device="cuda"), torch.randn(8, 4, device="cuda")
    xs = _fresh_inputs(4)
    runner = runner_of(linear_relu)
    for x in xs[:3]:
        runner(x, w)
    first_order = only_recording(runner).order
    torch.testing.assert_close(runner(xs[3], other_w), linear_relu(xs[3], other_w))
    assert only_recording(runner).copied == {0, 1}
    assert only_recording(runner).order > first_order


def test_mutated_input_is_written_back_when_copied():
    def scale_in_place(x, y):
        x.mul_(2)
        return (x + y,)

    y = torch.randn(6, device="cuda")
    runner = runner_of(scale_in_place)
    for _ in range(4):
        x = torch.randn(6, device="cuda")
        expected_x = x.clone()
        expected = scale_in_place(expected_x, y)
        torch.testing.assert_close(runner(x, y), expected)
        torch.testing.assert_close(x, expected_x)


def test_mutated_static_input_is_updated_in_place_once_per_call():
    def count(buffer, x):
        buffer.add_(1)
        return (buffer * x,)

    buffer = torch.zeros(3, device="cuda")
    runner = runner_of(count)
    for step in range(1, 5):
        x = torch.randn(3, device="cuda")
        torch.testing.assert_close(runner(buffer, x), (step * x,))
    torch.testing.assert_close(buffer, torch.full((3,), 4.0, device="cuda"))


def test_non_contiguous_inputs_are_copied_correctly():
    w = torch.randn(8, 4, device="cuda")
    runner = runner_of(linear_relu)
    for _ in range(3):
        x = torch.randn(8, 5, device="cuda").t()
        torch.testing.assert_close(runner(x, w), linear_relu(x, w))


def test_output_that_is_an_input_stays_an_alias_of_the_callers_tensor():
    runner = runner_of(lambda x: (x, x * 2))
    for _ in range(3):
        x = torch.randn(4, device="cuda")
        same, double = runner(x)
        torch.testing.assert_close(double, x * 2)
        assert same.data_ptr() == x.data_ptr()


def test_each_new_shape_is_recorded_then_the_bound_falls_back_with_one_warning(monkeypatch, caplog):
    monkeypatch.setattr(capture, "MAX_RECORDINGS", 2)
    w = torch.randn(8, 4, device="cuda")
    runner = runner_of(linear_relu)
    with caplog.at_level(logging.WARNING, logger="torchkiln.cudagraphs"):
        for rows in (2, 3, 4, 5):
            for _ in range(3):
                x = torch.randn(rows, 8, device="cuda")
                torch.testing.assert_close(runner(x, w), linear_relu(x, w))
    recordings = [r for r in runner.recordings.values() if isinstance(r, Recording)]
    assert len(recordings) == 2 and all(r.graph is not None for r in recordings)
    assert caplog.text.count("more than 2 input signatures") == 1


def test_an_output_overwritten_by_a_later_replay_cannot_be_read():
    w = torch.randn(8, 4, device="cuda")
    runner = runner_of(linear_relu)
    x1, x2, x3 = _fresh_inputs(3)
    runner(x1, w)  # warm-up
    (kept,) = runner(x1, w)
    kept_copy = kept.clone()
    (second,) = runner(x2, w)
    with pytest.raises(RuntimeError, match=r"overwritten.*clone"):
        kept + 1
    torch.testing.assert_close(kept_copy, linear_relu(x1, w)[0])
    torch.testing.assert_close(second, linear_relu(x2, w)[0])
    (third,) = runner(x3, w)
    torch.testing.assert_close(third, linear_relu(x3, w)[0])


def test_cpu_inputs_run_eagerly_and_say_so_once(caplog):
    runner = runner_of(linear_relu)
    w = torch.randn(8, 4)
    with caplog.at_level(logging.WARNING, logger="torchkiln.cudagraphs"):
        for _ in range(3):
            x = torch.randn(5, 8)
            torch.testing.assert_close(runner(x, w), linear_relu(x, w))
    assert caplog.text.count("not on a CUDA device") == 1


_UNRECORDABLE = """
import logging, torch
from torchkiln_cudagraphs.capture import CudaGraphRunner, Recording
from torchkiln_cudagraphs.wrapper import CudaGraphs

records = []
handler = logging.Handler()
handler.emit = records.append
logging.getLogger("torchkiln.cudagraphs").addHandler(handler)

def synchronizes(x):
    return (x * int(x.sum().item() > 0),)   # .item() syncs: not allowed while recording

runner = CudaGraphRunner(synchronizes, CudaGraphs(), "inference")
for _ in range(4):
    x = torch.randn(4, device="cuda")
    torch.testing.assert_close(runner(x), synchronizes(x))
(recording,) = runner.recordings.values()
assert recording.graph is None
assert [r.getMessage() for r in records if "recording failed" in r.getMessage()], records
assert sum("recording failed" in r.getMessage() for r in records) == 1
y = torch.rand(1000, device="cuda")   # the CUDA generator still works after the failure
"""


def test_unrecordable_function_runs_eagerly_and_says_why_once():
    # A failed capture may leave CUDA state behind: keep it out of this process.
    subprocess.run([sys.executable, "-c", _UNRECORDABLE], check=True)
