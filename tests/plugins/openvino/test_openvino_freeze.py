"""The openvino options ``freeze_weights`` (weights as constants, guarded) and ``cache_dir``."""

from __future__ import annotations

import copy
import logging
import os

import pytest

pytest.importorskip("openvino", reason="openvino is not installed")

import torch
import torch.nn as nn

import torchkiln
from torchkiln.exc import BackendCompilerFailed
from torchkiln_openvino import freeze

F32 = {"rtol": 1e-4, "atol": 1e-4}
FROZEN = {"freeze_weights": True}


def cnn():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(8 * 6 * 6, 5),
    )


@pytest.fixture
def folds(monkeypatch):
    """How many times a frozen graph folded its weights."""
    calls = []
    fold = freeze.fold

    def counting(model, values):
        calls.append(len(values))
        return fold(model, values)

    monkeypatch.setattr(freeze, "fold", counting)
    return calls


def check(compiled, twin):
    x = torch.randn(2, 3, 6, 6)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), twin(x), **F32)


def test_frozen_weights_match_eager_and_follow_every_change(folds):
    torch.manual_seed(0)
    model = cnn().eval()
    twin = copy.deepcopy(model)
    compiled = torchkiln.compile(model, backend="openvino", options=FROZEN)
    check(compiled, twin)
    check(compiled, twin)
    # conv weight and bias, batch norm weight, bias, mean and variance, linear's
    assert folds == [8]

    def both(change):
        change(model)
        change(twin)
        check(compiled, twin)

    with torch.no_grad():
        both(lambda m: m[0].weight.mul_(-1))  # an in-place write
    both(lambda m: m[1].running_mean.add_(0.5))  # a buffer
    state = cnn().state_dict()
    both(lambda m: m.load_state_dict(state))
    replaced = torch.randn(5, 8 * 6 * 6)
    both(lambda m: setattr(m[4], "weight", nn.Parameter(replaced.clone())))
    bias = torch.randn(5)
    both(lambda m: setattr(m[4].bias, "data", bias.clone()))
    assert len(folds) == 6


def test_training_graphs_take_weights_as_inputs(folds):
    torch.manual_seed(0)
    model = cnn()
    twin = copy.deepcopy(model)
    compiled = torchkiln.compile(model, backend="openvino", options=FROZEN)
    for m, fn in ((model, compiled), (twin, twin)):
        optimizer = torch.optim.SGD(m.parameters(), lr=0.1)
        x = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(1))
        fn(x).square().mean().backward()
        optimizer.step()
    torch.testing.assert_close(
        [p.grad for p in model.parameters()], [p.grad for p in twin.parameters()], **F32
    )
    assert folds == []
    model.eval(), twin.eval()
    check(compiled, twin)  # the inference graph folds the trained weights
    assert folds == [8]


def test_buffers_an_inference_graph_writes_stay_inputs(folds):
    """Batch norm in training mode under no_grad updates its running statistics."""
    torch.manual_seed(0)
    model = cnn()
    twin = copy.deepcopy(model)
    compiled = torchkiln.compile(model, backend="openvino", options=FROZEN)
    for _ in range(3):
        check(compiled, twin)
    torch.testing.assert_close(list(model.buffers()), list(twin.buffers()), **F32)
    assert folds == [6]  # all but the running mean, variance and count


def test_weights_that_keep_changing_become_inputs(monkeypatch, folds, caplog):
    monkeypatch.setattr(freeze, "REFREEZE_LIMIT", 1)
    torch.manual_seed(0)
    model = cnn().eval()
    twin = copy.deepcopy(model)
    compiled = torchkiln.compile(model, backend="openvino", options=FROZEN)
    with caplog.at_level(logging.WARNING, logger="torchkiln"):
        for _ in range(4):
            check(compiled, twin)
            with torch.no_grad():
                for m in (model, twin):
                    m[4].weight.add_(0.25)
    assert len(folds) == 2
    assert "takes them as inputs from now on" in caplog.text


def test_cache_dir_fills_with_compiled_models(tmp_path):
    folder = tmp_path / "ov"
    compiled = torchkiln.compile(
        lambda x: torch.tanh(x) @ x, backend="openvino", options={"cache_dir": str(folder)}
    )
    x = torch.randn(8, 8)
    torch.testing.assert_close(compiled(x), torch.tanh(x) @ x, **F32)
    assert os.listdir(folder)
    assert folder.stat().st_mode & 0o777 == 0o700


def test_cache_dir_others_can_write_to_is_refused(tmp_path):
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(0o777)
    compiled = torchkiln.compile(
        lambda x: x * 2, backend="openvino", options={"cache_dir": str(folder)}
    )
    with pytest.raises(BackendCompilerFailed, match="InvalidOptionError.*is not private"):
        compiled(torch.randn(3))
