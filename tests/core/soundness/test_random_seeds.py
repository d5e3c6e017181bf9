"""``torch.manual_seed`` makes a compiled step's random numbers repeat, as in eager.

onnxrt had converted random ops to ONNX's, which draw from onnxruntime's own generator:
a seeded training step gave other dropout masks on every run. The backends that wrap a
runtime leave random ops to torch, so a seed gives eager's very numbers; the inductor draws
its own (as torch.compile's does), the same ones for the same seed.
"""

from __future__ import annotations

import pytest
import torch

import torchkiln

#: backends whose random numbers are eager's under a seed (torch draws them)
EAGER_NUMBERS = ["aot_eager", "onnxrt", "openvino", "tvm"]
PACKAGE = {"onnxrt": "onnxruntime", "openvino": "openvino", "tvm": "tvm"}


def noisy(x, w):
    h = torch.nn.functional.dropout(x @ w, 0.5, training=True)
    return h + torch.rand_like(h) + torch.randn_like(h), torch.bernoulli(torch.sigmoid(h))


def seeded_run(fn, seed: int, x, w):
    torch.manual_seed(seed)
    return fn(x, w)


@pytest.mark.parametrize("backend", EAGER_NUMBERS)
@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_a_seed_gives_eager_numbers(backend, grad):
    pytest.importorskip(PACKAGE.get(backend, "torch"))
    torchkiln.reset()
    compiled = torchkiln.compile(noisy, backend=backend)
    x, w = torch.randn(8, 16), torch.randn(16, 16, requires_grad=grad)
    for seed in (0, 1):
        torch.testing.assert_close(seeded_run(compiled, seed, x, w), seeded_run(noisy, seed, x, w))


def test_the_inductor_repeats_its_numbers_under_a_seed():
    torchkiln.reset()
    compiled = torchkiln.compile(noisy)
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    first, again = seeded_run(compiled, 3, x, w), seeded_run(compiled, 3, x, w)
    torch.testing.assert_close(first, again, rtol=0, atol=0)
    other = seeded_run(compiled, 4, x, w)
    assert not torch.equal(first[0], other[0])
