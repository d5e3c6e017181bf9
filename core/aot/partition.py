"""Partitioners: split a joint forward+backward graph into a forward and a backward graph.

A partitioner is ``partition_fn(joint_gm, num_fwd_outputs) -> (fw_gm, bw_gm)``.
``joint_gm`` has placeholders named ``primals_*`` then ``tangents_*`` and a
flat tuple output: ``num_fwd_outputs`` forward outputs, then the input
gradients. The forward graph takes the primals and returns the forward
outputs followed by the *saved values*; the backward graph takes the saved
values (same order) followed by the tangents and returns the gradients.

What differs between partitioners is only the choice of saved values:

* :func:`simple_partition` saves every forward value the backward reads.
* :func:`min_cut_partition` saves the set of values with the fewest bytes
  from which backward can recompute the rest with cheap ops (see
  :mod:`torchkiln.aot.recompute` for what counts as cheap).
* :class:`MaterializingMinCut` is the min cut for a backend that runs only some
  ops (the core's chains): a value whose every backward reader runs elsewhere is
  saved, not recomputed.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable

import torch
import torch.fx as fx

from torchkiln.aot.mincut import FlowNetwork
from torchkiln.aot.recompute import is_recomputable, saved_bytes
from torchkiln.effects import is_effect

#: Ops that read only a tensor's metadata: a symbolic size the backward needs is saved as
#: the size, not as the tensor.
_SIZE_QUERIES = (
    torch.ops.aten.sym_size.int,
    torch.ops.aten.sym_stride.int,
    torch.ops.aten.sym_numel.default,
    torch.ops.aten.sym_storage_offset.default,
)


def _ancestors(outputs: Iterable[fx.Node], stop: set[fx.Node]) -> set[fx.Node]:
    seen: set[fx.Node] = set()
    stack = [n for n in outputs if isinstance(n, fx.Node)]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node not in stop:
            stack.extend(node.all_input_nodes)
    return seen


def _is_tangent(node: fx.Node) -> bool:
    return node.op == "placeholder" and str(node.target).startswith("tangents")


def _split_outputs(joint_gm: fx.GraphModule, num_fwd_outputs: int) -> tuple[list, list]:
    output = next(n for n in reversed(joint_gm.graph.nodes) if n.op == "output")
    outs = list(output.args[0])
    return outs[:num_fwd_outputs], outs[num_fwd_outputs:]


def _tangent_dependent(joint_gm: fx.GraphModule) -> set[fx.Node]:
    dependent: set[fx.Node] = set()
    for node in joint_gm.graph.nodes:
        if _is_tangent(node) or any(i in dependent for i in node.all_input_nodes):
            dependent.add(node)
    return dependent


def _extract(
    joint_gm: fx.GraphModule,
    inputs: list[fx.Node],
    outputs: list[fx.Node],
    on_demand: set[fx.Node] = frozenset(),
    effects: list[fx.Node] = (),
) -> fx.GraphModule:
    """A graph computing ``outputs`` from ``inputs``, copying nodes in joint order, and
    running ``effects`` (calls made for what they do, which nothing reads).

    Nodes in ``on_demand`` are instead placed just before their first user,
    so that values the backward recomputes are not all alive at its start.
    """
    needed = _ancestors([*outputs, *effects], stop=set(inputs))
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in inputs:
        env[node] = graph.placeholder(node.name)
        env[node].meta = dict(node.meta)

    def emit(node: fx.Node) -> None:
        stack = [node]
        while stack:
            top = stack[-1]
            missing = [n for n in top.all_input_nodes if n not in env]
            if top in env:
                stack.pop()
            elif missing:
                stack.extend(reversed(missing))
            elif top.op == "placeholder":
                raise AssertionError(f"partition bug: {top.name} is needed but not an input")
            else:
                env[top] = graph.node_copy(top, lambda n: env[n])
                stack.pop()

    for node in joint_gm.graph.nodes:
        if node in needed and node not in on_demand:
            emit(node)
    for node in outputs:
        if isinstance(node, fx.Node):
            emit(node)
    graph.output(tuple(env[n] if isinstance(n, fx.Node) else n for n in outputs))
    return fx.GraphModule(joint_gm, graph)


def partition_with_saved(
    joint_gm: fx.GraphModule, num_fwd_outputs: int, saved: list[fx.Node]
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Build the forward and backward graphs once the saved values are chosen.

    In the backward, tangent-free nodes (recomputations) run when first needed.
    """
    primals = [n for n in joint_gm.graph.nodes if n.op == "placeholder" and not _is_tangent(n)]
    tangents = [n for n in joint_gm.graph.nodes if _is_tangent(n)]
    fw_outs, bw_outs = _split_outputs(joint_gm, num_fwd_outputs)
    dependent = _tangent_dependent(joint_gm)
    recomputed = set(joint_gm.graph.nodes) - dependent
    effects = [n for n in joint_gm.graph.nodes if is_effect(n)]
    fw_effects = [n for n in effects if n not in dependent]
    bw_effects = [n for n in effects if n in dependent]
    # what a backward effect reads of the forward's values is saved (a tangent-free input)
    read = [i for n in bw_effects for i in n.all_input_nodes if i not in dependent]
    saved = saved + [i for i in dict.fromkeys(read) if i not in saved]
    fw_gm = _extract(joint_gm, primals, fw_outs + saved, effects=fw_effects)
    bw_gm = _extract(joint_gm, saved + tangents, bw_outs, on_demand=recomputed, effects=bw_effects)
    return fw_gm, bw_gm


def _in_graph_order(joint_gm: fx.GraphModule, nodes: set[fx.Node]) -> list[fx.Node]:
    return [n for n in joint_gm.graph.nodes if n in nodes]


def simple_partition(
    joint_gm: fx.GraphModule, num_fwd_outputs: int
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Save every value the forward computes that the backward reads; recompute nothing.

    The forward computes what its outputs need (and every element of a
    multi-output op it runs, since a tuple cannot be saved whole, and the
    sizes the backward asks of its tensors: saving a tensor for its size
    would keep it alive, and one that views an output would make the
    user's in-place write of that output an error in backward); everything
    else, including tangent-free ops autograd placed in backward, runs in
    backward.
    """
    fw_outs, bw_outs = _split_outputs(joint_gm, num_fwd_outputs)
    primals = {n for n in joint_gm.graph.nodes if n.op == "placeholder" and not _is_tangent(n)}
    forward = _ancestors(fw_outs, stop=set()) | primals
    forward |= {
        u
        for n in forward
        for u in n.users
        if u.target is operator.getitem or u.target in _SIZE_QUERIES
    }
    backward = _ancestors(bw_outs, stop=forward) - forward
    saved = {n for n in forward if any(u in backward for u in n.users)}
    saved |= {n for n in bw_outs if n in forward}
    return partition_with_saved(joint_gm, num_fwd_outputs, _in_graph_order(joint_gm, saved))


def min_cut_partition(
    joint_gm: fx.GraphModule,
    num_fwd_outputs: int,
    materialized: Callable[[fx.Node], bool] | None = None,
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Save the fewest bytes; recompute cheap ops in backward.

    A flow network gets two vertices per tangent-free node, ``in → out``
    with capacity = bytes saved if that value crosses to backward. The
    source feeds the primals and every node that must not be recomputed
    (matmuls, convolutions, random ops, large reductions...); the backward
    nodes (those reading a tangent) drain into the sink. A minimum cut is a
    cheapest set of values to save: everything on the sink side is
    recomputed in backward from them.

    ``materialized(node)``: whether a backward node reads its inputs from memory, with no
    recomputation fused into it (it runs in another backend than the recomputation
    would). A value whose every backward reader is such a node is never recomputed
    (:func:`_written_for_others`).
    """
    fw_outs, bw_outs = _split_outputs(joint_gm, num_fwd_outputs)
    dependent = _tangent_dependent(joint_gm)
    needed = _ancestors(fw_outs + bw_outs, stop=set())
    network = FlowNetwork()
    for node in joint_gm.graph.nodes:
        if node not in needed or node in dependent or node.op == "output":
            continue
        cost = saved_bytes(node)
        if cost is None:
            network.add_edge(f"{node.name}_in", f"{node.name}_out")  # infinite: never saved
        else:
            network.add_edge(f"{node.name}_in", f"{node.name}_out", capacity=cost)
        if (
            node.op == "placeholder"
            or not is_recomputable(node)
            or _written_for_others(node, dependent, materialized)
        ):
            network.add_edge("source", f"{node.name}_in")
        for user in node.users:
            if user in dependent and user in needed:
                network.add_edge(f"{node.name}_out", "sink")
            elif user in needed and user.op != "output":
                network.add_edge(f"{node.name}_out", f"{user.name}_in")
    for out in bw_outs:
        if isinstance(out, fx.Node) and out not in dependent:
            network.add_edge(f"{out.name}_out", "sink")
    if "sink" not in network or "source" not in network:
        saved: set[fx.Node] = set()  # backward reads nothing it cannot rebuild
    else:
        source_side = network.source_side("source", "sink")
        saved = {
            node
            for node in needed - dependent
            if f"{node.name}_in" in source_side
            and f"{node.name}_out" in network
            and f"{node.name}_out" not in source_side
        }
    return partition_with_saved(joint_gm, num_fwd_outputs, _in_graph_order(joint_gm, saved))


def _written_for_others(
    node: fx.Node, dependent: set[fx.Node], materialized: Callable[[fx.Node], bool] | None
) -> bool:
    """Whether ``node``'s value, recomputed, would only be written to memory for backward
    nodes that read it from there (``materialized``): saving it costs that one write, in the
    forward; recomputing it costs the same write and reading its inputs again (chain:
    ``x * w + b`` and its GELU, recomputed by OpenVINO for torch's fused backwards, 5.75 ms
    a step, where saving them cost the forward one more output)."""
    if materialized is None:
        return False
    readers = [user for user in node.users if user in dependent]
    return bool(readers) and all(materialized(user) for user in readers)


class MaterializingMinCut:
    """:func:`min_cut_partition` with ``materialized``: the partitioner the core gives a
    chain whose first backend runs only some ops (``materialized`` says which backward
    nodes it does not run).

    ``cache_name`` keys the plan cache: the predicate depends only on the chain's
    backends, which the chain's codec salt names."""

    cache_name = "torchkiln.aot.partition:MaterializingMinCut"

    def __init__(self, materialized: Callable[[fx.Node], bool]):
        self.materialized = materialized

    def __call__(
        self, joint_gm: fx.GraphModule, num_fwd_outputs: int
    ) -> tuple[fx.GraphModule, fx.GraphModule]:
        return min_cut_partition(joint_gm, num_fwd_outputs, materialized=self.materialized)
