"""OpenVINO or torch, per compiled graph: whichever ran it faster on its first call.

OpenVINO runs most forward graphs faster than torch, but not every backward: convnet's
backward graph (its convolutions', batch norms' and ReLUs' backwards) took OpenVINO 22 ms
where torch's fused kernels took 13, on the first call at one thread. Which graph is
which depends on the shapes, the CPU and the threads, so it is measured: on its first
call, :class:`MeasuredChoice` runs the graph's OpenVINO model and the same aten graph in
torch (:class:`TorchGraph`) on the call's own inputs, alternately, and keeps the faster
for good. The graph keeps the backward ops with fused torch kernels whole
(:data:`torchkiln_openvino.decompositions.WRITTEN_OUT`): only OpenVINO's copy has them
written out. The zoo's transformers stay in OpenVINO: torch running their graphs op by
op lost there too.

The graphs are functional (no input is written, nothing is drawn at random: random ops
never run in OpenVINO), so running one several times changes nothing; the call returns
the results of the variant it keeps, in that variant's layouts (a training forward's
saved values, which the backward, compiled on its first call, takes as they come).
Forward and backward are chosen apart, the backward on the layouts its forward's choice
gives. On convnet, the four pairs timed in a steady training loop (forward and backward,
one thread) gave OpenVINO/torch 26.4 ms, torch/torch 27.1, OpenVINO/OpenVINO 35.1
(eager: 26.6): the pair chosen apart was the best one.

A graph whose OpenVINO run takes under :data:`SMALL_S` is not measured and stays in
OpenVINO: there, a choice could save little, and the conformance kit's and the tests'
small graphs go on checking OpenVINO's conversions.
"""

from __future__ import annotations

import operator
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence

import torch
import torch.fx as fx

from torchkiln import counters, logs
from torchkiln.aot import run_boxed
from torchkiln_openvino.compiler import compile_aten_graph
from torchkiln_openvino.runtime import OpenVINOGraph

aten = torch.ops.aten

#: Timed runs of each variant on a graph's first call, after one untimed run each (the
#: first infer request, the allocator's first blocks)
ROUNDS = 5
#: Seconds of timed runs after which the measurement stops, at the end of a round
BUDGET_S = 1.0
#: OpenVINO's time on a graph under which it is not measured against torch
SMALL_S = 1e-3
#: How much faster than OpenVINO torch must have run a graph to be kept
MARGIN = 0.05


def compile_partition(
    gm: fx.GraphModule,
    example_inputs: Sequence[torch.Tensor],
    *,
    torch_when_faster: bool = True,
    **options,
) -> Callable:
    """The backend's compiler of one aten graph: :func:`compile_aten_graph`, its OpenVINO
    model measured against torch on its first call with ``torch_when_faster``."""
    compiled = compile_aten_graph(gm, example_inputs, **options)
    if torch_when_faster and isinstance(compiled, OpenVINOGraph):
        return MeasuredChoice(compiled, TorchGraph(gm))
    return compiled


#: Ops that read their input's strides: a graph with one takes its inputs as traced
READS_STRIDES = frozenset(
    {
        aten.as_strided.default,
        aten.as_strided_scatter.default,
        aten.as_strided_copy.default,
        aten._reshape_alias.default,
    }
)


class TorchGraph:
    """``gm`` run by torch.fx (boxed: :func:`torchkiln.aot.run_boxed`) on its inputs as
    they come, its results in the strides it was traced for.

    A backward's saved values come in the layouts an OpenVINO forward gave them
    (contiguous where eager's are transposed, NHWC where a convolution computed them):
    torch's kernels take those as they are, where copying them into the traced strides
    cost convnet's backward 8 ms a step. Its views become reshapes (a view of a
    transposed value is a copy), unless the graph reads strides itself (``as_strided``:
    then its inputs are copied into the traced strides). Results whose strides differ
    from the traced ones are copied into them: the next graph may view them.
    """

    def __init__(self, gm: fx.GraphModule, layout: tuple[list, list] | None = None):
        """``layout``: (position, stride) of each tensor input and output, as traced by
        default (a graph loaded from the plan cache has no traced values: they come with
        it)."""
        self.inputs, self.outputs = layout or traced_layout(gm)
        if any(n.target in READS_STRIDES for n in gm.graph.nodes):
            self.gm = _copy(gm)
        else:
            self.gm, self.inputs = _views_as_reshapes(gm), []
        self.boxed = run_boxed(self.gm, [])

    def layout(self) -> tuple[list, list]:
        """What :class:`TorchGraph` needs besides the graph (the plan cache stores it)."""
        return self.inputs, self.outputs

    def __call__(self, *args: torch.Tensor) -> list:
        return self.call_boxed(list(args))

    def call_boxed(self, args: list) -> list:
        _restride(args, self.inputs)
        results = list(self.boxed.call_boxed(args))
        _restride(results, self.outputs)
        return results


def traced_layout(gm: fx.GraphModule) -> tuple[list, list]:
    """(position, stride) of each tensor input and output of ``gm`` (a flat tuple of
    outputs, as the AOT layer's and the partitions' are), as traced."""
    inputs = [p.meta.get("val") for p in gm.graph.find_nodes(op="placeholder")]
    outputs = [
        o.meta.get("val") if isinstance(o, fx.Node) else None
        for o in gm.graph.output_node().args[0]
    ]
    return _strides(inputs), _strides(outputs)


def _strides(values: list) -> list[tuple[int, tuple]]:
    return [(k, tuple(v.stride())) for k, v in enumerate(values) if isinstance(v, torch.Tensor)]


def _restride(tensors: list, strides: list[tuple[int, tuple]]) -> None:
    """Copies, in place in ``tensors``, each tensor whose strides are not the given ones."""
    for k, stride in strides:
        tensor = tensors[k]
        if tensor.stride() != stride:
            tensors[k] = torch.empty_strided(tensor.shape, stride, dtype=tensor.dtype).copy_(tensor)


def _views_as_reshapes(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of ``gm`` (:func:`_copy`) whose views are reshapes: the same values from
    inputs of any strides."""
    gm = _copy(gm)
    for node in gm.graph.nodes:
        if node.target in (aten.view.default, aten._unsafe_view.default):
            node.target = aten.reshape.default
    gm.recompile()
    return gm


def _copy(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` with a graph of its own and no tracer class: it pickles as its code alone (a
    module traced by ``make_fx`` is traced again with its tracer on unpickling, which
    fails in a process that has not imported what that tracer reads)."""
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    return fx.GraphModule(gm, graph)


class MeasuredChoice:
    """``choice(*args) -> list``: ``openvino`` or ``torch`` (the same graph), whichever
    ran faster on the first call (:attr:`chosen`, ``None`` until then)."""

    def __init__(self, openvino: Callable, torch_graph: TorchGraph):
        self.openvino = openvino
        self.torch = torch_graph
        self.chosen: Callable | None = None
        self._lock = threading.Lock()

    def __call__(self, *args: torch.Tensor) -> list:
        chosen = self.chosen
        if chosen is None:
            return self._measure(args)
        return chosen(*args)

    def call_boxed(self, args: list) -> list:
        """A backward's call (:mod:`torchkiln.aot`): torch frees each saved value after its
        last use."""
        if self.chosen is self.torch:
            return self.torch.call_boxed(args)
        return self(*args)

    def _measure(self, args: Sequence[torch.Tensor]) -> list:
        with self._lock:  # threads on their first call at once measure once
            if self.chosen is not None:
                return self.chosen(*args)
            variants = {"openvino": self.openvino, "torch": self.torch}
            results = {"openvino": self.openvino(*args)}  # untimed: the first infer request
            times: dict[str, list[float]] = {"openvino": [], "torch": []}
            _timed(variants, "openvino", args, times, results)
            if times["openvino"][0] < SMALL_S:
                return self._keep("openvino", times, results)
            results["torch"] = self.torch(*args)  # untimed: torch's first run
            order, start = ["torch", "openvino"], time.perf_counter()
            while len(times["torch"]) < ROUNDS and time.perf_counter() - start < BUDGET_S:
                for name in order:
                    _timed(variants, name, args, times, results)
                order.reverse()
            return self._keep(faster(times), times, results)

    def _keep(self, name: str, times: dict[str, list[float]], results: dict) -> list:
        """Keep ``name`` for good (counted, and logged under ``autotune``); its results."""
        self.chosen = self.openvino if name == "openvino" else self.torch
        counters["openvino_choice"][name] += 1
        if logs.enabled("autotune"):
            fastest = ", ".join(
                f"{k} {min(t) * 1e3:.3f} ms (fastest of {len(t)})" for k, t in times.items() if t
            )
            logs.artifact(
                "autotune",
                "openvino or torch for a graph of %s: %s -> %s",
                _summary(self.torch.gm),
                fastest,
                name,
            )
        return results[name]


def faster(times: dict[str, list[float]]) -> str:
    """``"torch"`` where its fastest run beat OpenVINO's by :data:`MARGIN`, else
    ``"openvino"``. The fastest run of each is the least disturbed (other processes slow
    runs down, never up); the margin keeps a near tie in OpenVINO, for which the graphs
    were partitioned (a forward kept in torch hands its backward eager's layouts: the
    transposed saved values of a transformer, which an OpenVINO backward copies on every
    call)."""
    return "torch" if min(times["torch"]) < (1 - MARGIN) * min(times["openvino"]) else "openvino"


def _timed(variants: dict, name: str, args: Sequence, times: dict, results: dict) -> None:
    """Run variant ``name`` on ``args``: its time to ``times[name]``, its results to
    ``results[name]``, whose last ones are dropped first (their buffers free again, as in
    a steady loop)."""
    results[name] = None
    begin = time.perf_counter()
    results[name] = variants[name](*args)
    times[name].append(time.perf_counter() - begin)


def _summary(gm: fx.GraphModule) -> str:
    """The graph's ops, counted: ``12 ops (mm.default x4, add.Tensor x3, ...)``."""
    ops = Counter(
        getattr(n.target, "__name__", str(n.target))
        for n in gm.graph.nodes
        if n.op == "call_function" and n.target is not operator.getitem
    )
    common = ", ".join(f"{op} x{k}" if k > 1 else op for op, k in ops.most_common(4))
    more = ", ..." if len(ops) > 4 else ""
    return f"{sum(ops.values())} ops ({common}{more})"
