"""A minimum s-t cut of a small flow network (the min-cut partitioner's), by Dinic's max flow.

networkx computed it before, and importing networkx was most of a cold partition: 0.15 s
on the CPU VM, more on the GPU machine's host, where the partitioner's own work on a
transformer's joint graph (a few thousand vertices) is milliseconds. The source side
returned is the set of vertices that can't reach the sink in the residual network of a
maximum flow (the largest source side of a minimum cut): the same for every maximum flow,
so the same as networkx's ``minimum_cut`` gave.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable


class FlowNetwork:
    """Directed edges with capacities (``None``: unbounded), between hashable vertices.

    Edges are kept in flat lists, each beside its reverse (edge ``e``'s reverse is
    ``e ^ 1``), whose capacity grows as flow is pushed along ``e``.
    """

    def __init__(self) -> None:
        self._index: dict[Hashable, int] = {}
        self._names: list[Hashable] = []
        self._out: list[list[int]] = []  # per vertex, its edges (reverses included)
        self._head: list[int] = []  # per edge, the vertex it enters
        self._capacity: list[float] = []
        self._edge: dict[tuple[int, int], int] = {}

    def __contains__(self, vertex: Hashable) -> bool:
        return vertex in self._index

    def add_edge(self, u: Hashable, v: Hashable, capacity: float | None = None) -> None:
        """Add ``u -> v``; adding it again sets its capacity (as ``networkx`` does)."""
        a, b = self._vertex(u), self._vertex(v)
        capacity = math.inf if capacity is None else capacity
        if (a, b) in self._edge:
            self._capacity[self._edge[a, b]] = capacity
            return
        self._edge[a, b] = len(self._head)
        for tail, head, cap in ((a, b, capacity), (b, a, 0)):
            self._out[tail].append(len(self._head))
            self._head.append(head)
            self._capacity.append(cap)

    def source_side(self, source: Hashable, sink: Hashable) -> set[Hashable]:
        """The source's side of a minimum cut (pushes a maximum flow through the network).
        Raises ValueError where an unbounded path joins them: no cut is finite."""
        s, t = self._index[source], self._index[sink]
        while (level := self._levels(s))[t] >= 0:
            self._blocking_flow(s, t, level)
        reaching = self._reaching(t)
        return {name for name, i in self._index.items() if i not in reaching}

    def _vertex(self, name: Hashable) -> int:
        index = self._index.get(name)
        if index is None:
            index = self._index[name] = len(self._names)
            self._names.append(name)
            self._out.append([])
        return index

    def _levels(self, s: int) -> list[int]:
        """Each vertex's distance from ``s`` over edges with capacity left (-1: none)."""
        level = [-1] * len(self._names)
        level[s] = 0
        todo = deque([s])
        while todo:
            u = todo.popleft()
            for e in self._out[u]:
                v = self._head[e]
                if level[v] < 0 and self._capacity[e] > 0:
                    level[v] = level[u] + 1
                    todo.append(v)
        return level

    def _reaching(self, t: int) -> set[int]:
        """The vertices with a path to ``t`` over edges with capacity left."""
        reaching = {t}
        todo = [t]
        while todo:
            v = todo.pop()
            for e in self._out[v]:  # e's reverse enters v
                u = self._head[e]
                if u not in reaching and self._capacity[e ^ 1] > 0:
                    reaching.add(u)
                    todo.append(u)
        return reaching

    def _blocking_flow(self, s: int, t: int, level: list[int]) -> None:
        """Push flow along shortest paths (by ``level``) until none is left; a path is
        walked without recursion (a joint graph's paths are thousands of edges long)."""
        head, capacity, out = self._head, self._capacity, self._out
        next_edge = [0] * len(self._names)  # per vertex, the first edge not yet ruled out
        path: list[int] = []
        u = s
        while True:
            if u == t:
                pushed = min(capacity[e] for e in path)
                if pushed == math.inf:
                    raise ValueError(
                        f"unbounded path from {self._names[s]!r} to {self._names[t]!r}: "
                        "every cut between them is infinite"
                    )
                for e in path:
                    capacity[e] -= pushed
                    capacity[e ^ 1] += pushed
                path.clear()
                u = s
                continue
            edges = out[u]
            while next_edge[u] < len(edges):
                e = edges[next_edge[u]]
                if capacity[e] > 0 and level[head[e]] == level[u] + 1:
                    break
                next_edge[u] += 1
            else:  # a dead end: step back and rule out the edge that led here
                if u == s:
                    return
                u = head[path.pop() ^ 1]
                next_edge[u] += 1
                continue
            path.append(e)
            u = head[e]
