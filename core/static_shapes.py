"""One specialized graph per concrete size, for backends that take only static shapes.

A backend declares ``Backend(dynamic_shapes=False)`` when its compiler cannot take a
graph with symbolic sizes. The core then never hands it one: a captured graph whose
inputs have symbolic sizes is compiled for the sizes of each call, once per distinct
set of input sizes and strides (the capture still serves every size with one frame).
Past ``config.cache_size_limit`` sizes, new sizes run the graph as captured, with a
warning.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from torchkiln import config
from torchkiln.stats import counters

log = logging.getLogger("torchkiln")


def has_symbolic_inputs(gm: torch.fx.GraphModule) -> bool:
    """Whether capture made a size of one of ``gm``'s inputs symbolic."""
    for node in gm.graph.nodes:
        value = node.meta.get("example_value") if node.op == "placeholder" else None
        if isinstance(value, torch.Tensor) and any(
            isinstance(s, torch.SymInt) for s in value.shape
        ):
            return True
    return False


def has_symbolic_values(gm: torch.fx.GraphModule) -> bool:
    """Whether capture recorded a symbolic size anywhere in ``gm``: an input's, or one that
    depends on the data (``nonzero``'s count, ``config.capture_dynamic_output_shape_ops``)."""
    for node in gm.graph.nodes:
        value = node.meta.get("example_value")
        if isinstance(value, torch.SymInt) or (
            isinstance(value, torch.Tensor)
            and any(isinstance(s, torch.SymInt) for s in value.shape)
        ):
            return True
    return False


def static_copy(gm: torch.fx.GraphModule, args: Sequence) -> torch.fx.GraphModule:
    """``gm`` without its symbolic fake values: it computes sizes from its inputs when it runs,
    so a compiler that traces it with real or fake static inputs specializes it. An aten graph
    (one whose nodes carry ``meta["val"]``, as the AOT layer hands them to compilers) gets the
    static fake values of ``args`` in their place."""
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    aten_graph = any("val" in node.meta for node in graph.nodes)
    for node in graph.nodes:
        for key in ("example_value", "val", "tensor_meta"):
            node.meta.pop(key, None)
    copy = torch.fx.GraphModule(gm, graph)
    if aten_graph:
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.passes.fake_tensor_prop import FakeTensorProp

        with torch.no_grad():
            FakeTensorProp(copy, FakeTensorMode(allow_non_fake_inputs=True)).propagate(*args)
    return copy


def size_key(args: Sequence) -> tuple:
    """The sizes and strides of a call's tensor arguments, the values of its ints (a static
    copy bakes them in), the types of the others."""
    return tuple(
        (tuple(a.shape), a.stride())
        if isinstance(a, torch.Tensor)
        else a
        if type(a) is int
        else type(a)
        for a in args
    )


class PerSizeCompiled:
    """Calls the graph compiled for the sizes of its arguments (compiling it the first time).

    ``example_inputs`` (real or static fake values) are compiled for at once; ``None``, when
    only symbolic fakes are at hand: the first call compiles.
    """

    def __init__(
        self, gm: torch.fx.GraphModule, compile_static: Callable, example_inputs: list | None
    ):
        self.gm = gm
        self.compile_static = compile_static
        self.compiled: dict[tuple, Callable] = {}
        self.warned = False
        if example_inputs is not None:
            self._compile(size_key(tuple(example_inputs)), example_inputs)

    def _compile(self, key: tuple, args: Any) -> Callable:
        from torchkiln.capture.dispatch import compile_lock

        with compile_lock:
            compiled = self.compiled.get(key)
            if compiled is None:
                if len(self.compiled) >= config.cache_size_limit:
                    if not self.warned:
                        self.warned = True
                        log.warning(
                            "a backend that takes static shapes was given %d sizes of one graph "
                            "(config.cache_size_limit); running new sizes as captured",
                            len(self.compiled),
                        )
                    return self.gm.forward
                counters["static_shapes"]["specializations"] += 1
                compiled = self.compiled[key] = self.compile_static(
                    static_copy(self.gm, args), list(args)
                )
        return compiled

    def __call__(self, *args: Any) -> Any:
        key = size_key(args)
        compiled = self.compiled.get(key) or self._compile(key, args)
        return compiled(*args)
