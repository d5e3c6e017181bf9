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

#: each flag's getter and setter (torch's C ones: ``torch.backends.cudnn``'s attributes
#: refuse assignment once a test module has called ``torch.backends.disable_global_flags()``)
FLAGS = {
    "matmul": (torch._C._get_cublas_allow_tf32, torch._C._set_cublas_allow_tf32),
    "cudnn": (torch._C._get_cudnn_allow_tf32, torch._C._set_cudnn_allow_tf32),
}


def baking_backend(get):
    """A backend whose compiled code adds the flag's value at compile time to each output."""

    def compile_fn(gm, example_inputs):
        baked = float(get())
        return lambda *args: tuple(out + baked for out in gm(*args))

    return compile_fn


@pytest.fixture(params=FLAGS)
def flag(request):
    get, set_ = FLAGS[request.param]
    before = get()
    yield get, set_
    set_(before)


def test_a_changed_tf32_setting_recompiles(flag):
    get, set_ = flag
    torchkiln.reset()
    compiled = torchkiln.compile(lambda x: x + 1, backend=baking_backend(get))
    x = torch.randn(3)
    for value in (False, True, False):
        set_(value)
        torch.testing.assert_close(compiled(x), x + 1 + float(value))
    assert counters["recompiles"]["total"] == 1
