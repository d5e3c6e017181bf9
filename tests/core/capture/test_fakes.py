"""Fake propagation: a frame's second translation (after a graph break) replays the first's results."""

import operator

import torch

import torchkiln
from torchkiln.capture import fakes
from torchkiln.capture.fakes import FakePropagation


def test_second_pass_shares_input_fakes_and_replays_results():
    real = torch.randn(2, 3)
    first = FakePropagation()
    x = first.from_tensor(real)
    y = first.run("call_method", "sin", [x], {})
    second = FakePropagation(first)
    assert second.from_tensor(real) is x
    assert second.run("call_method", "sin", [x], {}) is y


def test_a_different_operation_ends_the_replay():
    first = FakePropagation()
    x = first.from_tensor(torch.randn(2, 3))
    first.run("call_method", "sin", [x], {})
    first.run("call_method", "cos", [x], {})
    second = FakePropagation(first)
    fresh = second.run("call_method", "exp", [x], {})
    assert fresh.shape == (2, 3)
    assert second.run("call_method", "cos", [x], {}) is not first.results[1][1]


def test_constants_must_be_equal_and_of_the_same_type():
    first = FakePropagation()
    x = first.from_tensor(torch.randn(4, 6))
    reshaped = first.run("call_method", "reshape", [x, 6, 4], {})
    second = FakePropagation(first)
    assert second.run("call_method", "reshape", [x, 3, 8], {}).shape == (3, 8)
    third = FakePropagation(first)
    assert third.run("call_method", "reshape", [x, 6, 4], {}) is reshaped


def test_in_place_metadata_change_is_not_replayed():
    first = FakePropagation()
    x = first.from_tensor(torch.randn(2, 3))
    first.run("call_method", "unsqueeze_", [x, 0], {})
    assert not first.replayable
    second = FakePropagation(first)
    assert second.mode is not first.mode
    assert second.from_tensor(torch.randn(2, 3)).shape == (2, 3)


def test_in_place_value_change_is_replayed():
    first = FakePropagation()
    x = first.from_tensor(torch.randn(2, 3))
    first.run("call_function", operator.setitem, [x, 0, 1.0], {})
    first.run("call_method", "add_", [x, 1.0], {})
    assert first.replayable


def test_graph_break_frame_replays_its_prefix(monkeypatch):
    replayed = []
    run = FakePropagation.run

    def counting_run(self, kind, target, args, kwargs):
        index = len(self.results)
        result = run(self, kind, target, args, kwargs)
        replayed.append(index < len(self._replay) and self._replay[index][1] is result)
        return result

    monkeypatch.setattr(fakes.FakePropagation, "run", counting_run)

    def fn(x):
        y = x.sin().cos()
        print("break", end="")
        return y + 1

    x = torch.randn(3)
    compiled = torchkiln.compile(fn, backend="eager")
    torch.testing.assert_close(compiled(x), fn(x))
    assert replayed[:2] == [False, False]  # first pass: sin, cos
    assert replayed[2:4] == [True, True]  # second pass, stopped at print
