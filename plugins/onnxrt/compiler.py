"""The onnxrt compiler of one aten graph.

``compile_aten_graph`` is what ``torchkiln.aot.aot_autograd`` calls for the
forward graph and for the backward graph: convert to ONNX, optionally dump
the model, open an onnxruntime session on the inputs' device. On the CPU
provider, bfloat16 and float16 ops compute in float32 inside the model (the
provider has kernels for few of them), each rounded back as eager does.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence

import onnx
import torch

from torchkiln import counters, logs
from torchkiln_onnxrt import (  # noqa: F401 (registers converters)
    ops_attention,
    ops_elementwise,
    ops_nn,
    ops_reduce,
    ops_shape,
    ops_sizes,
)
from torchkiln_onnxrt.converter import convert_graph
from torchkiln_onnxrt.dtypes import LOW_PRECISION
from torchkiln_onnxrt.runtime import OnnxRuntimeGraph, graph_device, session_providers

_graph_ids = itertools.count()


def compile_aten_graph(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[torch.Tensor],
    *,
    providers: Sequence[str] | None = None,
    graph_optimization_level: str = "all",
    dump_onnx_dir: str | None = None,
    intra_op_num_threads: int | None = None,
) -> Callable:
    """Compile a functional aten graph to ``compiled(*flat_args) -> list``.

    A graph with symbolic sizes becomes one model with named dynamic dimensions, or
    raises ``NeedsStaticShapes`` (the core then compiles it per size).
    ``torchkiln.counters["onnxrt"]["conversions"]`` counts the models made.
    """
    _ensure_meta(gm, example_inputs)
    device = graph_device(gm)
    providers = session_providers(device, providers)
    on_cpu = providers[0] == "CPUExecutionProvider"
    converted = convert_graph(gm, float32_compute=LOW_PRECISION if on_cpu else ())
    counters["onnxrt"]["conversions"] += 1
    graph_id = next(_graph_ids)
    if logs.enabled("output_code"):
        logs.artifact(
            "output_code", "onnxrt graph %d:\n%s", graph_id, onnx.printer.to_text(converted.model)
        )
    if dump_onnx_dir is not None:
        os.makedirs(dump_onnx_dir, exist_ok=True)
        onnx.save(
            converted.model, os.path.join(dump_onnx_dir, f"graph_{os.getpid()}_{graph_id}.onnx")
        )
    return OnnxRuntimeGraph(
        converted,
        device,
        providers=providers,
        graph_optimization_level=graph_optimization_level,
        intra_op_num_threads=intra_op_num_threads,
    )


def _ensure_meta(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> None:
    """Record ``meta["val"]`` on every node when the graph was not traced by make_fx."""
    if all("val" in n.meta for n in gm.graph.nodes if n.op not in ("output",)):
        return
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    FakeTensorProp(gm, FakeTensorMode(allow_non_fake_inputs=True)).propagate(*example_inputs)
