"""Helpers for the AOT-autograd tests: flat-input graphs from modules, graph inspection."""

from __future__ import annotations

import torch
import torch.fx as fx


class _InlineTracer(fx.Tracer):
    """Traces through every submodule, so parameters and buffers appear as ``get_attr`` nodes."""

    proxy_buffer_attributes = True

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        return False


def flat_graph(module: torch.nn.Module) -> tuple[fx.GraphModule, list[torch.Tensor]]:
    """``module`` as a graph whose leading placeholders are its parameters and buffers.

    Returns the graph and those tensors (the module's own objects, so an
    optimizer on ``module.parameters()`` updates what the graph reads).
    This is the shape of graph the capture core hands to backends.
    """
    for sub in module.modules():
        if isinstance(sub, torch.nn.modules.batchnorm._BatchNorm):
            sub._check_input_dim = lambda x: None  # data-dependent check symbolic_trace can't run
    graph = _InlineTracer().trace(module)
    state = dict(module.named_parameters()) | dict(module.named_buffers())
    first = next(n for n in graph.nodes if n.op == "placeholder")
    with graph.inserting_before(first):
        placeholders = {name: graph.placeholder(name.replace(".", "_")) for name in state}
    for node in list(graph.nodes):
        if node.op == "get_attr" and node.target in placeholders:
            node.replace_all_uses_with(placeholders[node.target])
            graph.erase_node(node)
    return fx.GraphModule(module, graph), list(state.values())


def ops(gm: fx.GraphModule) -> list:
    """The call_function targets of ``gm``, in order."""
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def placeholders(gm: fx.GraphModule) -> list[fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


class RecordingCompiler:
    """A graph compiler that records what it is given and runs the graph as is."""

    def __init__(self) -> None:
        self.graphs: list[fx.GraphModule] = []
        self.example_inputs: list[list] = []

    def __call__(self, gm: fx.GraphModule, example_inputs: list) -> object:
        self.graphs.append(gm)
        self.example_inputs.append(list(example_inputs))
        return gm.forward


def saved_values(bw_gm: fx.GraphModule) -> list[fx.Node]:
    """The backward's placeholders that hold saved values (not tangents)."""
    return [n for n in placeholders(bw_gm) if not str(n.target).startswith("tangents")]
