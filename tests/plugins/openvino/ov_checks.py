"""A training step through the openvino backend, checked against eager."""

from __future__ import annotations

import copy
import logging

import torch

import torchkiln
from torchkiln import logs

F32 = {"rtol": 1e-4, "atol": 1e-4}


def train_compared(
    model: torch.nn.Module, x: torch.Tensor, caplog, options: dict | None = None
) -> str:
    """One step of ``model`` compiled for openvino (loss, then every gradient) against an
    eager twin; the partition plans it logged."""
    twin = copy.deepcopy(model)
    compiled = torchkiln.compile(model, backend="openvino", options=options)
    logs.set_logs("partitions")
    try:
        with caplog.at_level(logging.INFO, logger="torchkiln"):
            loss = compiled(x).square().mean()
            loss.backward()
    finally:
        logs.set_logs("")
    expected = twin(x).square().mean()
    expected.backward()
    torch.testing.assert_close(loss, expected, **F32)
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **F32)
    return caplog.text
