"""Turning TF32 on or off after a compile recompiles, as torch.compile's global-state guard does.

Backends read ``torch.backends.cuda.matmul.allow_tf32`` and ``torch.backends.cudnn.allow_tf32``
when they compile (the inductor's attention rewrite and Triton templates bake the choice in):
an entry compiled under one setting went on computing at that precision under the other.
"""

from __future__ import annotations

import pytest
import torch

import torchkiln
from torchkiln import counters

FLAGS = {
    "matmul": (torch.backends.cuda.matmul, "allow_tf32"),
    "cudnn": (torch.backends.cudnn, "allow_tf32"),
}


def baking_backend(owner, attr):
    """A backend whose compiled code adds the flag's value at compile time to each output."""

    def compile_fn(gm, example_inputs):
        baked = float(getattr(owner, attr))
        return lambda *args: tuple(out + baked for out in gm(*args))

    return compile_fn


@pytest.fixture(params=FLAGS)
def flag(request):
    owner, attr = FLAGS[request.param]
    before = getattr(owner, attr)
    yield owner, attr
    setattr(owner, attr, before)


def test_a_changed_tf32_setting_recompiles(flag):
    owner, attr = flag
    torchkiln.reset()
    compiled = torchkiln.compile(lambda x: x + 1, backend=baking_backend(owner, attr))
    x = torch.randn(3)
    for value in (False, True, False):
        setattr(owner, attr, value)
        torch.testing.assert_close(compiled(x), x + 1 + float(value))
    assert counters["recompiles"]["total"] == 1
