"""Helpers for the cudagraphs tests: the CUDA skip marker and flat-input module graphs."""

from __future__ import annotations

import pytest
import torch
import torch.fx as fx

requires_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"
)


class _InlineTracer(fx.Tracer):
    """Traces through every submodule, so parameters and buffers appear as ``get_attr``."""

    proxy_buffer_attributes = True

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        return False


def flat_graph(module: torch.nn.Module) -> tuple[fx.GraphModule, list[torch.Tensor]]:
    """``module`` as a graph whose leading placeholders are its parameters and buffers.

    That is the shape of graph the capture core hands to backends.
    """
    for sub in module.modules():
        if isinstance(sub, torch.nn.modules.batchnorm._BatchNorm):
            sub._check_input_dim = lambda x: None  # a data-dependent check symbolic_trace can't run
    graph = _InlineTracer().trace(module)
    state = dict(module.named_parameters()) | dict(module.named_buffers())
    first = next(n for n in graph.nodes if n.op == "placeholder")
    with graph.inserting_before(first):
        placeholders = {name: graph.placeholder("p_" + name.replace(".", "_")) for name in state}
    for node in list(graph.nodes):
        if node.op == "get_attr" and node.target in placeholders:
            node.replace_all_uses_with(placeholders[node.target])
            graph.erase_node(node)
    return fx.GraphModule(module, graph), list(state.values())
