"""Rewrites of an aten graph before OpenVINO's frontend converts it.

:func:`expand_layer_norms`: the frontend converts ``native_layer_norm`` to its output 0
alone, but a training graph saves the norm's mean and reciprocal standard deviation for
the backward. Left to the next backend, every layer norm of a transformer cut its
forward graph in two (hf_bert's forward: 31 partitions, each an OpenVINO call). The
statistics of such a layer norm are computed here with ops the frontend converts
(``var_mean``, ``rsqrt``), so that OpenVINO computes them as well.

:func:`for_openvino` also returns each output once: the frontend fails on a graph
that returns one value twice ("Tensor name is not a number"), as a training graph does
when it saves an output for the backward through an alias (chain's softmax output).
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx
from torch.utils._pytree import tree_leaves

aten = torch.ops.aten

#: The dtypes of the layer norms whose statistics are computed apart; torch computes the
#: statistics of lower-precision ones in float32, which ``var_mean`` would not.
EXPANDED_DTYPES = frozenset({torch.float32, torch.float64})


def expands(node: fx.Node) -> bool:
    """Whether :func:`expand_layer_norms` computes ``node``'s statistics (a layer norm)."""
    return (
        node.target is aten.native_layer_norm.default
        and node.args[0].meta["val"].dtype in EXPANDED_DTYPES
    )


def expand_layer_norms(gm: fx.GraphModule) -> None:
    """Computes, in place, the statistics of the layer norms of ``gm`` that the graph reads
    with ``var_mean`` and ``rsqrt``, the norm itself still giving output 0.

    ``native_layer_norm(x, shape, w, b, eps)`` returns ``(y, mean, rstd)``, the statistics
    over the last ``len(shape)`` dims, kept as dims of size 1. OpenVINO runs ``y`` as one
    fused op (MVN); ``y`` written out as ``(x - mean) * rstd`` took twice as long (chain:
    a 4096x1024 forward went from 21 to 37 ms; from 21 to 20 ms this way).
    """
    graph = gm.graph
    for node in list(graph.find_nodes(op="call_function", target=aten.native_layer_norm.default)):
        statistics = [u for u in node.users if u.target is operator.getitem and u.args[1] != 0]
        if not statistics or not expands(node):
            continue
        x, shape, *_, eps = node.args
        dims = list(range(x.meta["val"].dim() - len(shape), x.meta["val"].dim()))
        with graph.inserting_before(node):
            var_mean = _call(graph, aten.var_mean.correction, x, dims, correction=0, keepdim=True)
            var = _call(graph, operator.getitem, var_mean, 0)
            mean = _call(graph, operator.getitem, var_mean, 1)
            rstd = _call(graph, aten.rsqrt.default, _call(graph, aten.add.Tensor, var, eps))
        for user in statistics:
            user.replace_all_uses_with(mean if user.args[1] == 1 else rstd)
            graph.erase_node(user)
    gm.recompile()


def repeated_outputs(gm: fx.GraphModule) -> dict[int, int]:
    """Output position → the earlier position of the same value (itself or an alias)."""
    first: dict = {}
    repeats = {}
    for position, value in enumerate(tree_leaves(gm.graph.output_node().args[0])):
        source = value
        while isinstance(source, fx.Node) and source.target is aten.alias.default:
            source = source.args[0]
        if source in first:
            repeats[position] = first[source]
        else:
            first[source] = position
    return repeats


def for_openvino(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of ``gm`` the frontend converts: its layer norms written out, and each of
    its outputs once (the runtime returns a repeated one as an alias of the first)."""
    graph = fx.Graph()
    outputs = tree_leaves(graph.graph_copy(gm.graph, {}))
    repeats = repeated_outputs(gm)
    graph.output(tuple(v for p, v in enumerate(outputs) if p not in repeats))
    copy = fx.GraphModule(gm, graph)
    expand_layer_norms(copy)
    copy.graph.eliminate_dead_code()
    copy.recompile()
    return copy


def _call(graph: fx.Graph, target, *args, **kwargs) -> fx.Node:
    """A new node calling ``target``, its ``meta["val"]`` computed on its inputs' (fake) values."""
    node = graph.call_function(target, args, kwargs)
    values = fx.node.map_arg((args, kwargs), lambda n: n.meta["val"])
    node.meta["val"] = target(*values[0], **values[1])
    return node
