"""The openvino compiler of one aten graph, and the decompositions it expects.

``compile_aten_graph`` is what ``torchkiln.aot.aot_autograd`` (or the core's
partitioning) calls for each forward, backward and inference graph: the graph goes
through OpenVINO's PyTorch frontend (``TorchFXPythonDecoder``, keyed on each node's
``str(target)``), its inputs get the example inputs' element types and static shapes,
and ``ov.Core().compile_model`` compiles it for the chosen device.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch._decomp import get_decompositions

import openvino as ov
from openvino.frontend import FrontEndManager
from openvino.frontend.pytorch.fx_decoder import TorchFXPythonDecoder
from torchkiln import logs
from torchkiln.aot import core_aten_table, keep_whole
from torchkiln.exc import BackendUnavailable, InvalidOptionError, KilnError
from torchkiln_openvino import freeze, ops
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
    table = core_aten_table()
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
    cache_dir: str | None = None,
    freeze_weights: bool = False,
    disabled_ops: Sequence[str] = (),
) -> Callable:
    """Compile a functional aten graph to ``compiled(*flat_tensors) -> list``.

    With ``freeze_weights``, an inference graph's weights become constants on its first
    call (:mod:`torchkiln_openvino.freeze`); the conversion runs now all the same, so
    that a graph the frontend can't convert goes to the next backend of the chain.
    """
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
    if cache_dir is not None:
        config["CACHE_DIR"] = private_dir(cache_dir)
    compile_model = functools.partial(core().compile_model, device_name=device, config=config)
    weights = freeze.weight_positions(gm) if freeze_weights else ()
    if weights:
        return freeze.FrozenGraph(model, gm, weights, compile_model)
    return OpenVINOGraph(compile_model(model), gm)


def check_options(options: Mapping[str, Any]) -> None:
    """What the option schema can't check: that ``cache_dir`` is a private folder."""
    if options.get("cache_dir") is not None:
        private_dir(options["cache_dir"])


def private_dir(path: str | os.PathLike) -> str:
    """``path`` (created 0700) if this user owns it and others can't write to it: OpenVINO
    loads compiled models from its cache folder without checking them."""
    path = os.path.abspath(os.path.expanduser(path))
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.stat(path)
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise InvalidOptionError(
            f"option 'cache_dir' of backend 'openvino': {path} is not private (owned by uid "
            f"{st.st_uid}, mode {st.st_mode & 0o777:o}); name a folder of your own that only "
            "you can write to"
        )
    return path


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
