"""The openvino compiler of one aten graph, and the decompositions it expects.

``compile_aten_graph`` is what ``torchkiln.aot.aot_autograd`` (or the core's
partitioning) calls for each forward, backward and inference graph: the graph goes
through OpenVINO's PyTorch frontend (``TorchFXPythonDecoder``, keyed on each node's
``str(target)``), its inputs get the example inputs' element types and static shapes,
and ``ov.Core().compile_model`` compiles it for the chosen device.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

import openvino as ov
from openvino.frontend import FrontEndManager
from openvino.frontend.pytorch.fx_decoder import TorchFXPythonDecoder
from torchkiln import logs
from torchkiln.aot import keep_whole
from torchkiln.exc import BackendUnavailable, KilnError
from torchkiln_openvino import ops
from torchkiln_openvino.runtime import OpenVINOGraph, element_type

aten = torch.ops.aten


def decompositions() -> dict:
    """torch's core-aten table, and the training batch norm decomposed.

    Not the AOT layer's default table: it brings some ops down to prims, which the
    frontend does not convert. Layer norm, the inference batch norm
    (``_native_batch_norm_legit_no_training``) and the fused CPU attention stay whole:
    OpenVINO runs each as one fused op (a decomposed batch norm costs ~4x). The
    training batch norm is decomposed, so that the statistics it saves for the
    backward come from ops OpenVINO converts.
    """
    table = dict(core_aten_decompositions())
    table.update(get_decompositions([aten._native_batch_norm_legit_functional]))
    return keep_whole(table)


@functools.cache
def core() -> ov.Core:
    return ov.Core()


def compile_aten_graph(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[torch.Tensor],
    *,
    device: str = "CPU",
    precision: str = "f32",
    num_threads: int | None = None,
    disabled_ops: Sequence[str] = (),
) -> Callable:
    """Compile a functional aten graph to ``compiled(*flat_tensors) -> list``."""
    off = ops.disabled(disabled_ops)
    named = sorted({str(n.target) for n in gm.graph.nodes if ops.is_disabled(n, off)})
    if named:
        raise KilnError(
            f"the graph has ops named in the openvino option disabled_ops: {', '.join(named)}; "
            "compile through torchkiln.compile(backend=['openvino', ...]) to run them elsewhere"
        )
    if device not in core().available_devices and device != "AUTO":
        raise BackendUnavailable(
            f"OpenVINO has no device {device!r} here; available: "
            f"{', '.join(core().available_devices)} (or 'AUTO')"
        )
    model = convert(gm, example_inputs)
    if logs.enabled("output_code"):
        logs.artifact("output_code", "openvino model %s:\n%s", model.get_friendly_name(), model)
    config = {
        "INFERENCE_PRECISION_HINT": precision,
        "INFERENCE_NUM_THREADS": num_threads or torch.get_num_threads(),
    }
    return OpenVINOGraph(core().compile_model(model, device, config), gm)


def convert(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> ov.Model:
    """The OpenVINO model of ``gm``, its inputs typed and shaped like ``example_inputs``."""
    # The decoder must outlive convert(): the frontend calls back into it.
    decoder = TorchFXPythonDecoder(gm)
    frontend = FrontEndManager().load_by_framework("pytorch")
    model = frontend.convert(frontend.load(decoder))
    parameters = model.get_parameters()
    if len(parameters) != len(example_inputs):
        raise KilnError(
            f"OpenVINO's frontend made {len(parameters)} inputs of a graph with "
            f"{len(example_inputs)}; report this graph:\n{gm.print_readable(False)}"
        )
    for parameter, example in zip(parameters, example_inputs):
        parameter.set_element_type(element_type(example.dtype))
        parameter.set_partial_shape(ov.PartialShape(list(example.shape)))
    model.validate_nodes_and_infer_types()
    return model
