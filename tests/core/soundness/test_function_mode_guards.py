"""Torch function modes on the stack are guarded: a compiled frame never answers for another.

``torch.set_default_device`` pushes a mode that sends factories without a device to the
default one; a user's ``TorchFunctionMode`` can change any call. Tracing bakes both into
the graph, so a cache entry captured under one stack gave stale answers under another
(``torch.ones(3)`` stayed on the old device; a mode's effect stayed after its ``with``
block ended, or was missing inside it). The AOT layer's plan cache on disk, keyed by the
captured graph's text, gave a graph traced under a mode to calls without it.
"""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

import torchkiln
from torchkiln import counters


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
