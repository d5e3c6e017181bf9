"""Helpers for the onnxrt tests: random inputs, flat-input graphs, eager comparisons."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._pytree import tree_leaves

from torchkiln.aot import aot_autograd
from torchkiln_onnxrt.compiler import compile_aten_graph
from torchkiln_onnxrt.decompositions import decompositions

Factory = Callable[[], torch.Tensor]


def f32(*shape: int) -> Factory:
    return lambda: torch.randn(*shape)


def f16(*shape: int) -> Factory:
    return lambda: torch.randn(*shape).half()


def bf16(*shape: int) -> Factory:
    return lambda: torch.randn(*shape).bfloat16()


def i64(*shape: int, low: int = -5, high: int = 10) -> Factory:
    return lambda: torch.randint(low, high, shape)


def boolean(*shape: int) -> Factory:
    return lambda: torch.rand(*shape) > 0.5


def transposed(*shape: int) -> Factory:
    """A non-contiguous float tensor: the transpose of a contiguous one."""
    return lambda: torch.randn(*reversed(shape)).transpose(0, -1)


def positive(*shape: int) -> Factory:
    return lambda: torch.rand(*shape) + 0.5


@dataclass(frozen=True)
class Case:
    """One function to compare with eager, and how to make fresh inputs for it."""

    name: str
    fn: Callable
    inputs: Sequence[Factory]

    def make(self) -> list[torch.Tensor]:
        return [make() for make in self.inputs]


def assert_matches(actual, expected) -> None:
    actual, expected = tree_leaves(actual), tree_leaves(expected)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        torch.testing.assert_close(a, e)


def aten_compiled(fn: Callable, example: list[torch.Tensor]) -> Callable:
    """``fn`` traced by make_fx with the backend's decompositions, compiled by onnxrt."""
    gm = make_fx(fn, decomposition_table=decompositions())(*example)
    return compile_aten_graph(gm, example)


def opaque_graph(fn: Callable, example: list[torch.Tensor]) -> fx.GraphModule:
    """A torch-level graph that calls ``fn`` as one node and returns its flattened outputs.

    The AOT layer traces through ``fn`` itself, so ``fn`` may use anything
    make_fx can trace (Python control flow on shapes, iteration, constants).
    """

    def flat_call(*args: torch.Tensor) -> tuple:
        return tuple(tree_leaves(fn(*args)))

    count = len(flat_call(*example))
    graph = fx.Graph()
    args = [graph.placeholder(f"arg{i}") for i in range(len(example))]
    call = graph.call_function(flat_call, tuple(args))
    graph.output(tuple(graph.call_function(operator.getitem, (call, i)) for i in range(count)))
    return fx.GraphModule(torch.nn.Module(), graph)


def backend_compiled(fn: Callable, example: list[torch.Tensor], **options) -> Callable:
    """``fn`` through the AOT layer with onnxrt compiling its graphs whole (see below)."""
    return whole_graphs_compiled(opaque_graph(fn, example), example, **options)


def whole_graphs_compiled(gm: fx.GraphModule, example: list, **options) -> Callable:
    """``gm``'s forward and backward graphs (AOT layer) each compiled by onnxrt whole.

    No partitioning: an op without a converter fails the compile instead of running
    eagerly, so a passing test means onnxruntime ran every op.
    """
    compiler = functools.partial(compile_aten_graph, **options)
    aot = aot_autograd(fw_compiler=compiler, bw_compiler=compiler, decompositions=decompositions())
    return aot(gm, example)


def floats_requiring_grad(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t.detach().requires_grad_(t.is_floating_point()) for t in tensors]
