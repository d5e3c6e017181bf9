"""Operators made with ``torch.library.custom_op``, called through their ``CustomOpDef`` or
through ``torch.ops.<namespace>``, are traced into the graph (they used to crash capture)."""

import pytest
import torch
from torch.testing import assert_close

import torchkiln


@torch.library.custom_op("kiln_spec::double", mutates_args=())
def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@double.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("kiln_spec::triple", mutates_args=())
def triple(x: torch.Tensor) -> torch.Tensor:
    return x * 3


@triple.register_fake
def _(x):
    return torch.empty_like(x)


def through_namespace(x):
    return torch.ops.kiln_spec.double(x) + 1


def through_definition(x):
    return double(x) + 1


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("fn", [through_namespace, through_definition])
def test_custom_ops_trace_in_one_graph(fn, backend):
    x = torch.randn(4)
    assert_close(torchkiln.compile(fn, backend=backend, fullgraph=True)(x), fn(x))


def test_rebinding_the_global_to_another_custom_op_recompiles():
    global double
    x = torch.randn(4)
    compiled = torchkiln.compile(through_definition, backend="eager", fullgraph=True)
    assert_close(compiled(x), x * 2 + 1)
    saved, double = double, triple
    try:
        assert_close(compiled(x), x * 3 + 1)
    finally:
        double = saved
