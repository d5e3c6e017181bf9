"""Splitting a graph by backend: every op labelled, grouped into partitions, then cut apart.

``group(graph, label_of)`` puts every compute node of ``graph`` into exactly one
:class:`Partition` of nodes with the same label (the index of the backend that runs
them), such that

* the graph stays acyclic once each partition is contracted to one node, so the
  partitions can run one after the other;
* no two partitions of the same label can merge without a cycle (partitions are
  maximal): adjacent ones, and independent ones (no path joins them either way).

It starts from a topological order that runs each label as long as it can (cut at
every label change, a cut is acyclic by construction), splits those runs into their
connected pieces, then merges adjacent pieces of one label while no other path joins
them, and pieces of one label that no path joins at all. ``split(gm, partitions)``
builds the graph that calls each partition as a submodule ``partition_<i>``, flat
tensors in and a tuple out, in an order that respects their dependencies. ``operator.getitem`` of a multi-output op always goes
with that op (``label_of`` is not asked about it).

Not ``torch.fx.passes.infra.partitioner.CapabilityBasedPartitioner``: it groups only
the supported nodes (a chain needs every node placed, by label), leaves the others
in the top graph, and knows no minimum size.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
import torch.fx as fx

#: Node kinds that are inputs or outputs of a graph, not work to place.
NOT_COMPUTE = ("placeholder", "output", "get_attr")


@dataclass
class Partition:
    """Nodes of one label, in graph order."""

    label: int
    nodes: list[fx.Node] = field(default_factory=list)

    @property
    def op_count(self) -> int:
        """Its ops worth offloading: not ``getitem`` of multi-output ops, nor size arithmetic
        (``sym_size``, ``*`` of SymInts: nodes whose value is a number), which a partition of
        its own would only add a call to."""
        return sum(
            1 for n in self.nodes if n.target is not operator.getitem and not _makes_a_number(n)
        )


def _makes_a_number(node: fx.Node) -> bool:
    return isinstance(node.meta.get("val"), int | float | torch.SymInt | torch.SymFloat)


def compute_nodes(graph: fx.Graph) -> list[fx.Node]:
    return [n for n in graph.nodes if n.op not in NOT_COMPUTE]


def _labels(nodes: list[fx.Node], label_of: Callable[[fx.Node], int]) -> dict[fx.Node, int]:
    labels: dict[fx.Node, int] = {}
    for node in nodes:
        source = node.args[0] if node.target is operator.getitem else None
        labels[node] = labels[source] if source in labels else label_of(node)
    return labels


def _compute_inputs(node: fx.Node, labels: dict[fx.Node, int]) -> list[fx.Node]:
    return [i for i in node.all_input_nodes if i in labels]


def _runs(nodes: list[fx.Node], labels: dict[fx.Node, int]) -> list[list[fx.Node]]:
    """A topological order cut at each label change, each label run as long as possible."""
    index = {n: i for i, n in enumerate(nodes)}
    waiting = {n: len(set(_compute_inputs(n, labels))) for n in nodes}
    ready: dict[int, list[int]] = {}
    for n in nodes:
        if not waiting[n]:
            heapq.heappush(ready.setdefault(labels[n], []), index[n])
    runs: list[list[fx.Node]] = []
    while any(ready.values()):
        label = min((heap[0], label) for label, heap in ready.items() if heap)[1]
        run: list[fx.Node] = []
        heap = ready[label]
        while heap:
            node = nodes[heapq.heappop(heap)]
            run.append(node)
            for user in node.users:
                if user in waiting:
                    waiting[user] -= 1
                    if not waiting[user]:
                        heapq.heappush(ready.setdefault(labels[user], []), index[user])
        runs.append(run)
    return runs


def _connected_pieces(run: list[fx.Node], labels: dict[fx.Node, int]) -> list[list[fx.Node]]:
    members = set(run)
    parent = {n: n for n in run}

    def find(n: fx.Node) -> fx.Node:
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for node in run:
        for i in _compute_inputs(node, labels):
            if i in members:
                parent[find(i)] = find(node)
    pieces: dict[fx.Node, list[fx.Node]] = {}
    for node in run:
        pieces.setdefault(find(node), []).append(node)
    return list(pieces.values())


class _PartitionGraph:
    """Partitions as nodes, with an edge where a value flows from one to another."""

    def __init__(
        self, pieces: list[list[fx.Node]], labels: dict[fx.Node, int], position: dict[fx.Node, int]
    ):
        self.labels = labels
        self.members = dict(enumerate(pieces))
        owner = {n: p for p, nodes in self.members.items() for n in nodes}
        self.succ: dict[int, set[int]] = {p: set() for p in self.members}
        self.pred: dict[int, set[int]] = {p: set() for p in self.members}
        for node, p in owner.items():
            for i in _compute_inputs(node, labels):
                if owner[i] != p:
                    self.succ[owner[i]].add(p)
                    self.pred[p].add(owner[i])
        #: where each partition starts in graph order
        self.first = {p: min(position[n] for n in nodes) for p, nodes in self.members.items()}

    def label(self, p: int) -> int:
        return self.labels[self.members[p][0]]

    def _reaches_other_than_directly(self, source: int, target: int) -> bool:
        stack = [s for s in self.succ[source] if s != target]
        seen = set(stack)
        while stack:
            p = stack.pop()
            if target in self.succ[p]:
                return True
            for s in self.succ[p] - seen:
                seen.add(s)
                stack.append(s)
        return False

    def merge_all(self) -> None:
        """Merge adjacent pairs of the same label that no other path joins, until none is left."""
        merged = True
        while merged:
            merged = False
            for p in sorted(self.members):
                for q in sorted(self.succ.get(p, ())):
                    if (
                        q in self.succ[p]
                        and self.label(p) == self.label(q)
                        and not self._reaches_other_than_directly(p, q)
                    ):
                        self._merge(p, q)
                        merged = True

    def _closure(self, p: int, edges: dict[int, set[int]]) -> set[int]:
        seen: set[int] = set()
        stack = list(edges[p])
        while stack:
            q = stack.pop()
            if q not in seen:
                seen.add(q)
                stack.extend(edges[q])
        return seen

    def merge_independent(self) -> bool:
        """Merge pairs of the same label that no path joins either way (a batch norm's
        running-statistics update beside the forward that computes it): one backend call
        instead of two, and a graph with one label stays whole. Whether any merged."""
        merged = False
        for p in sorted(self.members):
            if p not in self.members:
                continue
            joined = self._closure(p, self.succ) | self._closure(p, self.pred)
            for q in sorted(self.members):
                if q != p and q not in joined and self.label(q) == self.label(p):
                    self._merge(p, q)
                    joined = self._closure(p, self.succ) | self._closure(p, self.pred)
                    merged = True
        return merged

    def _merge(self, keep: int, gone: int) -> None:
        self.members[keep] += self.members.pop(gone)
        self.first[keep] = min(self.first[keep], self.first.pop(gone))
        succ, pred = self.succ.pop(gone), self.pred.pop(gone)
        for s in succ:
            self.pred[s].discard(gone)
            self.pred[s].add(keep)
        for p in pred:
            self.succ[p].discard(gone)
            self.succ[p].add(keep)
        self.succ[keep] = (self.succ[keep] | succ) - {keep}
        self.pred[keep] = (self.pred[keep] | pred) - {keep}

    def in_order(self, position: dict[fx.Node, int]) -> list[Partition]:
        """The partitions, each after those it depends on (ties: graph order)."""
        indegree = {p: 0 for p in self.members}
        for succ in self.succ.values():
            for s in succ:
                indegree[s] += 1
        first = self.first
        ready = [(first[p], p) for p, d in indegree.items() if not d]
        heapq.heapify(ready)
        ordered: list[Partition] = []
        while ready:
            _, p = heapq.heappop(ready)
            nodes = sorted(self.members[p], key=position.__getitem__)
            ordered.append(Partition(self.label(p), nodes))
            for s in self.succ[p]:
                indegree[s] -= 1
                if not indegree[s]:
                    heapq.heappush(ready, (first[s], s))
        assert len(ordered) == len(self.members), "partitions form a cycle"
        return ordered


def group(graph: fx.Graph, label_of: Callable[[fx.Node], int]) -> list[Partition]:
    """Maximal partitions of ``graph``'s compute nodes, acyclic once contracted."""
    nodes = compute_nodes(graph)
    labels = _labels(nodes, label_of)
    pieces = [piece for run in _runs(nodes, labels) for piece in _connected_pieces(run, labels)]
    position = {n: i for i, n in enumerate(nodes)}
    partitions = _PartitionGraph(pieces, labels, position)
    partitions.merge_all()
    while partitions.merge_independent():
        partitions.merge_all()
    return partitions.in_order(position)


def _external_inputs(nodes: Iterable[fx.Node], inside: set[fx.Node]) -> list[fx.Node]:
    inputs: dict[fx.Node, None] = {}
    for node in nodes:
        for i in node.all_input_nodes:
            if i not in inside and i.op != "get_attr":
                inputs[i] = None
    return list(inputs)


def _submodule(
    gm: fx.GraphModule, partition: Partition, inputs: list[fx.Node], outputs: list[fx.Node]
) -> fx.GraphModule:
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for i in inputs:
        env[i] = graph.placeholder(i.name)
        env[i].meta = dict(i.meta)
    for node in partition.nodes:
        for i in node.all_input_nodes:
            if i.op == "get_attr" and i not in env:
                env[i] = graph.node_copy(i)
        env[node] = graph.node_copy(node, env.__getitem__)
    graph.output(tuple(env[o] for o in outputs))
    return fx.GraphModule(gm, graph)


def split(gm: fx.GraphModule, partitions: list[Partition]) -> fx.GraphModule:
    """``gm`` as calls of one submodule ``partition_<i>`` per partition (in dependency order)."""
    owner = {n: i for i, p in enumerate(partitions) for n in p.nodes}
    parent = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    submodules: dict[str, fx.GraphModule] = {}
    for node in gm.graph.find_nodes(op="placeholder"):
        env[node] = parent.node_copy(node)
    for index, partition in enumerate(partitions):
        inside = set(partition.nodes)
        inputs = _external_inputs(partition.nodes, inside)
        outputs = [n for n in partition.nodes if any(owner.get(u) != index for u in n.users)]
        name = f"partition_{index}"
        submodules[name] = _submodule(gm, partition, inputs, outputs)
        call = parent.call_module(name, tuple(env[i] for i in inputs))
        for k, out in enumerate(outputs):
            env[out] = parent.call_function(operator.getitem, (call, k))
            env[out].meta = dict(out.meta)

    def outer(node: fx.Node) -> fx.Node:
        if node not in env:  # a constant the graph returns as it is
            env[node] = parent.node_copy(node)
        return env[node]

    parent.output(fx.node.map_arg(gm.graph.output_node().args[0], outer))
    constants = {
        n.target: operator.attrgetter(n.target)(gm) for n in parent.find_nodes(op="get_attr")
    }
    return fx.GraphModule({**constants, **submodules}, parent)
