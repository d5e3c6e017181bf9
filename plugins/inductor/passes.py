"""Graph passes on the aten FX graph, before lowering.

* :func:`remove_noop_ops` drops ops that return their input unchanged
  (``alias``, ``clone``, same-shape ``view``/``expand``, full ``slice``,
  same-dtype conversions), except where the result is a graph output (an
  output must not become an alias of something else).
* :func:`fold_constants` evaluates nodes whose tensor inputs are all
  constants (``get_attr``) once, at compile time.
* :func:`eliminate_dead_code` removes unused side-effect-free nodes.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

aten = torch.ops.aten
prims = torch.ops.prims

_RANDOM_PACKETS = {
    "rand",
    "randn",
    "rand_like",
    "randn_like",
    "bernoulli",
    "native_dropout",
    "randint",
    "randint_like",
    "normal",
    "uniform",
    "randperm",
    "multinomial",
    "exponential",
    "geometric",
    "cauchy",
    "log_normal",
    "poisson",
}


def _meta(node) -> torch.Tensor | None:
    val = node.meta.get("val") if isinstance(node, Node) else None
    return val if isinstance(val, torch.Tensor) else None


def _is_noop(node: Node) -> bool:
    if node.op != "call_function" or not node.args or not isinstance(node.args[0], Node):
        return False
    src, out = _meta(node.args[0]), _meta(node)
    if src is None or out is None:
        return False
    same = src.shape == out.shape and src.dtype == out.dtype and src.stride() == out.stride()
    t = node.target
    if t in (aten.alias.default, aten.clone.default):
        return same
    if t in (
        aten.view.default,
        aten._unsafe_view.default,
        aten.reshape.default,
        aten.expand.default,
        aten.slice.Tensor,
        aten._to_copy.default,
        prims.convert_element_type.default,
    ):
        if t == aten._to_copy.default and (set(node.kwargs) - {"dtype", "layout", "device"}):
            return False
        return same and src.device == out.device
    return False


def remove_noop_ops(gm: GraphModule) -> int:
    output = next(n for n in gm.graph.nodes if n.op == "output")
    removed = 0
    for node in list(gm.graph.nodes):
        if node in output.all_input_nodes:
            continue
        if _is_noop(node):
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
            removed += 1
    return removed


def _is_random(node: Node) -> bool:
    packet = getattr(node.target, "_overloadpacket", None)
    return packet is not None and packet.__name__ in _RANDOM_PACKETS


def fold_constants(gm: GraphModule) -> int:
    """Replace nodes computed only from constant tensors by new constant attributes."""
    constants: dict[Node, torch.Tensor] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = getattr(gm, node.target, None)
            if isinstance(value, torch.Tensor):
                constants[node] = value
    folded = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or _is_random(node):
            continue
        inputs = node.all_input_nodes
        if not inputs or not all(n in constants for n in inputs):
            continue
        schema = getattr(node.target, "_schema", None)
        if schema is not None and schema.is_mutable:
            continue
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: constants[n])
        value = node.target(*args, **kwargs)
        if not isinstance(value, torch.Tensor):
            continue
        name = f"_folded_constant_{folded}"
        while hasattr(gm, name):
            name += "_"
        gm.register_buffer(name, value)
        with gm.graph.inserting_before(node):
            new = gm.graph.get_attr(name)
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        constants[new] = value
        folded += 1
    return folded


def eliminate_dead_code(gm: GraphModule) -> bool:
    return gm.graph.eliminate_dead_code()


def run_passes(gm: GraphModule) -> GraphModule:
    remove_noop_ops(gm)
    fold_constants(gm)
    eliminate_dead_code(gm)
    gm.recompile()
    return gm
