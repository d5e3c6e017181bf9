"""TORCHKILN_LOGS=aot_graphs prints the joint, forward and backward graphs."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.fx as fx

from torchkiln import logs
from torchkiln.backends.aot import aot_eager


def cos_cos(x):
    return x.cos().cos()


@pytest.fixture
def aot_graphs_logged():
    logs.set_logs("aot_graphs")
    yield
    logs.set_logs("")


def test_aot_graphs_artifact_logs_joint_forward_and_backward(aot_graphs_logged, caplog) -> None:
    x = torch.randn(3, requires_grad=True)
    with caplog.at_level(logging.INFO, logger="torchkiln"):
        aot_eager(fx.symbolic_trace(cos_cos), [x])(x).sum().backward()
    messages = [
        r.getMessage() for r in caplog.records if getattr(r, "artifact", "") == "aot_graphs"
    ]
    titles = [m.split(":")[0] for m in messages]
    assert titles == ["joint graph", "forward graph", "backward graph"]
    assert "torch.ops.aten.cos.default" in messages[0]


def test_aot_graphs_are_silent_when_not_asked_for(caplog) -> None:
    x = torch.randn(3, requires_grad=True)
    with caplog.at_level(logging.INFO, logger="torchkiln"):
        aot_eager(fx.symbolic_trace(cos_cos), [x])(x).sum().backward()
    assert not [r for r in caplog.records if getattr(r, "artifact", "") == "aot_graphs"]
