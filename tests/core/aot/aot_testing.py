"""Helpers for the AOT-autograd tests: flat-input graphs from modules, graph inspection."""

from __future__ import annotations

import torch.fx as fx


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
