"""Graph passes on the aten FX graph, before lowering.

* :func:`remove_noop_ops` drops ops that return their input unchanged
  (``alias``, ``clone``, same-shape ``view``/``expand``, full ``slice``,
  same-dtype conversions), except where the result is a graph output (an
  output must not become an alias of something else).
* :func:`fold_constants` evaluates nodes whose tensor inputs are all
  constants (``get_attr``), and factory ops (``arange``, ``full``), once, at
  compile time.
* :func:`eliminate_common_subexpressions` merges nodes that compute the same
  value (the same pure op on the same arguments): a mask that ``transformers``
  hands every attention layer, made contiguous before each call, is one buffer
  instead of one per layer, all alive from the graph's start.
* :func:`eliminate_dead_code` removes unused side-effect-free nodes.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule, Node

from torchkiln.effects import is_impure

from .sizes import sizes_of

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
    # sizes compared as expressions: comparing SymInts would add a guard to the capture's
    # ShapeEnv, too late for the frame's guards to check it
    same = (
        sizes_of(src.shape) == sizes_of(out.shape)
        and src.dtype == out.dtype
        and sizes_of(src.stride()) == sizes_of(out.stride())
    )
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


#: ops whose value depends on their arguments alone (no tensor inputs): folded as
#: ops of constants are, so that what a graph builds from them (transformers builds its
#: causal mask from ``arange`` through ``cumsum``, ``index`` and compares: five kernels a
#: call) is computed once
_FACTORIES = {
    aten.arange.default,
    aten.arange.start,
    aten.arange.start_step,
    aten.full.default,
    aten.ones.default,
    aten.zeros.default,
    aten.scalar_tensor.default,
}
#: the most elements a folded value may have: the compiled graph keeps it for good
MAX_FOLDED_ELEMENTS = 1 << 20


def fold_constants(gm: GraphModule) -> int:
    """Replace nodes computed only from constant tensors (or by a factory op) by new
    constant attributes; not a node the graph returns (its caller would get the same
    tensor at every call) nor one of more than ``MAX_FOLDED_ELEMENTS``."""
    constants: dict[Node, torch.Tensor] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = getattr(gm, node.target, None)
            if isinstance(value, torch.Tensor):
                constants[node] = value
    folded = 0
    for node in list(gm.graph.nodes):
        if not _foldable(node, constants):
            continue
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: constants[n])
        value = node.target(*args, **kwargs)
        if not isinstance(value, torch.Tensor) or value.numel() > MAX_FOLDED_ELEMENTS:
            continue  # a node without a traced value, found too large once computed
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
    for node in list(constants):  # intermediates whose users were all folded
        if not node.users and node.target.startswith("_folded_constant_"):
            gm.graph.erase_node(node)
            delattr(gm, node.target)
    return folded


def _foldable(node: Node, constants: dict[Node, torch.Tensor]) -> bool:
    if node.op != "call_function" or _is_random(node):
        return False
    if any(user.op == "output" for user in node.users):
        return False
    traced = _meta(node)
    numel = traced.numel() if traced is not None else None
    if type(numel) is int and numel > MAX_FOLDED_ELEMENTS:  # a symbolic one: no guard here
        return False  # not computed at all: a large factory may not fit beside the model
    schema = getattr(node.target, "_schema", None)
    if schema is not None and schema.is_mutable:
        return False
    inputs = node.all_input_nodes
    if not inputs:
        symbolic = any(isinstance(a, (torch.SymInt, torch.SymFloat)) for a in node.args)
        return node.target in _FACTORIES and not symbolic
    return all(n in constants for n in inputs)


def _is_pure(node: Node) -> bool:
    """Whether two calls of ``node``'s op on the same arguments give the same value, and
    sharing one result is safe (no random draw, no mutation of it or by it)."""
    if node.op != "call_function" or _is_random(node):
        return False
    schema = getattr(node.target, "_schema", None)
    if schema is None:  # higher-order ops and plain callables: only ``getitem`` is known
        return node.target is operator.getitem
    if schema.is_mutable:
        return False
    if torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ()):
        return False
    return not any(
        getattr(getattr(user.target, "_schema", None), "is_mutable", False) for user in node.users
    )


def _cse_key(node: Node) -> tuple | None:
    """A hashable key of ``node``'s op and arguments, or None when an argument isn't one."""
    try:
        key = (node.target, _hashable(node.args), _hashable(node.kwargs))
        hash(key)
    except TypeError:
        return None
    return key


def _hashable(value):
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_hashable(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _hashable(v)) for k, v in sorted(value.items())))
    if isinstance(value, float) and value != value:
        raise TypeError("NaN never equals itself")
    return (type(value).__name__, value)


def eliminate_common_subexpressions(gm: GraphModule) -> int:
    """Replace each pure node by an earlier node computing the same op on the same arguments."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    seen: dict[tuple, Node] = {}
    merged = 0
    for node in list(gm.graph.nodes):
        if node in output.all_input_nodes or not _is_pure(node):
            continue  # an output kept apart: the caller may get two tensors, not one twice
        key = _cse_key(node)
        if key is None:
            continue
        earlier = seen.setdefault(key, node)
        if earlier is not node:
            node.replace_all_uses_with(earlier)
            gm.graph.erase_node(node)
            merged += 1
    return merged


def eliminate_dead_code(gm: GraphModule) -> bool:
    return gm.graph.eliminate_dead_code(is_impure_node=is_impure)


def run_passes(gm: GraphModule) -> GraphModule:
    remove_noop_ops(gm)
    fold_constants(gm)
    eliminate_common_subexpressions(gm)
    eliminate_dead_code(gm)
    gm.recompile()
    return gm
