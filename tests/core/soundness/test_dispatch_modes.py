"""Under a torch dispatch mode a compiled frame runs as written, as under torch.compile.

A dispatch mode sees every aten op eager runs. Compiled kernels hid the ops from it (a
user's mode that changed ``aten.add`` had no effect under the inductor), and a frame first
called under one had the mode's effect traced into its graph for good.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import torchkiln
from torchkiln import counters

BACKENDS = ["eager", "aot_eager", "inductor"]


class PlusOneAdd(TorchDispatchMode):
    """Adds 1 to what ``aten.add.Tensor`` returns."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out + 1 if func is torch.ops.aten.add.Tensor else out


class Recorder(TorchDispatchMode):
    """Notes the aten ops it sees."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


def add_relu(x, y):
    return (x + y).relu() * 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("first", ["mode", "plain"])
def test_a_dispatch_mode_sees_the_frame_as_eager_does(backend, first):
    torchkiln.reset()
    compiled = torchkiln.compile(add_relu, backend=backend)
    x, y = torch.randn(5), torch.randn(5)
    for with_mode in [True, False, True] if first == "mode" else [False, True, False]:
        if with_mode:
            with PlusOneAdd():
                torch.testing.assert_close(compiled(x, y), add_relu(x, y))
        else:
            torch.testing.assert_close(compiled(x, y), add_relu(x, y))
    assert counters["eager_fallback"]["dispatch_mode"] == (2 if first == "mode" else 1)


def test_a_recording_mode_sees_eagers_ops():
    torchkiln.reset()
    compiled = torchkiln.compile(add_relu, backend="inductor")
    x, y = torch.randn(5), torch.randn(5)
    compiled(x, y)
    with Recorder() as compiled_ops:
        compiled(x, y)
    with Recorder() as eager_ops:
        add_relu(x, y)
    assert compiled_ops.ops == eager_ops.ops
