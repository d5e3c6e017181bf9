"""The min-cut partitioner's flow network (``torchkiln.aot.mincut``) cuts where networkx
does: the source side of a minimum cut is the same for every maximum flow."""

import random

import networkx as nx
import pytest

from torchkiln.aot.mincut import FlowNetwork


def random_network(rng: random.Random, vertices: int, edges: int) -> list[tuple]:
    """Edges ``(u, v, capacity)``, each pair once (networkx keeps an edge's capacity when
    it is added again without one; the partitioner adds none twice with two capacities)."""
    out = {}
    for _ in range(edges):
        u, v = rng.sample(range(vertices), 2)
        capacity = None if rng.random() < 0.2 else rng.choice([0, 1, 2, 4, 8, 1024, 3 * 2**20])
        out.setdefault((u, v), capacity)
    return [(u, v, capacity) for (u, v), capacity in out.items()]


def networkx_source_side(edges, source, sink) -> set:
    graph = nx.DiGraph()
    for u, v, capacity in edges:
        if capacity is None:
            graph.add_edge(u, v)
        else:
            graph.add_edge(u, v, capacity=capacity)
    _, (side, _) = nx.minimum_cut(graph, source, sink)
    return side


@pytest.mark.parametrize("seed", range(300))
def test_the_source_side_is_networkx_s(seed):
    rng = random.Random(seed)
    vertices = rng.randint(2, 40)
    edges = random_network(rng, vertices, rng.randint(1, 4 * vertices))
    source, sink = 0, vertices - 1
    network = FlowNetwork()
    for u, v, capacity in edges:
        network.add_edge(u, v, capacity)
    if source not in network or sink not in network:
        return
    try:
        expected = networkx_source_side(edges, source, sink)
    except nx.NetworkXUnbounded:
        with pytest.raises(ValueError, match="unbounded path"):
            network.source_side(source, sink)
        return
    assert network.source_side(source, sink) == expected


def test_an_edge_added_again_takes_the_new_capacity():
    network = FlowNetwork()
    network.add_edge("s", "a", 1)
    network.add_edge("a", "t", 5)
    network.add_edge("s", "a", 10)  # now the cheaper cut is a -> t
    assert network.source_side("s", "t") == {"s", "a"}


def test_a_path_thousands_of_edges_long():
    """A joint graph's chains are long: no recursion limit is met."""
    network = FlowNetwork()
    for i in range(5000):
        network.add_edge(i, i + 1, 10 if i != 2500 else 3)
    assert network.source_side(0, 5000) == set(range(2501))
