"""The first min-cut partition of a fresh process: networkx's minimum cut (as before
40dd9ca, import included) against ``torchkiln.aot.mincut``, on one zoo model's joint graph.

    for r in 1 2 3; do for v in networkx mincut; do TORCHKILN_CACHE_DIR=$(mktemp -d) \\
        PYTHONPATH=. .venv/bin/python benchmarks/results/cpu-2026-11-30-mincut/ab_partition.py hf_bert $v
    done; done
"""

import sys
import time

import torch

import torchkiln
import torchkiln.aot as aot_package
import torchkiln.aot.api as aot_api
import torchkiln.aot.partition as partition
from benchmarks.models import MODELS


class NetworkxCut:
    """The partitioner's flow network as networkx held it (imported on first use)."""

    def __init__(self):
        import networkx

        self.nx = networkx
        self.graph = networkx.DiGraph()

    def __contains__(self, vertex):
        return vertex in self.graph

    def add_edge(self, u, v, capacity=None):
        if capacity is None:
            self.graph.add_edge(u, v)
        else:
            self.graph.add_edge(u, v, capacity=capacity)

    def source_side(self, source, sink):
        _, (side, _) = self.nx.minimum_cut(self.graph, source, sink)
        return side


model, variant = sys.argv[1], sys.argv[2]
if variant == "networkx":
    partition.FlowNetwork = NetworkxCut
original, times = partition.min_cut_partition, []


def timed(*args, **kwargs):
    start = time.perf_counter()
    try:
        return original(*args, **kwargs)
    finally:
        times.append(time.perf_counter() - start)


partition.min_cut_partition = aot_api.min_cut_partition = aot_package.min_cut_partition = timed
built = MODELS[model].build("small")
compiled = torchkiln.compile(built.module, backend="aot_eager_decomp_partition")
out = compiled(*built.inputs)
(out if isinstance(out, torch.Tensor) else out[0]).float().sum().backward()
print(model, variant, " ".join(f"{t * 1e3:.0f}" for t in times), "ms")
