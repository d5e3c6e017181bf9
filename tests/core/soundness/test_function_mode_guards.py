"""Torch function modes on the stack are guarded: a compiled frame never answers for another.

``torch.set_default_device`` pushes a mode that sends factories without a device to the
default one; a user's ``TorchFunctionMode`` can change any call. Tracing bakes both into
the graph, so a cache entry captured under one stack gave stale answers under another
(``torch.ones(3)`` stayed on the old device; a mode's effect stayed after its ``with``
block ended, or was missing inside it). The AOT layer's plan cache on disk, keyed by the
captured graph's text, gave a graph traced under a mode to calls without it.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch.overrides import TorchFunctionMode

import torchkiln
from torchkiln import counters
from torchkiln.registry import backend_status, lookup_backend


class AddHundred(TorchFunctionMode):
    """Adds 100 to what ``torch.add`` returns."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out + 100 if func is torch.add else out


def uses_default_device(x):
    return torch.ones(3) * 2 + x.sum()


def uses_add(x):
    return torch.add(x, 1) * 2


@pytest.fixture(autouse=True)
def cpu_default_device():
    yield
    torch.set_default_device(None)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("first", ["meta", "cpu"])
def test_factories_follow_the_default_device_after_it_changes(backend, first):
    torchkiln.reset()
    compiled = torchkiln.compile(uses_default_device, backend=backend)
    x = torch.randn(3, device="cpu")
    second = "cpu" if first == "meta" else "meta"
    for device in (first, second, first):
        torch.set_default_device(device)
        assert compiled(x).device == uses_default_device(x).device == torch.device(device)
    assert counters["recompiles"]["total"] == 1


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("mode_first", [True, False], ids=["mode_first", "plain_first"])
def test_a_function_mode_applies_only_while_it_is_on_the_stack(backend, mode_first):
    torchkiln.reset()
    compiled = torchkiln.compile(uses_add, backend=backend)
    x = torch.randn(4)
    for with_mode in (mode_first, not mode_first, mode_first):
        if with_mode:
            with AddHundred():
                torch.testing.assert_close(compiled(x), uses_add(x))
        else:
            torch.testing.assert_close(compiled(x), uses_add(x))
    assert counters["recompiles"]["total"] == 1


def test_a_new_instance_of_the_same_mode_reuses_the_entry():
    torchkiln.reset()
    compiled = torchkiln.compile(uses_add, backend="aot_eager")
    x = torch.randn(4)
    for _ in range(3):
        with AddHundred():
            torch.testing.assert_close(compiled(x), uses_add(x))
    assert counters["recompiles"]["total"] == 0


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_graph_traced_under_a_mode_is_not_reused_from_disk_without_it(
    backend, tmp_path, monkeypatch
):
    """The plan cache keys graphs by their text, which a mode's effect is not part of."""
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    x = torch.randn(4)
    torchkiln.reset()
    with AddHundred():
        torch.testing.assert_close(torchkiln.compile(uses_add, backend=backend)(x), uses_add(x))
    torchkiln.reset()  # what a new process has: the disk caches
    torch.testing.assert_close(torchkiln.compile(uses_add, backend=backend)(x), uses_add(x))


def test_the_plan_cache_key_names_the_default_device():
    """A graph traced under another default device bakes other devices into its factories
    (``torch.ones(3)`` in the captured graph, ``device=meta`` in the traced one)."""
    from torchkiln.aot.cache import _global_state

    cpu = _global_state()
    torch.set_default_device("meta")
    assert _global_state() != cpu


class AddsOne(TorchFunctionMode):
    """Adds 1 to what a floating-point addition returns, as the guard fuzz's ``PlusOne``."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        additions = (torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__)
        if func in additions and isinstance(out, torch.Tensor) and out.is_floating_point():
            return out + 1
        return out


class NormNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.bn = torch.nn.Linear(3, 6, bias=False), torch.nn.BatchNorm1d(6)
        self.ln = torch.nn.LayerNorm(6)

    def forward(self, x):
        return self.ln(self.bn(self.fc(x))) + x.sum()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor", "onnxrt", "openvino", "tvm"])
def test_a_mode_changes_the_graphs_calls_not_the_arithmetic_of_decompositions(backend):
    """The mode adds 1 to the frame's ``+``, not to the additions inside a batch norm,
    which the backends' decompositions (openvino's when it compiles) write as torch calls:
    the AOT layer traces those, and backends compile, beneath the user's modes."""
    status = backend_status(lookup_backend(backend))
    if not status.usable:
        pytest.skip(status.reason)
    torchkiln.reset()
    torch.manual_seed(0)
    model, reference = NormNet(), NormNet()
    reference.load_state_dict(model.state_dict())
    compiled = torchkiln.compile(model, backend=backend)
    for step, moded in enumerate((False, True, True, False)):  # compiled without it first
        x = torch.randn(8, 3)
        with AddsOne() if moded else contextlib.nullcontext():
            got, want = compiled(x), reference(x)
            got.sum().backward()
            want.sum().backward()
        torch.testing.assert_close(got, want, msg=lambda m, s=step: f"step {s}: {m}")
        for name, ours in [*model.named_parameters(), *model.named_buffers()]:
            theirs = dict([*reference.named_parameters(), *reference.named_buffers()])[name]
            torch.testing.assert_close(ours, theirs)
            if ours.grad is not None:
                torch.testing.assert_close(ours.grad, theirs.grad)
