"""GraphModules pickled as their nodes, and loaded without tracing.

torch pickles a ``GraphModule`` as its generated Python code and loads it by symbolically
tracing that code again (``torch.fx.graph_module.reduce_graph_module``). fx's tracer patches
``torch.nn.Module.__call__`` and ``__getattr__`` for every thread while it runs: a plan that
one thread loaded from the cache made another thread's eager module calls raise "module is
not installed as a submodule" (found by the guard fuzz's threads). Here a GraphModule
pickles as its nodes (operation, name, target, arguments, stack trace), its code generator
and its attributes; loading adds the nodes to a new graph, tracing nothing. As with torch's
own pickling, other node metadata (fake values) is not kept.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
from torch.fx.node import map_aggregate, map_arg


class _NodeRef:
    """A node argument that is another node, by name."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __reduce__(self) -> tuple:
        return _NodeRef, (self.name,)


class _Attributes(torch.nn.Module):
    """The module whose attributes a loaded GraphModule copies (as torch's ``_CodeOnlyModule``)."""

    def __init__(self, body: dict[str, Any]):
        super().__init__()
        self.__dict__ = body


def reduce(gm: fx.GraphModule) -> tuple:
    """``gm``'s pickled form: ``(load, (attributes, nodes, code generator, class name))``."""
    nodes = [
        (
            node.op,
            node.name,
            node.target,
            map_arg(node.args, lambda n: _NodeRef(n.name)),
            map_arg(node.kwargs, lambda n: _NodeRef(n.name)),
            node.meta.get("stack_trace"),
        )
        for node in gm.graph.nodes
    ]
    body = {k: v for k, v in gm.__dict__.items() if k != "_graph"}
    return load, (body, nodes, gm.graph._codegen, type(gm).__name__)


def load(body: dict[str, Any], nodes: list[tuple], codegen: Any, class_name: str) -> fx.GraphModule:
    """The GraphModule :func:`reduce` pickled: its nodes added to a new graph, in order."""
    graph = fx.Graph(tracer_cls=body.get("_tracer_cls"))
    graph._codegen = codegen
    made: dict[str, fx.Node] = {}

    def node_of(arg: Any) -> Any:
        return made[arg.name] if isinstance(arg, _NodeRef) else arg

    for op, name, target, args, kwargs, stack_trace in nodes:
        node = graph.create_node(
            op, target, map_aggregate(args, node_of), map_aggregate(kwargs, node_of), name=name
        )
        if stack_trace is not None:
            node.meta["stack_trace"] = stack_trace
        made[name] = node
    gm = fx.GraphModule(_Attributes(body), graph, class_name)
    # the constructor keeps only what the graph reads; keep the rest, as torch's loading does
    for key, value in body.items():
        if not hasattr(gm, key):
            setattr(gm, key, value)
    return gm
