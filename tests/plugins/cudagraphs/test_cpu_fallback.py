"""mode="reduce-overhead" without CUDA graphs: CPU runs as eager would, and says so once."""

from __future__ import annotations

import logging

import pytest
import torch

import torchkiln
from torchkiln.api import resolve_backend
from torchkiln.exc import InvalidOptionError
from torchkiln.plugin import MODE_DESCRIPTIONS
from torchkiln.registry import lookup_backend, runtime_wrappers_for_mode
from torchkiln_inductor.options import parse_options


def test_reduce_overhead_stands_for_the_cudagraphs_wrapper():
    assert [w.name for w in runtime_wrappers_for_mode("reduce-overhead")] == ["cudagraphs"]
    assert "CPU run without them" in MODE_DESCRIPTIONS["reduce-overhead"]


def test_cudagraphs_backend_records_through_the_wrapper_option():
    (record,) = lookup_backend("cudagraphs").options
    assert record.name == "record" and record.default is True
    assert record.runtime_wrapper == "cudagraphs"


def test_inductor_option_is_applied_by_the_core_not_the_compiler():
    with pytest.raises(InvalidOptionError, match="pass it to torchkiln.compile"):
        parse_options({"triton.cudagraphs": True})
    assert resolve_backend("inductor", "reduce-overhead", None).runtime_wrappers == ("cudagraphs",)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_reduce_overhead_without_cuda_trains_like_eager_and_says_so_once(caplog):
    torchkiln.reset()

    def step(x, w):
        y = (x @ w).relu()
        print("graph break: two graphs, one message")
        return (y * w.sum()).sum()

    compiled = torchkiln.compile(step, backend="aot_eager", mode="reduce-overhead")
    w = torch.randn(4, 3, requires_grad=True)
    w_ref = w.detach().clone().requires_grad_()
    with caplog.at_level(logging.WARNING, logger="torchkiln.cudagraphs"):
        for _ in range(3):
            x = torch.randn(5, 4)
            actual, expected = compiled(x, w), step(x, w_ref)
            torch.testing.assert_close(actual, expected)
            actual.backward()
            expected.backward()
            torch.testing.assert_close(w.grad, w_ref.grad)
    assert caplog.text.count("runs without CUDA graphs") == 1
