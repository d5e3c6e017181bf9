"""``trace.enabled``: a folder per compiled graph with its graphs, IR, schedule and code.

``trace.graph_diagram`` also draws the fused graph (kernels and extern calls
with their data dependencies) as ``fused_graph.svg`` via pydot/Graphviz.
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

from torchkiln.exc import KilnError

from .options import InductorOptions
from .scheduler import FusedKernel, Schedule

_counter = itertools.count()


class Tracer:
    def __init__(self, options: InductorOptions):
        root = Path(options.trace_dir or "torchkiln_trace")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.folder = root / f"graph{next(_counter)}_{stamp}_pid{os.getpid()}"
        self.folder.mkdir(parents=True, exist_ok=True)

    def write(self, name: str, text: str) -> Path:
        path = self.folder / name
        path.write_text(text)
        return path

    def draw_schedule(self, schedule: Schedule) -> Path:
        try:
            import pydot
        except ImportError as e:
            raise KilnError(
                "trace.graph_diagram needs the 'pydot' package and Graphviz's 'dot' program: "
                "pip install pydot (and apt-get install graphviz)"
            ) from e
        dot = pydot.Dot("fused_graph", graph_type="digraph")
        producer = {}
        for i, step in enumerate(schedule.steps):
            node_id = f"step{i}"
            if isinstance(step, FusedKernel):
                names = [n.name for n in step.nodes]
                label = f"{step.name}\\n{', '.join(names)}"
                for n in names:
                    producer[n] = node_id
                dot.add_node(pydot.Node(node_id, label=label, shape="box"))
            else:
                producer[step.kernel.name] = node_id
                for out in step.kernel.outputs:
                    producer[out.name] = node_id
                dot.add_node(
                    pydot.Node(node_id, label=f"extern\\n{step.kernel.op}", shape="ellipse")
                )
        for i, step in enumerate(schedule.steps):
            if isinstance(step, FusedKernel):
                reads = set().union(*(n.read_names() for n in step.nodes))
            else:
                reads = {v.buffer.name for v in step.kernel.tensor_args()}
            for name in sorted(reads):
                src = producer.get(name)
                if src is not None and src != f"step{i}":
                    dot.add_edge(pydot.Edge(src, f"step{i}", label=name))
        self.write("fused_graph.dot", dot.to_string())
        path = self.folder / "fused_graph.svg"
        try:
            dot.write_svg(str(path))
        except (FileNotFoundError, OSError) as e:
            raise KilnError(
                "trace.graph_diagram could not run Graphviz's 'dot' program "
                f"(apt-get install graphviz): {e}"
            ) from e
        return path
